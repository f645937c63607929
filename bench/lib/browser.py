"""Debian's Chromium for the benches and the browser tests (``tests/support/browser.py`` launches it from here: the
benches import no test code, the tests may import the benches'): headless, loopback only, a WAV as the microphone.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import playwright
from playwright.async_api import Browser, async_playwright

CHROMIUM = "/usr/bin/chromium"


def disabled_features() -> list[str]:
    """The features Playwright itself disables. Chromium keeps only the last ``--disable-features`` flag, so ours
    must repeat Playwright's list, read from the installed driver so the two never drift apart."""
    bundle = Path(playwright.__file__).parent / "driver" / "package" / "lib" / "coreBundle.js"
    m = re.search(r"disabledFeatures = \[(.*?)\]\.filter", bundle.read_text(encoding="utf-8"), re.S)
    if m is None:
        raise RuntimeError(f"cannot find Playwright's disabled Chromium features in {bundle}")
    return re.findall(r'"([A-Za-z0-9]+)"', re.sub(r"//[^\n]*", "", m.group(1)))


def chromium_args(fake_mic: Path) -> list[str]:
    """Chromium as tests and benches need it: headless, no background networking, host resolution off except
    loopback, fake microphone playing ``fake_mic`` once, loopback ICE candidates allowed, no mDNS-hidden local
    addresses."""
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
        "--disable-features=" + ",".join([*disabled_features(), "WebRtcHideLocalIpsWithMdns"]),
    ]


@asynccontextmanager
async def chromium(fake_mic: Path) -> AsyncIterator[Browser]:
    """A headless Chromium that contacts nothing but loopback, its microphone playing ``fake_mic`` once (a 16-bit
    PCM WAV; other formats play silence without an error)."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(fake_mic), headless=True)
        try:
            yield browser
        finally:
            await browser.close()
