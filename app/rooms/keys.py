"""The rooms' application keys."""

from __future__ import annotations

from aiohttp import web

from .registry import RoomRegistry
from .store.base import TranscriptStore

STORE = web.AppKey("store", TranscriptStore)
ROOMS = web.AppKey("rooms", RoomRegistry)
