"""Debian's Chromium for Playwright tests: launched by ``bench.lib.browser.chromium`` (nothing but loopback is ever
contacted, a WAV file as the fake microphone), and what the tests do with its pages."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page

from bench.lib.browser import chromium  # one launch for tests and benches, with the flags NOTES-machine.md gives

# What the shared ``mic_file`` fixture (tests/conftest.py) has the fake microphone say: one read sentence.
SPEECH_CLIP = "ls_2412-153948-0000"

__all__ = ["SPEECH_CLIP", "check_axe", "chromium", "open_page", "write_wav"]


def write_wav(path: Path, samples: np.ndarray, rate: int = 16_000) -> Path:
    """16-bit PCM mono WAV: a format Chromium's fake microphone plays (24-bit or compressed ones play silence)."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return path


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
