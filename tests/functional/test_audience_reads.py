"""What a room's audience can read besides its event stream: its transcript files (all five formats) give it only
what it has been given, corrected, and nothing of the editing; its editors (the room's editor token, or the server's
token) get everything at once. Also: every download says ``nosniff``, and the access log names no room.

Sentences go into rooms the way a publisher's do (``RoomPublisher.publish`` of a ``caption``), with no audio: what
is tested is who reads what, not the model (the named fake recognizer is the server's engine).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pycaption.exceptions import CaptionReadNoCaptions

from app.ops.access_log import RedactSecrets, RoomIds
from app.rooms import Room
from app.rooms.audience import Audience
from app.rooms.keys import ROOMS
from app.rooms.store import SentenceRecord, Snapshot, TimedEvent
from app.transcripts import hls
from engine import CaptionEngine
from engine.protocol import Caption, Sentence, Word
from tests.support.api import call, new_room
from tests.support.caption_readers import pycaption_captions, until_listed
from tests.support.servers import running_server
from tests.support.sse import SseReader

TOKEN = "audience-reads-server-token"
FORMATS = ("txt", "srt", "vtt", "scc", "json")
HEARD = "welcome to the counsel meeting"
FIXED = "Welcome to the council meeting."
DELAY_S = 1.5


@pytest.fixture
async def server(fake_engine: CaptionEngine, tmp_path: Path) -> AsyncIterator[tuple[str, web.Application]]:
    async with running_server(fake_engine, auth_token=TOKEN, db_path=str(tmp_path / "a.db")) as served:
        yield served


def _words(text: str, start: int) -> tuple[Word, ...]:
    return tuple(Word(w, start + i * 300, start + i * 300 + 260) for i, w in enumerate(text.split()))


async def say(room: Room, *texts: str) -> None:
    """``texts`` locked in ``room`` by one publisher, one caption each, as its session's ``caption`` messages."""
    publisher = room.join("pub")
    publisher.offset_ms = 0  # session time is room time: the files' times read as given
    start = 500
    for sid, text in enumerate(texts):
        words = _words(text, start)
        await publisher.publish(Caption([Sentence(sid, text, start, words[-1].end_ms, 0, words=words)], ""))
        start = words[-1].end_ms + 500
    publisher.leave()


async def files(url: str, room_id: str, token: str | None) -> dict[str, str]:
    """Every transcript file of the room as ``token`` reads it (fetched at once)."""

    async def one(fmt: str) -> str:
        status, body = await call("GET", f"{url}/rooms/{room_id}/transcript.{fmt}", token)
        assert status == 200, (fmt, body)
        return body["text"] if "text" in body else json.dumps(body)

    return dict(zip(FORMATS, await asyncio.gather(*(one(f) for f in FORMATS)), strict=True))


def shown(fmt: str, body: str) -> str:
    """The text a transcript file shows, one line ("" for a file with no sentence)."""
    if fmt == "json":
        return " ".join(s["text"] for s in json.loads(body)["sentences"])
    if fmt == "scc":  # CEA-608 byte pairs: read back by a real decoder
        try:
            return " ".join(text for _, _, text in pycaption_captions(body))
        except CaptionReadNoCaptions:
            return ""
    lines = [
        line
        for line in body.splitlines()
        if line.strip() and line != "WEBVTT" and not line.isdigit() and "-->" not in line and not line.startswith("[")
    ]
    return " ".join(" ".join(lines).replace("<v Speaker 1>", "").split())


def editing(doc: dict[str, Any]) -> set[str]:
    """What of the editing a JSON transcript shows: ``original``, ``edits``, ``deleted``."""
    found = {key for s in doc["sentences"] for key in ("original", "edits") if key in s}
    return found | ({"deleted"} if "deleted" in doc else set())


async def test_a_delay_rooms_files_show_the_audience_nothing_early_and_then_only_the_corrected_text(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN, private=True, delay_s=DELAY_S)
    room_id, viewer, editor = made["room"], made["viewer_token"], made["editor_token"]
    room = await app[ROOMS].get(room_id)
    assert room is not None
    locked_at = time.monotonic()
    await say(room, HEARD)
    audience, editors, server_token = await asyncio.gather(
        files(url, room_id, viewer), files(url, room_id, editor), files(url, room_id, TOKEN)
    )
    assert time.monotonic() - locked_at < DELAY_S, "read within the delay"
    for fmt in FORMATS:
        assert shown(fmt, audience[fmt]) == "", (fmt, audience[fmt])
        assert shown(fmt, editors[fmt]).lower().rstrip(".") == HEARD, (fmt, editors[fmt])
        assert shown(fmt, server_token[fmt]) == shown(fmt, editors[fmt]), fmt
    [sentence] = json.loads(editors["json"])["sentences"]
    status, _ = await call("PUT", f"{url}/rooms/{room_id}/sentences/{sentence['id']}", editor, {"text": FIXED})
    assert status == 200
    assert time.monotonic() - locked_at < DELAY_S, "corrected within the delay"
    editors = await files(url, room_id, editor)
    assert all(shown(fmt, editors[fmt]) == FIXED for fmt in FORMATS), editors
    while not shown("txt", (await files(url, room_id, viewer))["txt"]):
        assert time.monotonic() - locked_at < DELAY_S + 5, "never released"
        await asyncio.sleep(0.05)
    assert time.monotonic() - locked_at >= DELAY_S, "not before the delay"
    audience = await files(url, room_id, viewer)
    for fmt in FORMATS:
        assert shown(fmt, audience[fmt]) == FIXED, (fmt, audience[fmt])
        assert "counsel" not in audience[fmt], fmt
    assert not editing(json.loads(audience["json"]))
    assert editing(json.loads(editors["json"])) == {"original", "edits"}


