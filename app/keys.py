"""Typed application keys of the whole server: what ``create_app`` stores and every layer may read. Each package
keeps its own (``app.webrtc.keys``, ``app.rooms.keys``, ``app.ops.keys``), so this module imports nothing of them."""

from __future__ import annotations

import asyncio

import jinja2
from aiohttp import web

from engine import CaptionEngine

from .config import ServerConfig

CONFIG = web.AppKey("config", ServerConfig)
ENGINE = web.AppKey("engine", CaptionEngine)
TEMPLATES = web.AppKey("templates", jinja2.Environment)
ENGINE_START = web.AppKey("engine_start", asyncio.Task)
EXIT_STATUS = web.AppKey("exit_status", int)  # what ``python -m app`` exits with (set when the engine died)
MAIN_APP = web.AppKey("main_app", web.Application)  # on a side application (--funasr-port): the server's own app
