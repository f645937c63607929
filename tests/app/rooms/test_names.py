"""Joining a room as a person: the ``name`` every way in takes (``app.rooms.names.person_name``), the room-wide
labels a room gives its publishers' voices, and the names events that put a named publisher's name on its lines
(every screen, and the transcript files). The recognizer is the named fake, or none: what is tested is the room
plumbing, the store and the ways in."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from app.rooms import RoomRegistry, Viewer
from app.rooms.edits import SPEAKER_LABELS, Change
from app.rooms.keys import ROOMS
from app.rooms.names import MAX_PERSON_CHARS, BadName, RoomLabels, person_name
from app.rooms.store import Edits, SentenceRecord, open_store
from engine import CaptionEngine
from engine.protocol import Caption, Correction, Sentence, ServerMessage, Speakers
from speechdata.corpus import audio, pad
from tests.support.api import call, new_room
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server

TOKEN = "person-names-server-token"
LONGEST = "x" * MAX_PERSON_CHARS
# A WebSocket handshake's request, sent as a plain GET: a refusal's body can be read.
UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}
REFUSED: list[Any] = [LONGEST + "y", "Ann\tLee", "Ann\n", "\x00", "An\u200bn", "\ud800", 42, ["Ann"], True, {}]


def test_a_name_is_trimmed_at_most_64_characters_and_never_a_control_character() -> None:
    assert person_name(None) is None and person_name("") is None and person_name("   ") is None
    assert person_name("  Ann Lee ") == "Ann Lee" and person_name(f" {LONGEST} ") == LONGEST
    assert person_name("Zoë Ólafsdóttir (ops)") == "Zoë Ólafsdóttir (ops)"
    for value in REFUSED:
        with pytest.raises(BadName) as refused:
            person_name(value)
        assert str(value) not in str(refused.value) and "Ann" not in str(refused.value), "never echoes it"


def test_room_labels_stay_below_the_limit_and_are_reused_when_they_run_out() -> None:
    labels = RoomLabels(SPEAKER_LABELS - 2)
    assert [labels.take() for _ in range(3)] == [SPEAKER_LABELS - 2, SPEAKER_LABELS - 1, SPEAKER_LABELS - 1]
    assert RoomLabels(5000).take() == SPEAKER_LABELS - 1
    labels = RoomLabels()
    labels.seen([None, 4, 2])
    assert labels.take() == 5
    labels.seen([1])
    assert labels.take() == 6


async def _offer(url: str, name: Any) -> tuple[int, dict[str, Any]]:
    """``POST /offer`` with ``name`` and an SDP no one can use: a name that passes gets as far as the SDP."""
    return await call("POST", f"{url}/offer", TOKEN, {"sdp": "v=0\r\n", "type": "offer", "name": name})


async def test_every_way_in_refuses_a_bad_name_in_its_own_way(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, app), aiohttp.ClientSession() as http:
        for value in REFUSED:
            status, body = await _offer(url, value)
            assert (status, body["error"]["code"]) == (400, "bad_message"), value
            assert "name" in body["error"]["message"] and str(value) not in body["error"]["message"]
        for value in (f"  {LONGEST}  ", "Ann", "", None, "   "):
            status, body = await _offer(url, value)
            assert (status, body["error"]["code"]) == (400, "bad_sdp"), value  # the name passed
        auth = {"Authorization": f"Bearer {TOKEN}"}
        ws = "ws" + url[4:]
        for bad in (LONGEST + "y", "Ann\tLee"):
            query = {"name": bad, "encoding": "linear16", "sample_rate": "16000"}
            with pytest.raises(aiohttp.WSServerHandshakeError) as deepgram:
                await http.ws_connect(f"{ws}/v1/listen", params=query, headers={"Authorization": f"Token {TOKEN}"})
            assert deepgram.value.status == 400 and deepgram.value.headers is not None
            assert "name" in deepgram.value.headers["dg-error"] and bad not in deepgram.value.headers["dg-error"]
            async with http.get(
                f"{url}/v1/realtime", params={"intent": "transcription", "name": bad}, headers={**auth, **UPGRADE}
            ) as r:
                error = (await r.json())["error"]
                assert (r.status, error["code"], error["param"]) == (400, "invalid_value", "name")
            async with http.get(f"{url}/funasr", params={"name": bad}, headers={**auth, **UPGRADE}) as r:
                error = (await r.json())["error"]
                assert (r.status, error["code"], error["param"]) == (400, "bad_parameter", "name")
            async with http.post(
                f"{url}/whip/some-room-id",
                params={"name": bad},
                data=b"v=0\r\n",
                headers={**auth, "Content-Type": "application/sdp"},
            ) as r:
                error = (await r.json())["error"]
                assert (r.status, error["code"], error["param"]) == (400, "bad_parameter", "name")
                assert r.headers["Access-Control-Allow-Origin"] == "*"
        # A good one: the stream's publisher is that person in the room.
        room = (await app[ROOMS].create()).room
        query = {"name": "  Dana  ", "room": room.id, "encoding": "linear16", "sample_rate": "16000"}
        async with http.ws_connect(f"{ws}/v1/listen", params=query, headers={"Authorization": f"Token {TOKEN}"}):
            async with asyncio.timeout(5):
                while not room.publishers:  # noqa: ASYNC110 (it joins right after the upgrade)
                    await asyncio.sleep(0.02)
            assert [p.name for p in room.publishers.values()] == ["Dana"]


async def test_a_person_who_joins_through_the_page_has_their_name_on_their_lines(fake_engine: CaptionEngine) -> None:
    """``POST /offer`` with ``"name"``: the session's sentences (the fake engine labels no voices) are that person's
    in the room's files."""
    async with running_server(fake_engine, auth_token=TOKEN) as (url, app):
        room = (await app[ROOMS].create()).room
        client = CaptionClient(url, pad(audio("ls_1988-24833-0000")[: 2 * 16000], 0.3, 1.0))
        await client.connect(offer={"room": room.id, "token": TOKEN, "name": "  Ann Lee "})
        assert room.publishers[client.session].name == "Ann Lee"
        await client.until_played()
        await client.stop()
        await client.close()
        assert client.sentences() and all(s["spk"] is None for s in client.sentences()), "its own labels, unchanged"
        status, doc = await call("GET", f"{url}/rooms/{room.id}/transcript.json", TOKEN)
        assert status == 200 and doc["speaker_names"] == {"0": "Ann Lee"}
        assert {s["speaker"] for s in doc["sentences"]} == {"Ann Lee"}


