"""A room's captions out to where audiences watch: YouTube Live's caption ingestion, OBS Studio (which puts them in
the stream it sends), configured per room (``POST /rooms/{id}/outputs``) and kept with it in the store.

``target`` is the contract of one destination; ``youtube`` (and ``obs``) implement it, ``kinds`` makes them by
name; ``destinations`` is where they may connect (the operator's outbound policy), ``failures`` what their errors
may say. ``runner`` follows a room's audience stream for one output (``pending`` is its queue), ``registry`` holds a
server's outputs and keeps them in the store, ``routes`` is the HTTP API. ``layout`` is how a caption is written
on screen (the composition root hands in ``app.transcripts``' line breaking and speaker names)."""

from __future__ import annotations

from aiohttp import web

from . import routes
from .destinations import DestinationPolicy
from .keys import OUTPUTS
from .layout import Layout
from .registry import OutputRegistry
from .runner import OutputState
from .target import OutgoingCaption, Target, TargetError

__all__ = [
    "OUTPUTS",
    "DestinationPolicy",
    "Layout",
    "OutgoingCaption",
    "OutputRegistry",
    "OutputState",
    "Target",
    "TargetError",
    "add_routes",
]


def add_routes(app: web.Application) -> None:
    """``/rooms/{id}/outputs``: add, list and remove a room's outputs."""
    routes.add_routes(app)
