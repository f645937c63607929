"""The microphone page in real Chromium while the transcript database refuses writes (a full disk): the person
speaking sees their captions and a warning that they are not being saved, and the warning turns into a
reassurance once the database takes writes again. The recognizer is the named fake: no caption text is judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.rooms.keys import ROOMS, STORE
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.browser import chromium, write_wav
from tests.support.disk import disk_full
from tests.support.servers import running_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_the_page_warns_while_captions_are_not_saved_and_says_when_they_are_again(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    mic = write_wav(tmp_path / "mic.wav", pad(audio("ls_1988-24833-0000"), 1.0, 6.0))
    async with running_server(fake_engine, db_path=str(tmp_path / "c.db")) as (url, app), chromium(mic) as browser:
        disk_full(app[STORE], True)
        page = await browser.new_page()
        await page.goto(url)
        await page.wait_for_function("window.liveCaptions && window.liveCaptions.state === 'idle'")
        await page.click("#toggle")
        await page.wait_for_selector("[data-sentence-id]", timeout=30_000)  # captions still appear
        notice = page.locator("#notice")
        await notice.wait_for(state="visible")
        assert "not being saved" in await notice.inner_text()
        assert await notice.get_attribute("data-tone") == "warn"
        disk_full(app[STORE], False)
        await app[ROOMS].sweep()
        await page.wait_for_function("document.querySelector('#notice').textContent.includes('saved again')")
        assert app[ROOMS].snapshot_stats()["unsaved_rooms"] == 0, "the session's own room was written too"
        await page.click("#toggle")
        await page.wait_for_function("window.liveCaptions.state === 'idle'")
