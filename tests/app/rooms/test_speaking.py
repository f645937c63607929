"""Simultaneous talkers stay apart: a room caption's ``open`` carries each speaking publisher's open text on its own
(``engine.protocol.OpenLine``), in the order they started, with its own settled count and voice, while the joined
``partial`` and its ``stable``, ``partial_spk`` and ``partial_session`` stay what clients from before ``open`` read.
No model and no server: publishers are driven with the captions their sessions would post (as in
tests/functional/test_rooms.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp import web

from app.rooms import Room, RoomRegistry, Viewer
from app.rooms.store import open_store
from app.rooms.stream import Stream
from engine.protocol import Caption, OpenLine, Sentence, parse_server_message


@pytest.fixture
async def rooms() -> AsyncIterator[RoomRegistry]:
    store = await open_store(":memory:")
    registry = RoomRegistry(store)
    try:
        yield registry
    finally:
        registry.close()
        await store.close()


async def _captions(viewer: Viewer, quiet_s: float = 0.2) -> list[tuple[bool, Caption]]:
    """``(durable, caption)`` of every caption a viewer has, until nothing comes for ``quiet_s``."""
    out: list[tuple[bool, Caption]] = []
    while True:
        try:
            item = await viewer.get(quiet_s)
        except TimeoutError:
            return out
        assert item is not None
        if isinstance(item.message, Caption):
            out.append((item.durable, item.message))


async def test_each_speaking_publisher_has_its_own_line_in_the_order_it_started(rooms: RoomRegistry) -> None:
    room = (await rooms.create("talk")).room
    viewer = room.subscribe()
    a, b = room.join("session-a"), room.join("session-b")
    await b.publish(Caption([], "wait", partial_spk=0))  # b joined second but speaks first
    await a.publish(Caption([], "so the plan is", stable=2, partial_spk=3))
    assert a.partial_spk is not None and b.partial_spk is not None and a.partial_spk != b.partial_spk
    shown = room.partial_message()
    assert shown.open == [
        OpenLine("session-b", "wait", 0, b.partial_spk),
        OpenLine("session-a", "so the plan is", 2, a.partial_spk),
    ]
    # The joined text is as before `open`: join order, settled up to a's first unsettled word, nobody named.
    assert (shown.partial, shown.stable, shown.partial_spk, shown.partial_session) == (
        "so the plan is wait",
        2,
        None,
        None,
    )
    assert shown.wire()["open"] == [
        {"session": "session-b", "text": "wait", "stable": 0, "spk": b.partial_spk},
        {"session": "session-a", "text": "so the plan is", "stable": 2, "spk": a.partial_spk},
    ]
    assert [c for d, c in await _captions(viewer) if not d][-1].open == shown.open, "viewers get the same"

    await b.publish(Caption([], "wait what", stable=1, partial_spk=0))  # still open: b keeps its place
    assert [(line.session, line.text, line.stable) for line in room.partial_message().open or []] == [
        ("session-b", "wait what", 1),
        ("session-a", "so the plan is", 2),
    ]
    await b.publish(Caption([], ""))  # b stops speaking: its line goes; a alone is named again
    shown = room.partial_message()
    assert shown.open == [OpenLine("session-a", "so the plan is", 2, a.partial_spk)]
    assert (shown.partial, shown.partial_spk, shown.partial_session) == ("so the plan is", a.partial_spk, "session-a")
    await b.publish(Caption([], "hm", partial_spk=0))  # and speaks again: after a, who started before
    assert [line.session for line in room.partial_message().open or []] == ["session-a", "session-b"]
    assert room.partial_message().partial == "so the plan is hm"


async def test_a_locked_caption_carries_the_open_lines_left(rooms: RoomRegistry) -> None:
    room = (await rooms.create()).room
    viewer = room.subscribe()
    a, b = room.join("session-a"), room.join("session-b")
    await a.publish(Caption([], "so the plan is", stable=4))
    await b.publish(Caption([], "wait", stable=1))
    await _captions(viewer)
    # a's sentence locks as it goes on speaking: its line stays first (its open text never went empty).
    await a.publish(Caption([Sentence(0, "So the plan is.", 0, 900, None)], "and then", stable=1))
    locked = [c for d, c in await _captions(viewer) if d]
    assert len(locked) == 1 and [s.text for s in locked[0].sentences] == ["So the plan is."]
    assert locked[0].open == [OpenLine("session-a", "and then", 1, None), OpenLine("session-b", "wait", 1, None)]
    assert (locked[0].partial, locked[0].stable) == ("and then wait", 1)  # a's text is not all settled
    # b's locks and it stops: its line is gone from the caption that brings its sentence.
    await b.publish(Caption([Sentence(0, "Wait.", 0, 400, None)], ""))
    locked = [c for d, c in await _captions(viewer) if d]
    assert [s.text for s in locked[0].sentences] == ["Wait."]
    assert locked[0].wire()["open"] == [{"session": "session-a", "text": "and then", "stable": 1, "spk": None}]
    await a.publish(Caption([Sentence(1, "And then.", 1000, 1400, None)], ""))
    locked = [c for d, c in await _captions(viewer) if d]
    assert locked[0].wire()["open"] == [] and locked[0].wire()["partial"] == "", "nobody speaking: an empty list"
    # What the store keeps has no open text: it is never stored.
    stored = [m for _, m in await room.store.events_after(room.id, 0) if isinstance(m, Caption)]
    assert stored and all(m.open is None for m in stored)


async def test_publishers_on_other_front_ends_have_lines_in_the_order_they_were_heard(rooms: RoomRegistry) -> None:
    room = (await rooms.create()).room
    a = room.join("local")
    room.heard_announcement({"session": "remote", "after": room.seq, "text": "good morning", "words": []})
    await a.publish(Caption([], "hello everyone", stable=1))
    shown = room.partial_message()
    assert shown.open == [OpenLine("remote", "good morning", 2, None), OpenLine("local", "hello everyone", 1, None)]
    assert shown.partial == "hello everyone good morning", "the joined text: this front end's first, as before"
    room.heard_announcement({"session": "remote", "after": room.seq, "text": "good morning all", "words": []})
    assert [line.session for line in room.partial_message().open or []] == ["remote", "local"], "it keeps its place"


async def test_a_delayed_audience_gets_no_open_text_and_editors_get_all_of_it(rooms: RoomRegistry) -> None:
    room = (await rooms.create(delay_s=0.2)).room
    audience, editor = room.subscribe(), room.subscribe(editor=True)
    a, b = room.join("a"), room.join("b")
    await b.publish(Caption([], "still talking"))
    await a.publish(Caption([Sentence(0, "Done.", 0, 500, None)], ""))
    got = await _captions(audience, 0.5)
    assert [c.open for d, c in got if d] == [[]] and not [c for d, c in got if not d], "no partials either"
    assert [c.open for d, c in await _captions(editor) if d] == [[OpenLine("b", "still talking", 0, None)]]


class _Written:
    """The part of an aiohttp response a ``Stream`` writes to."""

    def __init__(self) -> None:
        self.data = b""

    async def write(self, data: bytes) -> None:
        self.data += data


async def test_replayed_captions_carry_an_empty_open_and_the_wire_parses_back(rooms: RoomRegistry) -> None:
    room: Room = (await rooms.create()).room
    response = _Written()
    await Stream(room, editor=False, words=False).send(
        cast(web.StreamResponse, response), Caption([Sentence(0, "Hi.", 0, 300, None, "s")], "", seq=1), 1
    )
    body: dict[str, Any] = json.loads(response.data.decode().split("data: ", 1)[1])
    assert body["open"] == [] and body["partial"] == ""
    live = Caption([], "a b", stable=1, seq=3, open=[OpenLine("s", "a b", 1, 2), OpenLine("t", "c", 0, None)])
    assert parse_server_message(live.wire()) == live
    assert parse_server_message(Caption([], "x").wire()) == Caption([], "x"), "no `open`: not a room's (None)"
    with pytest.raises(ValueError):
        parse_server_message({**live.wire(), "open": [{"text": "no session"}]})
