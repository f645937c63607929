"""A full disk, as the transcript store meets it."""

from __future__ import annotations

import sqlite3

from app.rooms.store import TranscriptStore


def disk_full(store: TranscriptStore, full: bool) -> None:
    """Make the store's writes fail as SQLite fails on a full disk (``SQLITE_FULL``), or work again. (A real tiny
    file system needs root to mount; this injects the same error at the same place.)"""

    def refuse(*_: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    for name in ("_append", "_create_room"):
        if full:
            setattr(store, name, refuse)
        else:
            store.__dict__.pop(name, None)
