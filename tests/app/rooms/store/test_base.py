"""The transcript store's contract, on both backends: SQLite (a file) and PostgreSQL (a real server started for
the run, see bench/lib/postgres.py). Commits survive reopening, the store numbers events and sentences so that two
writers on one database never collide, schema versions, clear errors, and PostgreSQL's commit notices."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.__main__ import EXIT_STORE_FAILED, main
from app.rooms.store import SentenceRecord, StoreError, TranscriptStore, open_store
from app.rooms.store.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
from engine import protocol

ROOM = "room-one-abcdef"


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store opens: a SQLite file, or a fresh database on the test PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    return str(request.getfixturevalue("postgres_url"))


def caption(*records: SentenceRecord, seq: int = 0) -> protocol.Caption:
    return protocol.Caption([r.sentence() for r in records], "", seq=seq)


async def test_commits_survive_reopening(target: str) -> None:
    store = await open_store(target)
    await store.create_room(ROOM, "t")
    first = SentenceRecord(0, "s", "Hello there.", 0, 999, 0, (protocol.Word("Hello", 0, 400),))
    await store.append(ROOM, caption(first, seq=1), [first])
    await store.append(ROOM, protocol.Speakers({0: 1}, seq=2), relabel={0: 1})
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.room(ROOM)
    again = await open_store(target)
    snap = await again.snapshot(ROOM)
    assert snap.seq == 2 and snap.sentences == [
        SentenceRecord(0, "s", "Hello there.", 0, 999, 1, (protocol.Word("Hello", 0, 400),))
    ]
    assert await again.events_after(ROOM, 1) == [(2, protocol.Speakers({0: 1}, seq=2))]
    assert await again.counters(ROOM) == (2, 1)
    record = await again.room(ROOM)
    assert record is not None and record.title == "t" and await again.room("no-such-room") is None
    await again.close()


async def test_better_word_times_replace_a_sentences_words_and_replay_in_order(target: str) -> None:
    """A ``words`` event (the aligner's times, after the lock) is a room event like a relabel: it gets the next
    seq, replays from ``events_after``, and the stored sentence (snapshots, transcripts) has the new times."""
    store = await open_store(target)
    estimated = (protocol.Word("Hello", 0, 500), protocol.Word("there.", 500, 999))
    aligned = (protocol.Word("Hello", 120, 430), protocol.Word("there.", 480, 910))
    other = SentenceRecord(0, "s", "Other.", 0, 99, 0)
    try:
        await store.create_room(ROOM)
        first = SentenceRecord(0, "s", "Hello there.", 0, 999, 0, estimated)
        await store.append(ROOM, caption(first, other), [first, other])
        update = protocol.WordTimes(0, aligned, seq=2, session="s")
        stored = await store.append(ROOM, dataclasses.replace(update, seq=99), retimed={0: aligned})
        assert stored.event == update and stored.records == []
        await store.append(ROOM, protocol.Speakers({0: 1}, seq=3), relabel={0: 1})
    finally:
        await store.close()
    again = await open_store(target)
    try:
        snap = await again.snapshot(ROOM)
        assert snap.seq == 3 and snap.sentences[0] == SentenceRecord(0, "s", "Hello there.", 0, 999, 1, aligned)
        assert snap.sentences[1] == SentenceRecord(1, "s", "Other.", 0, 99, 0), "only that sentence changed"
        assert await again.events_after(ROOM, 1) == [(2, update), (3, protocol.Speakers({0: 1}, seq=3))]
        assert await again.counters(ROOM) == (3, 2)
    finally:
        await again.close()


async def test_the_store_numbers_events_and_two_writers_never_collide(target: str) -> None:
    a, b = await open_store(target), await open_store(target)
    try:
        await a.create_room(ROOM)
        # The caller's numbers are a guess: the store gives out the next ones.
        draft = SentenceRecord(41, "s", "A guess.", 0, 10, None)
        stored = await a.append(ROOM, caption(draft, draft, seq=17), [draft, draft])
        assert stored.event.seq == 1 and [r.id for r in stored.records] == [0, 1]
        assert isinstance(stored.event, protocol.Caption) and [s.id for s in stored.event.sentences] == [0, 1]

        async def publish(store: TranscriptStore, name: str, n: int) -> list[int]:
            seqs = []
            for i in range(n):
                r = SentenceRecord(0, name, f"{name} {i}", i, i + 1, None)
                seqs.append((await store.append(ROOM, caption(r, r), [r, r])).event.seq)
            return seqs

        seqs_a, seqs_b = await asyncio.gather(publish(a, "a", 25), publish(b, "b", 25))
        assert sorted(seqs_a + seqs_b) == list(range(2, 52)), "every seq once"
        assert seqs_a == sorted(seqs_a) and seqs_b == sorted(seqs_b)
        events = await b.events_after(ROOM, 0)
        assert [seq for seq, _ in events] == list(range(1, 52))
        ids = [s.id for _, e in events if isinstance(e, protocol.Caption) for s in e.sentences]
        assert ids == list(range(102)), "sentence ids in seq order, none twice"
        assert all(e.seq == seq for seq, e in events)
        snap = await a.snapshot(ROOM)
        assert snap.seq == 51 and [s.id for s in snap.sentences] == ids
        for name in "ab":  # each writer's sentences in the order it wrote them
            mine = [s.text for s in snap.sentences if s.session == name]
            assert mine == [f"{name} {i}" for i in range(25) for _ in range(2)]
        assert await a.counters(ROOM) == (51, 102)
    finally:
        await a.close()
        await b.close()


async def test_a_room_that_does_not_exist_or_exists_already_is_a_store_error(target: str) -> None:
    store = await open_store(target)
    try:
        r = SentenceRecord(0, "s", "x", 0, 1, None)
        with pytest.raises(StoreError):
            await store.append("no-such-room-abc", caption(r), [r])
        await store.create_room(ROOM)
        with pytest.raises(StoreError):
            await store.create_room(ROOM)
        assert (await store.snapshot("no-such-room-abc")).seq == 0
    finally:
        await store.close()


async def test_a_newer_schema_is_refused(target: str) -> None:
    store = await open_store(target)
    await store.close()
    if target.startswith("postgresql://"):
        with psycopg.connect(target, autocommit=True) as conn:
            assert conn.execute("SELECT version FROM schema_version").fetchall() == [(PG_SCHEMA_VERSION,)]
            conn.execute("UPDATE schema_version SET version = 99")
    else:
        with sqlite3.connect(target) as db:
            db.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="schema version 99"):
        await open_store(target)


async def test_a_version_3_postgres_database_is_migrated_and_its_rooms_are_english(postgres_url: str) -> None:
    store = await open_store(postgres_url)
    await store.create_room(ROOM, "before spoken languages")
    await store.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as a version 3 front end left it
        conn.execute("ALTER TABLE rooms DROP COLUMN language")
        conn.execute("UPDATE schema_version SET version = 3")
    again = await open_store(postgres_url)
    record = await again.room(ROOM)
    await again.create_room("room-in-spanish-abc", language="es")
    spanish = await again.room("room-in-spanish-abc")
    await again.close()
    assert record is not None and record.title == "before spoken languages" and record.language == "en"
    assert spanish is not None and spanish.language == "es"
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(PG_SCHEMA_VERSION,)] == [(4,)]


async def test_front_ends_starting_together_create_the_schema_once(postgres_url: str) -> None:
    stores = await asyncio.gather(*(open_store(postgres_url) for _ in range(4)))
    await stores[0].create_room(ROOM)
    assert all([await s.room(ROOM) is not None for s in stores])
    for store in stores:
        await store.close()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(PG_SCHEMA_VERSION,)]


async def test_bad_targets_are_clear_errors_that_keep_passwords_out(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unsupported database URL scheme 'mysql'"):
        await open_store("mysql://user@127.0.0.1/db")
    with pytest.raises(StoreError) as refused:  # nothing listens on port 1
        await open_store("postgresql://user:hunter2@127.0.0.1:1/captions")
    assert "127.0.0.1" in str(refused.value) and "hunter2" not in str(refused.value)
    (tmp_path / "not-a-folder").write_text("")
    with pytest.raises(StoreError):
        await open_store(str(tmp_path / "not-a-folder" / "c.db"))


async def test_postgres_tells_every_listener_of_every_commit_and_of_a_lost_connection(postgres_url: str) -> None:
    a, b = await open_store(postgres_url), await open_store(postgres_url)
    heard: list[tuple[str, int]] = []
    missed, more = asyncio.Event(), asyncio.Event()

    def on_commit(room: str, seq: int) -> None:
        heard.append((room, seq))
        more.set()

    async def hear(n: int) -> None:
        async with asyncio.timeout(10):
            while len(heard) < n:
                more.clear()
                await more.wait()

    b.watch(on_commit, missed.set)
    try:
        await asyncio.wait_for(missed.wait(), 10)  # listening: it looks at the table once when it starts
        missed.clear()
        await a.create_room(ROOM)
        r = SentenceRecord(0, "s", "x", 0, 1, None)
        for _ in range(5):
            await a.append(ROOM, caption(r), [r])
        await hear(5)
        assert heard == [(ROOM, seq) for seq in range(1, 6)]
        # Every connection of both stores is cut (a database restart, a network drop): the listener listens again
        # and says so, and the pools replace their broken connections instead of failing the next call.
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            cut = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert cut is not None and cut[0] >= 3  # a's and b's pooled connections, b's listener
        await asyncio.wait_for(missed.wait(), 10)
        await a.append(ROOM, caption(r), [r])
        await hear(6)
        assert heard[-1] == (ROOM, 6)
    finally:
        await a.close()
        await b.close()


async def test_postgres_announcements_reach_the_other_front_ends_in_order_and_never_their_sender(
    postgres_url: str, tmp_path: Path
) -> None:
    a, b = await open_store(postgres_url), await open_store(postgres_url)
    heard: dict[str, list[tuple[str, dict[str, Any]]]] = {"a": [], "b": []}
    ready = {"a": asyncio.Event(), "b": asyncio.Event()}
    more = asyncio.Event()

    def hear(name: str) -> Callable[[str, dict[str, Any]], None]:
        def on_announce(room: str, body: dict[str, Any]) -> None:
            heard[name].append((room, body))
            more.set()

        return on_announce

    for name, store in (("a", a), ("b", b)):
        store.watch(lambda room, seq: None, ready[name].set, hear(name))
    try:
        await asyncio.gather(*(asyncio.wait_for(e.wait(), 10) for e in ready.values()))
        bodies = [{"session": "s", "after": 0, "text": " ".join(["word"] * i), "words": []} for i in range(1, 6)]
        for body in bodies:
            await a.announce(ROOM, body)
        async with asyncio.timeout(10):
            while len(heard["b"]) < len(bodies):
                more.clear()
                await more.wait()
        assert heard["b"] == [(ROOM, body) for body in bodies]
        with pytest.raises(ValueError, match="at most"):
            await a.announce(ROOM, {"text": "x" * 5000})
        await asyncio.sleep(0.2)
        assert heard["a"] == [], "a front end does not hear its own announcements"
    finally:
        await a.close()
        await b.close()
    sqlite = await open_store(str(tmp_path / "one.db"))  # one server: nobody to tell
    await sqlite.announce(ROOM, {"text": "x"})
    await sqlite.close()


def test_the_server_refuses_a_database_it_cannot_use_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["--db", "mysql://user@127.0.0.1/captions"])
    assert refused.value.code == 2 and "'mysql' databases are not supported" in capsys.readouterr().err
    status = main(["--db", "postgresql://user:hunter2@127.0.0.1:1/captions", "--port", "0"])
    err = capsys.readouterr().err
    assert status == EXIT_STORE_FAILED and "live captions: transcript store (postgresql://user:***@127.0.0.1:1" in err
    assert "hunter2" not in err and "Traceback" not in err
