"""The PostgreSQL transcript store: one database shared by several front ends (``--db postgresql://...``). The
interface and its contracts are ``app.rooms.store.base.TranscriptStore``'s.

Why psycopg 3's async API with a small pool (``psycopg_pool.AsyncConnectionPool``, 1 to ``POOL_MAX`` connections)
and one more connection for ``LISTEN``:
- the work is waiting on a socket, not computing: async connections wait on the event loop itself, with no thread
  hop per call (the SQLite store needs its thread because ``sqlite3`` blocks);
- a pool, not one connection, because one connection runs one query at a time: after a front end restarts, every
  viewer reconnects at once and each reads its catch-up, while publishers keep committing; with a pool these run
  side by side, and writes to one room still queue in the database on that room's row lock, which is the one
  ordering that matters. The pool also replaces broken connections (checked before each use), so a restarted
  database server costs the requests in flight, not the front end;
- ``LISTEN`` needs a connection of its own that stays open and idle (a pooled connection goes back to others).

Numbering: ``append`` runs ``UPDATE rooms SET last_seq = last_seq + 1, next_sentence = next_sentence + n ...
RETURNING`` first in its transaction. That both gives out the numbers and takes the room's row lock until commit,
so a second front end's ``append`` to the same room waits, then gets the next numbers; seq N is committed before
N + 1 exists (no holes for a reader to trip on), and different rooms never wait for each other.

Fan-out: the same transaction runs ``pg_notify('live_captions_events', '<room> <seq>')``. PostgreSQL delivers
notices on commit, in commit order, to every listening connection (this front end's own included). The payload is
only the room and the seq (well under the 8000-byte limit whatever the sentence); the listener reads the events
from the table. If the listening connection drops, it reconnects with a growing pause and calls ``on_missed``.

Announcements (``announce``: live state that is never stored, such as a publisher's stable open text) go on a
second channel, ``live_captions_announce``, as JSON ``{"from": <front end>, "room": <id>, "body": {...}}``; the
listener hands each to ``on_announce`` unless this front end sent it. ``announce`` waits for its ``NOTIFY`` to
commit, so a caller that sends one at a time has them arrive in order; they go one at a time, so they hold at most
one of the pool's connections (commits never queue behind them). The body is at most ``ANNOUNCE_MAX_BYTES``, so
the payload stays well under the 8000-byte limit.

Schema version: the one row of table ``schema_version`` (``SCHEMA_VERSION``; a newer database is refused, an
older one migrated). Front ends starting together serialise their check on an advisory lock. Version 1 is the
SQLite store's version 3 plus two counters per room (``last_seq``, ``next_sentence``: the numbering above); version 2
adds what SQLite's version 4 added for editors, version 3 what SQLite's version 5 added for translations, version 4
what SQLite's version 6 added (a room's spoken language).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Collection, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg_pool import AsyncConnectionPool

from engine import protocol

from . import base

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4
CHANNEL = "live_captions_events"
ANNOUNCE_CHANNEL = "live_captions_announce"
POOL_MAX = 4
CONNECT_TIMEOUT_S = 10  # opening the store: how long an unreachable server may take to refuse
LISTEN_RETRY_MAX_S = 5.0  # longest pause between attempts to listen again after the connection dropped
_SCHEMA_LOCK = 0x6C697665  # advisory lock key ("live"): one front end at a time checks and migrates the schema

_SCHEMA = """
CREATE TABLE schema_version (version integer NOT NULL);
CREATE TABLE rooms (
    id text PRIMARY KEY,
    created_ms bigint NOT NULL,
    title text NOT NULL DEFAULT '',
    viewer_token_sha256 text,
    viewer_token text,
    last_seq bigint NOT NULL DEFAULT 0,
    next_sentence bigint NOT NULL DEFAULT 0,
    editor_token_sha256 text,
    delay_s double precision NOT NULL DEFAULT 0,
    names text,
    terms text,
    learned text,
    ended_ms bigint,
    outputs text,
    languages text,
    language text
);
CREATE TABLE events (
    room text NOT NULL REFERENCES rooms(id),
    seq bigint NOT NULL,
    kind text NOT NULL,
    body text NOT NULL,
    created_ms bigint NOT NULL,
    PRIMARY KEY (room, seq)
);
CREATE TABLE sentences (
    room text NOT NULL REFERENCES rooms(id),
    id bigint NOT NULL,
    session text NOT NULL,
    text text NOT NULL,
    start_ms bigint NOT NULL,
    end_ms bigint NOT NULL,
    spk integer,
    locked_ms bigint NOT NULL,
    words text,
    original text,
    deleted boolean NOT NULL DEFAULT false,
    translations text,
    PRIMARY KEY (room, id)
);
"""
# Each step takes the schema from version N to N + 1 (index 0: version 1 -> 2), inside the opening transaction.
_MIGRATIONS: list[str] = [
    "ALTER TABLE rooms ADD COLUMN editor_token_sha256 text, ADD COLUMN delay_s double precision NOT NULL DEFAULT 0, "
    "ADD COLUMN names text, ADD COLUMN terms text, ADD COLUMN learned text, ADD COLUMN ended_ms bigint, "
    "ADD COLUMN outputs text; "
    "ALTER TABLE sentences ADD COLUMN original text, ADD COLUMN deleted boolean NOT NULL DEFAULT false;",
    "ALTER TABLE rooms ADD COLUMN languages text; ALTER TABLE sentences ADD COLUMN translations text;",
    "ALTER TABLE rooms ADD COLUMN language text;",
]


def redacted(url: str) -> str:
    """``url`` without its password (for logs and error messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresStore(base.TranscriptStore):
    shared = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = redacted(url)
        self._pool = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=POOL_MAX,
            open=False,
            name="transcripts",
            check=AsyncConnectionPool.check_connection,
        )
        self._listener: asyncio.Task[None] | None = None
        self._closed = False
        self.origin = secrets.token_hex(8)  # tells this front end's own announcements from the others'
        # One announcement at a time (see the module docstring): a crowd of them never holds the pool from commits.
        self._announcing = asyncio.Lock()

    @classmethod
    async def open(cls, url: str) -> PostgresStore:
        store = cls(url)
        try:
            await store._migrate()
            await store._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            await store.close()
            raise store._error(exc) from exc
        except BaseException:
            await store.close()
            raise
        return store

    # ---- public API ----------------------------------------------------------------------------------------------
    async def _insert_room(self, record: base.RoomRecord) -> None:
        await self._execute(
            "INSERT INTO rooms (id, created_ms, title, viewer_token_sha256, viewer_token, "
            "editor_token_sha256, delay_s, languages, language) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            base.room_row(record),
        )

    async def room(self, room_id: str) -> base.RoomRecord | None:
        row = await self._fetchone(f"SELECT {base.ROOM_COLUMNS} FROM rooms WHERE id = %s", (room_id,))
        return base.room_record(row) if row else None

    async def set_ended(self, room_id: str, ended_ms: int | None) -> None:
        await self._update_room("UPDATE rooms SET ended_ms = %s WHERE id = %s", (ended_ms, room_id))

    async def set_outputs(self, room_id: str, outputs: Sequence[dict[str, Any]]) -> None:
        await self._update_room("UPDATE rooms SET outputs = %s WHERE id = %s", (base.outputs_json(outputs), room_id))

    async def rooms_with_outputs(self) -> list[str]:
        rows = await self._fetchall("SELECT id FROM rooms WHERE outputs IS NOT NULL AND ended_ms IS NULL", ())
        return [str(r[0]) for r in rows]

    async def _update_room(self, query: str, params: tuple[Any, ...]) -> None:
        try:
            async with self._connection() as conn:
                cursor = await conn.execute(query, params)
                if cursor.rowcount != 1:
                    raise base.StoreError(f"transcript store ({self.where}): there is no room {params[-1]!r}")
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    async def counters(self, room_id: str) -> base.Counters:
        row = await self._fetchone("SELECT last_seq, next_sentence FROM rooms WHERE id = %s", (room_id,))
        return base.Counters(int(row[0]), int(row[1])) if row else base.Counters(0, 0)

    async def next_label(self, room_id: str) -> int:
        row = await self._fetchone(
            "SELECT (SELECT MAX(spk) FROM sentences WHERE room = %s), (SELECT names FROM rooms WHERE id = %s)",
            (room_id, room_id),
        )
        return base.label_after(row[0], row[1]) if row else 0

    async def append(
        self,
        room_id: str,
        event: base.RoomEvent,
        sentences: Sequence[base.SentenceRecord] = (),
        relabel: dict[int, int] | None = None,
        retimed: base.Retimed | None = None,
        edits: base.Edits | None = None,
    ) -> base.Appended:
        records = list(sentences)
        now = base.now_ms()
        try:
            async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
                # Numbers and the room's row lock in one statement (see the module docstring).
                await cur.execute(
                    "UPDATE rooms SET last_seq = last_seq + 1, next_sentence = next_sentence + %s "
                    "WHERE id = %s RETURNING last_seq, next_sentence",
                    (len(records), room_id),
                )
                row = await cur.fetchone()
                if row is None:
                    raise base.StoreError(f"transcript store ({self.where}): there is no room {room_id!r}")
                stored = base.numbered(event, records, int(row[0]), int(row[1]) - len(records))
                kind, body = base.event_json(stored.event)
                await cur.execute(
                    "INSERT INTO events (room, seq, kind, body, created_ms) VALUES (%s, %s, %s, %s, %s)",
                    (room_id, stored.event.seq, kind, body, now),
                )
                if stored.records:
                    await cur.executemany(
                        "INSERT INTO sentences (room, id, session, text, start_ms, end_ms, spk, locked_ms, words) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        base.sentence_rows(room_id, stored.records, now),
                    )
                if relabel:
                    await cur.executemany(
                        "UPDATE sentences SET spk = %s WHERE room = %s AND id = %s", base.relabel_rows(room_id, relabel)
                    )
                if retimed:
                    await cur.executemany(
                        "UPDATE sentences SET words = %s WHERE room = %s AND id = %s",
                        base.retimed_rows(room_id, retimed),
                    )
                if edits is not None:
                    await self._apply(cur, room_id, edits)
                await cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{room_id} {stored.event.seq}"))
        except psycopg.Error as exc:
            raise self._error(exc) from exc
        return stored

    async def events_after(self, room_id: str, after_seq: int) -> list[tuple[int, protocol.ServerMessage]]:
        rows = await self._fetchall(
            "SELECT seq, body FROM events WHERE room = %s AND seq > %s ORDER BY seq", (room_id, after_seq)
        )
        return [(int(seq), protocol.parse_server_message(json.loads(body))) for seq, body in rows]

    async def timed_events(self, room_id: str, since_ms: int = 0, kind: str | None = None) -> list[base.TimedEvent]:
        query = "SELECT seq, created_ms, body FROM events WHERE room = %s AND created_ms >= %s"
        params: tuple[Any, ...] = (room_id, since_ms)
        if kind is not None:
            query, params = query + " AND kind = %s", (*params, kind)
        rows = await self._fetchall(query + " ORDER BY seq", params)
        return [
            base.TimedEvent(int(seq), int(created), protocol.parse_server_message(json.loads(body)))
            for seq, created, body in rows
        ]

    async def snapshot(self, room_id: str, deleted: bool = False, ids: Collection[int] | None = None) -> base.Snapshot:
        only = None if ids is None else sorted(set(ids))
        try:
            async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
                # One snapshot of the database for both reads: the seq and the sentences agree.
                await cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                await cur.execute("SELECT last_seq, names FROM rooms WHERE id = %s", (room_id,))
                row = await cur.fetchone()
                await cur.execute(
                    f"SELECT {base.SENTENCE_COLUMNS} FROM sentences "
                    "WHERE room = %s AND (%s OR NOT deleted) "
                    "AND (%s::bigint[] IS NULL OR id = ANY(%s::bigint[])) ORDER BY id",
                    (room_id, deleted, only, only),
                )
                rows = await cur.fetchall()
        except psycopg.Error as exc:
            raise self._error(exc) from exc
        return base.snapshot(int(row[0]) if row else 0, rows, row[1] if row else None)

    def watch(
        self,
        on_commit: Callable[[str, int], None],
        on_missed: Callable[[], None],
        on_announce: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        if self._listener is None and not self._closed:
            self._listener = asyncio.create_task(
                self._listen_forever(on_commit, on_missed, on_announce), name="store-listen"
            )

    async def announce(self, room_id: str, body: dict[str, Any]) -> None:
        base.announce_json(body)  # the size check: raises ValueError
        payload = json.dumps(
            {"from": self.origin, "room": room_id, "body": body}, separators=(",", ":"), ensure_ascii=False
        )
        async with self._announcing:
            await self._execute("SELECT pg_notify(%s, %s)", (ANNOUNCE_CHANNEL, payload))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await self._pool.close()

    # ---- internals -----------------------------------------------------------------------------------------------
    @staticmethod
    async def _apply(cur: psycopg.AsyncCursor[Any], room_id: str, edits: base.Edits) -> None:
        """An editor's changes, inside ``append``'s transaction (which holds the room's row lock). The first edit
        of a sentence keeps its text as ``original``."""
        if edits.replaced:
            await cur.executemany(
                "UPDATE sentences SET original = COALESCE(original, text), text = %s, start_ms = %s, end_ms = %s, "
                "spk = %s, words = %s WHERE room = %s AND id = %s",
                base.replaced_rows(room_id, edits.replaced),
            )
        if edits.deleted:
            await cur.executemany(
                "UPDATE sentences SET original = COALESCE(original, text), deleted = true WHERE room = %s AND id = %s",
                [(room_id, sid) for sid in edits.deleted],
            )
        if edits.names:
            await cur.execute("SELECT names FROM rooms WHERE id = %s", (room_id,))
            row = await cur.fetchone()
            await cur.execute(
                "UPDATE rooms SET names = %s WHERE id = %s",
                (base.renamed_json(row[0] if row else None, edits.names), room_id),
            )
        if edits.vocabulary is not None:
            await cur.execute(
                "UPDATE rooms SET terms = %s, learned = %s WHERE id = %s",
                base.vocabulary_row(room_id, edits.vocabulary),
            )
        if edits.languages is not None:
            await cur.execute(
                "UPDATE rooms SET languages = %s WHERE id = %s", base.languages_row(room_id, edits.languages)
            )
        for sid, changed in sorted(edits.translations.items()):
            await cur.execute("SELECT translations FROM sentences WHERE room = %s AND id = %s", (room_id, sid))
            row = await cur.fetchone()
            if row is not None:
                await cur.execute(
                    "UPDATE sentences SET translations = %s WHERE room = %s AND id = %s",
                    (base.translated_json(row[0], changed), room_id, sid),
                )

    def _error(self, exc: BaseException) -> base.StoreError:
        self.errors += 1
        return base.StoreError(f"transcript store ({self.where}): {str(exc).strip() or type(exc).__name__}")

    def _connection(self) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        if self._closed:
            self.errors += 1
            raise base.StoreError("the transcript store is closed")
        return self._pool.connection()

    async def _execute(self, query: str, params: tuple[Any, ...]) -> None:
        try:
            async with self._connection() as conn:
                await conn.execute(query, params)
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    async def _fetchone(self, query: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        try:
            async with self._connection() as conn:
                return await (await conn.execute(query, params)).fetchone()
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    async def _fetchall(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        try:
            async with self._connection() as conn:
                return await (await conn.execute(query, params)).fetchall()
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    async def _migrate(self) -> None:
        async with (
            await psycopg.AsyncConnection.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S) as conn,
            conn.transaction(),
        ):
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            exists = await (await conn.execute("SELECT to_regclass('schema_version') IS NOT NULL")).fetchone()
            version = 0
            if exists and exists[0]:
                row = await (await conn.execute("SELECT max(version) FROM schema_version")).fetchone()
                version = int(row[0]) if row and row[0] is not None else 0
            if version > SCHEMA_VERSION:
                raise base.StoreError(
                    f"{self.where} has schema version {version}; this server knows up to {SCHEMA_VERSION}"
                )
            if version == 0:
                await conn.execute(_SCHEMA)
                await conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
                log.info("transcript store %s: schema version %d created", self.where, SCHEMA_VERSION)
            elif version < SCHEMA_VERSION:
                for step in _MIGRATIONS[version - 1 :]:
                    await conn.execute(step)
                await conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))
                log.info(
                    "transcript store %s: schema migrated from version %d to %d", self.where, version, SCHEMA_VERSION
                )

    async def _listen_forever(
        self,
        on_commit: Callable[[str, int], None],
        on_missed: Callable[[], None],
        on_announce: Callable[[str, dict[str, Any]], None] | None,
    ) -> None:
        pause_s = 0.1
        heard_before = False
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    if on_announce is not None:
                        await conn.execute(f"LISTEN {ANNOUNCE_CHANNEL}")
                    if heard_before:
                        log.warning("transcript store %s: listening again; rooms catch up from the table", self.where)
                    heard_before = True
                    on_missed()  # events committed while nobody listened sent notices nobody got
                    pause_s = 0.1
                    async for notice in conn.notifies():
                        if notice.channel == ANNOUNCE_CHANNEL:
                            if on_announce is not None:
                                self._announced(notice.payload, on_announce)
                            continue
                        room_id, _, seq = notice.payload.rpartition(" ")
                        try:
                            on_commit(room_id, int(seq))
                        except Exception:  # one room's failure must not end the listening
                            log.exception("room %s: handling commit notice %s failed", room_id, seq)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                log.warning(
                    "transcript store %s: listening failed (%s); again in %.1f s", self.where, str(exc).strip(), pause_s
                )
            await asyncio.sleep(pause_s)
            pause_s = min(pause_s * 2, LISTEN_RETRY_MAX_S)

    def _announced(self, payload: str, on_announce: Callable[[str, dict[str, Any]], None]) -> None:
        """One announcement heard: to ``on_announce`` unless it is this front end's own or not one at all."""
        try:
            notice = json.loads(payload)
            if notice["from"] == self.origin:
                return
            room_id, body = str(notice["room"]), notice["body"]
            if not isinstance(body, dict):
                raise TypeError("the body is not an object")
        except (ValueError, KeyError, TypeError) as exc:  # another program on the channel: not ours to act on
            log.warning("transcript store %s: ignoring an announcement that is not one (%s)", self.where, exc)
            return
        try:
            on_announce(room_id, body)
        except Exception:  # one room's failure must not end the listening
            log.exception("room %s: handling an announcement failed", room_id)
