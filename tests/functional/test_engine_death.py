"""The server and its vLLM engine-core child live and die together: the real server as its own process, the real
engine, killed with SIGKILL as the OOM killer or an operator would."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psutil
import pytest

from app.config import EXIT_ENGINE_FAILED
from app.webrtc import patches
from speechdata.corpus import audio, pad
from tests.support.rtc_client import CaptionClient
from tests.support.server_process import engine_children, engine_core, server_process, wait_ready
from tests.support.servers import LOOPBACK

pytestmark = pytest.mark.heavy


async def health_statuses(url: str, proc: subprocess.Popen[bytes], seconds: float) -> AsyncIterator[int]:
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    yield r.status
            await asyncio.sleep(0.1)


async def test_a_killed_engine_ends_sessions_with_the_reason_and_the_server_exits_for_its_supervisor(
    tmp_path: Path,
) -> None:
    with server_process(tmp_path) as (proc, url):
        await wait_ready(url, proc)
        core = engine_core(proc.pid)
        patches.install_ice(LOOPBACK.ice)  # this process's client offers loopback candidates, as the server expects
        client = CaptionClient(url, pad(audio("ls_1988-24833-0000"), 0.3, 60.0))
        await client.connect()
        await asyncio.sleep(6.0)  # captions flowing
        core.send_signal(signal.SIGKILL)
        statuses = [s async for s in health_statuses(url, proc, 30.0)]
        await asyncio.wait_for(client.stopped.wait(), 10)
        await client.close()
        assert proc.wait(30) == EXIT_ENGINE_FAILED, (tmp_path / "server.log").read_text()[-3000:]
    ended = [m for m in client.messages if m["type"] == "error" and m["code"] == "engine"]
    assert ended and "engine" in ended[-1]["message"], client.messages[-5:]
    assert 503 in statuses, f"/health never said the engine failed: {statuses}"
    assert client.sentences(), "sentences locked before the failure were delivered"


async def test_the_engine_core_dies_with_a_killed_server(tmp_path: Path) -> None:
    with server_process(tmp_path) as (proc, url):
        await wait_ready(url, proc)
        core = engine_core(proc.pid)
        others = [c for c in engine_children(proc.pid) if c.pid != core.pid]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        gone, alive = psutil.wait_procs([core, *others], timeout=5)
        assert core in gone, "the engine core outlived its server by 5 s"
        assert not alive, f"still running: {[p.name() for p in alive]}"
