"""Debian's Chromium for the benches that need a real browser, launched as the browser tests launch it (the
benches import no test code: this mirrors ``tests/support/browser.py``): headless, loopback only, a WAV as the
microphone.
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
    """Playwright's own ``--disable-features`` list (Chromium keeps only the last such flag), read from its driver."""
    bundle = Path(playwright.__file__).parent / "driver" / "package" / "lib" / "coreBundle.js"
    m = re.search(r"disabledFeatures = \[(.*?)\]\.filter", bundle.read_text(encoding="utf-8"), re.S)
    if m is None:
        raise RuntimeError(f"cannot find Playwright's disabled Chromium features in {bundle}")
    return re.findall(r'"([A-Za-z0-9]+)"', re.sub(r"//[^\n]*", "", m.group(1)))


@asynccontextmanager
async def chromium(fake_mic: Path) -> AsyncIterator[Browser]:
    """A headless Chromium that contacts nothing but loopback, its microphone playing ``fake_mic`` once (a 16-bit
    PCM WAV; other formats play silence without an error)."""
    args = [
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
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            yield browser
        finally:
            await browser.close()
