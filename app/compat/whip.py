"""WHIP ingest (RFC 9725): broadcast tools (OBS 30+, GStreamer's ``whipclientsink`` and ``whip-client``) publish a
room's audio over WebRTC with one HTTP request, and its viewers, kiosk and transcript get the captions.

- ``POST /whip/{room}`` with ``Content-Type: application/sdp`` (the offer) and ``Authorization: Bearer <token>``
  (when the server has a token) -> ``201 Created``, the SDP answer, ``Location: /whip/{room}/{session}`` (the
  session resource), ``ETag`` and a ``Link: <...>; rel="ice-server"`` per configured STUN/TURN server, with the
  credentials to use (static, or time-limited for the room: ``app.webrtc.stun_turn``, the pages' source too).
  ``?name=<person>``: the publisher is that person in the room (``app.rooms.names``).
- ``PATCH`` on the resource with ``Content-Type: application/trickle-ice-sdpfrag``: the client's trickled ICE
  candidates (``204``). ICE restarts (a new ``ice-ufrag``) are not supported: ``422``.
- ``DELETE`` on the resource ends the session: its open sentence is finished and locked, then it closes (``200``).
- ``OPTIONS`` on either answers CORS preflights and ``Accept-Post: application/sdp``.
- Errors: ``415`` wrong content type, ``400`` an SDP aiortc cannot use or one without exactly one audio track
  (``bad_sdp``) or a name ``person_name`` refuses (``bad_parameter``, ``"param": "name"``),
  ``401`` a missing or wrong token, ``404`` no such room or resource, ``413`` an oversize offer, ``503`` the
  refusals of ``POST /offer`` (``app.ops.admission``): ``loading`` and ``busy`` with ``Retry-After``, ``engine`` (it
  failed) without. Error bodies are this server's JSON errors.

The server's answer carries all its candidates (it does not trickle); clients may trickle theirs or put them in
the offer. A WHIP publisher has no caption channel: its captions go to its room only.
"""

from __future__ import annotations

import logging
import re

from aiohttp import web
from aiortc.sdp import candidate_from_sdp

from engine import EngineError, ErrorCode

from ..auth import presented_token, token_matches
from ..bodies import BodyError
from ..keys import CONFIG, ENGINE
from ..ops import ADMISSION, METRICS, NoRoom, Refused, admit_publisher
from ..responses import ParameterError, bad_parameter, json_error, unreadable_body
from ..rooms import ROOMS, BadName, person_name
from ..webrtc import MAX_OFFER_BYTES, PEERS, PeerSession, ice_servers, is_loopback, link_headers

log = logging.getLogger(__name__)

_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, If-Match",
    "Access-Control-Expose-Headers": "Location, ETag, Link, Accept-Patch, Accept-Post",
}
_TRICKLE = "application/trickle-ice-sdpfrag"


def add_routes(app: web.Application) -> None:
    app.router.add_route("OPTIONS", "/whip/{room}", options_endpoint)
    app.router.add_post("/whip/{room}", publish)
    app.router.add_route("OPTIONS", "/whip/{room}/{session}", options_resource)
    app.router.add_patch("/whip/{room}/{session}", trickle)
    app.router.add_delete("/whip/{room}/{session}", end)


def _error(status: int, code: ErrorCode, message: str, **headers: str) -> web.Response:
    """This server's JSON error (``json_error``) with the CORS headers every WHIP answer carries."""
    return json_error(status, code, message, headers={**_CORS, **headers})


def _authorized(request: web.Request) -> bool:
    return token_matches(presented_token(request), request.app[CONFIG].auth_token)


async def options_endpoint(request: web.Request) -> web.Response:
    return web.Response(
        status=204, headers={**_CORS, "Access-Control-Allow-Methods": "POST, OPTIONS", "Accept-Post": "application/sdp"}
    )


async def options_resource(request: web.Request) -> web.Response:
    return web.Response(
        status=204,
        headers={**_CORS, "Access-Control-Allow-Methods": "PATCH, DELETE, OPTIONS", "Accept-Patch": _TRICKLE},
    )


async def _read_sdp(request: web.Request) -> str:
    """The body as text, refused past ``MAX_OFFER_BYTES`` (an SDP offer is a few KB)."""
    if request.content_length is not None and request.content_length > MAX_OFFER_BYTES:
        raise BodyError(413, f"over {MAX_OFFER_BYTES} bytes")
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > MAX_OFFER_BYTES:
            raise BodyError(413, f"over {MAX_OFFER_BYTES} bytes")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError(400, "the SDP is not UTF-8 text") from None


