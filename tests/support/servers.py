"""Run the real aiohttp app in-process on a loopback port for tests."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any

from aiohttp import web

from app.config import IceConfig, ServerConfig
from app.server import create_app
from engine.stream.capacity import Capacity
from engine.stream.engine import CaptionEngine

# A fixed session cap, not the server's own estimate (``--max-sessions auto``): a test's clients run in the server's
# process and often faster than real time, so the estimate there depends on the machine and on the test, not on what
# the test is about. The capacity tests ask for ``max_sessions=None`` (auto) themselves.
TEST_MAX_SESSIONS = 16
# Apertium off unless a test asks (apertium=True): a server that translates starts and warms a pipeline per pair.
LOOPBACK = ServerConfig(
    ice=IceConfig(hosts=("127.0.0.1",), loopback_only=True), max_sessions=TEST_MAX_SESSIONS, apertium=False
)


@asynccontextmanager
async def running_server(
    engine: CaptionEngine | None, **overrides: object
) -> AsyncIterator[tuple[str, web.Application]]:
    """Serve ``create_app`` on 127.0.0.1 (a free port, or ``port=`` to restart a server where it was); yields
    (base URL, app)."""
    port = int(overrides.pop("port", 0))  # type: ignore[call-overload]
    translation: Any = overrides.pop("translator", None)  # translation engines (a fake's), else the config's
    app = create_app(replace(LOOPBACK, **overrides), engine=engine, translation=translation)  # type: ignore[arg-type]
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


@contextmanager
def capacity_afresh(engine: CaptionEngine) -> Iterator[Capacity]:
    """For the block, ``engine``'s capacity estimate is a freshly started server's (its warm-up figure, nothing
    measured yet): the tests before have measured loads of their own on the shared engine, which a server keeps until
    new ones replace them. Yields the fresh estimate; the engine's own is back afterwards."""
    old = engine.capacity
    fresh = Capacity(
        old.config, old.load, front_cores=old.front_cores, most=old.most, window_for=old._window_for
    )  # (the engine's own window policy)
    engine.observers.remove(old)
    engine.observers.add(fresh)
    engine.capacity = fresh
    try:
        yield fresh
    finally:
        engine.observers.remove(fresh)
        engine.observers.add(old)
        engine.capacity = old
