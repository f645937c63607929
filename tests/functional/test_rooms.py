"""Rooms without a browser: fan-out to viewers over server-sent events, late joiners, resuming by seq, tokens,
durable transcripts across a server restart, and the export formats. The recognizer is the named fake: what is
tested is the room plumbing and the store, not the model (the real engine is used by the browser tests' heavy
case)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.rooms import RoomRegistry, Viewer, ViewerState, merged_stable
from app.rooms.keys import ROOMS
from app.rooms.open_text import STALE_S, OpenPart, RemoteOpen
from app.rooms.store import RoomRecord, SentenceRecord, Snapshot, open_store
from app.rooms.store.sqlite import SCHEMA_VERSION, SqliteStore
from app.rooms.viewer import Queued
from app.transcripts import exports
from engine import CaptionEngine, protocol
from engine.protocol import Caption, Sentence, Word, WordTimes
from speechdata.corpus import audio, pad
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server
from tests.support.sse import SseReader, raw_events

TOKEN = "s3cret-publisher-token"
CLIP = "ls_1988-24833-0000"


async def create_room(url: str, token: str | None = TOKEN, **body: object) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json=body, headers=headers) as r:
        return r.status, await r.json()


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, await r.text()


async def publish(url: str, room: str) -> CaptionClient:
    """Stream the first 2 s of a clip (1.6 s of speech: partials, then a sentence) into ``room``, stop, and return the
    publisher's client. (The stop locks the open sentence: no need to stream the long pause that would lock it by
    itself.)"""
    client = CaptionClient(url, pad(audio(CLIP)[: 2 * 16000], 0.3, 1.0))
    await client.connect(offer={"room": room, "token": TOKEN})
    await client.until_played()
    await client.stop()
    await client.close()
    return client


async def test_viewers_get_the_publishers_sentences_late_joiners_too(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
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
        assert all(
            v["start"] >= p["start"] and v["end"] - v["start"] == p["end"] - p["start"]
            for v, p in zip(seen, published, strict=True)
        )
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
async def test_transcript_survives_a_restart_and_exports_are_correct(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
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
    async with (
        running_server(fake_engine, embed_origins=("https://host.example",)) as (url, _),
        aiohttp.ClientSession() as http,
    ):
        async with http.get(f"{url}/embed?room=x") as r:
            assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self' https://host.example"
        async with http.get(f"{url}/kiosk?room=x") as r:
            assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
        async with http.get(f"{url}/embed.js") as r:
            assert r.status == 200 and "javascript" in r.headers["Content-Type"]
        async with http.get(f"{url}/") as r:  # the microphone page: never framed by another site
            assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
            assert r.headers["X-Frame-Options"] == "SAMEORIGIN"


@pytest.mark.parametrize(
    "body", [{"private": "true"}, {"private": 1}, {"private": None}, {"title": 5}, {"title": "Board", "privte": True}]
)
async def test_a_room_body_of_the_wrong_shape_is_refused_not_defaulted(
    fake_engine: CaptionEngine, body: dict[str, Any]
) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, app):
        status, answer = await create_room(url, **body)
        assert status == 400 and answer["error"]["code"] == "bad_message", answer
        assert not app[ROOMS]._rooms, "a refused body created a room"
        status, answer = await create_room(url, title="Board", private=True)
        assert status == 201 and answer["viewer_token"], "a private room must come with its viewer token"


async def test_tokens_never_reach_the_access_log(fake_engine: CaptionEngine, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    async with running_server(fake_engine, auth_token=TOKEN) as (url, _):
        await get(f"{url}/view?room=abc&token=viewer-secret-1")
        await get(f"{url}/?key={TOKEN}&lang=en")
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert any(re.search(r"/view\?room=~[0-9a-f]{8}&token=REDACTED", line) for line in lines), lines
    assert any("/?key=REDACTED&lang=en" in line for line in lines), lines
    assert not any("viewer-secret-1" in line or TOKEN in line for line in lines)


def test_export_timing_and_speakers() -> None:
    assert exports.clock_time(999.6, ",") == "00:00:01,000"
    assert exports.clock_time(3_723_004, ".") == "01:02:03.004"
    room = exports.room_header(RoomRecord("r", 0, "", None))
    assert exports.render("vtt", [], room) == "WEBVTT\n"
    sentences = [
        SentenceRecord(0, "a", "Hi -->\nthere <b>", 59_999.7, 60_000, 1),  # type: ignore[arg-type]
        SentenceRecord(1, "a", "Bye.", 61_000, 62_500, None),
    ]
    sentences = [SentenceRecord(s.id, s.session, s.text, round(s.start_ms), s.end_ms, s.spk) for s in sentences]
    per_sentence = exports.ExportOptions(cues="sentence", speakers="label")
    srt = exports.render("srt", sentences, room, per_sentence)
    assert "00:01:00,000 --> 00:01:00,001\nSpeaker 2: Hi → there <b>\n" in srt and ",1000" not in srt
    vtt = exports.render("vtt", sentences, room, per_sentence)
    assert "<v Speaker 2>Speaker 2: Hi → there &lt;b&gt;" in vtt and "00:01:01.000 --> 00:01:02.500\nBye." in vtt
    # Subtitle cues: the first is up long enough to be read (0.83 s at least), here from a little before its words;
    # by default a speaker is marked by a dialogue dash when the voice changes, not named in the text.
    srt = exports.render("srt", sentences, room, exports.ExportOptions(speakers="label"))
    assert "00:00:59,567 --> 00:01:00,917\nSpeaker 2: Hi → there <b>\n" in srt and ",1000" not in srt
    assert "00:01:00,000 --> 00:01:00,833\nHi → there <b>\n" in exports.render("srt", sentences, room)
    assert exports.render("txt", sentences, room).startswith("[00:01:00] Speaker 2\n")


async def test_a_slow_viewer_gets_the_newest_partial_and_is_cut_off_rather_than_buffered() -> None:
    viewer = Viewer()
    locked = Caption([Sentence(0, "A.", 0, 500, None)], "")
    viewer.put(1, Caption([], "a"), durable=False)
    viewer.put(1, Caption([], "a b"), durable=False)  # replaces the unsent partial
    viewer.put(2, locked, durable=True)
    got = [await viewer.get(1.0) for _ in range(2)]
    assert got == [Queued(1, Caption([], "a b"), False), Queued(2, locked, True)]
    with pytest.raises(TimeoutError):
        await viewer.get(0.05)
    for seq in range(10_000):
        viewer.put(seq, Caption([], ""), durable=True)
        if viewer.state is ViewerState.ENDED:
            break
    assert viewer.state is ViewerState.ENDED and await viewer.get(1.0) is None  # reconnects, resumes from store


async def test_a_viewer_that_ends_with_its_room_gets_what_the_delay_held_then_its_end() -> None:
    """A room's output follows it until it ends (``Audience.until_end``): it gets what the delay still holds, then
    ``None`` (``FINISHED``), with no clock to look at; any other viewer of the room goes on."""
    store = await open_store(":memory:")
    rooms = RoomRegistry(store)
    room = (await rooms.create("ending", delay_s=0.3)).room
    output, other = room.subscribe(), room.subscribe()
    room.audience.until_end(output)
    assert output.state is ViewerState.OPEN  # not ended yet
    words = (Word("Last", 0, 300), Word("words.", 300, 600))
    await room.commit_sentences([SentenceRecord(-1, "pub", "Last words.", 0, 600, 0, words)])
    room.audience.end()  # the delay holds the sentence still
    assert output.state is ViewerState.OPEN
    got = []
    while (item := await output.get(2.0)) is not None:
        got.append(item)
    assert [i.message.sentences[0].text for i in got if i.durable and isinstance(i.message, Caption)] == [
        "Last words."
    ] and output.state is ViewerState.FINISHED
    late = room.subscribe()
    room.audience.until_end(late)  # following a room that ended and released everything: finished at once
    assert late.state is ViewerState.FINISHED and other.state is ViewerState.OPEN
    item = await other.get(0.5)
    while item is not None and not item.durable:  # (statuses) ... then the sentence, and it stays open
        item = await other.get(0.5)
    assert item is not None and other.state is ViewerState.OPEN
    rooms.close()
    await store.close()


async def test_viewers_learn_who_is_speaking_while_one_publisher_speaks() -> None:
    """A publisher's ``partial_spk`` reaches the room's viewers as its room label (each publisher's voices get their
    own), with the session it belongs to; while two publishers speak at once the merged partial names nobody."""
    store = await open_store(":memory:")
    rooms = RoomRegistry(store)
    try:
        room = (await rooms.create("talk")).room
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
                if isinstance(item.message, protocol.Caption):
                    got = item.message
            assert got is not None
            return got

        await first.publish(protocol.Caption([], "so the plan is", partial_spk=1))
        shown = await latest_partial()
        assert (shown.partial, shown.partial_spk, shown.partial_session) == ("so the plan is", 0, "session-a")
        assert shown.wire()["partial_session"] == "session-a"
        await second.publish(protocol.Caption([], "wait", partial_spk=0))
        shown = await latest_partial()
        assert shown.partial == "so the plan is wait" and shown.partial_spk is None and shown.partial_session is None
        await first.publish(protocol.Caption([], ""))  # the first stops speaking: the one still speaking is named
        shown = await latest_partial()
        assert (shown.partial, shown.partial_spk, shown.partial_session) == ("wait", 1, "session-b")
    finally:
        rooms.close()
        await store.close()


async def _drain(viewer: Viewer, quiet_s: float = 0.2) -> list[Queued]:
    """Everything a viewer has, until nothing comes for ``quiet_s``."""
    items: list[Queued] = []
    while True:
        try:
            item = await viewer.get(quiet_s)
        except TimeoutError:
            return items
        assert item is not None
        items.append(item)


def _partials(items: list[Queued]) -> list[Caption]:
    return [q.message for q in items if isinstance(q.message, Caption) and not q.durable]


async def test_better_word_times_reach_viewers_who_asked_for_words_and_the_transcript(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    """A publisher's ``words`` update (the aligner's times, after the lock) becomes a durable room event: viewers
    with ``?words=1`` get it with the room's sentence id and timeline; the others get only its id (their
    ``Last-Event-ID`` moves on, and a resume replays it the same way); transcripts carry the new times."""
    async with running_server(fake_engine, db_path=str(tmp_path / "c.db")) as (url, app):
        room = (await app[ROOMS].create()).room
        await room.commit_sentences([SentenceRecord(-1, "before", "Earlier.", 0, 500, 0)])  # session id 5 is room id 1
        publisher = room.join("s1")
        off = publisher.offset_ms
        estimated = (Word("Good", 0, 450), Word("morning.", 450, 900))
        aligned = (Word("Good", 60, 310), Word("morning.", 350, 820))
        await publisher.publish(Caption([Sentence(5, "Good morning.", 0, 900, 0, words=estimated)], "", seq=1))
        events = f"{url}/rooms/{room.id}/events"
        async with SseReader(events + "?words=1") as with_words, SseReader(events) as without:
            for reader in (with_words, without):
                await reader.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
            await publisher.publish(WordTimes(7, aligned, seq=2))  # a sentence the room never got: ignored
            await publisher.publish(WordTimes(5, aligned, seq=3))
            await publisher.publish(Caption([Sentence(6, "Next.", 1000, 1500, 0)], "", seq=4))
            for reader in (with_words, without):
                await reader.wait_for(lambda r: r.last_id() == 4)
        update = {
            "type": "words",
            "seq": 3,
            "id": 1,
            "session": "s1",
            "words": [w.shifted(off).wire() for w in aligned],
        }
        assert [(i, m) for i, m in with_words.events if i == 3] == [(3, update)]
        assert [i for i, _ in without.events if i is not None] == [2, 4]
        assert not any(m["type"] == "words" for _, m in without.events)
        # Resuming after the caption: the update again, in full or as its id alone.
        async with SseReader(events + "?words=1", last_event_id=2) as resumed:
            await resumed.wait_for(lambda r: r.last_id() == 4)
            assert [(i, m["type"]) for i, m in resumed.events if i is not None] == [(3, "words"), (4, "caption")]
        raw = await raw_events(events, "id: 4\n", last_event_id=2)
        assert "id: 3\n\n" in raw and '"type":"words"' not in raw, raw
        # A late viewer, the snapshot and the transcript: the aligned times.
        async with SseReader(events + "?words=1") as late:
            await late.wait_for(lambda r: r.last_id() == 4)
            assert late.events[0][1]["sentences"][1]["words"] == update["words"]
        assert [s.words for s in (await room.store.snapshot(room.id)).sentences][1] == tuple(
            w.shifted(off) for w in aligned
        )
        _, exported = await get(f"{url}/rooms/{room.id}/transcript.json")
        assert json.loads(exported)["sentences"][1]["words"] == update["words"]
        assert (await room.store.events_after(room.id, 2))[0][1] == WordTimes(
            1, tuple(w.shifted(off) for w in aligned), seq=3, session="s1"
        )


class _EmptyStore:
    """A store that has nothing of the room: what a read finds is all the room's own unsaved events."""

    async def snapshot(self, room_id: str, deleted: bool = False) -> Snapshot:
        return Snapshot(0, [])


