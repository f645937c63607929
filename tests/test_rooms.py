"""Rooms without a browser: fan-out to viewers over server-sent events, late joiners, resuming by seq, tokens,
durable transcripts across a server restart, and the export formats. The recognizer is the named fake: what is
tested is the room plumbing and the store, not the model (the real engine is used by the browser tests' heavy
case)."""

from __future__ import annotations

import itertools
import json
import logging
import re
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from app import exports
from app.keys import ROOMS
from app.rooms import RoomRegistry, Viewer, ViewerState
from app.store import RoomRecord, SentenceRecord, TranscriptStore
from app.store_sqlite import SCHEMA_VERSION
from engine import CaptionEngine, protocol
from tests.rtc_client import CaptionClient
from tests.servers import running_server
from tests.speech import audio, pad
from tests.sse import SseReader

TOKEN = "s3cret-publisher-token"
CLIP = "ls_1988-24833-0000"


async def create_room(url: str, token: str | None = TOKEN, **body: object) -> tuple[int, dict]:  # type: ignore[type-arg]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json=body, headers=headers) as r:
        return r.status, await r.json()


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, await r.text()


async def publish(url: str, room: str) -> CaptionClient:
    """Stream a clip into ``room`` to its end, stop, and return the publisher's client."""
    client = CaptionClient(url, pad(audio(CLIP), 0.3, 2.5))
    await client.connect(offer={"room": room, "token": TOKEN})
    await client.until_played()
    await client.stop()
    await client.close()
    return client


async def test_viewers_get_the_publishers_sentences_late_joiners_too(fake_engine: CaptionEngine,
                                                                     tmp_path: Path) -> None:
    async with running_server(fake_engine, auth_token=TOKEN, db_path=str(tmp_path / "c.db")) as (url, _):
        status, body = await create_room(url, title="Standup")
        assert status == 201 and re.fullmatch(r"[A-Za-z0-9_-]{16}", body["room"]) and body["viewer_token"] is None
        room = body["room"]
        async with SseReader(f"{url}/rooms/{room}/events") as early:
            await early.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
            client = await publish(url, room)
            published = client.sentences()
            assert published
            await early.wait_for(lambda r: len(r.sentences()) == len(published))
        # The viewer saw the same texts and speaker labels, renumbered and shifted onto the room's timeline.
        seen = list(early.sentences().values())
        assert [s["text"] for s in seen] == [s["text"] for s in published]
        assert [s["id"] for s in seen] == list(range(len(published)))
        assert all(s["session"] == client.session for s in seen)
        assert all(v["start"] >= p["start"] and v["end"] - v["start"] == p["end"] - p["start"]
                   for v, p in zip(seen, published, strict=True))
        durable = [i for i, m in early.events if i is not None]
        assert durable == sorted(durable) and len(set(durable)) == len(durable)
        assert any(m["type"] == "caption" and m["partial"] for _, m in early.events), "no partials reached viewers"

        # A late viewer gets every sentence so far in its first message, then the room's status.
        async with SseReader(f"{url}/rooms/{room}/events") as late:
            await late.wait_for(lambda r: len(r.events) >= 2)
            first_id, first = late.events[0]
            assert first["type"] == "caption" and [s["text"] for s in first["sentences"]] == [s["text"] for s in seen]
            assert first_id == durable[-1] and late.events[1][1]["type"] == "room"

        # Resuming from a seq replays exactly the events after it.
        async with SseReader(f"{url}/rooms/{room}/events", last_event_id=durable[0]) as resumed:
            await resumed.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
            assert [i for i, _ in resumed.events if i is not None] == durable[1:]


