"""Compatibility protocols: other programs' ways to send speech here, each a thin adapter onto the same engine
sessions, admission and rooms as the page (never a second pipeline). ``whip`` (WHIP ingest, RFC 9725, for
broadcasters such as OBS and GStreamer), ``openai_rest`` (OpenAI's ``/v1/audio/transcriptions`` for files, through
``file_jobs`` and ``audio_files``), ``funasr`` (FunASR's realtime WebSocket protocol)."""

from __future__ import annotations

from aiohttp import web

from . import funasr, openai_rest, whip
from .funasr import side_app as funasr_side_app

__all__ = ["add_routes", "funasr_side_app"]


def add_routes(app: web.Application) -> None:
    """WHIP (``/whip/{room}``), OpenAI's ``/v1/models`` and ``/v1/audio/transcriptions``, FunASR's ``/funasr``."""
    whip.add_routes(app)
    openai_rest.add_routes(app)
    funasr.add_routes(app)