async def test_word_times_the_store_has_not_taken_yet_are_in_the_snapshot() -> None:
    """While the store refuses writes, a ``words`` update is kept in memory with the sentence it times, in order,
    and the room's read path (``Room.read_snapshot``) applies it."""
    store = await open_store(":memory:")
    rooms = RoomRegistry(store)
    room = (await rooms.create()).room
    await store.close()  # every write fails from now on
    publisher = room.join("s1")
    await publisher.publish(Caption([Sentence(0, "Hello.", 0, 500, None, words=(Word("Hello.", 0, 500),))], ""))
    await publisher.publish(WordTimes(0, (Word("Hello.", 40, 380),)))
    assert [type(e.body) for e in room.unsaved] == [Caption, WordTimes] and not room.saving
    room.store = _EmptyStore()  # type: ignore[assignment]  # reads answer "nothing stored": all of it is unsaved
    snap = await room.read_snapshot()
    assert snap.seq == 2 and snap.sentences[0].words == (
        Word("Hello.", 40 + publisher.offset_ms, 380 + publisher.offset_ms),
    )
    rooms.close()


def test_the_merged_partial_is_settled_up_to_the_first_unsettled_word() -> None:
    def parts(*items: tuple[str, str, int]) -> list[OpenPart]:
        return [OpenPart(*item) for item in items]

    assert merged_stable([]) == 0
    assert merged_stable(parts(("a", "so the plan is", 2), ("b", "wait now", 2))) == 2
    assert merged_stable(parts(("a", "so the plan is", 4), ("b", "wait now", 1))) == 5
    assert merged_stable(parts(("a", "so the", 2), ("b", "wait now", 2), ("c", "ok", 0))) == 4
    assert merged_stable(parts(("a", "so", 5))) == 1  # never more than the words there are


