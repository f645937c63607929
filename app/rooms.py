"""Rooms: named caption channels. Publishers (microphone sessions) post into a room; viewers read it.

A room re-numbers what its publishers send onto one room-level stream:
- sentence ids are room-wide (0, 1, 2, ...), times are milliseconds since the room was created (so sentences of
  successive or concurrent publisher sessions share one timeline), and each sentence names its ``session``;
- every durable event (a ``caption`` carrying newly locked sentences, a ``speakers`` relabel) gets the next room
  ``seq`` and is committed to the ``TranscriptStore`` *before* any viewer sees it; viewers resume from a seq;
- partial text and ``room`` status messages are ephemeral: they repeat the latest seq and are never stored.

Viewers cost no audio and no model work: one small in-memory queue each. A slow viewer's queued partials are
coalesced (newest wins); a viewer that falls ``_VIEWER_QUEUE_MAX`` durable events behind is cut off and resumes
from the store when it reconnects, so the server never buffers without bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections import deque
from enum import Enum
from typing import Any

from engine.logs import SessionLog

from .store import RoomRecord, SentenceRecord, TranscriptStore

log = logging.getLogger(__name__)

_VIEWER_QUEUE_MAX = 512
ROOM_ID_BYTES = 12  # 96 random bits, 16 URL-safe characters: not guessable, short enough for a QR code
ROOM_ID_PATTERN = r"[A-Za-z0-9_-]{8,64}"


def new_token(nbytes: int = 16) -> str:
    return secrets.token_urlsafe(nbytes)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison of a presented token with an expected one (``None`` expected = nothing to check)."""
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class ViewerState(str, Enum):
    OPEN = "open"
    ENDED = "ended"  # server shutting down, or the viewer fell too far behind: the stream closes


class Viewer:
    """One subscriber's queue of ``(seq, message, durable)``. ``get`` returns ``None`` once the stream must end."""

    def __init__(self) -> None:
        self.state = ViewerState.OPEN
        self._items: deque[tuple[int, dict[str, Any], bool]] = deque()
        self._wake = asyncio.Event()

    def put(self, seq: int, message: dict[str, Any], durable: bool) -> None:
        if self.state is ViewerState.ENDED:
            return
        if not durable and self._items and not self._items[-1][2] and \
                self._items[-1][1].get("type") == message.get("type"):
            self._items[-1] = (seq, message, durable)  # the newer partial or status replaces the unsent one
        elif len(self._items) >= _VIEWER_QUEUE_MAX:
            self.end()  # too far behind: the client resumes from the store on reconnect
            return
        else:
            self._items.append((seq, message, durable))
        self._wake.set()

    def end(self) -> None:
        self.state = ViewerState.ENDED
        self._items.clear()
        self._wake.set()

    async def get(self, timeout_s: float) -> tuple[int, dict[str, Any], bool] | None:
        """The next item; raises ``TimeoutError`` after ``timeout_s`` with nothing to send (time for a heartbeat)."""
        while not self._items:
            if self.state is ViewerState.ENDED:
                return None
            self._wake.clear()
            await asyncio.wait_for(self._wake.wait(), timeout_s)
        if self.state is ViewerState.ENDED:
            return None
        return self._items.popleft()


