"""``GET /metrics``: the app's Prometheus registry (``app.ops.metrics``), guarded as ``--metrics`` says."""

from __future__ import annotations

from aiohttp import web

from engine import ErrorCode

from ..auth import presented_token, token_matches
from ..config import MetricsAccess
from ..keys import CONFIG
from ..responses import json_error
from .keys import METRICS


def add_routes(app: web.Application) -> None:
    """``GET /metrics`` unless ``--metrics off`` (then it is a 404 like any unknown path)."""
    if app[CONFIG].metrics != MetricsAccess.OFF:
        app.router.add_get("/metrics", metrics)


async def metrics(request: web.Request) -> web.Response:
    """The registry in Prometheus' text format (OpenMetrics when the scraper asks for it). With ``--metrics token``
    (the default) and an ``--auth-token``, 401 unless the request carries that token."""
    config = request.app[CONFIG]
    needed = config.auth_token if config.metrics == MetricsAccess.TOKEN else None
    if needed is not None and not token_matches(presented_token(request), needed):
        return json_error(
            401,
            ErrorCode.UNAUTHORIZED,
            "metrics need the server's token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": 'Bearer realm="live-captions"'},
        )
    body, content_type = request.app[METRICS].exposition(request.headers.get("Accept", ""))
    return web.Response(body=body, headers={"Content-Type": content_type, "Cache-Control": "no-store"})
