"""OpenAI's Realtime API for transcription at ``/v1/realtime?intent=transcription``, so that clients written for
it (the ``openai`` package's ``client.realtime.connect``, LiveKit Agents' ``openai.STT(use_realtime=True)``) stream
to this server unchanged but for their base URL and key. Every connection is an ordinary engine session: admitted
like a WebRTC one, batched with every other session, endpointed and speaker-labelled, published into
``?room=<id>`` (as ``?name=<person>``), finished by a stopping server.

The protocol (OpenAI's Realtime reference, transcription sessions):

- Connect with ``Authorization: Bearer <key>`` (or the subprotocol ``openai-insecure-api-key.<key>``), checked
  against ``--auth-token``; refusals before the upgrade use the REST API's error shape (``400`` ``invalid_value``
  a ``name`` that ``app.rooms.names.person_name`` refuses, ``401``, ``404`` no such room, and admission's refusals,
  ``app.ops.admission``: ``429`` every slot of a fixed ``--max-sessions N`` in use,
  ``503`` full, loading, stopping or a failed engine; with ``Retry-After`` where waiting helps, not for a failed
  engine); an engine that will not open the session after the upgrade after all closes the socket with 1013 (try
  again later) or 1011 (failed) and the reason. The server opens with ``session.created``; a beta client
  (``OpenAI-Beta: realtime=v1``) gets the beta API's names throughout: ``transcription_session.created`` and
  ``.updated`` (the beta session object), ``conversation.item.created`` for ``conversation.item.added``.
- Client events: ``session.update`` / ``transcription_session.update`` (``realtime_config``), answered with
  ``session.updated`` / ``transcription_session.updated``; ``input_audio_buffer.append`` (base64 audio, any
  length, odd bytes included; at most 15 MiB per event), ``input_audio_buffer.commit`` and
  ``input_audio_buffer.clear``.
- With ``server_vad`` (the default), each sentence the engine hears is an item: ``input_audio_buffer.speech_started``
  when its speech begins, ``speech_stopped`` and ``committed`` (then ``conversation.item.added``) when the
  endpointer closes it, ``conversation.item.input_audio_transcription.delta`` events with its words as they
  settle (settled words never change; the last words come when it locks, so the deltas add up to the
  transcript), and one ``...completed`` with the locked sentence. A client's ``commit`` ends the sentence at once.
- With ``turn_detection: null`` the client commits: every sentence locked since the previous commit, and the open
  one (locked at once), make the committed item's one ``completed``; ``committed`` answers the commit itself.
  A commit with less than 100 ms of new audio is an ``error`` (``input_audio_buffer_commit_empty``), as OpenAI's.
- ``clear`` drops the audio not committed yet: its words will be in no item (they still reach the room: a room
  keeps everything that was said).
- Errors are ``error`` events (``{"type", "code", "message", "param", "event_id"}``: the client event's id) and
  the session goes on; a failed recognition is ``...failed`` for its item. A message over 16 MiB closes with 1009;
  a server that stops finishes every item, then closes with 1001 (OpenAI's clients reconnect). OpenAI documents no
  timeout for a quiet connection; this server closes one that sent no event for 5 minutes or no audio for
  ``--stream-idle-s`` (an ``error`` with code ``idle_timeout``, then 1000), and one older than ``--stream-max-s``
  (``session_expired``, as OpenAI's past its session limit), after finishing its items. An event whose values have
  a shape the server cannot use gets ``invalid_value``; the session goes on.

This module is the way in (key, admission, upgrade); ``realtime_stream`` translates one connection's events and the
session's messages, ``realtime_config`` the session object.
"""

from __future__ import annotations

from aiohttp import web

from engine import SessionOptions

from ..auth import presented_token, token_matches
from ..keys import CONFIG
from ..ops import NoRoom, RefusalReason, Refused, admit_publisher
from ..rooms import BadName, person_name
from .client_socket import ClientSocket
from .live_stream import open_live
from .openai_rest import ApiError
from .realtime_config import RealtimeConfig
from .realtime_stream import RealtimeStream

MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # OpenAI takes up to 15 MiB of audio per append event
# Admission's refusals in the REST API's terms: (status, error type, error code).
_REFUSALS = {
    RefusalReason.LOADING: (503, "server_error", "model_not_ready"),
    RefusalReason.ENGINE_FAILED: (503, "server_error", "engine_failed"),
    RefusalReason.SHUTTING_DOWN: (503, "server_error", "server_shutting_down"),
    RefusalReason.FULL: (503, "server_error", "server_at_capacity"),
    RefusalReason.LIMIT: (429, "rate_limit_error", "rate_limit_exceeded"),
}
_SUBPROTOCOL_KEY = "openai-insecure-api-key."


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/realtime", realtime)


def _presented_key(request: web.Request) -> tuple[str | None, str | None]:
    """The API key (``Authorization: Bearer``, ``?token=``, or the browser subprotocol
    ``openai-insecure-api-key.<key>``) and that subprotocol, if it came so."""
    for proto in (p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")):
        if proto.startswith(_SUBPROTOCOL_KEY):
            return proto[len(_SUBPROTOCOL_KEY) :], proto
    return presented_token(request), None


async def realtime(request: web.Request) -> web.StreamResponse:
    """``GET /v1/realtime``: one transcription session (see the module's docstring)."""
    app = request.app
    key, key_protocol = _presented_key(request)
    if not token_matches(key, app[CONFIG].auth_token):
        return ApiError(
            401,
            "this server needs its token: send 'Authorization: Bearer <token>' (the API key)",
            code="invalid_api_key",
        ).response()
    ws = ClientSocket.response(("realtime", *((key_protocol,) if key_protocol else ())), MAX_MESSAGE_BYTES)
    if not ws.can_prepare(request).ok:
        return ApiError(400, "connect with a WebSocket client").response()
    try:
        name = person_name(request.query.get("name"))
    except BadName as exc:
        return ApiError(400, str(exc), param="name", code="invalid_value").response()
    try:
        admitted = await admit_publisher(app, request.query.get("room"), name)
    except NoRoom as exc:
        return ApiError(404, str(exc), code="room_not_found").response()
    except Refused as exc:
        status, kind, code = _REFUSALS[exc.refusal.reason]
        response = ApiError(status, str(exc), kind=kind, code=code).response()
        response.headers.update(exc.refusal.headers)
        return response
    try:
        sock = await ClientSocket.accept(request, ws, app[CONFIG].send_timeout_s)
    except BaseException:
        admitted.slot.release()
        raise
    # Until the client's session.update names a language: the room's, for a stream into one.
    config = RealtimeConfig(language=admitted.room.language if admitted.room is not None else app[CONFIG].language)
    try:
        # The session is configured with the client's settings when its first audio arrives.
        async with open_live(
            app, admitted, SessionOptions(language=config.language, words=True), configure=False, sock=sock
        ) as live:
            await RealtimeStream(
                sock,
                live,
                config,
                beta=_speaks_beta(request),
                spoken=admitted.room.language if admitted.room is not None else None,
            ).run()
    except Refused as exc:  # (the engine would not open the session after the upgrade)
        await sock.close(exc.refusal.close_code, str(exc))
    except Exception:  # logged, and the open sentence finished, by open_live
        await sock.close(1011, "internal server error")
    return ws


def _speaks_beta(request: web.Request) -> bool:
    """The client asked for the beta API (``OpenAI-Beta: realtime=v1``): it gets the beta event names."""
    return any(p.strip() == "realtime=v1" for p in request.headers.get("OpenAI-Beta", "").split(","))
