"""HTTP handlers for a room's editors: correct, delete and split locked sentences, name speakers, set the room's
vocabulary (docs/protocol.md, "Correcting a room live"). Each change is one durable room event (``Room``'s
``commit_edit``, ``commit_correction`` and ``commit_vocabulary``); what the sentence was comes from the store, with
what it has not taken yet, read inside the room's lock. What a text costs to retime is bounded (``edits``) and paid
in a worker thread, so the largest correction allowed never holds up the event loop.

Who: the room's editor token or the server's token, as ``Authorization: Bearer`` (or ``?token=``). A wrong token
answers 403 whatever the room, so an editor token opens nothing but its own room.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from engine import ErrorCode

from ..auth import presented_token
from ..bodies import BodyError, read_json_object
from ..responses import http_error
from . import edits
from .keys import ROOMS
from .room import ROOM_ID_PATTERN, Room
from .routes import may_edit
from .store.base import SentenceRecord, now_ms
from .unsaved import NumberedEvent

MAX_EDIT_BODY_BYTES = 16 * 1024
MAX_TEXT_CHARS = 2000
MAX_EDITOR_CHARS = 40
MAX_NAME_CHARS = 60


def add_routes(app: web.Application) -> None:
    room = "/rooms/{room:" + ROOM_ID_PATTERN + "}"
    sentence = room + "/sentences/{sentence:[0-9]{1,12}}"
    app.router.add_put(sentence, put_sentence)
    app.router.add_delete(sentence, delete_sentence)
    app.router.add_post(sentence + "/split", split_sentence)
    app.router.add_put(room + "/speakers/{spk:[0-9]{1,12}}", put_speaker)  # a label past the bound is a 400
    app.router.add_get(room + "/vocabulary", get_vocabulary)
    app.router.add_put(room + "/vocabulary", put_vocabulary)
    app.router.add_post(room + "/end", end_room)


async def put_sentence(request: web.Request) -> web.Response:
    """``PUT /rooms/{id}/sentences/{sid}`` ``{"text", "spk"?, "editor"?}``: the sentence's new text (and label)."""
    room, body = await editing(request, {"text", "spk", "editor"})
    text = body.get("text")
    if not isinstance(text, str) or not 0 < len(" ".join(text.split())) <= MAX_TEXT_CHARS:
        raise _bad(f'"text" must be a string of 1 to {MAX_TEXT_CHARS} characters (delete a sentence to remove it)')
    if "spk" in body and body["spk"] is not None and not _label(body["spk"]):
        raise _bad(f'"spk" must be a speaker label (0-{edits.SPEAKER_LABELS - 1}) or null')

    async def edit(record: SentenceRecord) -> edits.Change:
        # Retiming costs what the text costs (bounded: see edits): off the event loop.
        new = await asyncio.to_thread(edits.corrected, record, text, body.get("spk", record.spk))
        return edits.Change(replaced=(new,))

    record, event = await _edited(request, room, edit, body)
    new = event.edits.replaced[0] if event.edits is not None else record
    await _learn(room, record.original or record.text, new.text)
    return web.json_response({"seq": event.seq, "sentence": new.sentence().wire(words=True)})


async def delete_sentence(request: web.Request) -> web.Response:
    """``DELETE /rooms/{id}/sentences/{sid}``: the sentence goes (kept in the history)."""
    room = await editable_room(request)

    async def edit(record: SentenceRecord) -> edits.Change:
        return edits.Change(deleted=(record.id,))

    record, event = await _edited(request, room, edit, dict(request.query))
    return web.json_response({"seq": event.seq, "deleted": record.id})


async def split_sentence(request: web.Request) -> web.Response:
    """``POST /rooms/{id}/sentences/{sid}/split`` ``{"at", "editor"?}``: the first ``at`` words stay, the rest
    become a new sentence right after."""
    room, body = await editing(request, {"at", "editor"})
    at = body.get("at")
    if isinstance(at, bool) or not isinstance(at, int):
        raise _bad('"at" must be the number of words that stay in the sentence')

    async def edit(record: SentenceRecord) -> edits.Change:
        try:
            first, second = edits.split(record, at, new_id=record.id)  # the room gives the new part its id
        except ValueError as exc:
            raise _bad(str(exc)) from None
        return edits.Change(replaced=(first,), new=(second,))

    _, event = await _edited(request, room, edit, body)
    parts = [*(event.edits.replaced if event.edits is not None else ()), *event.records]
    return web.json_response({"seq": event.seq, "sentences": [r.sentence().wire(words=True) for r in parts]})


async def put_speaker(request: web.Request) -> web.Response:
    """``PUT /rooms/{id}/speakers/{spk}`` ``{"name", "editor"?}``: what label ``spk`` shows as in the whole room
    ("" = its default)."""
    room, body = await editing(request, {"name", "editor"})
    name = body.get("name")
    if not isinstance(name, str) or len(name.strip()) > MAX_NAME_CHARS:
        raise _bad(f'"name" must be a string of at most {MAX_NAME_CHARS} characters ("" for the default)')
    spk = int(request.match_info["spk"])
    if not _label(spk):
        raise _bad(f"a speaker label is 0-{edits.SPEAKER_LABELS - 1}, not {spk}")
    event = await room.commit_correction(
        edits.Change(names={spk: " ".join(name.split())}), editor_of(request, room, body)
    )
    return web.json_response({"seq": event.seq, "names": {str(k): v for k, v in sorted(room.names.items())}})


