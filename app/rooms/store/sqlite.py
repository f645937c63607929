"""The SQLite transcript store: one file (or ``:memory:``) for one server on one box. The interface and its
contracts are ``app.rooms.store.base.TranscriptStore``'s.

Durability: WAL journal, ``synchronous=FULL``: a committed sentence survives a process crash *and* a power cut; the
cost is one fsync per locked sentence, a few milliseconds on the store's thread, never on the event loop.

Threading: one connection, used only by one dedicated worker thread (a single-thread executor). SQLite then needs
no locking of ours, writes are serialised in the order they were submitted, and WAL lets other processes (a
backup, ``sqlite3`` on the command line) read while the server writes. Numbers are given out inside ``BEGIN
IMMEDIATE`` (the next seq and sentence id follow the highest stored), so even a second process writing the same
file would not collide; it would not hear of the other's events, though (``watch`` does nothing): several front
ends need ``app.rooms.store.postgres``.

Schema version: ``PRAGMA user_version`` = ``SCHEMA_VERSION``; a newer file is refused, an older one migrated.
Version 2 added ``rooms.viewer_token``, version 3 ``sentences.words``, version 4 what editors need (``rooms``:
editor_token_sha256, delay_s, names, terms, learned, ended_ms, outputs; ``sentences``: original, deleted), version 5
translations (``rooms.languages``, ``sentences.translations``), version 6 the language spoken in a room
(``rooms.language``: NULL for rooms made before, which are English).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from engine import protocol

from . import base

SCHEMA_VERSION = 6
_FEW_IDS = 500  # a snapshot of at most this many sentences asks for them by id

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rooms (
    id TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    viewer_token_sha256 TEXT,
    viewer_token TEXT,
    editor_token_sha256 TEXT,
    delay_s REAL NOT NULL DEFAULT 0,
    names TEXT,
    terms TEXT,
    learned TEXT,
    ended_ms INTEGER,
    outputs TEXT,
    languages TEXT,
    language TEXT
);
CREATE TABLE IF NOT EXISTS events (
    room TEXT NOT NULL REFERENCES rooms(id),
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (room, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sentences (
    room TEXT NOT NULL REFERENCES rooms(id),
    id INTEGER NOT NULL,
    session TEXT NOT NULL,
    text TEXT NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    spk INTEGER,
    locked_ms INTEGER NOT NULL,
    words TEXT,
    original TEXT,
    deleted INTEGER NOT NULL DEFAULT 0,
    translations TEXT,
    PRIMARY KEY (room, id)
) WITHOUT ROWID;
"""
# Each step takes the schema from version N to N + 1 (index 0: version 1 -> 2), inside the opening transaction.
_MIGRATIONS = [
    "ALTER TABLE rooms ADD COLUMN viewer_token TEXT;",
    "ALTER TABLE sentences ADD COLUMN words TEXT;",
    "ALTER TABLE rooms ADD COLUMN editor_token_sha256 TEXT;"
    "ALTER TABLE rooms ADD COLUMN delay_s REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE rooms ADD COLUMN names TEXT; ALTER TABLE rooms ADD COLUMN terms TEXT;"
    "ALTER TABLE rooms ADD COLUMN learned TEXT; ALTER TABLE sentences ADD COLUMN original TEXT;"
    "ALTER TABLE rooms ADD COLUMN ended_ms INTEGER; ALTER TABLE rooms ADD COLUMN outputs TEXT;"
    "ALTER TABLE sentences ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;",
    "ALTER TABLE rooms ADD COLUMN languages TEXT; ALTER TABLE sentences ADD COLUMN translations TEXT;",
    "ALTER TABLE rooms ADD COLUMN language TEXT;",
]

T = TypeVar("T")