@pytest.mark.slow
async def test_transcript_survives_a_restart_and_exports_are_correct(fake_engine: CaptionEngine,
                                                                     tmp_path: Path) -> None:
    db = str(tmp_path / "captions.db")
    async with running_server(fake_engine, db_path=db) as (url, _):
        _, body = await create_room(url, token=None)
        room = body["room"]
        first = await publish(url, room)
    async with running_server(fake_engine, db_path=db) as (url, _):  # a new server process would do the same
        second = await publish(url, room)
        files = {fmt: (await get(f"{url}/rooms/{room}/transcript.{fmt}"))[1] for fmt in ("txt", "srt", "vtt", "json")}
    texts = [s["text"] for s in first.sentences() + second.sentences()]
    exported = json.loads(files["json"])["sentences"]
    assert [s["text"] for s in exported] == texts
    assert [s["id"] for s in exported] == list(range(len(texts)))
    assert all(a["end_ms"] <= b["start_ms"] for a, b in itertools.pairwise(exported)), "timeline"
    assert files["vtt"].startswith("WEBVTT\n") and files["srt"].startswith("1\n")
    assert files["srt"].count(" --> ") == len(texts) and files["vtt"].count(" --> ") == len(texts)
    for text in texts:
        assert all(text in f for f in files.values())
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_tokens_guard_publishing_and_private_rooms(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, _):
        status, body = await create_room(url, token=None)
        assert status == 401 and body["error"]["code"] == "unauthorized"
        status, body = await create_room(url, token="wrong")
        assert status == 401
        offer = {"sdp": "v=0", "type": "offer"}
        async with aiohttp.ClientSession() as http, http.post(f"{url}/offer", json=offer) as r:
            assert r.status == 401
        status, body = await create_room(url, private=True)
        room, viewer_token = body["room"], body["viewer_token"]
        assert viewer_token and f"token={viewer_token}" in body["links"]["kiosk"]
        assert (await get(f"{url}/rooms/{room}/events"))[0] == 403
        assert (await get(f"{url}/rooms/{room}/transcript.txt?token=nope"))[0] == 403
        assert (await get(f"{url}/rooms/{room}/transcript.vtt?token={viewer_token}")) == (200, "WEBVTT\n")
        assert (await get(f"{url}/rooms/{room}/transcript.txt?token={TOKEN}"))[0] == 200  # the server's token
        assert (await get(f"{url}/rooms/AAAAAAAAAAAAAAAA/events"))[0] == 404
        status, svg = await get(f"{url}/rooms/{room}/qr.svg?token={viewer_token}")
        assert status == 200 and svg.startswith("<svg xmlns=") and "<path" in svg
        client = CaptionClient(url, audio(CLIP))
        with pytest.raises(RuntimeError, match="404"):
            await client.connect(offer={"room": "AAAAAAAAAAAAAAAA", "token": TOKEN})
        await client.close()


async def test_pages_allow_framing_only_where_configured(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, embed_origins=("https://host.example",)) as (url, _), \
            aiohttp.ClientSession() as http:
        async with http.get(f"{url}/embed?room=x") as r:
            assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self' https://host.example"
        async with http.get(f"{url}/kiosk?room=x") as r:
            assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
        async with http.get(f"{url}/embed.js") as r:
            assert r.status == 200 and "javascript" in r.headers["Content-Type"]
        async with http.get(f"{url}/") as r:  # the microphone page: never framed by another site
            assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
            assert r.headers["X-Frame-Options"] == "SAMEORIGIN"


@pytest.mark.parametrize("body", [{"private": "true"}, {"private": 1}, {"private": None}, {"title": 5},
                                  {"title": "Board", "privte": True}])
async def test_a_room_body_of_the_wrong_shape_is_refused_not_defaulted(fake_engine: CaptionEngine,
                                                                       body: dict) -> None:  # type: ignore[type-arg]
    async with running_server(fake_engine, auth_token=TOKEN) as (url, app):
        status, answer = await create_room(url, **body)
        assert status == 400 and answer["error"]["code"] == "bad_message", answer
        assert not app[ROOMS]._rooms, "a refused body created a room"
        status, answer = await create_room(url, title="Board", private=True)
        assert status == 201 and answer["viewer_token"], "a private room must come with its viewer token"