async def test_viewers_get_the_rooms_stable_count_and_each_publishers_settled_words() -> None:
    store = await open_store(":memory:")
    rooms = RoomRegistry(store)
    try:
        room = (await rooms.create()).room
        viewer = room.subscribe()
        a, b = room.join("session-a"), room.join("session-b")
        await a.publish(
            Caption([], "so the plan is", stable=2, stable_words=[Word("so", 0, 200), Word("the", 200, 300)])
        )
        shown = _partials(await _drain(viewer))[-1]
        assert (shown.partial, shown.stable, shown.partial_session) == ("so the plan is", 2, "session-a")
        assert shown.stable_words == [
            Word("so", 0, 200).shifted(a.offset_ms),
            Word("the", 200, 300).shifted(a.offset_ms),
        ]
        await b.publish(Caption([], "wait now", stable=1, stable_words=[Word("wait", 0, 300)]))
        shown = _partials(await _drain(viewer))[-1]
        assert (shown.partial, shown.stable) == ("so the plan is wait now", 2)  # a's text is not all settled
        assert shown.stable_words == [Word("wait", 0, 300).shifted(b.offset_ms)] and shown.partial_spk is None
        assert shown.partial_session == "session-b", "whose settled words they are"
        await a.publish(
            Caption([], "so the plan is", stable=4, stable_words=[Word("plan", 300, 600), Word("is", 600, 700)])
        )
        shown = _partials(await _drain(viewer))[-1]
        assert shown.stable == 5 and [w.w for w in shown.stable_words] == ["plan", "is"]
        await a.publish(Caption([], "so the plan is", stable=4))  # nothing newly settled: none sent again
        assert _partials(await _drain(viewer))[-1].stable_words == []
        # The durable caption that locks a's sentence carries the live partial and its stable count.
        await a.publish(Caption([Sentence(0, "So the plan is.", 0, 700, None)], ""))
        items = await _drain(viewer)
        locked = [q.message for q in items if q.durable]
        assert len(locked) == 1 and isinstance(locked[0], Caption)
        assert (locked[0].partial, locked[0].stable) == ("wait now", 1)
    finally:
        rooms.close()
        await store.close()


