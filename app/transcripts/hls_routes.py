"""A room's captions for HLS players over HTTP: ``GET /rooms/{id}/captions.m3u8`` (a live WebVTT subtitle media
playlist) and ``GET /rooms/{id}/captions/{n}.vtt`` (its segments). What they hold and when is ``hls``'. Both take
``?lang=`` (one of the room's languages: each sentence's translation at the source's timing, the same cue rules), and
``GET /rooms/{id}/captions/master.m3u8?video=<URI>`` is a master playlist pairing a video's playlist with one
``SUBTITLES`` rendition per room language (``hls_master``).

Access is the transcript files': an open room by its id, a private one with its viewer token (``?token=``, or
``Authorization: Bearer``); the playlist's segment URLs carry the ``?token=`` it was asked with, since players
fetch them without headers of their own. Any origin may read them (``CORS``); no browser may take them for another
type (``exports.NOSNIFF``).

Players reload the playlist every few seconds and fetch each segment once, many of them for one room: a segment is
made once per room state (the room's ``seq``) and kept in a small cache, and a room's end, which another front end
may have written, is read from the store at most every ``ENDED_RECHECK_S``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections import OrderedDict
from typing import Generic, TypeVar
from urllib.parse import quote

from aiohttp import web

from engine.protocol import ErrorCode

from ..responses import json_error
from ..rooms import (
    ROOM_ID_PATTERN,
    STORE,
    Room,
    SentenceRecord,
    Snapshot,
    stream_language,
    viewable_room,
)
from . import exports, hls, hls_master

ENDED_RECHECK_S = 2.0  # must stay well under hls.END_GRACE_MS
# Players in web pages (hls.js) fetch the playlist and segments from the video page's origin; captions carry no
# cookie and a private room's token is in the URL, so any origin may read them.
CORS = {"Access-Control-Allow-Origin": "*"}
CACHED_SEGMENTS = 256  # a few KB each: the segments of the windows of a few dozen live rooms
K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """The newest ``size`` entries."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class HlsState:
    """Per server: segments made (``(room, lang, n, seq, timing, closed_ms)`` -> WebVTT), last cue ends of closed
    playlists (``(room, seq, closed_ms)`` -> ms), and when each room's end was last read from a shared store (room
    -> (monotonic s, ``ended_ms``))."""

    def __init__(self) -> None:
        self.segments: _Lru[tuple[str, str, int, int, hls.Timing, int | None], str] = _Lru(CACHED_SEGMENTS)
        self.last_ends: _Lru[tuple[str, int, int], int | None] = _Lru(CACHED_SEGMENTS)
        self.ended: _Lru[str, tuple[float, int | None]] = _Lru(4096)


HLS = web.AppKey("hls", HlsState)


def add_routes(app: web.Application) -> None:
    app[HLS] = HlsState()
    room = "/rooms/{room:" + ROOM_ID_PATTERN + "}"
    app.router.add_get(room + "/captions.m3u8", captions_playlist)
    app.router.add_get(room + "/captions/master.m3u8", master_playlist)
    app.router.add_get(room + r"/captions/{n:\d{1,9}}.vtt", captions_segment)


async def captions_playlist(request: web.Request) -> web.Response:
    """``GET /rooms/{id}/captions.m3u8[?lang=es]``: the room's live WebVTT media playlist (``hls.playlist``), in
    one of its languages; 400 for a language it does not have."""
    room = await viewable_room(request)
    lang = stream_language(request, room)
    schedule = await _schedule(request, room)
    suffix = _query(request.query.get("token"), lang)
    text = hls.playlist(schedule, room.record.created_ms, lambda n: f"captions/{n}.vtt{suffix}")
    # Players reload it every few seconds: a second of caching lets a CDN answer most of them, no more.
    return web.Response(
        text=text,
        content_type=hls.PLAYLIST_MIME,
        charset="utf-8",
        headers={**CORS, **exports.NOSNIFF, "Cache-Control": "max-age=1"},
    )


async def master_playlist(request: web.Request) -> web.Response:
    """``GET /rooms/{id}/captions/master.m3u8?video=<URI>[&bandwidth=<bit/s>][&resolution=<W>x<H>][&codecs=<list>]``:
    a master playlist with the video's media playlist as its one variant and the room's captions in every language
    as its ``SUBTITLES`` renditions (``hls_master``). ``video`` is written into the playlist for players to
    fetch, never fetched here; a value that would not be one URI line is refused (400), without being repeated."""
    room = await viewable_room(request)
    try:
        video = hls_master.Variant.parse(request.query)
    except ValueError as exc:
        return _refused(400, ErrorCode.BAD_PARAMETER, str(exc))
    token = request.query.get("token")
    renditions = [hls_master.Rendition(room.language, f"../captions.m3u8{_query(token, None)}")]
    renditions += [hls_master.Rendition(lang, f"../captions.m3u8{_query(token, lang)}") for lang in room.languages]
    text = hls_master.master_playlist(video, renditions)
    return web.Response(
        text=text,
        content_type=hls.PLAYLIST_MIME,
        charset="utf-8",
        headers={**CORS, **exports.NOSNIFF, "Cache-Control": "max-age=1"},
    )


