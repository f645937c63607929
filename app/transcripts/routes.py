"""Transcript files over HTTP: ``GET /rooms/{id}/transcript.{txt,srt,vtt,scc,json}`` (a room's, through its read
path: everything for its editors, what was released for its audience) and ``POST /exports/transcript.{txt,srt,vtt,
scc,json}`` (the caption page's download buttons, and any client). Every file is sent with ``exports.NOSNIFF``.

The page sends the sentences it shows (its own session's, after any "clear"), and gets the file back from the one
formatter the room transcripts use (``exports``), so a download from the page and a room's transcript file never
disagree on format. Nothing is stored; the server's token is needed when it has one, as for ``POST /offer``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any

from aiohttp import web

from engine.protocol import Correction, ErrorCode, Word

from ..auth import presented_token_or_field, token_matches
from ..bodies import BodyError, read_json_object
from ..keys import CONFIG
from ..responses import bad_parameter, json_error, unreadable_body
from ..rooms import ROOM_ID_PATTERN, SentenceRecord, TimedEvent, may_edit, stream_language, viewable_room
from . import exports

MAX_EXPORT_BYTES = 16 * 1024 * 1024  # ~100,000 sentences: a long day of captions
MAX_EXPORT_SENTENCES = 200_000
_FORMATS = "|".join(exports.MIME)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/exports/transcript.{fmt:" + _FORMATS + "}", export_transcript)
    app.router.add_get("/rooms/{room:" + ROOM_ID_PATTERN + "}/transcript.{fmt:" + _FORMATS + "}", room_transcript)


async def export_transcript(request: web.Request) -> web.Response:
    """Body ``{"sentences": [{"id", "text", "start", "end", "spk", "session"?, "words"?}], "model"?,
    "language"?, "token"?}`` (times in ms and words as the ``caption`` messages carry them) -> the file, as an
    attachment. The query takes the cue options of ``exports.parse_options``."""
    if request.content_type != "application/json":
        return json_error(415, ErrorCode.BAD_MESSAGE, "send the transcript as application/json")
    try:
        body = await read_json_object(request, MAX_EXPORT_BYTES)
    except BodyError as exc:
        return unreadable_body(exc.status, exc.message)
    if not token_matches(presented_token_or_field(request, body), request.app[CONFIG].auth_token):
        return json_error(401, ErrorCode.UNAUTHORIZED, "exporting needs the server's token")
    raw = body.get("sentences")
    if isinstance(raw, list) and len(raw) > MAX_EXPORT_SENTENCES:
        return json_error(413, ErrorCode.TOO_LARGE, f"at most {MAX_EXPORT_SENTENCES} sentences")
    try:
        sentences = _sentences(raw)
        header = _header(body)
    except ValueError as exc:
        return json_error(400, ErrorCode.BAD_MESSAGE, str(exc))
    try:
        options = exports.parse_options(request.query)
    except exports.OptionError as exc:
        return bad_parameter(exc)
    fmt = request.match_info["fmt"]
    text = await asyncio.to_thread(exports.render, fmt, sentences, header, options)  # up to 200,000 sentences
    return web.Response(
        text=text,
        content_type=exports.MIME[fmt],
        charset="utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="captions.{fmt}"',
            "Cache-Control": "no-store",
            **exports.NOSNIFF,
        },
    )


def _sentences(raw: Any) -> list[SentenceRecord]:
    if not isinstance(raw, list):
        raise ValueError('"sentences" must be a list')
    out = []
    for i, s in enumerate(raw):
        if not isinstance(s, dict):
            raise ValueError(f"sentence {i} is not an object")
        sid, text, spk, session = s.get("id"), s.get("text"), s.get("spk"), s.get("session", "")
        if not isinstance(sid, int) or isinstance(sid, bool) or not isinstance(text, str):
            raise ValueError(f"sentence {i} needs an integer id and a text")
        if spk is not None and (not isinstance(spk, int) or isinstance(spk, bool)):
            raise ValueError(f"sentence {i}: spk must be an integer or null")
        session = "" if session is None else session
        if not isinstance(session, str):
            raise ValueError(f"sentence {i}: session must be a string")
        out.append(
            SentenceRecord(
                sid, session, text, _ms(s.get("start"), i), _ms(s.get("end"), i), spk, _words(s.get("words"), i)
            )
        )
    return out


def _words(raw: Any, i: int) -> tuple[Word, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"sentence {i}: words must be a list")
    words = []
    for w in raw:
        if not isinstance(w, dict) or not isinstance(w.get("w"), str) or not w["w"].strip():
            raise ValueError(f'sentence {i}: each word needs "w", "start_ms" and "end_ms"')
        words.append(Word(w["w"], _ms(w.get("start_ms"), i), _ms(w.get("end_ms"), i)))
    return tuple(words)


def _ms(value: Any, i: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"sentence {i}: start and end must be milliseconds (numbers >= 0)")
    return round(value)


def _header(body: dict[str, Any]) -> dict[str, Any]:
    model, language = body.get("model", ""), body.get("language")
    if not isinstance(model, str) or (language is not None and not isinstance(language, str)):
        raise ValueError('"model" must be a string and "language" a string or null')
    return {"model": model, "language": language}


async def room_transcript(request: web.Request) -> web.Response:
    """``GET /rooms/{id}/transcript.{txt,srt,vtt,scc,json}``: the room's locked sentences so far, each as it now is.
    SRT, WebVTT and SCC take the cue options of ``exports.parse_options`` in the query (a bad one: 400 naming it).

    Who asks decides what: the room's editors (its editor token, or the server's token) get every sentence at once,
    and the JSON also the editing (each changed sentence's ``original`` and ``edits``, the ``deleted`` ones); the
    audience gets what it has been given (``Room.read_released``), corrected, and nothing of the editing.

    ``?lang=es`` (one of the room's languages; not JSON, which carries every language): each sentence's newest
    translation in its place, with the source's timing and the same cue rules (its source text while it has none)."""
    room = await viewable_room(request)
    fmt = request.match_info["fmt"]
    lang = stream_language(request, room) if fmt != "json" else None
    try:
        options = exports.parse_options(request.query)
    except exports.OptionError as exc:
        return bad_parameter(exc)
    history: dict[int, list[exports.Edit]] = {}
    deleted: list[SentenceRecord] = []
    if may_edit(request, room):
        snapshot = await room.read_snapshot(deleted=fmt == "json")
        sentences = [s for s in snapshot.sentences if not s.deleted]
        deleted = [s for s in snapshot.sentences if s.deleted]
        if fmt == "json":
            history = _history(await room.read_corrections())
    else:
        snapshot = await room.read_released()
        # The recognizer's text is the editors' business: the audience reads the sentence as corrected, only.
        sentences = [dataclasses.replace(s, original=None) for s in snapshot.sentences if not s.deleted]
    options = dataclasses.replace(options, names=snapshot.names)
    if lang is not None:
        sentences = [s.translated(lang) for s in sentences]
    text = await asyncio.to_thread(
        exports.render, fmt, sentences, exports.room_header(room.record), options, history, deleted
    )
    return web.Response(
        text=text,
        content_type=exports.MIME[fmt],
        charset="utf-8",
        headers={
            "Content-Disposition": f'inline; filename="captions-{room.id}{"." + lang if lang else ""}.{fmt}"',
            "Cache-Control": "no-store",
            **exports.NOSNIFF,
        },
    )


def _history(events: list[TimedEvent]) -> dict[int, list[exports.Edit]]:
    """Each sentence's edits, in order, from a room's stored ``correction`` events."""
    out: dict[int, list[exports.Edit]] = {}
    for event in events:
        message = event.message
        if not isinstance(message, Correction):
            continue
        for s in message.sentences:
            out.setdefault(s.id, []).append(exports.Edit(event.seq, event.created_ms, message.editor, s.text, s.spk))
        for sid in message.deleted:
            out.setdefault(sid, []).append(exports.Edit(event.seq, event.created_ms, message.editor, deleted=True))
    return out