async def test_a_slow_viewer_loses_no_settled_words_when_its_partials_are_merged() -> None:
    viewer = Viewer()
    a, b = Word("a", 0, 1), Word("b", 1, 2)
    viewer.put(1, Caption([], "a b", stable=1, stable_words=[a], partial_session="p"), durable=False)
    viewer.put(1, Caption([], "a b c", stable=2, stable_words=[b], partial_session="p"), durable=False)
    viewer.put(
        1, Caption([], "a b c x", stable=3, stable_words=[Word("x", 5, 6)], partial_session="q"), durable=False
    )  # another publisher's words: never in one message with p's
    viewer.put(1, Caption([], "a b c x y", stable=3), durable=False)  # none settled: it waits behind, then merges
    viewer.put(1, Caption([], "a b c x y z", stable=3), durable=False)
    got = [await viewer.get(1.0) for _ in range(3)]
    messages = [q.message for q in got if q is not None]
    assert [(m.partial, m.stable, m.stable_words) for m in messages if isinstance(m, Caption)] == [
        ("a b c", 2, [a, b]),
        ("a b c x", 3, [Word("x", 5, 6)]),
        ("a b c x y z", 3, []),
    ]
    with pytest.raises(TimeoutError):
        await viewer.get(0.05)


class _Announcing(SqliteStore):
    """A SQLite store that pretends other front ends share it: it records what rooms announce."""

    shared = True

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.sent: list[dict[str, Any]] = []
        self.more = asyncio.Event()

    async def announce(self, room_id: str, body: dict[str, Any]) -> None:
        self.sent.append(body)
        self.more.set()


