"""The watch on the event loop (``tests/support/loop_watch.py``) catches what it is for: server code that blocks the
loop, here a store read made on the loop instead of the store's thread, and a blocking callback the server runs; the
same work done the way the server does it passes. (This file runs under the watch, as every quick-tier test does.)"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from blockbuster import BlockingError

from app.rooms.store import open_store
from app.rooms.store.sqlite import SqliteStore
from engine.stream.speech import SpeechListeners, SpeechStarted


async def test_a_store_read_on_the_loop_instead_of_the_stores_thread_fails_the_test(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "r.db"))
    assert isinstance(store, SqliteStore)
    try:
        assert await store.room("no-such-room") is None  # through the store's thread: what the server does
        with pytest.raises(BlockingError):
            store._room("no-such-room")  # the same SQLite read, on the loop
    finally:
        await store.close()


async def test_a_blocking_callback_the_server_runs_on_the_loop_is_caught() -> None:
    """A session's speech listeners (a transport's callbacks) run on the loop: one that sleeps is caught there (the
    session reports a failing listener and goes on, so the error is what it reports)."""
    caught: list[BaseException | None] = []

    def report() -> None:
        caught.append(sys.exc_info()[1])

    listeners = SpeechListeners(report)
    listeners.add(lambda _event: time.sleep(0.01))
    listeners.tell(SpeechStarted(0, 0, 0))
    assert len(caught) == 1 and isinstance(caught[0], BlockingError)
    await asyncio.sleep(0)