async def test_a_delay_room_read_without_loading_it_shows_nothing_early(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    """A restart within the delay: the files are read without loading the room (no audience seeded with what it
    held); the store's commit times hold the sentence back all the same."""
    db = str(tmp_path / "r.db")
    async with running_server(fake_engine, auth_token=TOKEN, db_path=db) as (url, app):
        made = await new_room(url, TOKEN, delay_s=DELAY_S)
        room_id = made["room"]
        room = await app[ROOMS].get(room_id)
        assert room is not None
        locked_at = time.monotonic()
        await say(room, HEARD)
    async with running_server(fake_engine, auth_token=TOKEN, db_path=db) as (url, app):
        early = await files(url, room_id, None)
        assert time.monotonic() - locked_at < DELAY_S, "read within the delay"
        assert app[ROOMS].loaded(room_id) is None, "a file read loads no room"
        assert all(shown(fmt, early[fmt]) == "" for fmt in FORMATS), early
        assert shown("txt", (await files(url, room_id, made["editor_token"]))["txt"]) == HEARD
        await asyncio.sleep(max(0.0, DELAY_S - (time.monotonic() - locked_at)) + 0.1)
        late = await files(url, room_id, None)
        assert all(shown(fmt, late[fmt]).lower().rstrip(".") == HEARD for fmt in FORMATS), late


def test_the_audience_view_hides_captions_committed_within_the_delay_and_every_later_sentence() -> None:
    """An audience that holds nothing (a room not loaded): the commit times of the recent captions decide. A split
    of a held sentence has a higher id than it: hidden with it."""
    audience = Audience(2.0, 5, set(), lambda: None)
    sentences = [SentenceRecord(i, "s", t, i * 1000, i * 1000 + 900, 0) for i, t in enumerate(("A.", "B", "C."))]
    snapshot = Snapshot(6, sentences)
    now_s = 1_000_000.0
    recent = [
        TimedEvent(4, int((now_s - 2.5) * 1000), Caption([sentences[0].sentence()], "")),
        TimedEvent(5, int((now_s - 0.5) * 1000), Caption([sentences[1].sentence()], "")),
    ]
    seen = audience.view(snapshot, recent, now_s)
    assert ([s.text for s in seen.sentences], seen.seq) == (["A."], 4)
    assert audience.view(snapshot, recent, now_s + 1.6) == snapshot, "all due"
    assert Audience(0.0, 5, set(), lambda: None).view(snapshot, recent, now_s) == snapshot, "no delay"


async def test_the_audience_json_shows_nothing_of_the_editing_and_the_editors_json_all_of_it(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room_id, editor = made["room"], made["editor_token"]
    room = await app[ROOMS].get(room_id)
    assert room is not None
    await say(room, "mister dash wood arrived", "uh uh", "then we began")
    ids = [s["id"] for s in json.loads((await files(url, room_id, editor))["json"])["sentences"]]
    assert (
        await call(
            "PUT",
            f"{url}/rooms/{room_id}/sentences/{ids[0]}",
            editor,
            {"text": "Mister Dashwood arrived.", "editor": "Ann"},
        )
    )[0] == 200
    assert (await call("DELETE", f"{url}/rooms/{room_id}/sentences/{ids[1]}", editor))[0] == 200
    for token in (None, "not-a-token"):  # an open room: anyone with its id is its audience
        _, doc = await call("GET", f"{url}/rooms/{room_id}/transcript.json", token)
        assert [s["text"] for s in doc["sentences"]] == ["Mister Dashwood arrived.", "then we began"]
        assert not editing(doc), doc
        assert "dash wood" not in json.dumps(doc) and "uh uh" not in json.dumps(doc)
    for token in (editor, TOKEN):
        _, doc = await call("GET", f"{url}/rooms/{room_id}/transcript.json", token)
        assert editing(doc) == {"original", "edits", "deleted"}, doc
        assert doc["sentences"][0]["original"] == "mister dash wood arrived"
        assert doc["sentences"][0]["edits"][0]["editor"] == "Ann" and doc["deleted"][0]["text"] == "uh uh"


async def test_every_download_says_nosniff(
    fake_engine: CaptionEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hls, "SEGMENT_MS", 1000)  # segment 0 listed 1.5 s after the room is made
    monkeypatch.setattr(hls, "SETTLE_MS", 500)
    async with (
        running_server(fake_engine, auth_token=TOKEN, db_path=str(tmp_path / "n.db")) as (url, app),
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
    ):
        room_id = (await new_room(url, TOKEN))["room"]
        room = await app[ROOMS].get(room_id)
        assert room is not None
        await say(room, FIXED)
        page = {"sentences": [{"id": 0, "text": FIXED, "start": 0, "end": 900, "spk": 0}]}
        await until_listed(http, f"{url}/rooms/{room_id}/captions.m3u8", 1)
        for method, path, body in [
            *(("GET", f"/rooms/{room_id}/transcript.{f}", None) for f in FORMATS),
            *(("POST", f"/exports/transcript.{f}", page) for f in FORMATS),
            ("GET", f"/rooms/{room_id}/captions.m3u8", None),
            ("GET", f"/rooms/{room_id}/captions/0.vtt", None),
            ("GET", f"/rooms/{room_id}/captions/99.vtt", None),
        ]:
            async with http.request(method, url + path, json=body) as r:
                assert r.status == (404 if "99" in path else 200), path
                assert r.headers.get("X-Content-Type-Options") == "nosniff", path


async def test_the_access_log_names_no_room(fake_engine: CaptionEngine, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    async with running_server(fake_engine, auth_token=TOKEN) as (url, _), aiohttp.ClientSession() as http:
        room_id = (await new_room(url, TOKEN))["room"]
        paths = [
            f"/rooms/{room_id}",
            f"/rooms/{room_id}/transcript.txt?token=v1ewer",
            f"/view?room={room_id}",
            f"/kiosk?room={room_id}&mic=1",
            f"/embed?theme=dark&room={room_id}",
            f"/?room={room_id}&key={TOKEN}",
            f"/rooms/{room_id}/edit?token=ed1tor",
            f"/whip/{room_id}",
        ]
        for path in paths:
            async with http.request(
                "POST" if path.startswith("/whip/") else "GET",
                url + path,
                headers={"Referer": f"{url}/view?room={room_id}"},
            ):
                pass
    records = [r for r in caplog.records if r.name == "aiohttp.access"]
    lines = [r.getMessage() for r in records]
    assert len(lines) >= len(paths) + 1, lines
    for record, line in zip(records, lines, strict=True):
        assert room_id not in line and "v1ewer" not in line and "ed1tor" not in line and TOKEN not in line, line
        fields = json.dumps([getattr(record, "first_request_line", ""), getattr(record, "request_header", {})])
        assert room_id not in fields, fields  # what a structured log handler would write
    marks = [set(re.findall(r"~[0-9a-f]{8}", line)) for line in lines if "POST /rooms " not in line]
    assert len(marks) == len(paths) and all(len(m) == 1 for m in marks), lines
    assert len(set.union(*marks)) == 1, "one room, one mark: its lines can still be followed"


def test_a_room_id_is_marked_alike_within_a_run_and_the_secrets_still_go() -> None:
    ids = RoomIds()
    room = "Zq3_x-Abcdefghij"
    line = (
        f'127.0.0.1 "GET /rooms/{room}/events?token=abc HTTP/1.1" 200 5 '
        f'"https://c.example/kiosk?mic=1&room={room}" "curl"'
    )
    out = RedactSecrets()
    cleaned = out.clean(line)
    mark = out.rooms.mark(room)
    assert cleaned == (
        f'127.0.0.1 "GET /rooms/{mark}/events?token=REDACTED HTTP/1.1" 200 5 '
        f'"https://c.example/kiosk?mic=1&room={mark}" "curl"'
    )
    assert len(mark) == 9 and mark == out.rooms.mark(room) != ids.mark(room)
    assert ids.hide(f"POST /whip/{room}/peer1 ?room=x") == f"POST /whip/{ids.mark(room)}/peer1 ?room={ids.mark('x')}"
    assert ids.hide("POST /rooms HTTP/1.1") == "POST /rooms HTTP/1.1", "creating a room names none"


async def test_a_new_audience_stream_shows_nothing_committed_elsewhere_within_the_delay(
    server: tuple[str, web.Application],
) -> None:
    """A caption another front end committed (written straight to the store: this front end has not heard of it,
    so its audience holds nothing) reaches a newly connecting audience stream only after the delay: its snapshot
    is judged by the store's commit times too."""
    url, app = server
    made = await new_room(url, TOKEN, delay_s=DELAY_S)
    room_id = made["room"]
    room = await app[ROOMS].get(room_id)
    assert room is not None
    words = _words(HEARD, 500)
    record = SentenceRecord(0, "elsewhere", HEARD, 500, words[-1].end_ms, 0, words)
    locked_at = time.monotonic()
    await room.store.append(room_id, Caption([record.sentence()], ""), [record])
    async with SseReader(f"{url}/rooms/{room_id}/events") as audience:
        await audience.wait_for(lambda r: any(m["type"] == "caption" for _, m in r.events), timeout_s=5)
        assert time.monotonic() - locked_at < DELAY_S, "connected within the delay"
        assert audience.sentences() == {}, audience.events