async def test_a_publisher_announces_its_stable_text_when_it_changes_and_not_when_it_locks() -> None:
    store = await _Announcing.open(":memory:")
    assert isinstance(store, _Announcing)
    rooms = RoomRegistry(store)

    async def sent(n: int) -> list[tuple[int, str, list[str]]]:
        async with asyncio.timeout(5):
            while len(store.sent) < n:
                store.more.clear()
                await store.more.wait()
        await asyncio.sleep(0.05)  # nothing more comes
        assert len(store.sent) == n, store.sent
        return [(b["after"], b["text"], [w[0] for w in b["words"]]) for b in store.sent]

    try:
        room = (await rooms.create()).room
        a = room.join("s")
        await a.publish(Caption([], "so the plan", stable=2, stable_words=[Word("so", 0, 200), Word("the", 200, 300)]))
        await a.publish(Caption([], "so the plan is", stable=2))  # the same stable text: nothing to tell
        assert await sent(1) == [(0, "so the", ["so", "the"])]
        assert store.sent[0]["words"][0] == ["so", a.offset_ms, a.offset_ms + 200] and store.sent[0]["session"] == "s"
        await a.publish(Caption([Sentence(0, "So the plan is.", 0, 900, None)], "and", stable=0))
        assert len(await sent(1)) == 1, "the lock clears it on the other front ends by itself"
        await a.publish(Caption([], "and then", stable=1, stable_words=[Word("and", 1000, 1200)]))
        assert (await sent(2))[1] == (1, "and", ["and"])
        a.leave()  # mid-sentence: the others stop showing it
        assert (await sent(3))[2] == (1, "", [])
        # Announcements that wait behind one in flight merge: the newest text, every settled word once.
        room.announce_open("t", "x", [Word("x", 0, 1)])
        room.announce_open("t", "x y", [Word("y", 1, 2)])
        assert (await sent(4))[3] == (1, "x y", ["x", "y"])
    finally:
        rooms.close()
        await store.close()


def test_open_text_from_other_front_ends_lasts_until_its_sentence_locks() -> None:
    now = [100.0]
    remote = RemoteOpen(clock=lambda: now[0])

    def body(text: str, after: int, *words: str) -> dict[str, Any]:
        return {"session": "s", "after": after, "text": text, "words": [[w, 0, 1] for w in words]}

    assert remote.heard(body("so the", 3, "so", "the")) == ("s", [Word("so", 0, 1), Word("the", 0, 1)])
    assert remote.heard(body("so the", 3)) is None, "nothing changed"
    assert remote.heard({"session": "t", "after": 3, "text": "hey"}) == ("t", [])
    assert remote.texts() == [("s", "so the"), ("t", "hey")]
    assert remote.locked("s", 4) and remote.texts() == [("t", "hey")]
    assert remote.heard(body("so the plan", 3, "plan")) is None, "sent before the lock, heard after it: stale"
    assert remote.heard(body("next", 4, "next")) == ("s", [Word("next", 0, 1)]), "sent after the lock"
    assert not remote.locked("s", 4), "announced after that lock: it stays"
    assert remote.heard(body("", 5)) == ("s", []) and remote.texts() == [("t", "hey")]
    assert remote.heard(body("", 5)) is None
    now[0] += STALE_S - 1
    assert not remote.expire()
    now[0] += 1
    assert remote.expire() and remote.texts() == []
    with pytest.raises(KeyError):
        remote.heard({"text": "no session"})