async def test_tokens_never_reach_the_access_log(fake_engine: CaptionEngine,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    async with running_server(fake_engine, auth_token=TOKEN) as (url, _):
        await get(f"{url}/view?room=abc&token=viewer-secret-1")
        await get(f"{url}/?key={TOKEN}&lang=en")
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert any("/view?room=abc&token=REDACTED" in line for line in lines), lines
    assert any("/?key=REDACTED&lang=en" in line for line in lines), lines
    assert not any("viewer-secret-1" in line or TOKEN in line for line in lines)


def test_export_timing_and_speakers() -> None:
    assert exports.clock_time(999.6, ",") == "00:00:01,000"
    assert exports.clock_time(3_723_004, ".") == "01:02:03.004"
    room = exports.room_header(RoomRecord("r", 0, "", None))
    assert exports.render("vtt", [], room) == "WEBVTT\n"
    sentences = [SentenceRecord(0, "a", "Hi -->\nthere <b>", 59_999.7, 60_000, 1),  # type: ignore[arg-type]
                 SentenceRecord(1, "a", "Bye.", 61_000, 62_500, None)]
    sentences = [SentenceRecord(s.id, s.session, s.text, round(s.start_ms), s.end_ms, s.spk) for s in sentences]
    per_sentence = exports.ExportOptions(cues="sentence")
    srt = exports.render("srt", sentences, room, per_sentence)
    assert "00:01:00,000 --> 00:01:00,001\nSpeaker 2: Hi → there <b>\n" in srt and ",1000" not in srt
    vtt = exports.render("vtt", sentences, room, per_sentence)
    assert "<v Speaker 2>Speaker 2: Hi → there &lt;b&gt;" in vtt and "00:01:01.000 --> 00:01:02.500\nBye." in vtt
    # Subtitle cues: the first stays up until the next (less two frames) instead of one millisecond.
    srt = exports.render("srt", sentences, room)
    assert "00:01:00,000 --> 00:01:00,917\nSpeaker 2: Hi → there <b>\n" in srt and ",1000" not in srt
    assert exports.render("txt", sentences, room).startswith("[00:01:00] Speaker 2\n")


async def test_a_slow_viewer_gets_the_newest_partial_and_is_cut_off_rather_than_buffered() -> None:
    viewer = Viewer()
    viewer.put(1, {"type": "caption", "partial": "a"}, durable=False)
    viewer.put(1, {"type": "caption", "partial": "a b"}, durable=False)  # replaces the unsent partial
    viewer.put(2, {"type": "caption", "sentences": [{"id": 0}]}, durable=True)
    assert [(await viewer.get(1.0)) for _ in range(2)] == [
        (1, {"type": "caption", "partial": "a b"}, False), (2, {"type": "caption", "sentences": [{"id": 0}]}, True)]
    with pytest.raises(TimeoutError):
        await viewer.get(0.05)
    for seq in range(10_000):
        viewer.put(seq, {"type": "caption"}, durable=True)
        if viewer.state is ViewerState.ENDED:
            break
    assert viewer.state is ViewerState.ENDED and await viewer.get(1.0) is None  # reconnects, resumes from store


async def test_viewers_learn_who_is_speaking_while_one_publisher_speaks() -> None:
    """A publisher's ``partial_spk`` reaches the room's viewers with the session it belongs to (labels are per
    session); while two publishers speak at once the merged partial names nobody."""
    store = await TranscriptStore.open(":memory:")
    rooms = RoomRegistry(store)
    try:
        room, _ = await rooms.create("talk")
        viewer = room.subscribe()
        first, second = room.join("session-a"), room.join("session-b")

        async def latest_partial() -> protocol.Caption:
            got = None
            while True:
                try:
                    item = await viewer.get(0.2)
                except TimeoutError:
                    break
                assert item is not None
                if isinstance(item[1], protocol.Caption):
                    got = item[1]
            assert got is not None
            return got

        await first.publish(protocol.Caption([], "so the plan is", partial_spk=1))
        shown = await latest_partial()
        assert (shown.partial, shown.partial_spk, shown.partial_session) == ("so the plan is", 1, "session-a")
        assert shown.wire()["partial_session"] == "session-a"
        await second.publish(protocol.Caption([], "wait", partial_spk=0))
        shown = await latest_partial()
        assert shown.partial == "so the plan is wait" and shown.partial_spk is None and shown.partial_session is None
        await first.publish(protocol.Caption([], ""))  # the first stops speaking: the one still speaking is named
        shown = await latest_partial()
        assert (shown.partial, shown.partial_spk, shown.partial_session) == ("wait", 0, "session-b")
    finally:
        rooms.close()
        await store.close()
