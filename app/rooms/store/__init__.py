"""The transcript store: its interface (``base``), its backends (``sqlite``, ``postgres``) and ``open_store``,
which picks the backend from the target."""

from __future__ import annotations

from .base import (
    MEMORY,
    POSTGRES_SCHEMES,
    Appended,
    Edits,
    Retimed,
    RoomEvent,
    RoomRecord,
    SentenceRecord,
    Snapshot,
    StoreError,
    TimedEvent,
    TranscriptStore,
)

__all__ = [
    "MEMORY",
    "Appended",
    "Edits",
    "Retimed",
    "RoomEvent",
    "RoomRecord",
    "SentenceRecord",
    "Snapshot",
    "StoreError",
    "TimedEvent",
    "TranscriptStore",
    "open_store",
]


async def open_store(target: str) -> TranscriptStore:
    """The store at ``target``: a SQLite file path, ``":memory:"`` (tests, or nothing kept), or a
    ``postgresql://`` URL. Raises ``StoreError`` when it cannot be opened."""
    if "://" in target:
        if not target.startswith(POSTGRES_SCHEMES):
            scheme = target.split("://", 1)[0]
            raise StoreError(
                f"unsupported database URL scheme {scheme!r}: use a SQLite file path or a postgresql:// URL"
            )
        from .postgres import PostgresStore  # psycopg is imported only by servers that use it

        return await PostgresStore.open(target)
    from .sqlite import SqliteStore

    return await SqliteStore.open(target)