async def get_vocabulary(request: web.Request) -> web.Response:
    room = await editable_room(request)
    return web.json_response({"terms": list(room.terms), "learned": list(room.learned)})


async def put_vocabulary(request: web.Request) -> web.Response:
    """``PUT /rooms/{id}/vocabulary`` ``{"terms": [...]}``: the terms editors enter (the learned ones stay)."""
    room, body = await editing(request, {"terms"})
    terms = body.get("terms")
    if (
        not isinstance(terms, list)
        or not all(isinstance(t, str) for t in terms)
        or len(terms) > edits.MAX_TERMS
        or any(len(t.strip()) > edits.MAX_TERM_CHARS for t in terms)
    ):
        raise _bad(
            f'"terms" must be a list of at most {edits.MAX_TERMS} strings of at most {edits.MAX_TERM_CHARS} characters'
        )
    cleaned = tuple(dict.fromkeys(" ".join(t.split()) for t in terms if t.strip()))
    await room.commit_vocabulary(cleaned, room.learned)
    return web.json_response({"terms": list(room.terms), "learned": list(room.learned)})


async def end_room(request: web.Request) -> web.Response:
    """``POST /rooms/{id}/end``: the event is over. Its HLS playlist closes (``EXT-X-ENDLIST``) and its outputs stop;
    its transcript stays, and viewers keep what they have. Ending twice keeps the first time."""
    room = await editable_room(request)
    if room.record.ended_ms is None:
        ended_ms = now_ms()
        await room.store.set_ended(room.id, ended_ms)
        room.record = dataclasses.replace(room.record, ended_ms=ended_ms)
        room.audience.end()  # its outputs send what the audience still gets, then stop
    return web.json_response({"room": room.id, "ended_ms": room.record.ended_ms})


# ---- helpers -----------------------------------------------------------------------------------------------------
async def editable_room(request: web.Request) -> Room:
    """The room named in the path, if the request may edit it (loaded into memory: edits commit through it)."""
    room = await request.app[ROOMS].get(request.match_info["room"])
    if room is None:
        raise http_error(404, ErrorCode.NO_ROOM, "there is no such room")
    if not may_edit(request, room):
        raise http_error(403, ErrorCode.UNAUTHORIZED, "editing this room needs its editor token")
    return room


async def editing(request: web.Request, fields: set[str]) -> tuple[Room, dict[str, Any]]:
    """The room (``editable_room``) and the request's JSON body, which may hold only ``fields``."""
    room = await editable_room(request)
    try:
        body = await read_json_object(request, MAX_EDIT_BODY_BYTES)
    except BodyError as exc:
        if exc.status == 413:
            raise http_error(413, ErrorCode.TOO_LARGE, exc.message) from None
        raise _bad(exc.message) from None
    unknown = sorted(set(body) - fields)
    if unknown:
        raise _bad(f"unknown field {unknown[0]!r}: expected {', '.join(sorted(fields))}")
    return room, body


async def _edited(
    request: web.Request, room: Room, edit: Callable[[SentenceRecord], Awaitable[edits.Change]], body: dict[str, Any]
) -> tuple[SentenceRecord, NumberedEvent]:
    """``edit`` of the sentence named in the path, committed (``Room.commit_edit``: it gets the sentence as it now
    is). Returns the sentence as it was and the event."""
    sid = int(request.match_info["sentence"])
    done = await room.commit_edit(sid, edit, editor_of(request, room, body))
    if done is None:
        raise http_error(404, ErrorCode.NO_SENTENCE, f"room {room.id} has no sentence {sid} (or it was deleted)")
    return done


def _label(spk: object) -> bool:
    """Whether ``spk`` is a speaker label an editor may give (``edits.SPEAKER_LABELS``)."""
    return isinstance(spk, int) and not isinstance(spk, bool) and 0 <= spk < edits.SPEAKER_LABELS


def editor_of(request: web.Request, room: Room, body: dict[str, Any]) -> str:
    """Who made the edit, for the history: the name the editor gave, else what their token says they are."""
    name = body.get("editor")
    if isinstance(name, str) and name.strip():
        return " ".join(name.split())[:MAX_EDITOR_CHARS]
    return "editor" if room.may_edit(presented_token(request)) else "server"


async def _learn(room: Room, original: str, text: str) -> None:
    """Fixes for what the recognizer got wrong (``edits.learned_fixes``, off the event loop like retiming) join the
    room's learned vocabulary."""
    fixes = [f.wire() for f in await asyncio.to_thread(edits.learned_fixes, original, text)]
    merged = edits.merged_entries(room.learned, fixes)
    if merged != room.learned:
        await room.commit_vocabulary(room.terms, merged)


def _bad(message: str) -> web.HTTPException:
    return http_error(400, ErrorCode.BAD_MESSAGE, message)