async def _drain(viewer: Viewer) -> list[ServerMessage]:
    out: list[ServerMessage] = []
    while True:
        try:
            item = await viewer.get(0.1)
        except TimeoutError:
            return out
        assert item is not None
        out.append(item.message)


def _said(sid: int, text: str, spk: int | None, start: int = 0) -> Caption:
    """A caption that locks session sentence ``sid`` of voice ``spk``."""
    return Caption([Sentence(sid, text, start, start + 800, spk)], "")


async def test_two_named_publishers_get_labels_of_their_own_and_their_names_in_every_file(
    fake_engine: CaptionEngine,
) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, app):
        room = (await app[ROOMS].create()).room
        viewer = room.subscribe()
        ann, bob, anon = room.join("s-ann", name="Ann"), room.join("s-bob", name="Bob"), room.join("s-anon")
        await _drain(viewer)  # (statuses)
        told: list[Correction] = []
        ann.watch(told.append)
        await ann.publish(Caption([], "so the plan", partial_spk=0))
        seen = await _drain(viewer)
        # The name first, then the partial that shows the voice.
        assert isinstance(seen[0], Correction) and (seen[0].names, seen[0].editor, seen[0].sentences) == (
            {0: "Ann"},
            "publisher",
            (),
        )
        assert isinstance(seen[-1], Caption) and seen[-1].partial_spk == 0
        await ann.publish(_said(0, "Hello from Ann.", 0))
        await bob.publish(_said(0, "Hi, Bob here.", 0, 1000))  # Bob's voice 0 is not Ann's
        await ann.publish(_said(1, "And I share Ann's laptop.", 1, 2000))
        await anon.publish(_said(0, "Nobody knows me.", 0, 3000))
        seen = await _drain(viewer)
        kinds = [
            (type(m).__name__, m.names if isinstance(m, Correction) else [s.spk for s in m.sentences])
            for m in seen
            if isinstance(m, Correction) or (isinstance(m, Caption) and m.sentences)
        ]
        assert kinds == [
            ("Caption", [0]),
            ("Correction", {1: "Bob"}),
            ("Caption", [1]),
            ("Correction", {2: "Ann (2)"}),
            ("Caption", [2]),
            ("Caption", [3]),
        ]
        snapshot = await room.store.snapshot(room.id)
        assert [s.spk for s in snapshot.sentences] == [0, 1, 2, 3]
        assert snapshot.names == {0: "Ann", 1: "Bob", 2: "Ann (2)"} and room.stats.corrections == 0
        # Ann's own page: her voices' names by her session's labels, none of Bob's.
        assert [c.names for c in told] == [{0: "Ann"}, {1: "Ann (2)"}]
        # A relabel from Ann's session names her session's labels, and a new voice gets a label and a name.
        await ann.publish(Speakers({1: 0, 0: 4}))
        seen = await _drain(viewer)
        assert [m.names for m in seen if isinstance(m, Correction)] == [{4: "Ann (3)"}]
        assert [m.relabel for m in seen if isinstance(m, Speakers)] == [{0: 4, 2: 0}]
        await ann.publish(Speakers({0: 0, 1: 1}))

        files = {}
        for fmt, query in (("srt", "?speakers=label&cues=sentence"), ("vtt", "")):
            async with (
                aiohttp.ClientSession() as http,
                http.get(
                    f"{url}/rooms/{room.id}/transcript.{fmt}{query}", headers={"Authorization": f"Bearer {TOKEN}"}
                ) as r,
            ):
                assert r.status == 200
                files[fmt] = await r.text()
        assert "Ann: Hello from Ann." in files["srt"] and "Bob: Hi, Bob here." in files["srt"]
        assert "Ann (2): And I share Ann's laptop." in files["srt"] and "Speaker 4: Nobody knows me." in files["srt"]
        assert all(f"<v {who}>" in files["vtt"] for who in ("Ann", "Bob", "Ann (2)", "Speaker 4")), files["vtt"]
        _, doc = await call("GET", f"{url}/rooms/{room.id}/transcript.json", TOKEN)
        assert [s["speaker"] for s in doc["sentences"]] == ["Ann", "Bob", "Ann (2)", "Speaker 4"]
        assert doc["speaker_names"] == {"0": "Ann", "1": "Bob", "2": "Ann (2)", "4": "Ann (3)"}
        for publisher in (ann, bob, anon):
            publisher.leave()