async def publish(request: web.Request) -> web.Response:
    """``POST /whip/{room}``: a new publishing session in the room."""
    app = request.app
    config, engine = app[CONFIG], app[ENGINE]
    if not _authorized(request):
        return _error(
            401,
            ErrorCode.UNAUTHORIZED,
            "publishing needs the server's token (Authorization: Bearer <token>)",
            **{"WWW-Authenticate": "Bearer"},
        )
    if request.content_type != "application/sdp":
        return _error(415, ErrorCode.BAD_MESSAGE, "send the SDP offer as application/sdp")
    try:
        name = person_name(request.query.get("name"))
    except BadName as exc:
        refused = bad_parameter(ParameterError("name", str(exc)))
        refused.headers.update(_CORS)
        return refused
    try:
        sdp = await _read_sdp(request)
    except BodyError as exc:
        refused = unreadable_body(exc.status, f"offer {exc.message}")
        refused.headers.update(_CORS)
        return refused
    try:  # the engine's state, the capacity and the room, as on every way in
        admitted = await admit_publisher(app, request.match_info["room"], name)
    except Refused as exc:
        return exc.refusal.response(_CORS)
    except NoRoom:
        return _error(
            404, ErrorCode.NO_ROOM, "there is no such room: create it first (the page's Share, or POST /rooms)"
        )
    slot, room = admitted.slot, admitted.room
    assert room is not None  # (it named one)
    try:
        peer = PeerSession(
            engine,
            config,
            app[PEERS],
            slot=slot,
            data_channel=False,
            on_shed=app[METRICS].shed,
            loss=app[METRICS],
            language=room.language,
        )
    except EngineError as exc:  # not ready after all, or every VAD row taken (the slot went back): as admission's
        return app[ADMISSION].refusal_for(exc).response(_CORS)
    try:
        answer = await peer.accept(sdp, "offer")
    except Exception as exc:  # aiortc raises ValueError and friends for SDP it cannot use
        await peer.close()
        log.info("rejected WHIP offer: %s", exc)
        return _error(400, ErrorCode.BAD_SDP, f"cannot use this offer: {exc}")
    room = await app[ROOMS].get(room.id) or room  # the room may have left memory during the awaits
    peer.join(room, admitted.name)
    headers = {**_CORS, "Location": f"/whip/{room.id}/{peer.id}", "ETag": f'"{peer.id}"'}
    response = web.Response(status=201, body=answer.sdp.encode(), content_type="application/sdp", headers=headers)
    for link in link_headers(ice_servers(config.ice, label=room.id)):  # the same servers the pages get
        response.headers.add("Link", link)
    log.info("WHIP session %s publishes into room %s", peer.id, room.id)
    return response


def _resource(request: web.Request) -> PeerSession | web.Response:
    """The WHIP session the URL names, or the error response (401 without the token, 404 if there is none)."""
    if not _authorized(request):
        return _error(401, ErrorCode.UNAUTHORIZED, "this session needs the server's token")
    peer: PeerSession | None = request.app[PEERS].get(request.match_info["session"])
    if peer is None or peer.publisher is None or peer.publisher.room.id != request.match_info["room"]:
        return _error(404, ErrorCode.NO_SESSION, "there is no such WHIP session")
    return peer


async def trickle(request: web.Request) -> web.Response:
    """``PATCH``: trickled ICE candidates from the client (``a=candidate`` lines of an SDP fragment)."""
    peer = _resource(request)
    if isinstance(peer, web.Response):
        return peer
    if request.content_type != _TRICKLE:
        return _error(415, ErrorCode.BAD_MESSAGE, f"send candidates as {_TRICKLE}", **{"Accept-Patch": _TRICKLE})
    match = request.headers.get("If-Match")
    if match not in (None, "*", f'"{peer.id}"'):
        return _error(412, ErrorCode.BAD_MESSAGE, "the ETag does not match this session")
    try:
        fragment = await _read_sdp(request)
    except BodyError as exc:
        return _error(exc.status, ErrorCode.BAD_MESSAGE, f"fragment {exc.message}")
    remote = peer.pc.remoteDescription
    ufrag = re.search(r"^a=ice-ufrag:(\S+)", fragment, re.M)
    if ufrag and remote is not None and f"a=ice-ufrag:{ufrag.group(1)}" not in remote.sdp:
        return _error(422, ErrorCode.BAD_MESSAGE, "ICE restarts are not supported: publish again")
    mid = None
    for line in fragment.splitlines():
        line = line.strip()
        if line.startswith("a=mid:"):
            mid = line[6:]
        elif line.startswith("a=candidate:"):
            try:
                candidate = candidate_from_sdp(line[2:])
            except (ValueError, IndexError):
                return _error(400, ErrorCode.BAD_MESSAGE, f"not an ICE candidate: {line[:80]}")
            if peer.config.ice.loopback_only and not is_loopback(candidate.ip):
                continue  # a candidate this server must not contact (as for the offer's own candidates)
            candidate.sdpMid = mid
            candidate.sdpMLineIndex = 0 if mid is None else None
            await peer.pc.addIceCandidate(candidate)
        elif line == "a=end-of-candidates":
            await peer.pc.addIceCandidate(None)
    return web.Response(status=204, headers=_CORS)


async def end(request: web.Request) -> web.Response:
    """``DELETE``: finish the open sentence, then close the session."""
    peer = _resource(request)
    if isinstance(peer, web.Response):
        return peer
    peer.request_stop()
    log.info("WHIP session %s ended by its client", peer.id)
    return web.Response(status=200, headers=_CORS)
