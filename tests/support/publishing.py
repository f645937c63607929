"""Sentences put into a room as a publisher's are, without audio or a recognizer, and a poll for what follows."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from app.rooms import Room
from app.rooms.keys import ROOMS
from app.rooms.store import SentenceRecord
from engine.protocol import Word


def words_of(text: str, start: int, step: int = 300) -> tuple[Word, ...]:
    """The words of ``text`` from ``start`` ms, ``step`` ms each (20 ms apart)."""
    return tuple(Word(w, start + i * step, start + (i + 1) * step - 20) for i, w in enumerate(text.split()))


def record(sid: int, text: str, start: int = 0, spk: int | None = 0, session: str = "s") -> SentenceRecord:
    """A locked sentence of ``text`` from ``start`` ms with ``words_of``'s word times."""
    words = words_of(text, start)
    return SentenceRecord(sid, session, text, start, words[-1].end_ms, spk, words)


async def lock(
    app: web.Application, room_id: str, *texts: str, session: str = "pub", start_ms: int = 0
) -> list[SentenceRecord]:
    """Sentences locked in the room in one event the way a publisher's are, said one after another from
    ``start_ms`` on the room's timeline (``words_of``'s times, 500 ms between sentences)."""
    room: Room | None = await app[ROOMS].get(room_id)
    assert room is not None
    start = start_ms
    make: list[SentenceRecord] = []
    for text in texts:
        words = words_of(text, start)
        make.append(SentenceRecord(-1, session, text, start, words[-1].end_ms, 0, words))
        start = words[-1].end_ms + 500
    return await room.commit_sentences(make)


async def until(predicate: Any, timeout_s: float = 10.0) -> None:
    """Wait until ``predicate()`` is true, failing the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
