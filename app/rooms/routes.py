"""HTTP handlers for rooms: create, status, the viewer event stream (server-sent events) and the QR code. (The
room's transcript files are ``app.transcripts``'; the pages that show a room are ``app.pages``'.)

Why server-sent events for viewers: viewers only read; SSE is plain HTTP (proxies, no upgrade, nothing to parse
for the server), and the browser's ``EventSource`` reconnects by itself and sends ``Last-Event-ID``, which is the
room ``seq``: after a network drop or a server restart the stream resumes exactly where it stopped, replayed from
the store. WebSocket would need all of that built by hand for no gain in this direction.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket

import segno
from aiohttp import web

from engine import LANGUAGE_CODES, ErrorCode

from ..auth import presented_token, token_matches
from ..bodies import BodyError, read_json_object
from ..keys import CONFIG, ENGINE
from ..responses import http_error, json_error, unreadable_body
from .holdback import MAX_DELAY_S
from .keys import ROOMS
from .room import ROOM_ID_PATTERN, Room
from .stream import Stream
from .translating import SOURCE_LANGUAGE, asked_language, room_languages
from .viewer import Viewer

log = logging.getLogger(__name__)

HEARTBEAT_S = 15.0  # a `ping` event this often keeps proxies from closing an idle stream and finds dead clients
RETRY_MS = 2000  # EventSource's reconnect delay after a drop
MAX_ROOM_BODY_BYTES = 4096
SSE_SEND_BUFFER_BYTES = 32 * 1024  # kernel send buffer per viewer stream (see _small_send_buffer)


def add_routes(app: web.Application) -> None:
    room = "/rooms/{room:" + ROOM_ID_PATTERN + "}"
    app.router.add_post("/rooms", create_room)
    app.router.add_get(room, room_status)
    app.router.add_get(room + "/events", room_events)
    app.router.add_get(room + "/qr.svg", room_qr)


def base_url(request: web.Request) -> str:
    """Where clients reach this server: ``--public-url``, else the URL this request came to."""
    configured = request.app[CONFIG].public_url
    return configured.rstrip("/") if configured else str(request.url.origin())


def room_links(
    request: web.Request, room_id: str, viewer_token: str | None, editor_token: str | None = None
) -> dict[str, str]:
    """The room's URLs for its audience (with its viewer token, if private): ``join`` is the page a person at the
    meeting joins from with a name and their own microphone; and its editor page (with ``editor_token``, when given:
    only at creation)."""
    base = base_url(request)
    query = f"room={room_id}" + (f"&token={viewer_token}" if viewer_token else "")
    auth = f"?token={viewer_token}" if viewer_token else ""
    links = {
        "view": f"{base}/view?{query}",
        "kiosk": f"{base}/kiosk?{query}",
        "embed": f"{base}/embed?{query}",
        "join": f"{base}/join?{query}",
        "events": f"{base}/rooms/{room_id}/events{auth}",
        "transcript": f"{base}/rooms/{room_id}/transcript.txt{auth}",
    }
    if editor_token is not None:
        links["edit"] = f"{base}/rooms/{room_id}/edit?token={editor_token}"
    return links


async def create_room(request: web.Request) -> web.Response:
    """``POST /rooms`` ``{"title"?: str, "private"?: bool, "delay_s"?: number, "language"?: str, "languages"?:
    [str]}`` -> 201 ``{"room", "viewer_token", "editor_token", "language", "languages", "links"}``. Needs the server's
    auth token when one is configured. ``viewer_token``: private rooms only. ``delay_s`` (0-30): the audience's
    hold-back delay (``app.rooms.holdback``). ``language``: what its sessions speak (a Whisper language code, "en"
    unless given; fixed for the room's life: its sentences, files and translations all start from it).
    ``languages``: what its sentences are translated into (``app.rooms.language_routes``; 400 for one this server
    cannot produce from ``language``)."""
    if not token_matches(presented_token(request), request.app[CONFIG].auth_token):
        return json_error(401, ErrorCode.UNAUTHORIZED, "creating a room needs the server's token")
    try:
        params = await read_json_object(request, MAX_ROOM_BODY_BYTES, empty_ok=True)
    except BodyError as exc:
        return unreadable_body(exc.status, exc.message)
    title, private, delay_s = params.get("title", ""), params.get("private", False), params.get("delay_s", 0)
    # A wrong type is an error, never a default: "private": "true" must not quietly create an open room.
    if not isinstance(title, str) or not isinstance(private, bool):
        return json_error(400, ErrorCode.BAD_MESSAGE, '"title" must be a string and "private" true or false')
    if isinstance(delay_s, bool) or not isinstance(delay_s, int | float) or not 0 <= delay_s <= MAX_DELAY_S:
        return json_error(
            400, ErrorCode.BAD_MESSAGE, f'"delay_s" must be a number of seconds from 0 to {MAX_DELAY_S:g}'
        )
    unknown = sorted(set(params) - {"title", "private", "delay_s", "language", "languages"})
    if unknown:
        return json_error(
            400,
            ErrorCode.BAD_MESSAGE,
            f"unknown field {unknown[0]!r}: expected title, private, delay_s, language, languages",
        )
    language = params.get("language", SOURCE_LANGUAGE)
    if not isinstance(language, str) or language not in LANGUAGE_CODES:
        return json_error(
            400,
            ErrorCode.BAD_MESSAGE,
            '"language" must be a language code the recognizer knows (Whisper\'s: "en", "es", "zh", ...)',
        )
    cannot = request.app[ENGINE].cannot_caption(language)
    if cannot:
        return json_error(400, ErrorCode.BAD_MESSAGE, f"a room spoken in {language!r} cannot be made here: {cannot}")
    try:
        languages = room_languages(params.get("languages", []), request.app[ROOMS].translatable(language), language)
    except ValueError as exc:
        return json_error(400, ErrorCode.BAD_MESSAGE, str(exc))
    new = await request.app[ROOMS].create(
        title, private=private, delay_s=float(delay_s), languages=languages, language=language
    )
    room = new.room
    return web.json_response(
        {
            "room": room.id,
            "viewer_token": new.viewer_token,
            "editor_token": new.editor_token,
            "language": room.language,
            "languages": list(room.languages),
            "links": room_links(request, room.id, new.viewer_token, new.editor_token),
        },
        status=201,
    )


async def viewable_room(request: web.Request, keep: bool = False) -> Room:
    """The room named in the path, if this request may view it; raises 404 / 403 as JSON otherwise. Holders of
    the server's auth token may view every room. ``keep``: see ``RoomRegistry.get`` (only subscribers keep)."""
    room = await request.app[ROOMS].get(request.match_info["room"], keep=keep)
    if room is None:
        raise http_error(404, ErrorCode.NO_ROOM, "there is no such room")
    token = presented_token(request)
    admin = request.app[CONFIG].auth_token
    if not room.may_view(token) and not (admin is not None and token_matches(token, admin)):
        raise http_error(403, ErrorCode.UNAUTHORIZED, "this room needs its viewer token")
    return room


def may_edit(request: web.Request, room: Room) -> bool:
    """Whether the request carries ``room``'s editor token or the server's token."""
    token = presented_token(request)
    admin = request.app[CONFIG].auth_token
    return room.may_edit(token) or (admin is not None and token_matches(token, admin))


async def room_status(request: web.Request) -> web.Response:
    room = await viewable_room(request)
    return web.json_response(
        {
            **room.status(editor=may_edit(request, room)).wire(),
            "title": room.record.title,
            "created_ms": room.record.created_ms,
            "private": room.private,
            "delay_s": room.audience.delay_s,
            "language": room.language,
            "languages": list(room.languages),
            "translations_waiting": room.translating.waiting if room.translating else 0,
        }
    )


QR_PAGES = {"view": "X-Viewer-Url", "join": "X-Join-Url"}  # ?page= -> the header that names the URL encoded


async def room_qr(request: web.Request) -> web.Response:
    """An SVG QR code of the room's phone viewer URL, or with ``?page=join`` of its join page (where a person at the
    meeting joins with a name and their phone's microphone); made here, no outside service. The URL is also in the
    ``X-Viewer-Url`` (``X-Join-Url``) header.

    A private room's URL carries the room's *viewer* token, however the request was authorised: never the server's
    token (the code is shown on screens in meeting rooms), and never nothing (the code must open the room)."""
    target = request.query.get("page", "view")
    if target not in QR_PAGES:
        raise http_error(400, ErrorCode.BAD_MESSAGE, '"page" must be "view" or "join"')
    room = await viewable_room(request)
    token = None
    if room.private:
        presented = presented_token(request)
        token = room.record.viewer_token or (presented if room.may_view(presented) else None)
        if token is None:  # a room made before viewer tokens were kept, asked for with the server's token
            raise http_error(
                409,
                ErrorCode.NO_VIEWER_TOKEN,
                "this room's viewer token was not kept; ask with the viewer token itself",
            )
    url = room_links(request, room.id, token)[target]
    buffer = io.BytesIO()
    # Black on white with a quiet zone, whatever the page's theme: phone cameras read that best.
    segno.make(url, error="m").save(
        buffer, kind="svg", xmldecl=False, svgns=True, scale=1, border=2, omitsize=True, dark="#000", light="#fff"
    )
    return web.Response(
        body=buffer.getvalue(),
        content_type="image/svg+xml",
        headers={"Cache-Control": "no-store", QR_PAGES[target]: url},
    )


async def room_events(request: web.Request) -> web.StreamResponse:
    """``GET /rooms/{id}/events``: the room as server-sent events, one JSON message per event.

    Without ``Last-Event-ID`` (or ``?after=``) it starts with one ``caption`` holding every sentence so far (then
    the room's speaker names, as a ``correction``); with it, the stored events after that seq are replayed, each
    sentence as it now is. Then a ``room`` status, the current partial, and live updates. Durable events carry
    ``id: <seq>``; partials and status carry none (they are never replayed). ``?words=1``: sentences carry their word
    times, and ``words`` updates are sent (else only their ids). ``?editor=1`` (the room's editor token or the
    server's): everything at once whatever the room's delay, and its ``vocabulary``; else what the audience gets.
    ``?lang=es``: the room in one of its languages (``app.rooms.stream``); 400 for one it does not have.
    """
    room = await viewable_room(request, keep=True)
    after = _after_seq(request)
    lang = stream_language(request, room)
    words = request.query.get("words", "0") in ("1", "true")  # word times in each sentence: opt-in
    editor = request.query.get("editor", "0") in ("1", "true")
    if editor and not may_edit(request, room):
        raise http_error(403, ErrorCode.UNAUTHORIZED, "the editor's stream needs the room's editor token")
    stream = Stream(room, editor, words, lang)
    # Subscribe before reading the store: nothing committed meanwhile can be missed. A viewer that stops reading
    # sits in a socket write; if it falls too far behind, its connection is aborted to free it.
    viewer = room.subscribe(on_overflow=lambda: _abort(request), editor=editor)
    _small_send_buffer(request)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )
    try:
        await response.prepare(request)
        await response.write(f"retry: {RETRY_MS}\n\n".encode())
        last = await stream.catch_up(response, after)
        room.heard(last)  # the store may be ahead of this front end (a notice not yet heard): catch the room up
        await stream.send(response, room.status(editor), None)
        if room.partial() and stream.partials:
            await stream.send(response, room.partial_message(), None)
        await _follow(response, viewer, last, stream)
    except ConnectionResetError:
        pass  # the viewer went away (or was cut off): nothing to clean but the subscription
    finally:
        room.unsubscribe(viewer)
    return response


