"""Rooms across front ends on one PostgreSQL database (a real server started for the run, bench/lib/postgres.py).

Two real front ends (two ``create_app`` servers on one database) serve one room: a publisher on A, server-sent-event
viewers on A and B, B restarted while the room is live (its viewer resumes with ``Last-Event-ID``), then publishers
on both at once. Every viewer must get every sentence once, in seq order, and both front ends must export the same
transcript. The recognizer is the named fake: what is measured is the fan-out between front ends, not the model.
The cross-front-end delay is printed (target 200 ms) and asserted only loosely: the machine is shared. So is the
delay of a publisher's stable words (announced, never stored) from front end A to a viewer on B; word-time updates
(durable) must reach B's viewers, its resumes and its transcripts like sentences.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from app.rooms import Room, RoomRegistry, SentenceRecord, Viewer
from app.rooms.keys import ROOMS, STORE
from app.rooms.store import open_store
from engine import CaptionEngine, protocol
from engine.protocol import Caption, Sentence, Word, WordTimes
from speechdata.corpus import audio, pad
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server
from tests.support.sse import SseReader, raw_events

TOKEN = "s3cret-publisher-token"
CLIPS = ["ls_1988-24833-0000", "ls_3752-4944-0000", "ls_3752-4944-0002", "ls_6930-75918-0000"]
DELAY_BOUND_S = 2.0  # loose on purpose (a loaded, shared machine); the target, 200 ms, is what gets printed


def speech(clips: list[str], gap_s: float = 2.6) -> np.ndarray:
    """The clips one after another with pauses long enough to end a sentence each."""
    return np.concatenate([pad(audio(c), 0.3, gap_s) for c in clips])


def durable_ids(*viewers: SseReader) -> list[int]:
    return [i for v in viewers for i, _ in v.events if i is not None]


def sentences_in_order(*viewers: SseReader) -> list[dict[str, Any]]:
    """Every sentence as the viewers received them, in arrival order (duplicates kept, so they show)."""
    return [s for v in viewers for _, m in v.events if m["type"] == "caption" for s in m["sentences"]]


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        assert r.status == 200, (url, r.status, await r.text())
        return await r.json()


class FrontEnd:
    """One front end on the shared database, restartable on its port (``running_server`` underneath)."""

    def __init__(self, engine: CaptionEngine, db: str) -> None:
        self.engine, self.db = engine, db
        self.url = ""
        self.app: web.Application | None = None
        self._cm: AbstractAsyncContextManager[tuple[str, web.Application]] | None = None

    async def start(self, port: int = 0) -> None:
        self._cm = running_server(self.engine, auth_token=TOKEN, db_path=self.db, port=port)
        self.url, self.app = await self._cm.__aenter__()

    async def stop(self) -> None:
        if self._cm is not None:
            await self._cm.__aexit__(None, None, None)
            self._cm = None

    async def restart(self) -> None:
        port = int(self.url.rsplit(":", 1)[1])
        await self.stop()
        await self.start(port)


@pytest.fixture
async def front_ends(fake_engine: CaptionEngine, postgres_url: str) -> AsyncIterator[tuple[FrontEnd, FrontEnd]]:
    a, b = FrontEnd(fake_engine, postgres_url), FrontEnd(fake_engine, postgres_url)
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await b.stop()
        await a.stop()


async def publish(url: str, room: str, samples: np.ndarray) -> CaptionClient:
    client = CaptionClient(url, samples)
    await client.connect(offer={"room": room, "token": TOKEN})
    return client


async def finish(client: CaptionClient) -> None:
    await client.until_played()
    await client.stop()
    await client.close()


@pytest.mark.slow
async def test_two_front_ends_serve_one_room_through_a_restart(front_ends: tuple[FrontEnd, FrontEnd]) -> None:
    a, b = front_ends
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{a.url}/rooms", json={"title": "Across"}, headers={"Authorization": f"Bearer {TOKEN}"}) as r,
    ):
        assert r.status == 201
        room = (await r.json())["room"]
    status = await get_json(f"{b.url}/rooms/{room}")  # made on A, known on B
    assert status["title"] == "Across" and status["seq"] == 0

    viewer_a = SseReader(f"{a.url}/rooms/{room}/events")
    viewer_b = SseReader(f"{b.url}/rooms/{room}/events")
    async with viewer_a, viewer_b:
        for v in (viewer_a, viewer_b):
            await v.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
        # Phase 1: a publisher on A; front end B restarts once B's viewer has seen two sentences.
        first = await publish(a.url, room, speech(CLIPS))
        await viewer_b.wait_for(lambda r: len(r.sentences()) >= 2, timeout_s=60)
        await b.restart()
        await asyncio.wait_for(viewer_b.ended.wait(), 10)  # the restart ended its stream
        resumed = SseReader(f"{b.url}/rooms/{room}/events", last_event_id=viewer_b.last_id())
        async with resumed:
            await finish(first)
            # Phase 2: publishers on both front ends at once, into the same room.
            on_a, on_b = await asyncio.gather(
                publish(a.url, room, speech(CLIPS[:2])), publish(b.url, room, speech(CLIPS[2:]))
            )
            await asyncio.gather(finish(on_a), finish(on_b))
            published = len(first.sentences()) + len(on_a.sentences()) + len(on_b.sentences())
            assert len(first.sentences()) >= 3 and on_a.sentences() and on_b.sentences()
            for v in (viewer_a, resumed):
                await v.wait_for(
                    lambda r, v=v: len(sentences_in_order(*([viewer_b, r] if r is resumed else [r]))) >= published,
                    timeout_s=30,
                )
            await asyncio.sleep(0.5)  # anything late (a duplicate) would arrive now

    exported_a = (await get_json(f"{a.url}/rooms/{room}/transcript.json"))["sentences"]
    exported_b = (await get_json(f"{b.url}/rooms/{room}/transcript.json"))["sentences"]
    assert exported_a == exported_b
    assert [s["id"] for s in exported_a] == list(range(published)), "room ids 0.. with no gap or repeat"
    texts = [s["text"] for s in exported_a]
    for client in (first, on_a, on_b):  # each publisher's sentences, in its order, all in the room
        mine = [s["text"] for s in exported_a if s["session"] == client.session]
        assert mine == [s["text"] for s in client.sentences()]

    # Every viewer: every durable event once, in seq order, with no gap; every sentence once, in room order.
    last = durable_ids(viewer_a)[-1]
    assert durable_ids(viewer_a) == list(range(last + 1))
    assert durable_ids(viewer_b, resumed) == list(range(last + 1)), "B's viewer across the restart"
    for viewers in ((viewer_a,), (viewer_b, resumed)):
        seen = sentences_in_order(*viewers)
        assert [s["id"] for s in seen] == list(range(published))
        assert [s["text"] for s in seen] == texts

    # The delay between front ends: from the viewer on the front end where an event was committed to the viewer on
    # the other one, for the events both got live (B's replay after its restart left out).
    from_b = {
        i
        for i, m in viewer_a.events
        if i and m["type"] == "caption" and m["sentences"] and m["sentences"][0]["session"] == on_b.session
    }
    at_a = {i: t for (i, _), t in zip(viewer_a.events, viewer_a.arrived, strict=True) if i}
    at_b = {
        i: t
        for v in (viewer_b, resumed)
        for (i, _), t in zip(v.events, v.arrived, strict=True)
        if i and not (v is resumed and t <= _first_status(resumed))
    }
    a_to_b = [at_b[i] - at_a[i] for i in at_b if i in at_a and i not in from_b]
    b_to_a = [at_a[i] - at_b[i] for i in at_b if i in at_a and i in from_b]
    assert len(a_to_b) >= 3 and b_to_a, (at_a, at_b)
    for name, delays in (("A -> B", a_to_b), ("B -> A", b_to_a)):
        print(
            f"\ncross-front-end delivery {name} ({len(delays)} events): median "
            f"{statistics.median(delays) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms (target 200 ms)"
        )
    assert max(a_to_b + b_to_a) < DELAY_BOUND_S, (a_to_b, b_to_a)


def _first_status(reader: SseReader) -> float:
    """When ``reader`` got its first ``room`` status: everything before it was its catch-up."""
    return next(t for (_, m), t in zip(reader.events, reader.arrived, strict=True) if m["type"] == "room")


async def test_rooms_on_two_front_ends_deliver_each_others_events_in_order_and_agree_on_labels(
    postgres_url: str,
) -> None:
    store_a, store_b = await open_store(postgres_url), await open_store(postgres_url)
    rooms_a, rooms_b = RoomRegistry(store_a), RoomRegistry(store_b)
    rooms_a.start()
    rooms_b.start()
    try:
        made = (await rooms_a.create(title="Both")).room
        room_b = await rooms_b.get(made.id)
        assert isinstance(room_b, Room) and room_b.record == made.record
        viewer_a, viewer_b = made.subscribe(), room_b.subscribe()

        async def speak(room: Room, name: str) -> list[int]:
            ids = []
            for i in range(20):
                records = await room.commit_sentences(
                    [SentenceRecord(-1, name, f"{name} {i}", i * 100, i * 100 + 90, 0)]
                )
                ids += [r.id for r in records]
            return ids

        ids_a, ids_b = await asyncio.gather(speak(made, "a"), speak(room_b, "b"))
        assert sorted(ids_a + ids_b) == list(range(40))
        # Labels are room-wide: B corrects one of A's sentences and one of its own.
        await room_b.commit_relabel({ids_a[0]: 7, ids_b[0]: 8})
        for viewer in (viewer_a, viewer_b):
            events = await _durable(viewer, 41)
            assert [seq for seq, _ in events] == list(range(1, 42)), "each event once, in seq order"
            assert [s.id for _, m in events if isinstance(m, protocol.Caption) for s in m.sentences] == list(range(40))
            assert events[-1][1] == protocol.Speakers({ids_a[0]: 7, ids_b[0]: 8}, seq=41)
        snap_a, snap_b = await store_a.snapshot(made.id), await store_b.snapshot(made.id)
        assert snap_a == snap_b and snap_a.seq == 41
        assert {s.id: s.spk for s in snap_a.sentences if s.spk != 0} == {ids_a[0]: 7, ids_b[0]: 8}

        # A front end that missed every notice (its registry never listened) still delivers in order: its own
        # next event brings in the ones before it from the table first.
        deaf = RoomRegistry(await open_store(postgres_url))
        room_c = await deaf.get(made.id)
        assert room_c is not None and room_c.seq == 41
        viewer_c = room_c.subscribe()
        for i in range(3):
            await made.commit_sentences([SentenceRecord(-1, "a", f"late {i}", 0, 1, 0)])
        await room_c.commit_sentences([SentenceRecord(-1, "c", "mine", 0, 1, 0)])
        assert [seq for seq, _ in await _durable(viewer_c, 4)] == [42, 43, 44, 45]
        await deaf.store.close()
    finally:
        rooms_a.close()
        rooms_b.close()
        await store_a.close()
        await store_b.close()


async def _durable(viewer: Viewer, n: int) -> list[tuple[int, protocol.ServerMessage]]:
    """The next ``n`` durable events a viewer gets (partials and status skipped)."""
    out: list[tuple[int, protocol.ServerMessage]] = []
    while len(out) < n:
        item = await viewer.get(10.0)
        assert item is not None, "the viewer's stream ended"
        if item.durable:
            out.append((item.seq, item.message))
    return out


async def test_a_viewer_moving_to_a_front_end_that_lags_resumes_exactly(front_ends: tuple[FrontEnd, FrontEnd]) -> None:
    """A viewer of A reconnects to B with a ``Last-Event-ID`` that B has not heard of yet (B's notices are late;
    here they are stopped): B asks the store, and replays exactly the events after it, not the whole room."""
    a, b = front_ends
    assert a.app is not None and b.app is not None
    made = (await a.app[ROOMS].create()).room
    room_b = await b.app[ROOMS].get(made.id)
    assert room_b is not None and room_b.seq == 0
    listener = b.app[STORE]._listener  # type: ignore[attr-defined]
    listener.cancel()  # B hears nothing from now on
    for i in range(3):
        await made.commit_sentences([SentenceRecord(-1, "a", f"Sentence {i}.", i * 1000, i * 1000 + 900, 0)])
    assert room_b.seq == 0
    async with SseReader(f"{b.url}/rooms/{made.id}/events", last_event_id=2) as moved:
        await moved.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
        assert [(i, [s["text"] for s in m["sentences"]]) for i, m in moved.events if i is not None] == [
            (3, ["Sentence 2."])
        ]
    for _ in range(100):  # and B's room catches up from the store (its viewers get the events in order)
        if room_b.seq == 3:
            break
        await asyncio.sleep(0.05)
    assert room_b.seq == 3


async def test_word_times_reach_the_other_front_end_its_resumed_viewers_and_its_transcript(
    front_ends: tuple[FrontEnd, FrontEnd],
) -> None:
    """A publisher on A sends better word times for a locked sentence: B's viewers get the ``words`` event in seq
    order (in full with ``?words=1``, as its id alone otherwise), a viewer resuming on B replays it, and B's
    transcript and the table carry the aligned times."""
    a, b = front_ends
    assert a.app is not None and b.app is not None
    made = (await a.app[ROOMS].create()).room
    publisher = made.join("s1")
    off = publisher.offset_ms
    estimated = (Word("Good", 0, 450), Word("morning.", 450, 900))
    aligned = (Word("Good", 60, 310), Word("morning.", 350, 820))
    await publisher.publish(Caption([Sentence(0, "Good morning.", 0, 900, 0, words=estimated)], ""))
    events = f"{b.url}/rooms/{made.id}/events"
    async with SseReader(events + "?words=1") as with_words, SseReader(events) as without:
        for reader in (with_words, without):
            await reader.wait_for(lambda r: r.last_id() == 1)
        await publisher.publish(WordTimes(0, aligned))
        await publisher.publish(Caption([Sentence(1, "Next.", 1000, 1500, 0)], ""))
        for reader in (with_words, without):
            await reader.wait_for(lambda r: r.last_id() == 3)
    update = {"type": "words", "seq": 2, "id": 0, "session": "s1", "words": [w.shifted(off).wire() for w in aligned]}
    assert [(i, m) for i, m in with_words.events if i == 2] == [(2, update)]
    assert [i for i, _ in without.events if i is not None] == [1, 3]
    assert not any(m["type"] == "words" for _, m in without.events)
    async with SseReader(events + "?words=1", last_event_id=1) as resumed:
        await resumed.wait_for(lambda r: r.last_id() == 3)
        assert next((i, m) for i, m in resumed.events if i is not None) == (2, update)
    raw = await raw_events(events, "id: 3\n", last_event_id=1)
    assert "id: 2\n\n" in raw and '"type":"words"' not in raw, raw
    exported = (await get_json(f"{b.url}/rooms/{made.id}/transcript.json"))["sentences"]
    assert exported[0]["words"] == update["words"] and exported[1]["words"] == []
    snap = await b.app[STORE].snapshot(made.id)
    assert snap.seq == 3 and snap.sentences[0].words == tuple(w.shifted(off) for w in aligned)


async def test_stable_words_reach_viewers_on_other_front_ends_before_the_sentence_locks(
    front_ends: tuple[FrontEnd, FrontEnd],
) -> None:
    """A publisher on A: B's viewers see its stable words (never its unsettled tail) as they settle, until the
    sentence locks; then the locked sentence takes their place. A publisher leaving mid-sentence takes its text
    away. The delay from the publish on A to B's viewer is printed (target: the locked-sentence delay's)."""
    a, b = front_ends
    assert a.app is not None and b.app is not None
    made = (await a.app[ROOMS].create()).room
    events = f"{b.url}/rooms/{made.id}/events"
    words = "so the plan for today is to ship the rollout before lunch".split()
    delays: list[float] = []
    async with SseReader(events) as viewer_b, SseReader(f"{a.url}/rooms/{made.id}/events") as viewer_a:
        for reader in (viewer_a, viewer_b):
            await reader.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
        # B listens once a commit on A reaches its viewer (announcements sent before that would be lost: by design).
        await made.commit_sentences([SentenceRecord(-1, "s0", "Earlier.", 0, 500, None)])
        await viewer_b.wait_for(lambda r: r.last_id() == 1)
        publisher = made.join("s1")
        for n in range(1, len(words) + 1):
            settled = " ".join(words[:n])
            seen = len(viewer_b.events)
            sent = time.monotonic()
            await publisher.publish(
                Caption([], settled + " and the", stable=n, stable_words=[Word(words[n - 1], n * 300, n * 300 + 250)])
            )
            await viewer_b.wait_for(lambda r, s=settled, k=seen: any(m.get("partial") == s for _, m in r.events[k:]))
            i = next(i for i in range(seen, len(viewer_b.events)) if viewer_b.events[i][1].get("partial") == settled)
            delays.append(viewer_b.arrived[i] - sent)
            shown = viewer_b.events[i][1]
            assert shown["stable"] == n and shown["stable_words"] == [
                Word(words[n - 1], n * 300, n * 300 + 250).shifted(publisher.offset_ms).wire()
            ]
        assert not any("and the" in m.get("partial", "") for _, m in viewer_b.events), "only settled words travel"
        assert viewer_a.events[-1][1]["partial"] == " ".join(words) + " and the"
        assert made.remote.texts() == [], "a front end does not show its own publisher twice"
        # The sentence locks: on B the locked caption comes with no open text left.
        await publisher.publish(Caption([Sentence(0, " ".join(words) + ".", 0, 4000, None)], ""))
        await viewer_b.wait_for(lambda r: r.last_id() == 2)
        locked = next(m for i, m in viewer_b.events if i == 2)
        assert locked["sentences"][0]["text"] == " ".join(words) + "." and locked["partial"] == ""
        assert "stable" not in locked
        # A second publisher that leaves mid-sentence: B stops showing its words.
        other = made.join("s2")
        await other.publish(Caption([], "hold on", stable=2, stable_words=[Word("hold", 0, 200), Word("on", 200, 400)]))
        await viewer_b.wait_for(lambda r: r.events[-1][1].get("partial") == "hold on")
        other.leave()
        await viewer_b.wait_for(lambda r: r.events[-1][1].get("partial") == "")
        room_b = await b.app[ROOMS].get(made.id)
        assert room_b is not None and room_b.remote.texts() == []
    print(
        f"\nstable words A -> B ({len(delays)} updates): median {statistics.median(delays) * 1000:.0f} ms, "
        f"max {max(delays) * 1000:.0f} ms (target 200 ms)"
    )
    assert max(delays) < DELAY_BOUND_S, delays


async def test_a_front_end_that_stops_mid_sentence_locks_it_for_viewers_on_the_other(
    front_ends: tuple[FrontEnd, FrontEnd],
) -> None:
    """SIGTERM's path on front end A (its runner's cleanup) while its publisher is mid-sentence: the sentence is
    locked on the way out and reaches the room's viewer on B, which stays connected."""
    a, b = front_ends
    assert a.app is not None
    room = (await a.app[ROOMS].create()).room
    async with SseReader(f"{b.url}/rooms/{room.id}/events") as viewer:
        await viewer.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
        client = await publish(a.url, room.id, pad(audio("ls_1988-24833-0001"), 0.3, 20.0))  # 7.9 s of speech
        try:
            while not any(m["type"] == "caption" and m.get("partial") for m in client.messages):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            assert not client.sentences(), "the sentence locked before the stop: the test needs it open"
            await a.stop()
        finally:
            await client.close()
        assert client.stopped.is_set()
        (sentence,) = client.sentences()
        await viewer.wait_for(lambda r: sentence["id"] in r.sentences(), timeout_s=10)
        assert viewer.sentences()[sentence["id"]]["text"] == sentence["text"]
        assert not viewer.ended.is_set(), "B's viewer was cut off by A's stop"
