"""HTTP handlers for a room's languages (docs/protocol.md, "Rooms in other languages"): which languages this server
can translate into, a room's languages set by its editors during the event, and an editor's correction of one
translation. Each change is one durable room event (``Room.commit_languages``, ``Room.commit_translation``).

A language is a BCP 47 tag; the engines translate by its primary subtag (``es-MX`` is Spanish: ``es``), and the room
keeps the tag as normalised (``engine.normalise_language``). One the installed engines cannot produce is refused
with 400, naming those that can be had.
"""

from __future__ import annotations

from aiohttp import web

from engine import LANGUAGE_CODES, ErrorCode, normalise_language, primary

from ..responses import http_error
from .edit_routes import MAX_TEXT_CHARS, editing, editor_of
from .keys import ROOMS
from .room import ROOM_ID_PATTERN
from .translating import SOURCE_LANGUAGE, room_languages


def add_routes(app: web.Application) -> None:
    room = "/rooms/{room:" + ROOM_ID_PATTERN + "}"
    app.router.add_get("/languages", get_languages)
    app.router.add_put(room + "/languages", put_languages)
    app.router.add_put(
        room + "/sentences/{sentence:[0-9]{1,12}}/translations/{lang:[A-Za-z0-9-]{2,35}}", put_translation
    )


async def get_languages(request: web.Request) -> web.Response:
    """``GET /languages[?source=es]``: ``{"source", "languages": [...], "engines": [...]}``: what a room spoken in
    ``source`` (a Whisper language code; English unless asked) can be translated into here (open to all: it says
    nothing about any room)."""
    rooms = request.app[ROOMS]
    source = request.query.get("source", SOURCE_LANGUAGE)
    if source not in LANGUAGE_CODES:
        raise _bad('"source" must be a language code the recognizer knows (Whisper\'s: "en", "es", "zh", ...)')
    engines = rooms.translator.names() if rooms.translator is not None else []
    return web.json_response({"source": source, "languages": sorted(rooms.translatable(source)), "engines": engines})


async def put_languages(request: web.Request) -> web.Response:
    """``PUT /rooms/{id}/languages`` ``{"languages": [...]}`` (the room's editor token or the server's): what the
    room's sentences are translated into from now on. A language added gets the sentences so far."""
    room, body = await editing(request, {"languages"})
    # A language the room has may stay, engines or not (one only its speech gives: ``Room.commit_original``).
    kept = frozenset(primary(lang) for lang in room.languages)
    try:
        languages = room_languages(
            body.get("languages"), request.app[ROOMS].translatable(room.language) | kept, room.language
        )
    except ValueError as exc:
        raise _bad(str(exc)) from None
    seq = await room.commit_languages(languages)
    return web.json_response({"seq": seq, "languages": list(room.languages)})


async def put_translation(request: web.Request) -> web.Response:
    """``PUT /rooms/{id}/sentences/{sid}/translations/{lang}`` ``{"text", "editor"?}``: an editor's translation of
    the sentence into room language ``lang`` (it stands until the sentence's source text changes)."""
    room, body = await editing(request, {"text", "editor"})
    try:
        lang = normalise_language(request.match_info["lang"])
    except ValueError:
        raise _bad("not a language code (BCP 47)") from None
    if lang not in room.languages:
        raise _bad(f"{lang!r} is not one of the room's languages ({', '.join(room.languages) or 'none'})")
    text = body.get("text")
    if not isinstance(text, str) or not 0 < len(" ".join(text.split())) <= MAX_TEXT_CHARS:
        raise _bad(f'"text" must be a string of 1 to {MAX_TEXT_CHARS} characters')
    sid = int(request.match_info["sentence"])
    event = await room.commit_translation(
        lang, {sid: " ".join(text.split())}, update=True, editor=editor_of(request, room, body)
    )
    if event is None:
        raise http_error(404, ErrorCode.NO_SENTENCE, f"room {room.id} has no sentence {sid} (or it was deleted)")
    return web.json_response({"seq": event.seq, "lang": lang, "sentence": event.body.wire()["sentences"][0]})


def _bad(message: str) -> web.HTTPException:
    return http_error(400, ErrorCode.BAD_MESSAGE, message)
