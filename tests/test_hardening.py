"""Faults found by trying to break the server from outside (as an attacker, a careless client or a bad network
would), each locked in by a test that failed before its fix. The recognizer is the named fake: what is tested is
the transport, the rooms and the store, not the model."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import aiohttp
from aiortc import RTCPeerConnection

from app.keys import ADMISSION, PEERS
from app.store import SCHEMA_VERSION, TranscriptStore
from engine.hub import CaptionEngine
from tests.servers import running_server

TOKEN = "s3cret-server-token"


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


async def post_json(url: str, body: object, token: str | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


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


async def test_the_session_cap_holds_under_concurrent_offers_into_a_stored_room(fake_engine: CaptionEngine,
                                                                                 tmp_path: Path) -> None:
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
        asks = [({"Authorization": f"Bearer {TOKEN}"}, ""), ({}, f"?token={TOKEN}"),
                ({"Authorization": f"Bearer {viewer_token}"}, ""), ({}, f"?token={viewer_token}")]
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
            PRAGMA user_version=1;""")
    store = await TranscriptStore.open(str(path))
    record = await store.room("old-room-abcdef")
    assert record is not None and record.title == "Old" and record.viewer_token_sha256 == "ab12"
    assert record.viewer_token is None
    await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    json.dumps(record.__dict__)  # plain data
