"""WebRTC signalling over HTTP: ``POST /offer`` (an SDP offer in, the answer and the session out) and ``GET /ice``
(the STUN/TURN servers a page uses for its next connection). Errors are JSON ``{"error": {code, message}}``."""

from __future__ import annotations

import logging

from aiohttp import web

from engine import LANGUAGE_CODES, EngineError, ErrorCode
from engine.protocol import TASKS

from ..auth import presented_token, presented_token_or_field, token_matches
from ..bodies import BodyError, read_json_object
from ..keys import CONFIG, ENGINE
from ..ops import ADMISSION, METRICS, NoRoom, Refused, admit_publisher
from ..responses import json_error, unreadable_body
from ..rooms import ROOMS, SOURCE_LANGUAGE, BadName, StoreError, person_name
from . import stun_turn
from .keys import PEERS
from .peer import PeerSession

log = logging.getLogger(__name__)

MAX_OFFER_BYTES = 64 * 1024  # a browser's audio offer is a few KB


async def ice(request: web.Request) -> web.Response:
    """``GET /ice?room=<id>`` -> ``{"iceServers": [...], "iceTransportPolicy": "all"|"relay"}``: what a page passes
    to ``new RTCPeerConnection`` before each offer, fetched afresh every time so that time-limited TURN credentials
    are new for every connection (a kiosk's page stays open for days). Needs the server's token when it has one, as
    ``POST /offer`` does: TURN credentials open the relay, so they go only to clients that may publish."""
    config = request.app[CONFIG]
    if not token_matches(presented_token(request), config.auth_token):
        return json_error(401, ErrorCode.UNAUTHORIZED, "captioning a microphone needs the server's token")
    return web.json_response(
        stun_turn.page_config(config.ice, label=request.query.get("room")), headers={"Cache-Control": "no-store"}
    )


async def offer(request: web.Request) -> web.Response:
    """``POST /offer`` ``{"sdp", "type": "offer", "room"?, "name"?, "token"?, "language"?, "task"?}`` -> ``{"sdp",
    "type": "answer", "session", "room"}``. The session publishes into ``room`` (which must exist; it speaks the
    room's language), or into a new room of its own spoken in ``language`` (a Whisper code; else the server's
    default language, else English), as person ``name`` (``names.person_name``). ``"task": "translate"`` (the
    session will start with Whisper's translate task): its own room is English, whatever ``language`` is spoken."""
    if request.content_type != "application/json":
        return json_error(415, ErrorCode.BAD_MESSAGE, "send the offer as application/json")
    try:
        params = await read_json_object(request, MAX_OFFER_BYTES)
    except BodyError as exc:
        return unreadable_body(exc.status, f"offer {exc.message}" if exc.status == 413 else exc.message)
    if not isinstance(params, dict) or not isinstance(params.get("sdp"), str) or params.get("type") != "offer":
        return json_error(400, ErrorCode.BAD_MESSAGE, 'expected {"sdp": "...", "type": "offer"}')

    app = request.app
    engine, peers, config = app[ENGINE], app[PEERS], app[CONFIG]
    if not token_matches(presented_token_or_field(request, params), config.auth_token):
        return json_error(401, ErrorCode.UNAUTHORIZED, "captioning a microphone needs the server's token")
    room_id = params.get("room")
    if room_id is not None and not isinstance(room_id, str):
        return json_error(400, ErrorCode.BAD_MESSAGE, '"room" must be a room id string')
    try:
        name = person_name(params.get("name"))
    except BadName as exc:
        return json_error(400, ErrorCode.BAD_MESSAGE, str(exc))
    asked = params.get("language") or None
    if asked is not None and (not isinstance(asked, str) or asked not in LANGUAGE_CODES):
        return json_error(400, ErrorCode.BAD_MESSAGE, '"language" must be a language code the recognizer knows')
    task = params.get("task", "transcribe")
    if task not in TASKS:
        return json_error(400, ErrorCode.BAD_MESSAGE, '"task" must be "transcribe" or "translate"')
    cannot = engine.cannot_caption(asked, task) if room_id is None else ""
    if cannot:
        return json_error(400, ErrorCode.BAD_MESSAGE, cannot)
    # A translating session's sentences are English (the words said are kept beside them: ``Room.commit_original``).
    own_language = SOURCE_LANGUAGE if task == "translate" else asked or config.language or SOURCE_LANGUAGE
    # The engine's state, the capacity and the room, as on every way in. A refusal is 503 (loading, busy with
    # Retry-After: the page waits and tries again by itself; engine: it failed).
    try:
        admitted = await admit_publisher(app, room_id, name)
    except Refused as exc:
        return exc.refusal.response()
    except NoRoom:
        return json_error(404, ErrorCode.NO_ROOM, "there is no such room")
    slot, room = admitted.slot, admitted.room
    try:
        # The session owns the slot from here (released on close).
        peer = PeerSession(
            engine,
            config,
            peers,
            slot=slot,
            on_shed=app[METRICS].shed,
            loss=app[METRICS],
            language=room.language if room is not None else asked,
        )
    except EngineError as exc:  # not ready after all, or every VAD row taken (the slot went back): as admission's
        return app[ADMISSION].refusal_for(exc).response()
    try:
        answer = await peer.accept(params["sdp"], "offer")
    except Exception as exc:  # aiortc raises ValueError and friends for SDP it cannot use
        await peer.close()
        log.info("rejected offer: %s", exc)
        return json_error(400, ErrorCode.BAD_SDP, f"cannot use this offer: {exc}")
    editor_token = None
    try:
        if room is None:
            # A room of its own only for an offer that was accepted: rejected offers leave nothing behind. A
            # failing store does not stop the captions: the room is written when the store recovers.
            made = await app[ROOMS].create(unsaved_ok=True, language=own_language)
            room, editor_token = made.room, made.editor_token  # the session's own room: its speaker may edit it
        else:
            # The same room again: the object fetched before the await may have left memory meanwhile.
            room = await app[ROOMS].get(room.id) or room
    except StoreError as exc:  # the stored room could not be read again
        await peer.close()
        return json_error(503, ErrorCode.STORAGE, f"the transcript store fails: {exc}")
    peer.join(room, admitted.name, own=editor_token is not None)
    body = {"sdp": answer.sdp, "type": answer.type, "session": peer.id, "room": room.id}
    if editor_token is not None:
        body["editor_token"] = editor_token
    return web.json_response(body)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/offer", offer)
    app.router.add_get("/ice", ice)
