"""Compatibility protocols: other programs' ways to send speech here, each a thin adapter onto the same engine
sessions, admission and rooms as the page (never a second pipeline). ``whip`` (WHIP ingest, RFC 9725, for
broadcasters such as OBS and GStreamer), ``openai_rest`` (OpenAI's ``/v1/audio/transcriptions`` for files, through
``file_jobs`` and ``audio_files``), ``funasr`` (FunASR's realtime WebSocket protocol), ``deepgram`` (Deepgram's
live ``/v1/listen``) and ``openai_realtime`` (OpenAI's Realtime transcription sessions, ``/v1/realtime``, one
connection's events in ``realtime_stream``); the live WebSocket protocols share ``client_socket`` (pings, a send
deadline, hang-ups, closes, parsing a client's JSON), ``live_stream`` (admission, session, room, limits, drain),
``read_ahead`` (the client's messages, read ahead of the engine) and ``live_audio`` (decoding, resampling,
backpressure)."""

from __future__ import annotations

from aiohttp import web

from . import deepgram, deepgram_files, funasr, openai_realtime, openai_rest, whip
from .funasr import side_app as funasr_side_app

__all__ = ["add_routes", "funasr_side_app"]


def add_routes(app: web.Application) -> None:
    """WHIP (``/whip/{room}``), OpenAI's ``/v1/models`` and ``/v1/audio/transcriptions``, FunASR's ``/funasr``,
    Deepgram's ``/v1/listen`` (live, and ``POST`` for files), OpenAI's ``/v1/realtime``."""
    whip.add_routes(app)
    openai_rest.add_routes(app)
    funasr.add_routes(app)
    deepgram.add_routes(app)
    deepgram_files.add_routes(app)
    openai_realtime.add_routes(app)
