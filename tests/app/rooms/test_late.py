"""Updates that follow a lock, after an editor corrected the sentence: the aligner's word times and a speaker
relabel apply to the sentence as it now is (``app.rooms.late``). A corrected sentence never gets the recognizer's
words back, in any file, HLS segment, output or screen, and a label an editor set stays. Sentences come from a
publisher the way a session's do (``RoomPublisher.publish``), with the fake recognizer's server around them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from app.outputs.pending import PendingCaptions
from app.outputs.spec import Progress
from app.rooms import Room, RoomPublisher
from app.rooms.edits import retimed
from app.rooms.keys import ROOMS
from app.rooms.store import Edits, SentenceRecord, open_store
from app.transcripts import hls, speaker_name
from engine import CaptionEngine
from engine.protocol import (
    Caption,
    Correction,
    Sentence,
    Speakers,
    Vocabulary,
    Word,
    WordTimes,
    parse_server_message,
)
from tests.support.api import call, new_room
from tests.support.caption_readers import pycaption_captions, vtt_cues
from tests.support.disk import disk_full
from tests.support.servers import running_server
from tests.support.sse import SseReader

TOKEN = "server-token-for-late-updates"
HEARD = "mister dash wood opened the meeting."  # what the recognizer locked
MEANT = "Mr. Dashwood opened the meeting."  # what the editor made of it


def words_at(text: str, start: int, step: int, lead: int = 0) -> tuple[Word, ...]:
    """The words of ``text`` one per ``step`` ms from ``start`` + ``lead``."""
    at = start + lead
    return tuple(Word(w, at + i * step, at + (i + 1) * step - 30) for i, w in enumerate(text.split()))


@pytest.fixture
async def server(
    monkeypatch: pytest.MonkeyPatch, fake_engine: CaptionEngine, tmp_path: Path
) -> AsyncIterator[tuple[str, web.Application]]:
    """1 s HLS segments listed 0.5 s after their end, closed 0.5 s after the room ends (as
    tests/app/transcripts/test_hls.py)."""
    monkeypatch.setattr(hls, "SEGMENT_MS", 1000)
    monkeypatch.setattr(hls, "SETTLE_MS", 500)
    monkeypatch.setattr(hls, "END_GRACE_MS", 500)
    async with running_server(fake_engine, auth_token=TOKEN, db_path=str(tmp_path / "late.db")) as served:
        yield served


async def publishing(app: web.Application, room_id: str) -> tuple[Room, RoomPublisher, list[Correction]]:
    """The room, a publisher in it whose session began 2.2 s ago (so what it says is in the past), and what that
    session's client is told of corrections."""
    room: Room | None = await app[ROOMS].get(room_id)
    assert room is not None
    publisher = room.join("pub-late")
    told: list[Correction] = []
    publisher.watch(told.append)
    await asyncio.sleep(2.2)
    return room, publisher, told


def audience_queue(room: Room, events: list[tuple[int | None, dict[str, Any]]]) -> PendingCaptions:
    """An output's queue fed with the audience's stream ``events`` (what ``app.outputs.runner`` takes in)."""
    queue = PendingCaptions(room.record.created_ms, speaker_name, Progress(0))
    for seq, body in events:
        if seq is not None:
            queue.take(seq, parse_server_message(body), room.names)
    return queue


async def hls_text(url: str, room_id: str) -> str:
    """Every segment of the room's HLS playlist once it closed (the room ended), one after another."""
    deadline = time.monotonic() + 10
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(f"{url}/rooms/{room_id}/captions.m3u8") as r:
                playlist = await r.text()
            if "#EXT-X-ENDLIST" in playlist:
                break
            assert time.monotonic() < deadline, playlist
            await asyncio.sleep(0.1)
        text = ""
        for uri in (line for line in playlist.splitlines() if line.startswith("captions/")):
            async with http.get(f"{url}/rooms/{room_id}/{uri}") as r:
                assert r.status == 200
                text += " ".join(t for _, _, t in vtt_cues(await r.text())) + " "
    return " ".join(text.split())