def _query(token: str | None, lang: str | None) -> str:
    """The query a playlist's URIs carry: the viewer token it was asked with (players send no headers of their
    own) and the room language."""
    params = [f"token={quote(token, safe='')}"] if token else []
    if lang is not None:
        params.append(f"lang={quote(lang, safe='')}")
    return "?" + "&".join(params) if params else ""


def _refused(status: int, code: ErrorCode, message: str) -> web.Response:
    response = json_error(status, code, message)
    response.headers.update({**CORS, **exports.NOSNIFF, "Cache-Control": "no-store"})
    return response


async def captions_segment(request: web.Request) -> web.Response:
    """``GET /rooms/{id}/captions/{n}.vtt[?lang=es]``: segment ``n`` once listed (``404 no_segment`` before), also
    after it left the playlist's window."""
    room = await viewable_room(request)
    lang = stream_language(request, room)
    n = int(request.match_info["n"])
    schedule = await _schedule(request, room)
    if n >= schedule.count:
        return _refused(404, ErrorCode.NO_SEGMENT, "this segment is not listed yet")
    state = request.app[HLS]
    key = (room.id, lang or "", n, room.seq, schedule.timing, schedule.closed_ms)
    text = state.segments.get(key)
    if text is None:
        snapshot, committed = await _sentences(room, hls.commits_needed_after(n, schedule), lang)
        text = await asyncio.to_thread(_segment_text, n, snapshot.sentences, committed, schedule, snapshot.names)
        state.segments.put(key, text)
    # A listed segment changes only if an editor corrects it later, and players fetch it once: a CDN may keep it
    # while it can be in the playlist.
    max_age = schedule.timing.window * schedule.timing.segment_ms // 1000
    return web.Response(
        text=text,
        content_type=hls.SEGMENT_MIME,
        charset="utf-8",
        headers={**CORS, **exports.NOSNIFF, "Cache-Control": f"max-age={max_age}"},
    )


def _segment_text(
    n: int, sentences: list[SentenceRecord], committed: dict[int, float], schedule: hls.Schedule, names: dict[int, str]
) -> str:
    return hls.segment_vtt(hls.segment_cues(n, sentences, committed, schedule, names), names)


async def _schedule(request: web.Request, room: Room) -> hls.Schedule:
    """The room's segments now, for its audience."""
    timing = hls.Timing.current()
    created = room.record.created_ms
    now = _wall_ms() - created - round(room.audience.delay_s * 1000)
    ended = await _ended_ms(request, room)
    if ended is None or now < timing.closes_at(ended - created):
        return hls.live_schedule(timing, now)
    closed = timing.closes_at(ended - created)
    state = request.app[HLS]
    key = (room.id, room.seq, closed)
    last_end = state.last_ends.get(key)
    if last_end is None:
        snapshot, committed = await _sentences(room, closed)
        last_end = await asyncio.to_thread(hls.last_cue_end, snapshot.sentences, committed, closed, snapshot.names)
        state.last_ends.put(key, last_end)
    return hls.closed_schedule(timing, closed, last_end)


async def _ended_ms(request: web.Request, room: Room) -> int | None:
    """When the room ended (ms since the Unix epoch; None: it runs). A room in memory knows if it was ended here;
    on a store shared with other front ends the record may be older than an end written there, so it is read
    again, at most every ``ENDED_RECHECK_S``."""
    ended = room.record.ended_ms
    store = request.app[STORE]
    if ended is not None or not store.shared:
        return ended
    state = request.app[HLS]
    checked = state.ended.get(room.id)
    now = time.monotonic()
    if checked is not None and now - checked[0] < ENDED_RECHECK_S:
        return checked[1]
    record = await store.room(room.id)
    ended = record.ended_ms if record is not None else None
    state.ended.put(room.id, (now, ended))
    return ended


async def _sentences(room: Room, since_ms: float, lang: str | None = None) -> tuple[Snapshot, dict[int, float]]:
    """The room's sentences (corrected, without the deleted ones; in room language ``lang``, None for the spoken
    one: each with its source's commit time, a translation being committed within a second of it), and when each
    sentence committed at or after room time ``since_ms`` was committed (room time; see ``hls.committed_by``).
    Sentences the store has not taken yet (a full disk) count as committed now.

    What the audience of a room with a delay does not have yet is left out by the listing rule itself (``hls``: a
    segment holds only what was committed a delay before it is listed), by the store's commit times, which are the
    same on every front end. The room's ``Audience`` is not asked: it holds an event from when this front end heard
    of it, which may be later than its commit (another front end's), and a segment made while it held a caption
    the rule puts there would lose the caption for good (players fetch a segment once)."""
    created = room.record.created_ms
    snapshot = await room.read_snapshot()
    if lang is not None:
        snapshot = dataclasses.replace(snapshot, sentences=[s.translated(lang) for s in snapshot.sentences])
    # The commit times after the snapshot: a caption committed between the two reads must not pass for an old one.
    since = created + max(0, math.floor(since_ms)) if math.isfinite(since_ms) else 0
    committed: dict[int, float] = {sid: ms - created for sid, ms in (await room.read_commit_times(since)).items()}
    return snapshot, committed


def _wall_ms() -> int:
    return int(time.time() * 1000)