class Room:
    """In-memory side of one room; created by ``RoomRegistry`` from its stored record."""

    def __init__(self, record: RoomRecord, store: TranscriptStore, last_seq: int, next_sentence: int) -> None:
        self.record = record
        self.id = record.id
        self.store = store
        self.seq = last_seq  # the newest event committed *and* broadcast
        self._next_sentence = next_sentence
        self._lock = asyncio.Lock()  # one durable event at a time: seq order = commit order = broadcast order
        self.viewers: set[Viewer] = set()
        self.publishers: dict[str, RoomPublisher] = {}

    @property
    def private(self) -> bool:
        return self.record.viewer_token_sha256 is not None

    def may_view(self, token: str | None) -> bool:
        expected = self.record.viewer_token_sha256
        return expected is None or (token is not None and hmac.compare_digest(token_digest(token), expected))

    # ---- viewers ---------------------------------------------------------------------------------------------
    def subscribe(self) -> Viewer:
        """Register a viewer. Register *before* reading the store, then skip queued events the read covered."""
        viewer = Viewer()
        self.viewers.add(viewer)
        self._broadcast_status()
        return viewer

    def unsubscribe(self, viewer: Viewer) -> None:
        self.viewers.discard(viewer)
        viewer.end()
        self._broadcast_status()

    def partial(self) -> str:
        """The open text of every live publisher, in the order they joined."""
        return " ".join(p.partial for p in self.publishers.values() if p.partial)

    def status(self) -> dict[str, Any]:
        return {"type": "room", "seq": self.seq, "room": self.id, "live": bool(self.publishers),
                "publishers": len(self.publishers), "viewers": len(self.viewers)}

    def partial_message(self) -> dict[str, Any]:
        return {"type": "caption", "seq": self.seq, "sentences": [], "partial": self.partial(), "is_final": False}

    def _broadcast(self, message: dict[str, Any], durable: bool) -> None:
        for viewer in list(self.viewers):
            viewer.put(self.seq, message, durable)

    def _broadcast_status(self) -> None:
        self._broadcast(self.status(), durable=False)

    def broadcast_partial(self, latency_ms: Any = None) -> None:
        message = self.partial_message()
        if latency_ms is not None:
            message["latency_ms"] = latency_ms
        self._broadcast(message, durable=False)

    # ---- durable events ----------------------------------------------------------------------------------------
    async def commit_sentences(self, make: list[tuple[str, str, int, int, int | None]],
                               latency_ms: Any = None) -> list[SentenceRecord]:
        """Give each new sentence ``(session, text, start_ms, end_ms, spk)`` a room id, commit, then broadcast.
        Returns the records (with their room ids)."""
        async with self._lock:
            first = self._next_sentence
            records = [SentenceRecord(first + i, *fields) for i, fields in enumerate(make)]
            seq = self.seq + 1
            body = {"type": "caption", "seq": seq, "sentences": [r.wire() for r in records], "partial": "",
                    "is_final": False}
            await self.store.append(self.id, seq, "caption", body, records)
            self._next_sentence = first + len(records)
            self.seq = seq
            live = dict(body, partial=self.partial())
            if latency_ms is not None:
                live["latency_ms"] = latency_ms
            self._broadcast(live, durable=True)
            return records

    async def commit_relabel(self, relabel: dict[int, int]) -> None:
        """Commit corrected speaker labels (room sentence id -> spk), then broadcast them."""
        if not relabel:
            return
        async with self._lock:
            seq = self.seq + 1
            body = {"type": "speakers", "seq": seq, "relabel": {str(k): v for k, v in sorted(relabel.items())}}
            await self.store.append(self.id, seq, "speakers", body, relabel=relabel)
            self.seq = seq
            self._broadcast(body, durable=True)

    # ---- publishers --------------------------------------------------------------------------------------------
    def join(self, session_id: str) -> RoomPublisher:
        publisher = RoomPublisher(self, session_id)
        self.publishers[session_id] = publisher
        self._broadcast_status()
        return publisher

    def leave(self, session_id: str) -> None:
        if self.publishers.pop(session_id, None) is not None:
            self.broadcast_partial()
            self._broadcast_status()

    def close(self) -> None:
        """Server shutdown: end every viewer's stream (clients reconnect and resume from the store)."""
        for viewer in list(self.viewers):
            viewer.end()
        self.viewers.clear()


class RoomPublisher:
    """A publisher session's view of its room: maps its session sentence ids and times onto the room's.

    ``publish`` takes every message the session sends to its own client, in order, and returns once anything
    durable in it is committed.
    """

    def __init__(self, room: Room, session_id: str) -> None:
        self.room = room
        self.session_id = session_id
        # Session audio time 0 is (about) now: shift its times onto the room's timeline.
        self.offset_ms = max(0, int(time.time() * 1000) - room.record.created_ms)
        self.partial = ""
        self._ids: dict[int, int] = {}  # session sentence id -> room sentence id
        self._log = SessionLog(log, session_id)

    async def publish(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "caption":
            self.partial = "" if message.get("is_final") else str(message.get("partial") or "")
            latency = message.get("latency_ms")
            new = [s for s in message.get("sentences") or [] if s.get("id") not in self._ids]
            if not new:
                self.room.broadcast_partial(latency)
                return
            records = await self.room.commit_sentences(
                [(self.session_id, str(s["text"]), int(s["start"]) + self.offset_ms,
                  int(s["end"]) + self.offset_ms, s.get("spk")) for s in new], latency)
            for s, r in zip(new, records, strict=True):
                self._ids[s["id"]] = r.id
        elif kind == "speakers":
            relabel = {self._ids[int(k)]: v for k, v in (message.get("relabel") or {}).items()
                       if int(k) in self._ids}
            await self.room.commit_relabel(relabel)

    def leave(self) -> None:
        self.room.leave(self.session_id)
        self._log.info("left room %s", self.room.id)


class RoomRegistry:
    """The rooms this server knows: loaded from the store on first use, kept in memory (a few hundred bytes each)."""

    def __init__(self, store: TranscriptStore) -> None:
        self.store = store
        self._rooms: dict[str, Room] = {}
        self._loading = asyncio.Lock()

    async def create(self, title: str = "", private: bool = False) -> tuple[Room, str | None]:
        """A new room with an unguessable id; ``private`` rooms get a viewer token (kept with the room: its QR code
        and links carry it)."""
        viewer_token = new_token() if private else None
        record = await self.store.create_room(secrets.token_urlsafe(ROOM_ID_BYTES), title[:200],
                                              token_digest(viewer_token) if viewer_token else None,
                                              viewer_token=viewer_token)
        room = Room(record, self.store, 0, 0)
        self._rooms[room.id] = room
        log.info("room %s created%s", room.id, " (viewer token required)" if private else "")
        return room, viewer_token

    async def get(self, room_id: str) -> Room | None:
        room = self._rooms.get(room_id)
        if room is not None:
            return room
        async with self._loading:  # two first requests for one stored room must not build two Room objects
            room = self._rooms.get(room_id)
            if room is None:
                record = await self.store.room(room_id)
                if record is None:
                    return None
                last_seq, next_id = await self.store.counters(room_id)
                room = Room(record, self.store, last_seq, next_id)
                self._rooms[room_id] = room
            return room

    def close(self) -> None:
        for room in self._rooms.values():
            room.close()
