"""The real server as its own process (``python -m app`` on loopback, as an operator runs it, with the real
engine), its vLLM engine-core child, and waiting until it is ready."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import psutil

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]  # tests/support/ is two folders down
LOAD_TIMEOUT_S = 600  # how long the server may take to load its model and become ready


@contextlib.contextmanager
def server_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``python -m app`` on loopback, as an operator runs it (no speaker model: not what is tested here)."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--loopback-only",
        "--ice-host",
        "127.0.0.1",
        "--db",
        str(tmp_path / "captions.db"),
        "--no-speakers",
    ]
    if os.environ.get("LIVE_CAPTIONS_TEST_MODEL"):
        args += ["--model", os.environ["LIVE_CAPTIONS_TEST_MODEL"]]
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    children: list[psutil.Process] = []
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        children = engine_children(proc.pid)  # before the kill: orphans are no longer listed as children
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        log.close()
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()


def engine_children(pid: int) -> list[psutil.Process]:
    """Every process under the server ``pid`` (none once it is gone)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        children: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
        return children
    return []


def engine_core(pid: int) -> psutil.Process:
    """The engine-core child of the server ``pid`` (vLLM names it ``VLLM::EngineCore``)."""
    for child in engine_children(pid):
        with contextlib.suppress(psutil.Error):
            if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name():
                return child
    raise AssertionError(f"no engine-core child under {pid}: {[c.name() for c in engine_children(pid)]}")


async def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    """Poll ``{url}/ready`` once a second until it answers 200; fails if ``proc`` exits first or after
    ``LOAD_TIMEOUT_S``."""
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
