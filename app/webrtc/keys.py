"""The WebRTC side's application keys."""

from __future__ import annotations

from aiohttp import web

PEERS = web.AppKey("peers", dict)  # session id -> PeerSession
