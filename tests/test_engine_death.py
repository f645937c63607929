"""The server and its vLLM engine-core child live and die together: the real server as its own process, the real
engine, killed with SIGKILL as the OOM killer or an operator would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import psutil
import pytest

from app.config import EXIT_ENGINE_FAILED
from app.webrtc import patches
from speechdata.corpus import audio, pad
from tests.rtc_client import CaptionClient
from tests.servers import LOOPBACK

pytestmark = pytest.mark.heavy
ROOT = Path(__file__).resolve().parent.parent
LOAD_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``python -m app`` on loopback, as an operator runs it (no speaker model: not what is tested here)."""
    port = free_port()
    args = [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port), "--loopback-only",
            "--ice-host", "127.0.0.1", "--db", str(tmp_path / "captions.db"), "--no-speakers"]
    if os.environ.get("LIVE_CAPTIONS_TEST_MODEL"):
        args += ["--model", os.environ["LIVE_CAPTIONS_TEST_MODEL"]]
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    children: list[psutil.Process] = []
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        children = _engine_children(proc.pid)  # before the kill: orphans are no longer listed as children
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        log.close()
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()


def _engine_children(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).children(recursive=True)
    return []


def engine_core(pid: int) -> psutil.Process:
    """The engine-core child of the server ``pid`` (vLLM names it ``VLLM::EngineCore``)."""
    for child in _engine_children(pid):
        with contextlib.suppress(psutil.Error):
            if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name():
                return child
    raise AssertionError(f"no engine-core child under {pid}: {[c.name() for c in _engine_children(pid)]}")


async def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the server exited while loading"
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{url}/ready") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(1.0)
    raise AssertionError("the server did not become ready")


async def health_statuses(url: str, proc: subprocess.Popen[bytes], seconds: float) -> AsyncIterator[int]:
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    yield r.status
            await asyncio.sleep(0.1)


async def test_a_killed_engine_ends_sessions_with_the_reason_and_the_server_exits_for_its_supervisor(
        tmp_path: Path) -> None:
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
        others = [c for c in _engine_children(proc.pid) if c.pid != core.pid]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        gone, alive = psutil.wait_procs([core, *others], timeout=5)
        assert core in gone, "the engine core outlived its server by 5 s"
        assert not alive, f"still running: {[p.name() for p in alive]}"
