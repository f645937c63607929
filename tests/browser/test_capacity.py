"""The microphone page in real Chromium when the server is full: it says so, waits as long as the server asks
(``Retry-After``), tries again by itself, and goes live once a place is free, without the person pressing anything
again. The recognizer is the named fake: no caption text is judged here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.ops import ADMISSION, Slot
from engine import CapacityEstimate
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.browser import chromium, write_wav
from tests.support.servers import running_server

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # real-time speech after seconds of refusals: about 10 s on an idle machine, fake recognizer
async def test_the_page_waits_while_the_server_is_full_then_goes_live_by_itself(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    # The microphone plays from the moment the page asks for it: the speech comes after the seconds the page waits
    # for a place (nothing is sent meanwhile; it goes live about 4 s in). Were it late on a loaded machine, the rest
    # of the speech would still make a sentence.
    mic = write_wav(tmp_path / "mic.wav", pad(audio("ls_1988-24833-0000"), 4.5, 4.0))
    async with running_server(fake_engine, max_sessions=None) as (url, app), chromium(mic) as browser:
        admission = app[ADMISSION]
        admission.capacity = lambda: CapacityEstimate(1, "measured", 0.5, 0.1, 0.95, 0.2, False)
        admission.retry_after_s = 1
        taken = admission.admit()  # the one session the server holds
        assert isinstance(taken, Slot)
        page = await browser.new_page()
        await page.goto(url)
        await page.wait_for_function("window.liveCaptions && window.liveCaptions.state === 'idle'")
        await page.click("#toggle")
        await page.wait_for_function("window.liveCaptions.state === 'full'")
        badge = page.locator("#badge")
        assert await badge.get_attribute("data-state") == "full"
        notice = await page.locator("#notice").inner_text()
        assert "server is full" in notice and "Trying again in" in notice, notice
        refusals = admission.refused.get("full", 0)
        # It asks again on its own, after about the second the server asked for (±20 %), and is refused again.
        began = time.monotonic()
        while admission.refused.get("full", 0) < refusals + 2 and time.monotonic() - began < 10:
            await page.wait_for_timeout(100)
        assert admission.refused["full"] >= refusals + 2
        assert await page.evaluate("window.liveCaptions.state") == "full"
        taken.release()  # a place frees up
        await page.wait_for_function("window.liveCaptions.state === 'live'", timeout=10_000)
        assert await badge.get_attribute("data-state") == "live"
        await page.wait_for_selector("[data-sentence-id]", timeout=20_000)  # and captions flow
        await page.click("#toggle")
        await page.wait_for_function("window.liveCaptions.state === 'idle'")