class SqliteStore(base.TranscriptStore):
    """``path`` ":memory:" keeps everything in memory (tests, or a server started with ``--db :memory:``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.where = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transcript-store")
        self._db: sqlite3.Connection | None = None
        self._closed = False

    @classmethod
    async def open(cls, path: str) -> SqliteStore:
        store = cls(path)
        try:
            await store._run(store._open)
        except BaseException:
            await store.close()
            raise
        return store

    # ---- public API (async; every call runs on the store's thread) -------------------------------------------
    async def _insert_room(self, record: base.RoomRecord) -> None:
        await self._run(self._create_room, record)

    async def room(self, room_id: str) -> base.RoomRecord | None:
        return await self._run(self._room, room_id)

    async def counters(self, room_id: str) -> base.Counters:
        return await self._run(self._counters, room_id)

    async def next_label(self, room_id: str) -> int:
        return await self._run(self._next_label, room_id)

    async def set_ended(self, room_id: str, ended_ms: int | None) -> None:
        await self._run(self._update_room, room_id, "ended_ms", ended_ms)

    async def set_outputs(self, room_id: str, outputs: Sequence[dict[str, Any]]) -> None:
        await self._run(self._update_room, room_id, "outputs", base.outputs_json(outputs))

    async def rooms_with_outputs(self) -> list[str]:
        return await self._run(self._rooms_with_outputs)

    async def append(
        self,
        room_id: str,
        event: base.RoomEvent,
        sentences: Sequence[base.SentenceRecord] = (),
        relabel: dict[int, int] | None = None,
        retimed: base.Retimed | None = None,
        edits: base.Edits | None = None,
    ) -> base.Appended:
        return await self._run(
            self._append,
            room_id,
            event,
            list(sentences),
            dict(relabel or {}),
            dict(retimed or {}),
            edits or base.Edits(),
        )

    async def events_after(self, room_id: str, after_seq: int) -> list[tuple[int, protocol.ServerMessage]]:
        return await self._run(self._events_after, room_id, after_seq)

    async def snapshot(self, room_id: str, deleted: bool = False, ids: Collection[int] | None = None) -> base.Snapshot:
        return await self._run(self._snapshot, room_id, deleted, None if ids is None else sorted(set(ids)))

    async def timed_events(self, room_id: str, since_ms: int = 0, kind: str | None = None) -> list[base.TimedEvent]:
        return await self._run(self._timed_events, room_id, since_ms, kind)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._db is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._close_db)
        self._executor.shutdown(wait=False)  # (its thread has nothing left to do: joining it would block the loop)

    # ---- the store thread --------------------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Every store operation goes through here: the one place where a failure becomes a ``StoreError`` (and is
        counted in ``errors``)."""
        if self._closed:
            self.errors += 1
            raise base.StoreError("the transcript store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except (sqlite3.Error, OSError) as exc:  # OSError: a folder that cannot be made
            self.errors += 1
            raise base.StoreError(f"transcript store ({self.path}): {exc}") from exc
        except base.StoreError:
            self.errors += 1
            raise

    def _open(self) -> None:
        if self.path != base.MEMORY:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None)  # autocommit; transactions are explicit
        self._db = db
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise base.StoreError(f"{self.path} has schema version {version}; this server knows up to {SCHEMA_VERSION}")
        if self.path != base.MEMORY:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise base.StoreError(f"{self.path}: cannot switch to WAL mode (got {mode!r})")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=5000")
        if version == 0:
            # One script, one transaction: the tables and the version number appear together or not at all.
            db.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}PRAGMA user_version={SCHEMA_VERSION};COMMIT;")
        elif version < SCHEMA_VERSION:
            steps = "".join(_MIGRATIONS[version - 1 :])
            db.executescript(f"BEGIN IMMEDIATE;{steps}PRAGMA user_version={SCHEMA_VERSION};COMMIT;")

    def _close_db(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise base.StoreError("the transcript store is not open")
        return self._db

    def _create_room(self, record: base.RoomRecord) -> None:
        self._conn.execute(
            "INSERT INTO rooms (id, created_ms, title, viewer_token_sha256, viewer_token, "
            "editor_token_sha256, delay_s, languages, language) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            base.room_row(record),
        )

    def _room(self, room_id: str) -> base.RoomRecord | None:
        row = self._conn.execute(f"SELECT {base.ROOM_COLUMNS} FROM rooms WHERE id = ?", (room_id,)).fetchone()
        return base.room_record(row) if row else None

    def _update_room(self, room_id: str, column: str, value: object) -> None:
        assert column in ("ended_ms", "outputs")  # a column name, never data
        if self._conn.execute(f"UPDATE rooms SET {column} = ? WHERE id = ?", (value, room_id)).rowcount != 1:
            raise base.StoreError(f"transcript store ({self.path}): there is no room {room_id!r}")

    def _rooms_with_outputs(self) -> list[str]:
        rows = self._conn.execute("SELECT id FROM rooms WHERE outputs IS NOT NULL AND ended_ms IS NULL").fetchall()
        return [str(r[0]) for r in rows]

    def _last_seq(self, room_id: str) -> int:
        row = self._conn.execute("SELECT MAX(seq) FROM events WHERE room = ?", (room_id,)).fetchone()
        return int(row[0] or 0)

    def _counters(self, room_id: str) -> base.Counters:
        row = self._conn.execute("SELECT MAX(id) FROM sentences WHERE room = ?", (room_id,)).fetchone()
        return base.Counters(self._last_seq(room_id), int(row[0]) + 1 if row[0] is not None else 0)

    def _next_label(self, room_id: str) -> int:
        db = self._conn
        db.execute("BEGIN")  # one snapshot for both reads
        try:
            top = db.execute("SELECT MAX(spk) FROM sentences WHERE room = ?", (room_id,)).fetchone()
            names = db.execute("SELECT names FROM rooms WHERE id = ?", (room_id,)).fetchone()
        finally:
            db.execute("COMMIT")
        return base.label_after(top[0], names[0] if names else None)

    def _append(
        self,
        room_id: str,
        event: base.RoomEvent,
        sentences: list[base.SentenceRecord],
        relabel: dict[int, int],
        retimed: base.Retimed,
        edits: base.Edits,
    ) -> base.Appended:
        db = self._conn
        now = base.now_ms()
        db.execute("BEGIN IMMEDIATE")  # the write lock first: the numbers read next stay ours until COMMIT
        try:
            last_seq, next_id = self._counters(room_id)
            stored = base.numbered(event, sentences, last_seq + 1, next_id)
            kind, body = base.event_json(stored.event)
            db.execute(
                "INSERT INTO events (room, seq, kind, body, created_ms) VALUES (?, ?, ?, ?, ?)",
                (room_id, stored.event.seq, kind, body, now),
            )
            db.executemany(
                "INSERT INTO sentences (room, id, session, text, start_ms, end_ms, spk, locked_ms, words) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                base.sentence_rows(room_id, stored.records, now),
            )
            db.executemany(
                "UPDATE sentences SET spk = ? WHERE room = ? AND id = ?", base.relabel_rows(room_id, relabel)
            )
            db.executemany(
                "UPDATE sentences SET words = ? WHERE room = ? AND id = ?", base.retimed_rows(room_id, retimed)
            )
            self._apply(room_id, edits)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return stored

    def _apply(self, room_id: str, edits: base.Edits) -> None:
        """An editor's changes (inside ``_append``'s transaction). The first edit of a sentence keeps its text as
        ``original``."""
        db = self._conn
        db.executemany(
            "UPDATE sentences SET original = COALESCE(original, text), text = ?, start_ms = ?, end_ms = ?, "
            "spk = ?, words = ? WHERE room = ? AND id = ?",
            base.replaced_rows(room_id, edits.replaced),
        )
        db.executemany(
            "UPDATE sentences SET original = COALESCE(original, text), deleted = 1 WHERE room = ? AND id = ?",
            [(room_id, sid) for sid in edits.deleted],
        )
        if edits.names:
            row = db.execute("SELECT names FROM rooms WHERE id = ?", (room_id,)).fetchone()
            db.execute(
                "UPDATE rooms SET names = ? WHERE id = ?",
                (base.renamed_json(row[0] if row else None, edits.names), room_id),
            )
        if edits.vocabulary is not None:
            db.execute(
                "UPDATE rooms SET terms = ?, learned = ? WHERE id = ?", base.vocabulary_row(room_id, edits.vocabulary)
            )
        if edits.languages is not None:
            db.execute("UPDATE rooms SET languages = ? WHERE id = ?", base.languages_row(room_id, edits.languages))
        for sid, changed in sorted(edits.translations.items()):
            row = db.execute("SELECT translations FROM sentences WHERE room = ? AND id = ?", (room_id, sid)).fetchone()
            if row is not None:
                db.execute(
                    "UPDATE sentences SET translations = ? WHERE room = ? AND id = ?",
                    (base.translated_json(row[0], changed), room_id, sid),
                )

    def _timed_events(self, room_id: str, since_ms: int, kind: str | None) -> list[base.TimedEvent]:
        query = "SELECT seq, created_ms, body FROM events WHERE room = ? AND created_ms >= ?"
        params: tuple[object, ...] = (room_id, since_ms)
        if kind is not None:
            query, params = query + " AND kind = ?", (*params, kind)
        rows = self._conn.execute(query + " ORDER BY seq", params).fetchall()
        return [
            base.TimedEvent(int(seq), int(created), protocol.parse_server_message(json.loads(body)))
            for seq, created, body in rows
        ]

    def _events_after(self, room_id: str, after_seq: int) -> list[tuple[int, protocol.ServerMessage]]:
        rows = self._conn.execute(
            "SELECT seq, body FROM events WHERE room = ? AND seq > ? ORDER BY seq", (room_id, after_seq)
        ).fetchall()
        return [(int(seq), protocol.parse_server_message(json.loads(body))) for seq, body in rows]

    def _snapshot(self, room_id: str, deleted: bool, ids: list[int] | None) -> base.Snapshot:
        db = self._conn
        # A few sentences by their ids, or all of them (more ids than SQLite's oldest limit on parameters, 999).
        few = ids is not None and len(ids) <= _FEW_IDS
        only = f" AND id IN ({', '.join('?' * len(ids))})" if few and ids is not None else ""
        db.execute("BEGIN")
        try:
            seq = self._last_seq(room_id)
            rows = db.execute(
                f"SELECT {base.SENTENCE_COLUMNS} FROM sentences WHERE room = ? AND (? OR deleted = 0)"
                f"{only} ORDER BY id",
                (room_id, deleted, *(ids if few and ids is not None else ())),
            ).fetchall()
            names = db.execute("SELECT names FROM rooms WHERE id = ?", (room_id,)).fetchone()
        finally:
            db.execute("COMMIT")
        if ids is not None and not few:
            wanted = set(ids)
            rows = [r for r in rows if r[0] in wanted]
        return base.snapshot(seq, rows, names[0] if names else None)
