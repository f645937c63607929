"""Launching Debian's Chromium for Playwright tests so that nothing but loopback is ever contacted, with a WAV file
as the fake microphone."""

from __future__ import annotations

import re
import wave
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import playwright
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = "/usr/bin/chromium"
# What the shared ``mic_file`` fixture (tests/conftest.py) has the fake microphone say: one read sentence.
SPEECH_CLIP = "ls_2412-153948-0000"


def playwright_disabled_features() -> list[str]:
    """The features Playwright itself disables. Chromium keeps only the last ``--disable-features`` flag, so ours
    must repeat Playwright's list, read from the installed driver so the two never drift apart."""
    bundle = Path(playwright.__file__).parent / "driver" / "package" / "lib" / "coreBundle.js"
    text = bundle.read_text(encoding="utf-8")
    m = re.search(r"disabledFeatures = \[(.*?)\]\.filter", text, re.S)
    if m is None:
        raise RuntimeError(f"cannot find Playwright's disabled Chromium features in {bundle}")
    return re.findall(r'"([A-Za-z0-9]+)"', re.sub(r"//[^\n]*", "", m.group(1)))


def chromium_args(fake_mic: Path) -> list[str]:
    """Chromium as the tests need it: headless, no background networking, host resolution off except loopback, fake
    microphone playing ``fake_mic`` once, loopback ICE candidates allowed, no mDNS-hidden local addresses."""
    features = [*playwright_disabled_features(), "WebRtcHideLocalIpsWithMdns"]
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={fake_mic}%noloop",
        "--allow-loopback-in-peer-connection",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost",
        "--disable-features=" + ",".join(features),
    ]


def write_wav(path: Path, samples: np.ndarray, rate: int = 16_000) -> Path:
    """16-bit PCM mono WAV: a format Chromium's fake microphone plays (24-bit or compressed ones play silence)."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return path


@asynccontextmanager
async def chromium(fake_mic: Path) -> AsyncIterator[Browser]:
    """Debian's Chromium, headless, loopback only, ``fake_mic`` as the microphone."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(fake_mic), headless=True)
        try:
            yield browser
        finally:
            await browser.close()


async def open_page(browser: Browser, url: str, width: int = 1280, height: int = 720, mobile: bool = False) -> Page:
    """A new page of ``browser`` at ``width`` x ``height`` CSS pixels (``mobile``: as a phone), opened at ``url``."""
    page = await browser.new_page(viewport={"width": width, "height": height}, is_mobile=mobile)
    await page.goto(url)
    return page


async def check_axe(page: Page, state: str) -> None:
    """axe-core (bundled with axe-playwright-python: injected from the package, nothing is fetched) finds nothing
    serious or critical."""
    results = await Axe().run(page)
    bad = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert not bad, f"{state}: " + "; ".join(
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']]}" for v in bad
    )
