"""Liveness (``GET /health``) and readiness (``GET /ready``) for load balancers and supervisors: both answer at once,
from memory, under any load."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from engine import EngineState

from ..keys import ENGINE
from ..rooms import ROOMS
from .keys import ADMISSION


def add_routes(app: web.Application) -> None:
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)


async def health(request: web.Request) -> web.Response:
    """Liveness: answers at once (no engine call, no I/O). 200 while the server can serve or is loading; 503 once
    its speech engine failed (it failed to load, or died: then the process is on its way out)."""
    engine = request.app[ENGINE]
    if engine.state is EngineState.FAILED:
        return web.json_response({"status": "failed", "engine": "failed", "detail": engine.detail}, status=503)
    return web.json_response({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body: dict[str, Any] = {"ready": engine.state is EngineState.READY, "state": engine.state.value,
                            "model": engine.model_name, "sessions": request.app[ADMISSION].in_use,
                            "rooms": request.app[ROOMS].snapshot_stats()}
    if engine.state is not EngineState.READY and engine.detail:
        body["detail"] = engine.detail
    return web.json_response(body, status=200 if body["ready"] else 503)
