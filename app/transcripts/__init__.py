"""Transcript files: a room's (or the page's) locked sentences as TXT, SRT, WebVTT or JSON. ``cues`` cuts the
words into subtitle cues (lines, reading speed, pauses, speaker changes; ``line_breaks`` places the line break),
``exports`` renders the formats, ``routes`` serves them."""

from __future__ import annotations

from .cues import speaker_name
from .exports import to_srt, to_vtt
from .line_breaks import break_lines
from .routes import add_routes

__all__ = ["add_routes", "break_lines", "speaker_name", "to_srt", "to_vtt"]
