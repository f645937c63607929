"""Typed application keys: what ``create_app`` stores and the handlers read."""

from __future__ import annotations

import asyncio

import jinja2
from aiohttp import web

from engine import CaptionEngine

from .admission import Admission
from .config import ServerConfig
from .drain import DrainReport, LiveStreams
from .metrics import ServerMetrics
from .rooms import RoomRegistry
from .store import TranscriptStore

CONFIG = web.AppKey("config", ServerConfig)
ENGINE = web.AppKey("engine", CaptionEngine)
PEERS = web.AppKey("peers", dict)  # session id -> PeerSession
STREAMS = web.AppKey("streams", LiveStreams)  # the live streams that are not peers (FunASR, file jobs)
DRAIN = web.AppKey("drain", DrainReport)  # what the stop finished (filled in as the server stops)
TEMPLATES = web.AppKey("templates", jinja2.Environment)
ENGINE_START = web.AppKey("engine_start", asyncio.Task)
STORE = web.AppKey("store", TranscriptStore)
ROOMS = web.AppKey("rooms", RoomRegistry)
ADMISSION = web.AppKey("admission", Admission)  # the --max-sessions cap
FILE_JOBS = web.AppKey("file_jobs", Admission)  # the --max-file-jobs cap (uploaded files transcribing at once)
EXIT_STATUS = web.AppKey("exit_status", int)  # what ``python -m app`` exits with (set when the engine died)
METRICS = web.AppKey("metrics", ServerMetrics)  # the app's Prometheus registry and event metrics
MAIN_APP = web.AppKey("main_app", web.Application)  # on a side application (--funasr-port): the server's own app
