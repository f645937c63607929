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
    """Readiness: 200 once the model is loaded (503 before, or once it failed). A full server stays ready: its room
    viewers still need it, and ``admitting`` says whether it takes a new live session now; ``capacity`` says how many
    it holds on time (``engine.stream.capacity``: its estimate, the sessions live, headroom, how late finals run)."""
    engine = request.app[ENGINE]
    admission = request.app[ADMISSION]
    body: dict[str, Any] = {
        "ready": engine.state is EngineState.READY,
        "state": engine.state.value,
        "model": engine.model_name,
        "sessions": admission.in_use,
        "voices": engine.voices_active if engine.state is EngineState.READY else 0,
        "rooms": request.app[ROOMS].snapshot_stats(),
    }
    if engine.state is EngineState.READY:
        body["admitting"] = admission.check() is None
        body["max_sessions"] = "auto" if admission.auto else admission.limit
        body["capacity"] = (admission.estimate() or engine.capacity_estimate()).as_dict(
            admission.in_use, admission.talking
        )
    if engine.state is not EngineState.READY and engine.detail:
        body["detail"] = engine.detail
    return web.json_response(body, status=200 if body["ready"] else 503)