def stream_language(request: web.Request, room: Room) -> str | None:
    """The room language a request asks for (``?lang=``): None for the spoken one, or one of the room's languages;
    raises 400 for any other."""
    raw = request.query.get("lang", "")
    if not raw:
        return None
    try:
        return asked_language(raw, room.languages, room.language)
    except ValueError as exc:
        raise http_error(400, ErrorCode.BAD_MESSAGE, f'"lang": {exc}') from None


def _small_send_buffer(request: web.Request) -> None:
    """Keep at most ``SSE_SEND_BUFFER_BYTES`` per viewer in the kernel. Otherwise the kernel absorbs megabytes for
    a client that stopped reading (Linux grows send buffers by itself), the viewer's queue never fills, and the
    server never notices that the client is thousands of events behind."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SSE_SEND_BUFFER_BYTES)


def _abort(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()


async def _follow(response: web.StreamResponse, viewer: Viewer, last: int, stream: Stream) -> None:
    while True:
        try:
            item = await viewer.get(HEARTBEAT_S)
        except TimeoutError:
            await response.write(b"event: ping\ndata: {}\n\n")  # a named event: pages can watch for silence
            continue
        if item is None:
            return
        if item.durable:
            if item.seq <= last:
                continue  # already sent from the store
            last = item.seq
        await stream.send(response, item.message, item.seq if item.durable else None)


def _after_seq(request: web.Request) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.query.get("after")
    with contextlib.suppress(ValueError, TypeError):
        value = int(raw) if raw is not None else None
        return value if value is None or value >= 0 else None
    return None
