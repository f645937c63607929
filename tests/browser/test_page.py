"""End to end in a real browser: Debian's Chromium driven by Playwright, the real page, a real WebRTC connection on
loopback, recorded speech as the fake microphone, the real engine. Assertions are what a person would see."""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import srt as srt_lib
import webvtt
from playwright.async_api import Browser, Page

from app.webrtc.keys import PEERS
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad, reference
from speechdata.wer import word_errors
from tests.support.browser import chromium, write_wav
from tests.support.servers import running_server

pytestmark = [pytest.mark.heavy, pytest.mark.e2e]

CLIP = "ls_2412-153948-0000"  # 11.7 s of LibriSpeech read speech
LEAD_S, TAIL_S = 1.0, 3.0  # the fake microphone starts before the connection is up: lead with silence


@pytest.fixture(scope="module")
def fake_mic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_wav(tmp_path_factory.mktemp("mic") / f"{CLIP}.wav", pad(audio(CLIP), LEAD_S, TAIL_S))


@pytest.fixture
async def browser(fake_mic: Path) -> AsyncIterator[Browser]:
    async with chromium(fake_mic) as b:
        yield b


async def caption_run(page: Page, url: str, app: Any) -> dict[str, Any]:
    """Open the page, press Start, wait for the clip to be spoken and captioned, press Stop."""
    t_load = time.monotonic()
    await page.goto(url)
    await page.wait_for_function("window.liveCaptions && window.liveCaptions.state === 'idle'", timeout=60_000)
    await page.click("#toggle")
    await page.wait_for_function("window.liveCaptions.state === 'live'", timeout=30_000)
    await page.wait_for_selector("[data-sentence-id]", timeout=90_000)
    t_first = time.monotonic()
    energy = sum(p.ingest.energy for p in app[PEERS].values())
    remaining = LEAD_S + audio(CLIP).size / 16000 + TAIL_S - (time.monotonic() - t_load)
    await asyncio.sleep(max(0.0, remaining))
    await page.click("#toggle")  # Stop
    await page.wait_for_function("window.liveCaptions.state === 'idle'", timeout=60_000)
    return {
        "first_caption_s": t_first - t_load,
        "energy": energy,
        "messages": await page.evaluate("window.liveCaptions.messages"),
        "transcript": await page.evaluate("window.liveCaptions.transcript()"),
        "shown": await page.locator("[data-sentence-id]").all_inner_texts(),
    }


async def test_spoken_clip_appears_as_locked_captions(engine: CaptionEngine, browser: Browser) -> None:
    async with running_server(engine) as (url, app):
        page = await browser.new_page()
        run = await caption_run(page, url, app)
    assert run["energy"] > 1.0, "the fake microphone sent silence: check the WAV format and Chromium flags"
    text = " ".join(s["text"] for s in run["transcript"]["sentences"])
    errors, words = word_errors(reference(CLIP), text)
    assert errors / words < 0.15, text
    shown = " ".join(run["shown"])
    assert all(s["text"] in shown for s in run["transcript"]["sentences"])  # on screen, not only in memory
    msgs = run["messages"]
    first_lock = next(i for i, m in enumerate(msgs) if m["type"] == "caption" and m["sentences"])
    assert any(m["type"] == "caption" and m["partial"] for m in msgs[:first_lock]), "no partial before the lock"
    assert msgs[-1]["type"] == "stopped" and any(m["type"] == "caption" and m["is_final"] for m in msgs)
    assert run["transcript"]["partial"] == ""
    print(f"\npage load to first locked caption: {run['first_caption_s']:.2f} s")


async def test_transcript_downloads(engine: CaptionEngine, browser: Browser, tmp_path: Path) -> None:
    async with running_server(engine) as (url, app):
        page = await browser.new_page()
        run = await caption_run(page, url, app)
        files: dict[str, str] = {}
        for fmt in ("txt", "srt", "vtt", "json"):
            async with page.expect_download() as info:
                await page.click(f"button[data-format={fmt}]")
            download = await info.value
            target = tmp_path / download.suggested_filename
            await download.save_as(target)
            files[fmt] = target.read_text(encoding="utf-8")
    sentences = run["transcript"]["sentences"]
    assert sentences
    said = [w for s in sentences for w in s["text"].split()]
    for s in sentences:
        assert s["text"] in files["txt"]
    # SRT and WebVTT: subtitle cues cut at the page's word times, the words all there and in order.
    label = re.compile(r"^Speaker \d+: ")
    srt_words = [w for cue in srt_lib.parse(files["srt"]) for w in label.sub("", cue.content).split()]
    (tmp_path / "c.vtt").write_text(files["vtt"], encoding="utf-8")
    vtt_words = [
        w
        for cue in webvtt.read(str(tmp_path / "c.vtt")).captions
        for w in label.sub("", html.unescape(cue.text)).split()
    ]
    assert srt_words == said and vtt_words == said
    assert all(len(line) <= 42 for line in files["srt"].splitlines())
    stamp = r"\d\d:\d\d:\d\d[,.]\d\d\d"
    assert re.search(rf"^1\n{stamp.replace('[,.]', ',')} --> {stamp.replace('[,.]', ',')}$", files["srt"], re.M)
    assert files["vtt"].startswith("WEBVTT")
    assert re.search(rf"^{stamp.replace('[,.]', '[.]')} --> ", files["vtt"], re.M)
    assert ",1000" not in files["srt"] and ".1000" not in files["vtt"]
    exported = json.loads(files["json"])
    texts = [s["text"] for s in (exported["sentences"] if isinstance(exported, dict) else exported)]
    assert texts == [s["text"] for s in sentences]
    assert all([w["w"] for w in s["words"]] == s["text"].split() for s in exported["sentences"]), "no word times"
