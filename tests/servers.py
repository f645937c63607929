"""Run the real aiohttp app in-process on a loopback port for tests."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from aiohttp import web

from app.config import IceConfig, ServerConfig
from app.server import create_app
from engine.stream.engine import CaptionEngine

# A fixed session cap, not the server's own estimate (``--max-sessions auto``): a test's clients run in the server's
# process and often faster than real time, so the estimate there depends on the machine and on the test, not on what
# the test is about. The capacity tests ask for ``max_sessions=None`` (auto) themselves.
TEST_MAX_SESSIONS = 16
LOOPBACK = ServerConfig(ice=IceConfig(hosts=("127.0.0.1",), loopback_only=True), max_sessions=TEST_MAX_SESSIONS)


@asynccontextmanager
async def running_server(engine: CaptionEngine | None,
                         **overrides: object) -> AsyncIterator[tuple[str, web.Application]]:
    """Serve ``create_app`` on 127.0.0.1 (a free port, or ``port=`` to restart a server where it was); yields
    (base URL, app)."""
    port = int(overrides.pop("port", 0))  # type: ignore[call-overload]
    app = create_app(replace(LOOPBACK, **overrides), engine=engine)  # type: ignore[arg-type]
    async with serving(app, port) as url:
        yield url, app


@asynccontextmanager
async def serving(app: web.Application, port: int = 0, **runner_options: Any) -> AsyncIterator[str]:
    """Serve any aiohttp ``app`` on 127.0.0.1 (``port`` 0: a free one; another: rebound where it was); yields its
    base URL and stops it when the block ends. ``runner_options`` go to ``web.AppRunner``."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def free_port() -> int:
    """A loopback port free at the time of the call (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
