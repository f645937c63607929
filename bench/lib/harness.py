"""What the transport benches share: the bench server as a subprocess, its CPU and memory, and N clients at once.

CPU is read with psutil from the server process and all its children (vLLM's EngineCore included), never from the
bench process that runs the clients, so the clients' own cost (Opus packetising, SRTP, ICE) is not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import av
import numpy as np
import psutil

from app.config import IceConfig
from app.webrtc.patches import install_ice as install_ice_policy
from bench.lib.client import BenchClient, PacketLoss, Refused

ROOT = Path(__file__).resolve().parents[2]  # the repository


def machine_info() -> dict[str, Any]:
    """This machine's CPU model, core count, whether it has AVX-512 BF16 (``/proc/cpuinfo``), Python's version and
    the load average now: what a bench's JSON says of where it ran."""
    model, flags = platform.processor(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    return {
        "model": model,
        "cpus": psutil.cpu_count(),
        "avx512_bf16": "avx512_bf16" in flags,
        "python": platform.python_version(),
        "load_avg": psutil.getloadavg(),
    }


async def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write a bench's results (its folder made if missing, off the event loop) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(path.write_text, json.dumps(document, indent=2, default=str), "utf-8")
    print(f"JSON: {path}")


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def tree_cpu_rss(proc: psutil.Process) -> tuple[float, int]:
    """(user+system CPU seconds, RSS bytes) of a process and all its descendants."""
    cpu, rss = 0.0, 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:  # the server is gone
        return cpu, rss
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            cpu += t.user + t.system
            rss += p.memory_info().rss
    return cpu, rss


@dataclass
class CpuTrace:
    """(monotonic time, CPU seconds, RSS) of the server tree, sampled every ``interval_s``."""

    proc: psutil.Process
    interval_s: float = 0.25
    samples: list[tuple[float, float, int]] = field(default_factory=list)

    async def run(self) -> None:
        while self.proc.is_running():
            cpu, rss = await asyncio.to_thread(tree_cpu_rss, self.proc)
            self.samples.append((time.monotonic(), cpu, rss))
            await asyncio.sleep(self.interval_s)

    def cpu_between(self, t0: float, t1: float) -> float:
        """CPU seconds used from ``t0`` to ``t1`` (linear between samples)."""
        ts = [s[0] for s in self.samples]
        cs = [s[1] for s in self.samples]
        return float(np.interp(t1, ts, cs) - np.interp(t0, ts, cs))

    def peak_rss(self, t0: float, t1: float) -> int:
        return max((s[2] for s in self.samples if t0 <= s[0] <= t1), default=0)


class ServerProcess:
    """``python -m bench.serve`` as a child process; ``base_url`` once it printed its port."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.info['port']}"

    @property
    def ps(self) -> psutil.Process:
        assert self.proc is not None
        return psutil.Process(self.proc.pid)

    def _spawn(self) -> subprocess.Popen[str]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w", encoding="utf-8") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "bench.serve", *self.args],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    async def start(self, timeout_s: float = 900.0) -> None:
        """Start the server and wait (model loading: minutes on a busy CPU) for its ready line."""
        self.proc = await asyncio.to_thread(self._spawn)
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), timeout_s)
        if not line:
            raise RuntimeError(f"bench server exited ({self.proc.wait()}); see {self.log_path}")
        self.info = json.loads(line)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL for the whole tree after 30 s."""
        if self.proc is None:
            return
        if self.proc.poll() is not None:
            print(f"bench server had exited with code {self.proc.returncode}; see {self.log_path}", file=sys.stderr)
            return
        children = self.ps.children(recursive=True)
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()


@contextlib.asynccontextmanager
async def bench_server(args: list[str], log_path: Path) -> AsyncIterator[ServerProcess]:
    server = ServerProcess(args, log_path)
    try:
        await server.start()
        yield server
    finally:
        await server.stop()


async def get_json(http: aiohttp.ClientSession, url: str, method: str = "GET") -> dict[str, Any]:
    async with http.request(method, url) as resp:
        body: dict[str, Any] = await resp.json()
        if resp.status != 200:
            raise RuntimeError(f"{method} {url}: {resp.status} {body}")
        return body


_PROBE = """
import json, sys, threading, time, urllib.request
url, stop, out = sys.argv[1], threading.Event(), []
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
while not stop.is_set():
    t0 = time.perf_counter()
    urllib.request.urlopen(url, timeout=10).read()
    out.append((time.perf_counter() - t0) * 1000)
    time.sleep(0.1)
print(json.dumps(out))
"""


class HealthProbe:
    """A process of its own that asks a URL (``/health``) every 0.1 s until ``stop``, which returns each answer's
    time in ms: the bench process itself is too busy with its clients to time the server's answers."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    @classmethod
    async def start(cls, url: str) -> HealthProbe:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _PROBE, url, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        return cls(proc)

    async def stop(self) -> list[float]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.close()
        out = await self._proc.stdout.read()
        await self._proc.wait()
        return [float(ms) for ms in json.loads(out or b"[]")]


@dataclass
class Run:
    """N clients streamed together: the clients and when they were all live."""

    clients: list[BenchClient]
    all_live_s: float  # monotonic time when the last client started sending
    first_done_s: float  # monotonic time when the first client's file ended
    t0: float
    t1: float


def ogg_duration_s(path: Path) -> float:
    with av.open(str(path)) as f:
        return float(f.duration or 0) / 1e6


async def run_clients(
    base_url: str,
    oggs: list[Path],
    *,
    connect_concurrency: int = 8,
    stop_timeout_s: float = 120.0,
    offer_fields: list[dict[str, Any]] | None = None,
    loss: float = 0.0,
    start: dict[str, Any] | None = None,
) -> Run:
    """Connect one client per file (at most ``connect_concurrency`` offers at once), stream them all at real time,
    stop each when its file ends, and return once every one has stopped (or timed out). A client the server refused
    as full has ``refused`` set and streams nothing. ``offer_fields``: extra
    ``POST /offer`` fields per client (``{"room": id}``). ``loss``: each client's network loses this fraction of
    its audio packets, at random (client i's packets are the same in every run). ``start``: every client's
    ``start`` fields (``BenchClient``)."""
    install_ice_policy(IceConfig(hosts=("127.0.0.1",)))  # the clients gather loopback candidates only
    t0 = time.monotonic()
    fields = offer_fields or [{} for _ in oggs]
    clients = [
        BenchClient(base_url, ogg, f, PacketLoss.at_random(loss, seed=i) if loss else None, start=start)
        for i, (ogg, f) in enumerate(zip(oggs, fields, strict=True))
    ]
    gate = asyncio.Semaphore(connect_concurrency)

    async def one(client: BenchClient, http: aiohttp.ClientSession) -> None:
        try:
            async with gate:
                await client.connect(http)
        except Refused as exc:  # the server is full: a refusal, not a failure (``client.refused``)
            client.refused = exc
            await client.close()
            return
        except Exception as exc:
            client.error = f"connect failed: {exc}"
            await client.close()
            return
        await client.play(ogg_duration_s(client.ogg), stop_timeout_s)

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(one(c, http) for c in clients))
    starts = [c.started_s for c in clients if c.started_s is not None]  # (refused clients sent nothing)
    ends = [c.media_ended_s for c in clients if c.media_ended_s is not None]
    return Run(clients, max(starts, default=t0), min(ends, default=t0), t0, time.monotonic())
