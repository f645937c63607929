"""The outputs' application key."""

from __future__ import annotations

from aiohttp import web

from .registry import OutputRegistry

OUTPUTS = web.AppKey("outputs", OutputRegistry)  # every output of this server's rooms
