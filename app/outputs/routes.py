"""HTTP handlers for a room's outputs (docs/protocol.md, "Outputs: YouTube Live and OBS"): add one, list them
with their state, remove one.

Who: the room's editor token or the server's token (``Authorization: Bearer``, or ``?token=``), as for correcting
the room: an output publishes the room's captions elsewhere. A wrong token answers 403 whatever the room. Where an
output may connect is the operator's (``destinations``): a URL the outbound policy refuses answers 400
``bad_message``, naming the class of address it is, never more.
"""

from __future__ import annotations

import time

from aiohttp import web

from engine import ErrorCode

from ..bodies import BodyError, read_json_object
from ..responses import http_error, unreadable_body
from ..rooms import ROOM_ID_PATTERN, ROOMS, Room, asked_language, may_edit
from .destinations import DestinationRefused
from .keys import OUTPUTS
from .registry import TooManyOutputs
from .spec import SpecError, parse

MAX_BODY_BYTES = 4096
OUTPUT_ID_PATTERN = r"[A-Za-z0-9_-]{1,32}"


def add_routes(app: web.Application) -> None:
    outputs = "/rooms/{room:" + ROOM_ID_PATTERN + "}/outputs"
    app.router.add_post(outputs, add_output)
    app.router.add_get(outputs, list_outputs)
    app.router.add_delete(outputs + "/{output:" + OUTPUT_ID_PATTERN + "}", delete_output)


async def add_output(request: web.Request) -> web.Response:
    """``POST /rooms/{id}/outputs`` ``{"kind": "youtube", "url", "lang"?}`` or ``{"kind": "obs", "url",
    "password"?, "lang"?}`` -> 201 with the output as ``GET`` lists it (no secret). The output starts at once, with
    the sentences the room's audience gets from now on; ``lang``: in that room language (its translations)."""
    room = await _editable_room(request, keep=True)
    try:
        body = await read_json_object(request, MAX_BODY_BYTES)
    except BodyError as exc:
        return unreadable_body(exc.status, exc.message)
    try:
        spec = parse(
            body,
            created_ms=int(time.time() * 1000),
            languages=lambda raw: asked_language(raw, room.languages, room.language),
        )
    except SpecError as exc:
        raise http_error(400, ErrorCode.BAD_MESSAGE, str(exc)) from None
    if room.record.ended_ms is not None:
        raise http_error(409, ErrorCode.ROOM_ENDED, "the room has ended: its outputs stopped")
    try:
        await request.app[OUTPUTS].policy.check_destination(spec.url)
    except DestinationRefused as exc:
        raise http_error(400, ErrorCode.BAD_MESSAGE, f'"url": {exc}') from None
    try:
        runner = await request.app[OUTPUTS].add(room, spec)
    except TooManyOutputs as exc:  # the room's limit or the server's: the message says which
        raise http_error(409, ErrorCode.TOO_MANY_OUTPUTS, str(exc)) from None
    return web.json_response(runner.view(), status=201)


async def list_outputs(request: web.Request) -> web.Response:
    """``GET /rooms/{id}/outputs`` -> ``{"outputs": [{"id", "kind", "url", "created_ms", "state", "sent",
    "last_sent_ms", "last_error", "behind", "status"}, ...]}`` in the order they were added."""
    room = await _editable_room(request, keep=False)
    runners = await request.app[OUTPUTS].outputs(room.id)
    return web.json_response({"outputs": [r.view() for r in runners]})


async def delete_output(request: web.Request) -> web.Response:
    """``DELETE /rooms/{id}/outputs/{oid}``: the output stops and is forgotten -> ``{"deleted": oid}``."""
    room = await _editable_room(request, keep=False)
    output_id = request.match_info["output"]
    if not await request.app[OUTPUTS].remove(room.id, output_id):
        raise http_error(404, ErrorCode.NO_OUTPUT, f"room {room.id} has no output {output_id}")
    return web.json_response({"deleted": output_id})


async def _editable_room(request: web.Request, keep: bool) -> Room:
    """The room named in the path, if the request may edit it. ``keep``: load it into memory (an output added
    follows it); a look loads nothing."""
    room = await request.app[ROOMS].get(request.match_info["room"], keep=keep)
    if room is None:
        raise http_error(404, ErrorCode.NO_ROOM, "there is no such room")
    if not may_edit(request, room):
        raise http_error(403, ErrorCode.UNAUTHORIZED, "a room's outputs need its editor token")
    return room
