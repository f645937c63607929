"""HTTP handlers: the page, signalling, liveness and readiness. Errors are JSON ``{"error": {code, message}}``."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from engine import LANGUAGE_CODES, MAX_HOTWORDS, EngineError, EngineNotReady, EngineState, ErrorCode

from . import ice_servers
from .auth import presented_token, presented_token_or_field
from .bodies import BodyError, read_json_object
from .exports import OptionError
from .keys import ADMISSION, CONFIG, ENGINE, METRICS, PEERS, ROOMS, TEMPLATES
from .peer import PeerSession
from .rooms import token_matches
from .store import StoreError

log = logging.getLogger(__name__)

MAX_OFFER_BYTES = 64 * 1024  # a browser's audio offer is a few KB
LANGUAGE_NAMES = {"en": "English", "de": "Deutsch", "fr": "Français", "es": "Español", "it": "Italiano",
                  "nl": "Nederlands", "pt": "Português", "pl": "Polski", "sv": "Svenska", "zh": "中文",
                  "ja": "日本語", "ko": "한국어", "ru": "Русский", "uk": "Українська", "tr": "Türkçe"}


def json_error(status: int, code: ErrorCode | str, message: str) -> web.Response:
    code_text = code.value if isinstance(code, ErrorCode) else code
    return web.json_response({"error": {"code": code_text, "message": message}}, status=status)


def bad_parameter(exc: OptionError) -> web.Response:
    """400 for a bad query parameter: the error JSON names it (``"param"``)."""
    return web.json_response({"error": {"code": "bad_parameter", "message": str(exc), "param": exc.param}},
                             status=400)


async def index(request: web.Request) -> web.Response:
    app = request.app
    engine = app[ENGINE]
    config = app[CONFIG]
    languages = [("", "Detect automatically")] + [(c, n) for c, n in LANGUAGE_NAMES.items() if c in LANGUAGE_CODES]
    html = app[TEMPLATES].get_template("index.html").render(
        model=engine.model_name, languages=languages, default_language=config.language or "",
        static="/static", max_hotwords=MAX_HOTWORDS)
    # The microphone page is never framed by another site (clickjacking); only /embed follows --embed-origin.
    return web.Response(text=html, content_type="text/html",
                        headers={"Content-Security-Policy": "frame-ancestors 'self'", "X-Frame-Options": "SAMEORIGIN"})


async def ice(request: web.Request) -> web.Response:
    """``GET /ice?room=<id>`` -> ``{"iceServers": [...], "iceTransportPolicy": "all"|"relay"}``: what a page passes
    to ``new RTCPeerConnection`` before each offer, fetched afresh every time so that time-limited TURN credentials
    are new for every connection (a kiosk's page stays open for days). Needs the server's token when it has one, as
    ``POST /offer`` does: TURN credentials open the relay, so they go only to clients that may publish."""
    config = request.app[CONFIG]
    if not token_matches(presented_token(request), config.auth_token):
        return json_error(401, "unauthorized", "captioning a microphone needs the server's token")
    return web.json_response(ice_servers.page_config(config.ice, label=request.query.get("room")),
                             headers={"Cache-Control": "no-store"})


async def health(request: web.Request) -> web.Response:
    """Liveness: answers at once (no engine call, no I/O). 200 while the server can serve or is loading; 503 once
    its speech engine failed (it failed to load, or died: then the process is on its way out)."""
    engine = request.app[ENGINE]
    if engine.state is EngineState.FAILED:
        return web.json_response({"status": "failed", "engine": "failed", "detail": engine.detail}, status=503)
    return web.json_response({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body: dict[str, Any] = {"ready": engine.state is EngineState.READY, "state": engine.state.value,
                            "model": engine.model_name, "sessions": len(request.app[PEERS]),
                            "rooms": request.app[ROOMS].snapshot_stats()}
    if engine.state is not EngineState.READY and engine.detail:
        body["detail"] = engine.detail
    return web.json_response(body, status=200 if body["ready"] else 503)


async def offer(request: web.Request) -> web.Response:
    """``POST /offer`` ``{"sdp", "type": "offer", "room"?, "token"?}`` -> ``{"sdp", "type": "answer", "session",
    "room"}``. The session publishes into ``room`` (which must exist), or into a new room of its own."""
    if request.content_type != "application/json":
        return json_error(415, ErrorCode.BAD_MESSAGE, "send the offer as application/json")
    try:
        params = await read_json_object(request, MAX_OFFER_BYTES)
    except BodyError as exc:
        code = ErrorCode.TOO_LARGE if exc.status == 413 else ErrorCode.BAD_MESSAGE
        return json_error(exc.status, code, f"offer {exc.message}" if exc.status == 413 else exc.message)
    if not isinstance(params, dict) or not isinstance(params.get("sdp"), str) or params.get("type") != "offer":
        return json_error(400, ErrorCode.BAD_MESSAGE, 'expected {"sdp": "...", "type": "offer"}')

    app = request.app
    engine, peers, config = app[ENGINE], app[PEERS], app[CONFIG]
    if not token_matches(presented_token_or_field(request, params), config.auth_token):
        return json_error(401, "unauthorized", "captioning a microphone needs the server's token")
    room_id = params.get("room")
    if room_id is not None and not isinstance(room_id, str):
        return json_error(400, ErrorCode.BAD_MESSAGE, '"room" must be a room id string')
    if engine.state is not EngineState.READY:
        loading = engine.state in (EngineState.NEW, EngineState.LOADING)
        status, code = (503, ErrorCode.LOADING) if loading else (503, ErrorCode.ENGINE)
        return json_error(status, code, f"the speech model is {engine.state.value}; try again shortly")
    slot = app[ADMISSION].try_acquire()  # taken before the first await: concurrent offers cannot overshoot
    if slot is None:
        return json_error(503, ErrorCode.BUSY, app[ADMISSION].refusal("caption sessions"))
    try:
        room = await app[ROOMS].get(room_id) if room_id else None
    except BaseException:
        slot.release()
        raise
    if room_id and room is None:
        slot.release()
        return json_error(404, "no_room", "there is no such room")
    try:
        # The session owns the slot from here (released on close).
        peer = PeerSession(engine, config, peers, slot=slot, on_shed=app[METRICS].shed)
    except EngineNotReady as exc:
        return json_error(503, ErrorCode.ENGINE, str(exc))
    except EngineError as exc:
        return json_error(503, ErrorCode.BUSY, str(exc))
    try:
        answer = await peer.accept(params["sdp"], "offer")
    except Exception as exc:  # aiortc raises ValueError and friends for SDP it cannot use
        await peer.close()
        log.info("rejected offer: %s", exc)
        return json_error(400, "bad_sdp", f"cannot use this offer: {exc}")
    try:
        if room is None:
            # A room of its own only for an offer that was accepted: rejected offers leave nothing behind. A
            # failing store does not stop the captions: the room is written when the store recovers.
            room = (await app[ROOMS].create(unsaved_ok=True))[0]
        else:
            # The same room again: the object fetched before the await may have left memory meanwhile.
            room = await app[ROOMS].get(room.id) or room
    except StoreError as exc:  # the stored room could not be read again
        await peer.close()
        return json_error(503, "storage", f"the transcript store fails: {exc}")
    peer.join(room)
    return web.json_response({"sdp": answer.sdp, "type": answer.type, "session": peer.id, "room": room.id})
