"""Editors correcting a room live, without a browser: the correction events through both stores, the audience's
hold-back delay through a server, corrected transcript files with their history, who may edit, and the vocabulary
reaching a live session's decodes. Sentences come from the room's own commit path (or the named fake recognizer): what
is tested is the rooms, not the model. What an edit does to one sentence, the delay on a fake clock and the vocabulary
alone are in tests/app/rooms/ (test_edits.py, test_holdback.py, test_vocabulary.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from app.rooms import Room
from app.rooms.edits import corrected, split
from app.rooms.keys import ROOMS
from app.rooms.store import Edits, open_store
from engine import CaptionEngine, protocol
from engine.protocol import Caption, Correction, Sentence
from tests.support.api import call, new_room
from tests.support.publishing import lock, record, until
from tests.support.servers import running_server
from tests.support.sse import SseReader

TOKEN = "server-token-for-corrections"
ROOM = "room-edits-abcdef"


# ---- both stores -----------------------------------------------------------------------------------------------------
async def test_corrections_are_stored_with_the_original_and_survive_reopening(store_target: str) -> None:
    store = await open_store(store_target)
    await store.create_room(ROOM, "t", editor_token_sha256="digest", delay_s=5.0)
    a, b = record(0, "mister dash wood arrived"), record(1, "uh", start=2000)
    await store.append(ROOM, Caption([a.sentence(), b.sentence()], "", seq=1), [a, b])
    fixed = corrected(a, "Mister Dashwood arrived.", 1)
    await store.append(
        ROOM,
        Correction((fixed.sentence(),), (), {1: "Dr. Lee"}, "Ann", seq=2),
        edits=Edits(replaced=(fixed,), names={1: "Dr. Lee"}),
    )
    await store.append(ROOM, Correction((), (1,), {}, "Ann", seq=3), edits=Edits(deleted=(1,)))
    first, second = split(fixed, 2, new_id=99)
    stored = await store.append(
        ROOM,
        Correction((first.sentence(), second.sentence()), editor="Bo", seq=4),
        [second],
        edits=Edits(replaced=(first,)),
    )
    assert [s.id for s in stored.records] == [2], "the split's new part gets the room's next id"
    assert isinstance(stored.event, Correction) and [s.id for s in stored.event.sentences] == [0, 2]
    await store.append(
        ROOM, protocol.Vocabulary(("Dashwood",), ("Frere",), seq=5), edits=Edits(vocabulary=(("Dashwood",), ("Frere",)))
    )
    await store.close()
    again = await open_store(store_target)
    snap = await again.snapshot(ROOM)
    assert [(s.id, s.text, s.spk, s.original) for s in snap.sentences] == [
        (0, "Mister Dashwood", 1, "mister dash wood arrived"),
        (2, "arrived.", 1, None),
    ]
    assert snap.names == {1: "Dr. Lee"} and snap.seq == 5
    everything = await again.snapshot(ROOM, deleted=True)
    assert [(s.id, s.deleted) for s in everything.sentences] == [(0, False), (2, False), (1, True)], "in time order"
    history = await again.timed_events(ROOM, kind="correction")
    assert [e.seq for e in history] == [2, 3, 4] and all(e.created_ms > 0 for e in history)
    assert isinstance(history[0].message, Correction) and history[0].message.editor == "Ann"
    assert [seq for seq, _ in await again.events_after(ROOM, 1)] == [2, 3, 4, 5]
    room = await again.room(ROOM)
    assert room is not None and (room.editor_token_sha256, room.delay_s) == ("digest", 5.0)
    assert (room.names, room.terms, room.learned) == ({1: "Dr. Lee"}, ("Dashwood",), ("Frere",))
    await again.close()


# ---- over HTTP: who may edit, what viewers and files get ---------------------------------------------------------
@pytest.fixture
async def server(fake_engine: CaptionEngine, tmp_path: Path) -> AsyncIterator[tuple[str, web.Application]]:
    async with running_server(fake_engine, auth_token=TOKEN, db_path=str(tmp_path / "c.db")) as served:
        yield served


def shown(events: list[tuple[int | None, dict[str, Any]]]) -> dict[int, str]:
    """What a viewer shows after ``events``: sentence id -> text (corrections applied, deleted ones gone)."""
    out: dict[int, str] = {}
    for _, m in events:
        if m["type"] == "caption":
            out.update({s["id"]: s["text"] for s in m["sentences"]})
        elif m["type"] == "correction":
            out.update({s["id"]: s["text"] for s in m["sentences"]})
            for sid in m["deleted"]:
                out.pop(sid, None)
    return out


def texts_ever(events: list[tuple[int | None, dict[str, Any]]]) -> set[str]:
    return {s["text"] for _, m in events if m["type"] in ("caption", "correction") for s in m["sentences"]}


async def test_an_editor_token_edits_its_own_room_and_nothing_else(server: tuple[str, web.Application]) -> None:
    url, app = server
    mine, other = await new_room(url, TOKEN, private=True), await new_room(url, TOKEN)
    room, editor = mine["room"], mine["editor_token"]
    assert editor and mine["links"]["edit"].endswith(f"/rooms/{room}/edit?token={editor}")
    [s] = await lock(app, room, "hello wrold")
    put = f"{url}/rooms/{room}/sentences/{s.id}"
    assert (await call("PUT", put, editor, {"text": "hello world"}))[0] == 200
    assert (await call("PUT", put, TOKEN, {"text": "hello world!"}))[0] == 200, "the server's token edits any room"
    for token in (None, "nope", mine["viewer_token"], other["editor_token"]):
        status, body = await call("PUT", put, token, {"text": "vandalised"})
        assert status == 403 and body["error"]["code"] == "unauthorized", token
    assert (await call("POST", f"{url}/rooms", editor, {}))[0] == 401, "an editor token cannot create rooms"
    assert (await call("GET", f"{url}/rooms/{other['room']}/vocabulary", editor))[0] == 403
    assert (await call("GET", f"{url}/rooms/{room}/events?editor=1", mine["viewer_token"]))[0] == 403
    status, _ = await call("GET", f"{url}/rooms/{room}/transcript.txt", editor)
    assert status == 200, "an editor may read its (private) room"
    assert (await call("PUT", f"{url}/rooms/{room}/sentences/999", editor, {"text": "x"}))[0] == 404
    for bad in ({"text": ""}, {"text": 5}, {"text": "ok", "spk": "1"}, {"text": "ok", "colour": 1}):
        status, body = await call("PUT", put, editor, bad)
        assert status == 400 and body["error"]["code"] == "bad_message", bad
    status, body = await call("POST", f"{put}/split", editor, {"at": 9})
    assert status == 400 and "both sides" in body["error"]["message"]


async def test_viewers_see_a_correction_in_place_and_late_or_resuming_ones_only_the_corrected_text(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    a, b, c = await lock(app, room, "mister dash wood arrived", "uh uh", "then we began")
    async with SseReader(f"{url}/rooms/{room}/events?token={TOKEN}") as live:
        await until(lambda: len(shown(live.events)) == 3)
        resume_from = max(i for i, _ in live.events if i is not None)
        assert (
            await call(
                "PUT",
                f"{url}/rooms/{room}/sentences/{a.id}",
                editor,
                {"text": "Mister Dashwood arrived.", "editor": "Ann"},
            )
        )[0] == 200
        assert (await call("DELETE", f"{url}/rooms/{room}/sentences/{b.id}", editor))[0] == 200
        status, body = await call("PUT", f"{url}/rooms/{room}/speakers/0", editor, {"name": "Dr. Lee"})
        assert status == 200 and body["names"] == {"0": "Dr. Lee"}
        status, body = await call("POST", f"{url}/rooms/{room}/sentences/{c.id}/split", editor, {"at": 1})
        assert status == 200 and [s["text"] for s in body["sentences"]] == ["then", "we began"]
        await until(lambda: sum(m["type"] == "correction" for _, m in live.events) == 4)
        assert shown(live.events) == {
            a.id: "Mister Dashwood arrived.",
            c.id: "then",
            body["sentences"][1]["id"]: "we began",
        }
        names = [m["names"] for _, m in live.events if m["type"] == "correction" and m["names"]]
        assert names == [{"0": "Dr. Lee"}]
        first = next(m for _, m in live.events if m["type"] == "correction")
        assert first["editor"] == "Ann" and first["sentences"][0]["id"] == a.id
    async with (
        SseReader(f"{url}/rooms/{room}/events") as late,
        SseReader(f"{url}/rooms/{room}/events", last_event_id=resume_from) as resumed,
    ):
        await until(lambda: any(m["type"] == "room" for _, m in late.events))
        await until(lambda: any(m["type"] == "room" for _, m in resumed.events))
        for reader in (late, resumed):
            assert shown(reader.events) == shown(live.events)
            assert "mister dash wood arrived" not in texts_ever(reader.events), "never the replaced text"
            assert "uh uh" not in texts_ever(reader.events)
        assert any(m["type"] == "correction" and m["names"] == {"0": "Dr. Lee"} for _, m in late.events)
    status, srt = await call("GET", f"{url}/rooms/{room}/transcript.srt?speakers=label", None)
    assert "Dr. Lee: Mister Dashwood arrived." in srt["text"] and "dash wood" not in srt["text"]
    status, doc = await call("GET", f"{url}/rooms/{room}/transcript.json", editor)  # the editing: editors' only
    entries = {s["id"]: s for s in doc["sentences"]}
    assert entries[a.id]["original"] == "mister dash wood arrived" and entries[a.id]["speaker"] == "Dr. Lee"
    assert [w["w"] for w in entries[a.id]["words"]] == ["Mister", "Dashwood", "arrived."]
    assert [(e["editor"], e["text"]) for e in entries[a.id]["edits"]] == [("Ann", "Mister Dashwood arrived.")]
    assert doc["deleted"][0]["id"] == b.id and doc["deleted"][0]["edits"][0]["deleted"] is True
    assert doc["speaker_names"] == {"0": "Dr. Lee"}


async def test_with_a_delay_the_audience_never_sees_a_version_corrected_within_it(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN, delay_s=1.5)
    room, editor = made["room"], made["editor_token"]
    async with (
        SseReader(f"{url}/rooms/{room}/events") as audience,
        SseReader(f"{url}/rooms/{room}/events?editor=1&token={editor}") as editors,
    ):
        await until(lambda: any(m["type"] == "room" for _, m in audience.events))
        locked_at = time.monotonic()
        [s] = await lock(app, room, "welcome to the counsel meeting")
        await until(lambda: bool(shown(editors.events)))
        assert time.monotonic() - locked_at < 1.0, "editors get it at once"
        assert (
            await call(
                "PUT", f"{url}/rooms/{room}/sentences/{s.id}", editor, {"text": "Welcome to the council meeting."}
            )
        )[0] == 200
        _, state = await call("GET", f"{url}/rooms/{room}", editor)
        assert state["delay_s"] == 1.5 and state["held"] == 2 and state["released"] == 0
        await until(lambda: bool(shown(audience.events)))
        i = next(k for k, (_, m) in enumerate(audience.events) if m["type"] == "caption" and m["sentences"])
        assert audience.arrived[i] - locked_at >= 1.5, "not before the delay"
        await asyncio.sleep(0.3)  # the correction (its seq alone) and the status follow at once
        assert shown(audience.events) == {s.id: "Welcome to the council meeting."}
        assert texts_ever(audience.events) == {"Welcome to the council meeting."}
        assert not any(m.get("partial") for _, m in audience.events if m["type"] == "caption")
        assert any(m["type"] == "room" and m.get("held") == 0 for _, m in audience.events[i:])


async def test_a_restart_during_the_delay_keeps_every_held_sentence(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    db = str(tmp_path / "d.db")
    async with running_server(fake_engine, auth_token=TOKEN, db_path=db) as (url, app):
        made = await new_room(url, TOKEN, delay_s=2.0)
        room = made["room"]
        await lock(app, room, "said just before the restart")
    async with running_server(fake_engine, auth_token=TOKEN, db_path=db) as (url, app):
        async with SseReader(f"{url}/rooms/{room}/events") as audience:
            await until(lambda: any(m["type"] == "room" for _, m in audience.events))
            assert not shown(audience.events), "still held after the restart"
            await until(lambda: bool(shown(audience.events)), timeout_s=5)
            assert list(shown(audience.events).values()) == ["said just before the restart"]


async def test_a_learned_fix_and_the_vocabulary_respell_what_publishers_lock_and_tell_their_clients(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room_id, editor = made["room"], made["editor_token"]
    [s] = await lock(app, room_id, "we met captain freyr")
    status, _ = await call("PUT", f"{url}/rooms/{room_id}/sentences/{s.id}", editor, {"text": "We met Captain Frere."})
    assert status == 200
    status, vocab = await call(
        "PUT", f"{url}/rooms/{room_id}/vocabulary", editor, {"terms": ["Concord", " Concord ", "C-SPAN"]}
    )
    assert status == 200 and vocab == {"terms": ["Concord", "C-SPAN"], "learned": ["freyr → Frere"]}
    room: Room | None = await app[ROOMS].get(room_id)
    assert room is not None
    told: list[Correction] = []
    publisher = room.join("pub-2")
    publisher.watch(told.append)
    await publisher.publish(Caption([], "Captain Freyr came from Concorde", stable=3))
    assert room.partial() == "Captain Frere came from Concord" and publisher.stable == 3
    await publisher.publish(
        Caption(
            [
                Sentence(0, "Captain Freyr came from Concorde.", 0, 2000, 0),
                Sentence(1, "Nothing to change here.", 2100, 3000, 0),
            ],
            "",
        )
    )
    async with SseReader(f"{url}/rooms/{room_id}/events") as viewer:
        await until(lambda: len(shown(viewer.events)) == 3)
        assert list(shown(viewer.events).values())[1:] == [
            "Captain Frere came from Concord.",
            "Nothing to change here.",
        ]
    assert [(c.editor, [(x.id, x.text) for x in c.sentences]) for c in told] == [
        ("vocabulary", [(0, "Captain Frere came from Concord.")])
    ], "the client gets its own ids"
    room.leave("pub-2")
    _, got = await call("GET", f"{url}/rooms/{room_id}/vocabulary", editor)
    assert got == vocab


async def test_two_editors_on_one_sentence_the_later_write_wins_everywhere(server: tuple[str, web.Application]) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    [s] = await lock(app, room, "the minutes were aproved")
    async with (
        SseReader(f"{url}/rooms/{room}/events?editor=1&token={editor}") as one,
        SseReader(f"{url}/rooms/{room}/events") as viewer,
    ):
        await until(lambda: bool(shown(one.events)) and bool(shown(viewer.events)))
        put = f"{url}/rooms/{room}/sentences/{s.id}"
        answers = await asyncio.gather(
            *(
                call("PUT", put, token, {"text": text, "editor": who})
                for token, text, who in (
                    (editor, "The minutes were approved.", "Ann"),
                    (TOKEN, "The minutes were approved unanimously.", "Bo"),
                )
            )
        )
        assert [status for status, _ in answers] == [200, 200]
        last = max(answers, key=lambda a: a[1]["seq"])[1]["sentence"]["text"]
        await until(lambda: sum(m["type"] == "correction" for _, m in viewer.events) == 2)
        await until(lambda: sum(m["type"] == "correction" for _, m in one.events) == 2)
        assert shown(one.events) == shown(viewer.events) == {s.id: last}
    _, doc = await call("GET", f"{url}/rooms/{room}/transcript.json", editor)
    assert doc["sentences"][0]["text"] == last and len(doc["sentences"][0]["edits"]) == 2


async def test_an_editor_ends_the_room_once_and_it_stays_ended_across_a_restart(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    db = str(tmp_path / "e.db")
    async with running_server(fake_engine, auth_token=TOKEN, db_path=db) as (url, _):
        made = await new_room(url, TOKEN)
        room, editor = made["room"], made["editor_token"]
        assert (await call("POST", f"{url}/rooms/{room}/end", made["viewer_token"]))[0] == 403
        status, first = await call("POST", f"{url}/rooms/{room}/end", editor)
        assert status == 200 and first["ended_ms"] > 0
        assert (await call("POST", f"{url}/rooms/{room}/end", TOKEN))[1] == first, "the first end stays"
    async with running_server(fake_engine, auth_token=TOKEN, db_path=db) as (url, app):
        loaded = await app[ROOMS].get(room)
        assert loaded is not None and loaded.record.ended_ms == first["ended_ms"]


async def test_an_oversize_edit_is_refused_with_413(server: tuple[str, web.Application]) -> None:
    url, _ = server
    made = await new_room(url, TOKEN)
    status, body = await call(
        "PUT", f"{url}/rooms/{made['room']}/vocabulary", made["editor_token"], {"terms": ["x" * 60] * 300}
    )
    assert status == 413 and body["error"]["code"] == "too_large"
