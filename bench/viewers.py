"""Viewer bench: what room viewers cost a front end, and how fast a locked sentence reaches all of them.

    python -m bench.viewers [--viewers 0 100 400] [--seconds 40] [--json out.json]

The real server runs as a subprocess (``bench/serve.py --recognizer fake --no-speakers``: the named
``FakeTranscriber`` answers after 50 ms, so sentences lock at speech pace without model work). For each step, V
server-sent-events viewers (``bench.soak.Viewer``, in this process) follow one room while one publisher (aiortc,
Ogg Opus at real time) captions ``--seconds`` of read speech into it. Reported per step:

- ``server % core``: the server tree's CPU over the publisher's streaming window; ``% core/100 viewers``: the same
  minus the step without viewers, per 100 viewers (the fan-out's own cost);
- ``fan-out p95/max ms``: for each durable room event (a locked sentence), the spread between the first and the
  last viewer receiving it (the server writes to viewers one after another; this is the slowest viewer's wait);
- ``events``: durable events each viewer got (all viewers must get all of them), ``client % core``: this process.

The viewers parse every event; with many hundreds of them the client process itself needs a core, and the
fan-out spread then includes its own queueing: read it together with ``client % core``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from app.config import IceConfig
from bench.lib.client import BenchClient
from bench.lib.clips import CACHE_DIR, session_clip
from bench.lib.harness import CpuTrace, bench_server, install_ice_policy, ogg_duration_s, pct
from bench.lib.metrics import print_markdown_table
from bench.lib.room_viewer import Viewer


class TimedViewer(Viewer):
    """A room viewer that notes when each durable event (SSE id) arrived."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.arrived: dict[int, float] = {}

    def _on(self, message: dict[str, Any], event_id: int | None) -> None:
        if event_id is not None and event_id not in self.arrived:
            self.arrived[event_id] = time.monotonic()
        super()._on(message, event_id)


async def run_step(
    base: str, http: aiohttp.ClientSession, trace: CpuTrace, n_viewers: int, args: argparse.Namespace
) -> dict[str, Any]:
    async with http.post(f"{base}/rooms", json={"title": f"viewers-{n_viewers}"}) as r:
        room = (await r.json())["room"]
    viewers = [TimedViewer(f"{base}/rooms/{room}/events") for _ in range(n_viewers)]
    tasks = [asyncio.create_task(v.run(http)) for v in viewers]
    await asyncio.sleep(2.0 + n_viewers / 200)  # all connected before the publisher starts
    ogg = session_clip(0, args.seconds, args.pause_s).ogg
    me = psutil.Process()
    client_cpu0 = sum(me.cpu_times()[:2])
    client = BenchClient(base, ogg, {"room": room})
    await client.connect(http)
    await client.play(ogg_duration_s(ogg), stop_timeout_s=60.0)
    await asyncio.sleep(2.0)  # the last sentences reach the viewers
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    t0, t1 = client.started_s or 0.0, client.media_ended_s or 0.0
    window = max(t1 - t0, 1e-9)
    events = sorted({e for v in viewers for e in v.arrived})
    spreads = [
        1000 * (max(times) - min(times))
        for e in events
        if len(times := [v.arrived[e] for v in viewers if e in v.arrived]) == n_viewers
    ]
    sentences = sum(len(m.get("sentences") or []) for _, m in client.messages if m.get("type") == "caption")
    return {
        "viewers": n_viewers,
        "window_s": round(window, 1),
        "sentences": sentences,
        "server_cpu_pct": 100 * trace.cpu_between(t0, t1) / window,
        "events_min": min((len(v.arrived) for v in viewers), default=0),
        "events_max": len(events),
        "fanout_p95_ms": pct(spreads, 95),
        "fanout_max_ms": max(spreads, default=float("nan")),
        "reconnects": sum(v.reconnects - 1 for v in viewers if v.reconnects > 1),
        "client_cpu_pct": 100 * (sum(me.cpu_times()[:2]) - client_cpu0) / window,
        "error": client.error,
    }


COLUMNS = [
    ("viewers", "viewers", "{:d}"),
    ("window_s", "window s", "{:.0f}"),
    ("sentences", "sentences", "{:d}"),
    ("server_cpu_pct", "server % core", "{:.1f}"),
    ("per_100_pct", "% core/100 viewers", "{:.2f}"),
    ("events_min", "events (min viewer)", "{:d}"),
    ("events_max", "events", "{:d}"),
    ("fanout_p95_ms", "fan-out p95 ms", "{:.0f}"),
    ("fanout_max_ms", "fan-out max ms", "{:.0f}"),
    ("client_cpu_pct", "client % core", "{:.0f}"),
]


async def main(args: argparse.Namespace) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a socket per viewer, here and in the server
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * max(args.viewers) + 1024)), hard))
    session_clip(0, args.seconds, args.pause_s)
    install_ice_policy(IceConfig(hosts=("127.0.0.1",)))
    server_args = ["--recognizer", "fake", "--no-speakers", "--db", str(CACHE_DIR / "viewers.db")]
    (CACHE_DIR / "viewers.db").unlink(missing_ok=True)
    rows: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        bench_server(server_args, CACHE_DIR / "viewers-server.log") as server,
        aiohttp.ClientSession(connector=connector) as http,
    ):
        trace = CpuTrace(server.ps)
        sampler = asyncio.create_task(trace.run())
        try:
            for n in args.viewers:
                row = await run_step(server.base_url, http, trace, n, args)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
        finally:
            sampler.cancel()
    base = next((r["server_cpu_pct"] for r in rows if r["viewers"] == 0), None)
    for r in rows:
        r["per_100_pct"] = (
            100 * (r["server_cpu_pct"] - base) / r["viewers"] if base is not None and r["viewers"] else float("nan")
        )
    print(
        f"\none publisher, {args.seconds:g} s of read speech, fake recognizer; load average "
        f"{', '.join(f'{x:.1f}' for x in psutil.getloadavg())}\n"
    )
    print_markdown_table(COLUMNS, rows)
    if args.json:
        report = json.dumps({"rows": rows, "args": vars(args)}, indent=2, default=str)
        await asyncio.to_thread(Path(args.json).write_text, report, "utf-8")
    return 0 if all(not r["error"] and r["events_min"] == r["events_max"] for r in rows) else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.viewers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--viewers", type=int, nargs="+", default=[0, 100, 400])
    p.add_argument("--seconds", type=float, default=40.0, help="speech + pauses the publisher sends")
    p.add_argument("--pause-s", type=float, default=1.0)
    p.add_argument("--json", default=None)
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