async def test_an_editors_name_sticks_and_corrections_reach_the_publisher_with_its_labels(
    fake_engine: CaptionEngine,
) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, app):
        made = await new_room(url, TOKEN)
        room = await app[ROOMS].get(made["room"])
        assert room is not None
        await room.commit_correction(Change(names={5: "Guest"}), "editor")  # named ahead: new voices go above it
        bob, ann = room.join("s-bob"), room.join("s-ann", name="Ann")
        told: list[Correction] = []
        ann.watch(told.append)
        await bob.publish(_said(0, "Bob first.", 0))
        await ann.publish(_said(0, "Ann speaks.", 0, 1000))
        assert dict(room.names) == {5: "Guest", 7: "Ann"}, "Bob's voice is 6, unnamed"
        status, body = await call(
            "PUT", f"{url}/rooms/{room.id}/speakers/7", made["editor_token"], {"name": "Dr. Ann Lee"}
        )
        assert (status, body["names"]) == (200, {"5": "Guest", "7": "Dr. Ann Lee"})
        await ann.publish(_said(1, "Still Ann.", 0, 2000))
        await ann.publish(Caption([], "and more", partial_spk=0))
        assert room.names[7] == "Dr. Ann Lee" and room.stats.corrections == 2
        # An editor moves Ann's first sentence to the guest, then to Ann again: her page gets her labels back.
        status, _ = await call(
            "PUT", f"{url}/rooms/{room.id}/sentences/1", made["editor_token"], {"text": "Ann speaks.", "spk": 5}
        )
        assert status == 200
        status, _ = await call(
            "PUT", f"{url}/rooms/{room.id}/sentences/1", made["editor_token"], {"text": "Ann speaks.", "spk": 7}
        )
        assert status == 200
        assert [(c.names, [(s.id, s.spk) for s in c.sentences]) for c in told] == [
            ({0: "Ann"}, []),
            ({0: "Dr. Ann Lee"}, []),
            ({}, [(0, 5)]),
            ({}, [(0, 0)]),
        ]
        snapshot = await room.store.snapshot(room.id)
        assert snapshot.names == {5: "Guest", 7: "Dr. Ann Lee"}
        for publisher in (ann, bob):
            publisher.leave()


async def test_a_reloaded_room_gives_labels_above_every_stored_one(store_target: str) -> None:
    store = await open_store(store_target)
    rooms = RoomRegistry(store)
    room = (await rooms.create()).room
    assert await store.next_label(room.id) == 0
    ann = room.join("s-ann", name="Ann")
    await ann.publish(_said(0, "One.", 0))
    await ann.publish(_said(1, "Two.", 3))  # her second voice: label 1
    removed = SentenceRecord(-1, "old", "Gone.", 0, 10, 8)  # a deleted sentence's label counts too
    await room.commit_sentences([removed])
    await room.commit_correction(Change(deleted=(2,)), "editor")
    ann.leave()
    assert await store.next_label(room.id) == 9
    await store.append(room.id, Correction(names={11: "Guest"}, seq=9), edits=Edits(names={11: "Guest"}))
    assert await store.next_label(room.id) == 12
    rooms.close()
    await store.close()

    store = await open_store(store_target)
    rooms = RoomRegistry(store)
    again = await rooms.get(room.id)
    assert again is not None and again.labels.next == 12
    cleo = again.join("s-cleo", name="Cleo")
    await cleo.publish(_said(0, "I am new here.", 0))
    snapshot = await store.snapshot(again.id)
    assert [s.spk for s in snapshot.sentences] == [0, 1, 12]
    assert snapshot.names == {0: "Ann", 1: "Ann (2)", 11: "Guest", 12: "Cleo"}
    cleo.leave()
    rooms.close()
    await store.close()