async def test_word_times_after_a_correction_retime_the_editors_words_in_every_file_and_stream(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room_id, editor = made["room"], made["editor_token"]
    room, publisher, told = await publishing(app, room_id)
    async with SseReader(f"{url}/rooms/{room_id}/events?words=1") as viewer:
        locked = words_at(HEARD, 0, 300)  # the lock's own times (the VAD's)
        await publisher.publish(Caption([Sentence(0, HEARD, 0, locked[-1].end_ms, 0, words=locked)], ""))
        await viewer.wait_for(lambda r: bool(r.sentences()))
        [sid] = list(viewer.sentences())
        status, body = await call("PUT", f"{url}/rooms/{room_id}/sentences/{sid}", editor, {"text": MEANT})
        assert status == 200 and body["sentence"]["text"] == MEANT
        aligned = words_at(HEARD, 0, 280, lead=40)  # the aligner's, a second later: for the recognizer's words
        await publisher.publish(WordTimes(0, aligned))
        await viewer.wait_for(lambda r: any(m["type"] == "words" for _, m in r.events))
        [update] = [m for _, m in viewer.events if m["type"] == "words"]
        assert [w["w"] for w in update["words"]] == MEANT.split(), "the words as they now apply, not the recognizer's"
        off = publisher.offset_ms
        shifted = tuple(w.shifted(off) for w in aligned)
        expected = retimed(
            SentenceRecord(sid, "pub-late", HEARD, off, off + locked[-1].end_ms, 0, shifted), MEANT.split()
        )
        assert [(w["w"], w["start_ms"], w["end_ms"]) for w in update["words"]] == [
            (w.w, w.start_ms, w.end_ms) for w in expected
        ]
        assert expected[0].start_ms == shifted[0].start_ms and expected[1].end_ms == shifted[2].end_ms, (
            '"Mr. Dashwood" takes the time "mister dash wood" took'
        )
        assert expected[2:] == shifted[3:], "the words the editor left alone keep the aligner's times"
        output = audience_queue(room, viewer.events)
    assert [(w.caption.text, w.caption.spk) for w in output] == [(MEANT, 0)], "an output sends the corrected text"
    mine = [c for c in told if c.sentences]
    assert mine[-1].sentences[0].text == MEANT and [w.w for w in mine[-1].sentences[0].words] == MEANT.split(), (
        "the publishing client gets its sentence's words as they now are, after its own words message"
    )
    assert mine[-1].sentences[0].words[2] == aligned[3], "in its own session's times"

    _, doc = await call("GET", f"{url}/rooms/{room_id}/transcript.json", None)
    [entry] = doc["sentences"]
    assert entry["text"] == MEANT and [(w["w"], w["start_ms"], w["end_ms"]) for w in entry["words"]] == [
        (w.w, w.start_ms, w.end_ms) for w in expected
    ]
    for fmt in ("txt", "srt", "vtt"):
        status, got = await call("GET", f"{url}/rooms/{room_id}/transcript.{fmt}", None)
        flat = " ".join(got["text"].split())
        assert status == 200 and "Mr. Dashwood opened the meeting." in flat and "dash" not in flat, (fmt, flat)
    _, scc = await call("GET", f"{url}/rooms/{room_id}/transcript.scc", None)
    shown = " ".join(" ".join(t for _, _, t in pycaption_captions(scc["text"])).split())
    assert "Mr. Dashwood opened the meeting." in shown and "dash" not in shown.lower().replace("dashwood", ""), shown
    assert (await call("POST", f"{url}/rooms/{room_id}/end", editor))[0] == 200
    segments = await hls_text(url, room_id)
    assert "Mr. Dashwood opened the meeting." in segments and "dash wood" not in segments, segments
    stored = await room.store.snapshot(room_id)
    assert [w.w for w in stored.sentences[0].words] == MEANT.split(), "as stored"
    room.leave("pub-late")


async def test_word_times_for_a_correction_the_store_has_not_taken_yet_retime_it_and_are_stored_so(
    server: tuple[str, web.Application],
) -> None:
    """While the store refuses writes, the correction and the word times wait in memory (``Room.unsaved``): the
    word times apply to the correction all the same, in what readers get meanwhile and in what is written later."""
    url, app = server
    made = await new_room(url, TOKEN)
    room_id, editor = made["room"], made["editor_token"]
    room, publisher, _ = await publishing(app, room_id)
    locked = words_at(HEARD, 0, 300)
    await publisher.publish(Caption([Sentence(0, HEARD, 0, locked[-1].end_ms, 0, words=locked)], ""))
    [record] = (await room.read_snapshot()).sentences
    disk_full(room.store, True)
    try:
        assert (await call("PUT", f"{url}/rooms/{room_id}/sentences/{record.id}", editor, {"text": MEANT}))[0] == 200
        await publisher.publish(WordTimes(0, words_at(HEARD, 0, 280, lead=40)))
        assert not room.saving and [type(e.body) for e in room.unsaved] == [Correction, Vocabulary, WordTimes]
        [now] = (await room.read_snapshot()).sentences
        assert now.text == MEANT and [w.w for w in now.words] == MEANT.split()
        _, doc = await call("GET", f"{url}/rooms/{room_id}/transcript.json", None)
        assert [w["w"] for w in doc["sentences"][0]["words"]] == MEANT.split()
    finally:
        disk_full(room.store, False)
    await room.retry_unsaved()
    assert room.saving and not room.unsaved
    [stored] = (await room.store.snapshot(room_id)).sentences
    assert stored.text == MEANT and [w.w for w in stored.words] == MEANT.split() and stored.original == HEARD
    room.leave("pub-late")


async def test_word_times_of_a_sentence_split_or_deleted_meanwhile_time_what_is_left(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room_id, editor = made["room"], made["editor_token"]
    room, publisher, _ = await publishing(app, room_id)
    said = ["thanks everyone now over to Sam.", "and one more thing."]
    locked = [words_at(said[0], 0, 300), words_at(said[1], 2000, 300)]
    await publisher.publish(
        Caption(
            [
                Sentence(i, t, w[0].start_ms, w[-1].end_ms, 0, words=w)
                for i, (t, w) in enumerate(zip(said, locked, strict=True))
            ],
            "",
        )
    )
    first, gone = (await room.read_snapshot()).sentences
    assert (await call("POST", f"{url}/rooms/{room_id}/sentences/{first.id}/split", editor, {"at": 2}))[0] == 200
    assert (await call("DELETE", f"{url}/rooms/{room_id}/sentences/{gone.id}", editor))[0] == 200
    aligned = words_at(said[0], 0, 280, lead=40)
    await publisher.publish(WordTimes(0, aligned))
    await publisher.publish(WordTimes(1, words_at(said[1], 2000, 280, lead=40)))
    kept, rest = (await room.read_snapshot()).sentences
    off = publisher.offset_ms
    assert (kept.text, kept.words) == ("thanks everyone", tuple(w.shifted(off) for w in aligned[:2]))
    assert rest.text == "now over to Sam." and [w.w for w in rest.words] == rest.text.split()
    assert [type(e.message).__name__ for e in await room.store.timed_events(room_id, kind="words")] == ["WordTimes"], (
        "a deleted sentence takes no word times"
    )
    room.leave("pub-late")


async def test_a_relabel_leaves_a_speaker_an_editor_set_and_moves_the_others(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room_id, editor = made["room"], made["editor_token"]
    room, publisher, told = await publishing(app, room_id)
    said = ["good morning everyone.", "let us begin.", "the first item is the budjet."]
    locked = [words_at(t, 600 * i, 150) for i, t in enumerate(said)]
    async with SseReader(f"{url}/rooms/{room_id}/events") as viewer:
        await publisher.publish(
            Caption(
                [
                    Sentence(i, t, w[0].start_ms, w[-1].end_ms, 0, words=w)
                    for i, (t, w) in enumerate(zip(said, locked, strict=True))
                ],
                "",
            )
        )
        await viewer.wait_for(lambda r: len(r.sentences()) == 3)
        a, b, c = sorted(viewer.sentences())
        put = f"{url}/rooms/{room_id}/sentences"
        assert (await call("PUT", f"{put}/{a}", editor, {"text": "Good morning, everyone.", "spk": 2}))[0] == 200
        assert (await call("PUT", f"{put}/{c}", editor, {"text": "The first item is the budget."}))[0] == 200
        await publisher.publish(Speakers({0: 1, 1: 1, 2: 1}))  # the session re-clustered its voices
        await viewer.wait_for(lambda r: any(m["type"] == "speakers" for _, m in r.events))
        await publisher.publish(Speakers({0: 3}))  # and again: the editor's label still stays
        await asyncio.sleep(0.2)
        relabels = [m["relabel"] for _, m in viewer.events if m["type"] == "speakers"]
        # (The session's voice 1 is the room's label 3: new voices' labels go above the 2 the editor used.)
        assert relabels == [{str(b): 3, str(c): 3}], "the editor's label is not relabelled; a text fix's is"
        output = audience_queue(room, viewer.events)
    assert [(w.caption.sentence_id, w.caption.spk, w.caption.speaker) for w in output] == [
        (a, 2, "Speaker 3"),
        (b, 3, "Speaker 4"),
        (c, 3, "Speaker 4"),
    ]
    _, doc = await call("GET", f"{url}/rooms/{room_id}/transcript.json", None)
    assert [(s["text"], s["spk"]) for s in doc["sentences"]] == [
        ("Good morning, everyone.", 2),
        ("let us begin.", 3),
        ("The first item is the budget.", 3),
    ]
    restated = [s for c_ in told if c_.editor == "" for s in c_.sentences]
    assert [(s.id, s.spk) for s in restated] == [(0, 2), (0, 2)], (
        "the publishing client, which relabelled it itself, is told the editor's label again each time"
    )
    room.leave("pub-late")


# ---- the store: a few sentences read by id (both backends) ----------------------------------------------------------
async def test_a_snapshot_of_a_few_sentences_reads_only_those(store_target: str) -> None:
    store = await open_store(store_target)
    room = "room-late-ids-abc"
    await store.create_room(room)
    records = [SentenceRecord(-1, "s", f"sentence {i}.", i * 1000, i * 1000 + 900, 0) for i in range(700)]
    await store.append(room, Caption([r.sentence() for r in records], "", seq=1), records)
    await store.append(room, Correction((), (3,), seq=2), edits=Edits(deleted=(3,)))
    few = await store.snapshot(room, ids={5, 3, 1, 9999})
    assert few.seq == 2 and [s.id for s in few.sentences] == [1, 5], "deleted and unknown ones are left out"
    assert [s.id for s in (await store.snapshot(room, deleted=True, ids=[3])).sentences] == [3]
    many = await store.snapshot(room, ids=range(0, 700, 2))  # more than a statement takes as parameters
    assert [s.id for s in many.sentences] == list(range(0, 700, 2))
    assert json.dumps([s.text for s in many.sentences[:2]]) == '["sentence 0.", "sentence 2."]'
    await store.close()
