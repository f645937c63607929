"""Faults found by trying to break the server from outside (as an attacker, a careless client or a bad network
would), each locked in by a test that failed before its fix. The recognizer is the named fake: what is tested is
the transport, the rooms and the store, not the model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiortc import RTCPeerConnection

from app.ops.keys import ADMISSION
from app.rooms.keys import ROOMS, STORE
from app.rooms.store import SentenceRecord, open_store
from app.rooms.store.sqlite import SCHEMA_VERSION
from app.webrtc.keys import PEERS
from engine.asr.fake import FakeTranscriber
from engine.config import EngineConfig
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.disk import disk_full
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server
from tests.support.sse import SseReader

TOKEN = "s3cret-server-token"
CLIP = "ls_1988-24833-0000"


async def offer_sdp(audio_tracks: int = 1) -> str:
    """A real aiortc offer with ``audio_tracks`` send-only audio tracks and the captions channel."""
    pc = RTCPeerConnection()
    for _ in range(audio_tracks):
        pc.addTransceiver("audio", direction="sendonly")
    pc.createDataChannel("captions")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


async def post_json(url: str, body: object, token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def until(condition: Callable[[], bool], why: str = "", timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, why or "timed out"
        await asyncio.sleep(0.05)


async def close_peers(app: object) -> None:
    for peer in list(app[PEERS].values()):  # type: ignore[index]
        await peer.close()


async def test_an_offer_with_many_audio_tracks_is_refused(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, app):
        status, body = await post_json(f"{url}/offer", {"sdp": await offer_sdp(50), "type": "offer"})
        assert status == 400 and body["error"]["code"] == "bad_sdp" and "exactly one" in body["error"]["message"]
        assert not app[PEERS] and not fake_engine.sessions and app[ADMISSION].in_use == 0
        status, body = await post_json(f"{url}/offer", {"sdp": await offer_sdp(1), "type": "offer"})
        assert status == 200 and body["type"] == "answer"
        await close_peers(app)


async def test_the_session_cap_holds_under_concurrent_offers_into_a_stored_room(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    db = str(tmp_path / "rooms.db")
    async with running_server(fake_engine, db_path=db) as (url, _):
        room = (await post_json(f"{url}/rooms", {}))[1]["room"]
    sdp = await offer_sdp()
    # Right after a restart the room is only on disk: every offer's first await is the load.
    async with running_server(fake_engine, db_path=db, max_sessions=16) as (url, app):
        async with aiohttp.ClientSession() as http:

            async def one() -> int:
                async with http.post(f"{url}/offer", json={"sdp": sdp, "type": "offer", "room": room}) as r:
                    return r.status

            statuses = await asyncio.gather(*(one() for _ in range(200)))
        assert statuses.count(200) == 16 and statuses.count(503) == 184, sorted(set(statuses))
        assert len(app[PEERS]) == 16 and app[ADMISSION].in_use == 16
        await close_peers(app)
        assert app[ADMISSION].in_use == 0, "closed sessions must give their places back"


async def test_the_qr_code_carries_the_viewer_token_never_the_server_token(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, _), aiohttp.ClientSession() as http:
        room = await post_json(f"{url}/rooms", {"private": True}, token=TOKEN)
        room_id, viewer_token = room[1]["room"], room[1]["viewer_token"]
        asks = [
            ({"Authorization": f"Bearer {TOKEN}"}, ""),
            ({}, f"?token={TOKEN}"),
            ({"Authorization": f"Bearer {viewer_token}"}, ""),
            ({}, f"?token={viewer_token}"),
        ]
        for headers, query in asks:
            async with http.get(f"{url}/rooms/{room_id}/qr.svg{query}", headers=headers) as r:
                assert r.status == 200
                viewer_url = r.headers["X-Viewer-Url"]
            assert viewer_url.endswith(f"/view?room={room_id}&token={viewer_token}"), (headers, query, viewer_url)
            assert TOKEN not in viewer_url
        async with http.get(f"{url}/rooms/{room_id}/qr.svg") as r:
            assert r.status == 403


async def test_a_version_1_store_is_migrated_and_keeps_its_rooms(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the version 1 schema, as the first release wrote it
        db.executescript("""
            CREATE TABLE rooms (id TEXT PRIMARY KEY, created_ms INTEGER NOT NULL, title TEXT NOT NULL DEFAULT '',
                                viewer_token_sha256 TEXT);
            CREATE TABLE events (room TEXT NOT NULL REFERENCES rooms(id), seq INTEGER NOT NULL, kind TEXT NOT NULL,
                                 body TEXT NOT NULL, created_ms INTEGER NOT NULL, PRIMARY KEY (room, seq))
                                 WITHOUT ROWID;
            CREATE TABLE sentences (room TEXT NOT NULL REFERENCES rooms(id), id INTEGER NOT NULL,
                                    session TEXT NOT NULL, text TEXT NOT NULL, start_ms INTEGER NOT NULL,
                                    end_ms INTEGER NOT NULL, spk INTEGER, locked_ms INTEGER NOT NULL,
                                    PRIMARY KEY (room, id)) WITHOUT ROWID;
            INSERT INTO rooms VALUES ('old-room-abcdef', 5, 'Old', 'ab12');
            INSERT INTO sentences VALUES ('old-room-abcdef', 0, 's', 'Said before word times.', 100, 900, 0, 7);
            PRAGMA user_version=1;""")
    store = await open_store(str(path))
    record = await store.room("old-room-abcdef")
    assert record is not None and record.title == "Old" and record.viewer_token_sha256 == "ab12"
    assert record.viewer_token is None
    old = (await store.snapshot("old-room-abcdef")).sentences
    assert [(s.text, s.words) for s in old] == [("Said before word times.", ())]  # version 3: words, NULL here
    assert (record.editor_token_sha256, record.delay_s, record.names) == (None, 0.0, {})  # version 4: editors
    assert not old[0].deleted and old[0].original is None
    assert record.languages == () and old[0].translations == {}  # version 5: translations
    assert record.language == "en"  # version 6: the spoken language, NULL here (rooms before it were English)
    await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    json.dumps(record.__dict__)  # plain data


async def test_viewers_that_stop_reading_are_cut_off_and_a_reading_viewer_is_untouched(
    fake_engine: CaptionEngine,
) -> None:
    async with running_server(fake_engine) as (url, app):
        room = (await app[ROOMS].create()).room
        host, port = url.removeprefix("http://").split(":")
        stuck = []
        for _ in range(20):  # ask for the stream, then never read a byte
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(f"GET /rooms/{room.id}/events HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            stuck.append((reader, writer))
        async with SseReader(f"{url}/rooms/{room.id}/events") as reading:
            await until(lambda: len(room.viewers) == 21)
            for i in range(3000):
                await room.commit_sentences(
                    [
                        SentenceRecord(
                            -1,
                            "s",
                            f"Sentence {i} of a long meeting, as long as captions are.",
                            i * 1000,
                            i * 1000 + 900,
                            0,
                        )
                    ]
                )
                room.broadcast_partial()
            await reading.wait_for(lambda r: len(r.sentences()) == 3000, timeout_s=30)
            await until(lambda: len(room.viewers) == 1, "viewers far behind must be cut off")
            assert app[ROOMS].stats.viewers_dropped == 20
            assert [m for _, m in reading.events if m["type"] == "caption" and m["sentences"]], "reader untouched"
            assert not reading.ended.is_set()
        for reader, writer in stuck:  # their connections were closed: reading ends instead of waiting forever
            with contextlib.suppress(ConnectionResetError):
                while await asyncio.wait_for(reader.read(1 << 20), 5):
                    pass
            writer.close()
        async with aiohttp.ClientSession() as http, http.get(f"{url}/ready") as r:
            assert (await r.json())["rooms"]["viewers_dropped"] == 20


async def test_idle_rooms_leave_memory_and_reads_do_not_pin_them(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    db = str(tmp_path / "rooms.db")
    async with running_server(fake_engine, db_path=db, room_idle_s=0.0) as (url, app):
        rooms = app[ROOMS]
        ids = [(await rooms.create()).room.id for _ in range(500)]
        busy = await rooms.get(ids[0])
        assert busy is not None
        async with SseReader(f"{url}/rooms/{ids[1]}/events") as viewer:
            await viewer.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
            await rooms.sweep()
            assert set(rooms._rooms) == {ids[1]}, "only the room with a viewer stays in memory"
        # (the closed stream leaves its room at its next heartbeat write: the server learns of a gone reader then)
        viewed = set(rooms._rooms)
        async with aiohttp.ClientSession() as http:
            for room_id in ids[:100]:  # status, transcript and QR code reads load nothing
                for path in ("", "/transcript.txt", "/qr.svg"):
                    async with http.get(f"{url}/rooms/{room_id}{path}") as r:
                        assert r.status == 200
        assert set(rooms._rooms) <= viewed, "reads must not load rooms into memory"
        # An evicted room comes back on demand with its numbering intact.
        room = await rooms.get(ids[2])
        assert room is not None
        await room.commit_sentences([SentenceRecord(-1, "s", "Back again.", 0, 500, None)])
        await rooms.sweep()
        again = await rooms.get(ids[2])
        assert again is not None and again is not room and again.seq == 1
        async with aiohttp.ClientSession() as http, http.get(f"{url}/rooms/{ids[2]}/transcript.txt") as r:
            assert "Back again." in await r.text()


async def test_a_full_disk_never_stops_live_captions_and_loses_nothing_once_space_returns(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    async with running_server(fake_engine, db_path=str(tmp_path / "full.db")) as (url, app):
        store = app[STORE]
        room = (await post_json(f"{url}/rooms", {}))[1]["room"]
        disk_full(store, True)
        status, body = await post_json(f"{url}/rooms", {"title": "x" * 200})
        assert status == 503 and body["error"]["code"] == "storage", body
        async with SseReader(f"{url}/rooms/{room}/events") as viewer:
            client = CaptionClient(url, pad(audio(CLIP)[: 2 * 16000], 0.3, 8.0))  # 1.6 s of speech, then a pause
            await client.connect(offer={"room": room})
            await viewer.wait_for(lambda r: len(r.sentences()) >= 1, timeout_s=30)
            assert any(m["type"] == "storage" and m["saving"] is False for m in client.messages)
            status_msgs = [m for _, m in viewer.events if m["type"] == "room"]
            assert status_msgs and status_msgs[-1]["saving"] is False
            # A viewer that (re)connects now still gets what the store could not take.
            async with SseReader(f"{url}/rooms/{room}/events") as late:
                await late.wait_for(lambda r: len(r.sentences()) >= 1)
            assert (await store.snapshot(room)).sentences == [], "the store really refused it"
            disk_full(store, False)
            await app[ROOMS].sweep()  # the server's periodic sweep writes what was held back
            await until(
                lambda: any(m["type"] == "storage" and m["saving"] is True for m in client.messages),
                "the publisher is told that saving resumed",
            )
            await client.stop()
            await client.close()
            await viewer.wait_for(lambda r: len(r.sentences()) == len(client.sentences()))
        assert client.sentences()
        assert app[ROOMS].snapshot_stats()["unsaved_events"] == 0
        snapshot = await store.snapshot(room)
        assert [s.text for s in snapshot.sentences] == [s["text"] for s in client.sentences()], "nothing lost"


async def test_a_room_made_while_the_disk_is_full_is_saved_as_it_was_made(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    """A microphone's own room is made in memory when the store refuses it, and written once space returns: with
    its spoken language and its delay, not as a room made today by default."""
    async with running_server(fake_engine, db_path=str(tmp_path / "full.db")) as (_url, app):
        store = app[STORE]
        disk_full(store, True)
        made = await app[ROOMS].create("Sitzung", unsaved_ok=True, delay_s=4.0, language="de")
        assert await store.room(made.room.id) is None
        disk_full(store, False)
        await app[ROOMS].sweep()
        stored = await store.room(made.room.id)
    assert stored is not None and (stored.title, stored.language, stored.delay_s) == ("Sitzung", "de", 4.0)


@pytest.mark.slow  # 3,200 messages through aiortc's SCTP, then the clip in real time: about 10 s
async def test_a_flood_of_bad_channel_messages_gets_few_replies_and_the_session_survives(
    fake_engine: CaptionEngine,
) -> None:
    flood = 10 * 320
    async with running_server(fake_engine) as (url, _):
        # The microphone is muted during the flood: this client shares the server's process and event loop, and
        # its own sending of 3,200 messages (aiortc's SCTP, in Python) delays its audio until the receiver drops
        # it. A browser floods from its own process.
        client = CaptionClient(url, pad(audio(CLIP)[: 2 * 16000], 0.3, 0.5), held=True)  # 1.6 s of speech
        await client.connect()
        for burst in range(10):  # 3,200 malformed messages in about 1 s
            for i in range(320):
                client.send(f"{{not json {burst} {i}")
            await asyncio.sleep(0.1)
        await until(lambda: accounted(client) == flood, "every bad message is answered or counted", 120.0)
        client.track.release()
        await client.until_played()
        await client.stop()  # the clip's speech is over by now; the stop locks it
        await client.close()
    errors = [m for m in client.messages if m["type"] == "error"]
    assert 1 <= len(errors) <= 40, f"{len(errors)} error replies to a flood"
    assert any("ignored" in m["message"] for m in errors), "the client is told that more were ignored"
    assert client.sentences(), "the session's captions survive the flood"


def accounted(client: CaptionClient) -> int:
    """Bad messages the server has replied to, one by one or in its summaries of those it ignored."""
    total = 0
    for m in client.messages:
        if m["type"] == "error" and m["code"] == "bad_message":
            ignored = re.match(r"(\d+) more bad messages were ignored", m["message"])
            total += int(ignored.group(1)) if ignored else 1
    return total


async def test_when_the_engine_dies_sessions_end_with_the_reason_and_health_says_so() -> None:
    recognizer = FakeTranscriber(delay_s=0.1)
    engine = CaptionEngine(EngineConfig(speakers=False), transcriber=recognizer)
    await engine.start()
    try:
        async with running_server(engine) as (url, app), aiohttp.ClientSession() as http:
            client = CaptionClient(url, pad(audio(CLIP), 0.3, 30.0))
            await client.connect()
            await until(
                lambda: any(m["type"] == "caption" and m["partial"] for m in client.messages),
                "captions flow before the engine dies",
            )
            recognizer.die("engine core process killed")
            await asyncio.wait_for(client.stopped.wait(), 10)
            ended = [m for m in client.messages if m["type"] == "error" and m["code"] == "engine"]
            assert ended and "engine stopped" in ended[-1]["message"]
            await until(lambda: not app[PEERS] and not engine.sessions, "the ended session must be torn down")
            assert engine.failed.is_set()
            async with http.get(f"{url}/health") as r:
                health = await r.json()
                assert r.status == 503 and health["status"] == "failed", health
                assert "engine core process killed" in health["detail"]
            status, body = await post_json(f"{url}/offer", {"sdp": await offer_sdp(), "type": "offer"})
            assert status == 503 and body["error"]["code"] == "engine"
            await client.close()
    finally:
        await engine.close()
