"""Transcript files: a room's (or the page's) locked sentences as TXT, SRT, WebVTT, JSON or SCC (CEA-608, ``scc``).
``cues`` cuts the words into subtitle cues (lines, reading speed, pauses, speaker changes; ``line_breaks`` places the
line break), ``exports`` renders the formats, ``routes`` serves them; ``hls`` and ``hls_routes`` give a room's
captions to HLS players as a live WebVTT subtitle playlist."""

from __future__ import annotations

from aiohttp import web

from . import hls_routes, routes
from .cues import speaker_name
from .exports import to_srt, to_vtt
from .line_breaks import break_lines

__all__ = ["add_routes", "break_lines", "speaker_name", "to_srt", "to_vtt"]


def add_routes(app: web.Application) -> None:
    """The transcript files and the HLS captions."""
    routes.add_routes(app)
    hls_routes.add_routes(app)
