"""Transcript files: one formatter (app/transcripts/exports.py) for a room's transcript and for the page's
download buttons.

The page posts the sentences it shows to ``POST /exports/transcript.{fmt}``; a room's files come from
``GET /rooms/{id}/transcript.{fmt}``. Both must give the same file for the same sentences, and the export route
must refuse bad input clearly. The browser test clicks the page's real download buttons.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from app.rooms import SentenceRecord
from app.rooms.keys import ROOMS
from engine import CaptionEngine
from tests.support.browser import chromium, write_wav
from tests.support.servers import running_server

TOKEN = "export-test-token-1"
SENTENCES: list[dict[str, Any]] = [
    {"id": 0, "text": "Hello there, this is the first sentence.", "start": 1200, "end": 3999.6, "spk": 0},
    {"id": 1, "text": "And a reply --> with an arrow <b>", "start": 4100, "end": 6000, "spk": 1},
    {"id": 2, "text": "Back to the first voice.", "start": 6500, "end": 6500, "spk": 0},
    {"id": 3, "text": "No label here.", "start": 3_723_004, "end": 3_724_000, "spk": None},
]


async def _post(http: aiohttp.ClientSession, url: str, body: Any, **kw: Any) -> tuple[int, str, str]:
    # As a stream: aiohttp warns that a body of megabytes sent as one bytes object would hold up the event loop.
    data = io.BytesIO(json.dumps(body).encode())
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}, **kw) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def test_the_page_export_and_the_room_transcript_are_the_same_file(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        publisher = room.join("s1")
        await room.commit_sentences(
            [SentenceRecord(-1, "s1", s["text"], round(s["start"]), round(s["end"]), s["spk"]) for s in SENTENCES]
        )
        publisher.leave()
        for fmt in ("txt", "srt", "vtt"):
            status, ctype, page_file = await _post(
                http,
                f"{url}/exports/transcript.{fmt}",
                {"sentences": [dict(s, session="s1") for s in SENTENCES], "model": "m", "language": "en"},
            )
            assert status == 200 and ctype.startswith(("text/", "application/x-subrip")), (status, ctype)
            async with http.get(f"{url}/rooms/{room.id}/transcript.{fmt}") as r:
                assert await r.text() == page_file, fmt
        # One cue per sentence, on one line, as before word times (?cues=sentence), labels in the text as before
        # (?speakers=label).
        status, _, srt = await _post(
            http, f"{url}/exports/transcript.srt?cues=sentence&speakers=label", {"sentences": SENTENCES}
        )
        assert "00:00:01,200 --> 00:00:04,000\nSpeaker 1: Hello there" in srt and ",1000" not in srt
        assert "00:00:06,500 --> 00:00:06,501" in srt, "a cue never ends where it starts"
        assert "Speaker 2: And a reply → with an arrow <b>" in srt
        assert "01:02:03,004 --> 01:02:04,000\nNo label here." in srt
        status, _, vtt = await _post(
            http, f"{url}/exports/transcript.vtt?cues=sentence&speakers=label", {"sentences": SENTENCES}
        )
        assert vtt.startswith("WEBVTT\n") and "<v Speaker 2>Speaker 2: And a reply → with an arrow &lt;b&gt;" in vtt
        # Subtitle cues (the default): two lines of at most 42 characters, label first, broken after the comma;
        # a sentence said in no time stays up as long as reading its 35 characters at 20 per second takes.
        status, _, srt = await _post(http, f"{url}/exports/transcript.srt?speakers=label", {"sentences": SENTENCES})
        assert "00:00:01,200 --> 00:00:04,000\nSpeaker 1: Hello there,\nthis is the first sentence.\n" in srt
        assert "00:00:06,500 --> 00:00:08,250\nSpeaker 1: Back to the first voice.\n" in srt
        # By default a change of speaker is a dialogue dash (counted: 25 characters stay up 1.25 s); the first
        # speaker needs none.
        status, _, srt = await _post(http, f"{url}/exports/transcript.srt", {"sentences": SENTENCES})
        assert "00:00:01,200 --> 00:00:04,000\nHello there, this is the first sentence.\n" in srt
        assert "00:00:06,500 --> 00:00:07,750\n-Back to the first voice.\n" in srt and "Speaker" not in srt
        status, _, narrow = await _post(
            http, f"{url}/exports/transcript.srt?max_chars=20&max_lines=1", {"sentences": SENTENCES}
        )
        text_lines = [line for line in narrow.splitlines() if line and " --> " not in line and not line.isdigit()]
        assert status == 200 and text_lines and max(len(line) for line in text_lines) <= 20, text_lines
        assert all(block.count("\n") == 2 for block in narrow.strip().split("\n\n")), "one line per cue"
        status, ctype, doc = await _post(
            http, f"{url}/exports/transcript.json", {"sentences": SENTENCES, "model": "whisper-base", "language": None}
        )
        exported = json.loads(doc)
        assert ctype.startswith("application/json") and exported["model"] == "whisper-base"
        assert [s["text"] for s in exported["sentences"]] == [s["text"] for s in SENTENCES]
        assert [s["speaker"] for s in exported["sentences"]] == ["Speaker 1", "Speaker 2", "Speaker 1", None]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"sentences": "x"}, 400),
        ({"sentences": [{"id": "0", "text": "a", "start": 0, "end": 1, "spk": 0}]}, 400),
        ({"sentences": [{"id": 0, "text": 5, "start": 0, "end": 1, "spk": 0}]}, 400),
        ({"sentences": [{"id": 0, "text": "a", "start": -1, "end": 1, "spk": 0}]}, 400),
        ({"sentences": [{"id": 0, "text": "a", "start": 0, "end": 1, "spk": True}]}, 400),
        ({"sentences": [], "language": 3}, 400),
        ([1, 2], 400),
    ],
)
async def test_bad_export_requests_get_a_clear_error(fake_engine: CaptionEngine, body: Any, status: int) -> None:
    async with running_server(fake_engine) as (url, _), aiohttp.ClientSession() as http:
        got, ctype, text = await _post(http, f"{url}/exports/transcript.srt", body)
        assert got == status and ctype.startswith("application/json") and json.loads(text)["error"]["message"]
        ok, _, _ = await _post(http, f"{url}/exports/transcript.srt", {"sentences": []})
        assert ok == 200  # the same route takes a well-formed body


@pytest.mark.slow  # ~10 s: tens of megabytes of JSON each way
async def test_a_long_transcript_exports_and_an_oversized_one_is_refused(fake_engine: CaptionEngine) -> None:
    """A day of captions (far over the server's default body limit for offers) exports; past the limits, 413."""
    day = [
        {
            "id": i,
            "text": f"Sentence {i} of a long day of meetings.",
            "start": i * 3000,
            "end": i * 3000 + 2500,
            "spk": i % 3,
        }
        for i in range(5_000)
    ]
    async with running_server(fake_engine) as (url, _), aiohttp.ClientSession() as http:
        status, _, srt = await _post(http, f"{url}/exports/transcript.srt", {"sentences": day})
        assert status == 200 and srt.count(" --> ") == 5_000
        too_many = {"sentences": [{"id": 0, "text": "", "start": 0, "end": 0, "spk": None}] * 200_001}
        assert (await _post(http, f"{url}/exports/transcript.srt", too_many))[0] == 413
        huge = json.dumps({"sentences": [], "pad": "x" * (17 * 1024 * 1024)})
        async with http.post(
            f"{url}/exports/transcript.srt",
            data=io.BytesIO(huge.encode()),
            headers={"Content-Type": "application/json"},
        ) as r:
            assert r.status == 413 and (await r.json())["error"]["code"] == "too_large"


async def test_export_needs_the_token_when_the_server_has_one(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, _), aiohttp.ClientSession() as http:
        assert (await _post(http, f"{url}/exports/transcript.txt", {"sentences": []}))[0] == 401
        assert (await _post(http, f"{url}/exports/transcript.txt", {"sentences": [], "token": TOKEN}))[0] == 200
        async with http.post(f"{url}/exports/transcript.txt", data="{}", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415


@pytest.mark.e2e
async def test_the_page_download_buttons_save_the_server_rendered_files(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    """Captions handed to the page as server messages; each button saves what the export route renders."""
    silence = write_wav(tmp_path / "silence.wav", np.zeros(16_000, np.float32))
    caption = {
        "type": "caption",
        "seq": 2,
        "partial": "",
        "is_final": False,
        "sentences": [dict(s, session="p1") for s in SENTENCES],
    }
    async with running_server(fake_engine) as (url, _), aiohttp.ClientSession() as http, chromium(silence) as browser:
        page = await browser.new_page()
        await page.goto(url)
        await page.wait_for_function("window.liveCaptions !== undefined")
        await page.evaluate("(m) => window.liveCaptions.receive(JSON.stringify(m))", caption)
        await page.wait_for_selector("[data-sentence-id='3']")
        shown = await page.evaluate("window.liveCaptions.transcript().sentences")
        assert [s["text"] for s in shown] == [s["text"] for s in SENTENCES]
        for fmt in ("txt", "srt", "vtt", "json"):
            async with page.expect_download() as info:
                await page.click(f"button[data-format={fmt}]")
            download = await info.value
            assert re.fullmatch(rf"captions-\d{{4}}-\d\d-\d\d-\d{{4}}\.{fmt}", download.suggested_filename)
            saved = await asyncio.to_thread(Path(await download.path()).read_text, encoding="utf-8")
            _, _, expected = await _post(
                http, f"{url}/exports/transcript.{fmt}", {"sentences": shown, "model": "fake", "language": None}
            )
            if fmt == "json":
                saved_doc, expected_doc = json.loads(saved), json.loads(expected)
                assert saved_doc["sentences"] == expected_doc["sentences"]
            else:
                assert saved == expected, fmt


async def test_word_times_reach_the_room_file_and_viewers_that_ask(fake_engine: CaptionEngine) -> None:
    """Word times are stored with each sentence (on the room timeline), written to transcript.json, and sent to a
    viewer that asks (``?words=1``), also when it resumes from the store; other viewers get sentences as before."""
    from engine.protocol import Word
    from tests.support.sse import SseReader

    words = (Word("Hello", 1200, 1500), Word("there,", 1520, 1900), Word("friends.", 2000, 2600))
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        publisher = room.join("s1")
        await room.commit_sentences([SentenceRecord(-1, "s1", "Hello there, friends.", 1200, 2600, 0, words)])
        publisher.leave()
        async with http.get(f"{url}/rooms/{room.id}/transcript.json") as r:
            doc = await r.json()
        assert doc["sentences"][0]["words"] == [w.wire() for w in words]
        for query, expect in (
            ("?words=1", [w.wire() for w in words]),
            ("", None),
            ("?words=1&after=0", [w.wire() for w in words]),
        ):
            async with SseReader(f"{url}/rooms/{room.id}/events{query}") as viewer:
                await viewer.wait_for(lambda r: any(m["type"] == "caption" and m["sentences"] for _, m in r.events))
                sent = next(m for _, m in viewer.events if m["type"] == "caption" and m["sentences"])["sentences"][0]
                assert sent.get("words") == expect, query


async def test_room_subtitles_follow_the_aligned_word_times_once_they_come(fake_engine: CaptionEngine) -> None:
    """A live sentence locks with estimated word times; the aligner's follow as a ``words`` update, and the room's
    subtitle cues are cut at those from then on (the sentence's own start and end stay as locked)."""
    from engine.protocol import Caption, Sentence, Word, WordTimes

    estimated = (Word("Hello", 1200, 1500), Word("there,", 1500, 1900), Word("friends.", 1900, 2600))
    aligned = (Word("Hello", 1340, 1580), Word("there,", 1600, 1880), Word("friends.", 1950, 2410))
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        publisher = room.join("s1")
        publisher.offset_ms = 0  # session time is room time here: the file's times read as given
        await publisher.publish(Caption([Sentence(0, "Hello there, friends.", 1200, 2600, 0, words=estimated)], ""))

        async def srt() -> str:
            async with http.get(f"{url}/rooms/{room.id}/transcript.srt") as r:
                return await r.text()

        assert "00:00:01,200 --> 00:00:02,600\n" in await srt()
        await publisher.publish(WordTimes(0, aligned))
        assert "00:00:01,340 --> 00:00:02,410\n" in await srt()
        async with http.get(f"{url}/rooms/{room.id}/transcript.srt?cues=sentence") as r:
            assert "00:00:01,200 --> 00:00:02,600\n" in await r.text()
        async with http.get(f"{url}/rooms/{room.id}/transcript.json") as r:
            sentence = (await r.json())["sentences"][0]
        assert (sentence["start_ms"], sentence["end_ms"]) == (1200, 2600)
        assert sentence["words"] == [w.wire() for w in aligned]
        publisher.leave()
