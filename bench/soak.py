"""Soak: the real server under steady load for a long time. Does anything grow, get lost or slow down?

    python -m bench.soak [--minutes 30] [--sessions 1] [--viewers 50] [--json soak.json]

N publishers caption into one room, each session streaming a ~60 s file of real read speech at real time and
then reconnecting as a new session (so sessions open and close all along), while ``--viewers`` server-sent-event
viewers follow the room. The server is the real app with the real engine in its own process
(``bench.serve``) on an SQLite file. ``--sessions`` defaults to the number of sessions this 2-core machine holds in
real time (``bench.sessions``, docs/benchmarks.md).

Measured, after a warm-up (``--warmup-min``, not counted in the slopes):
- RSS of the server process tree (and of the server process alone, without vLLM's engine core) and open file
  descriptors of the server process every 10 s; their slope by least squares (MB/hour, fds/hour; RSS also over
  the second half alone, to tell a settling heap from a leak) and their range;
- the server process's C heap every 60 s (``bench.serve``'s ``/bench/heap``: glibc bytes in use and free but
  kept), and at the end how much RSS ``malloc_trim`` gives back: memory in use that keeps growing is a leak,
  free memory glibc keeps is fragmentation (it is reused, and a trim returns most of it);
- ``/health`` latency, one request every 0.5 s (p50, p99, max);
- lost sentences: every sentence any viewer saw must be in the room's ``transcript.json`` at the end with the same
  text, and every viewer must have seen every sentence of the export;
- sessions completed and failed, audio skipped by the server's overload guard.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import psutil

from app.config import IceConfig
from bench.lib.client import BenchClient
from bench.lib.clips import CACHE_DIR, session_clip
from bench.lib.harness import bench_server, get_json, install_ice_policy, ogg_duration_s, pct, tree_cpu_rss
from bench.lib.room_viewer import Viewer


async def publisher(
    base_url: str, room: str, index: int, until: float, counts: dict[str, int], seconds: float = 60.0
) -> None:
    """Caption into ``room`` session after session (each ``seconds`` of speech) until ``until`` (monotonic)."""
    ogg = session_clip(index, seconds, 2.5).ogg
    duration = ogg_duration_s(ogg)
    while time.monotonic() + duration < until:
        client = BenchClient(base_url, ogg, {"room": room})
        try:
            async with aiohttp.ClientSession() as http:
                await client.connect(http)
            await client.play(duration, stop_timeout_s=120.0)
        except Exception as exc:  # a refused offer, a connection that never came up
            client.error = str(exc)
            await client.close()
        counts["failed" if client.error else "completed"] += 1
        counts["overloaded"] += sum(1 for _, m in client.messages if m.get("code") == "overloaded")
        if client.error:
            print(f"session {index}: {client.error}", file=sys.stderr)
            await asyncio.sleep(2.0)


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    if len(samples) < 3:
        return float("nan")
    t = np.array([s[0] for s in samples]) / 3600.0
    y = np.array([s[1] for s in samples])
    return float(np.polyfit(t, y, 1)[0])


async def main(args: argparse.Namespace) -> int:
    for i in range(args.sessions):
        session_clip(i, args.session_seconds, 2.5)
    install_ice_policy(IceConfig(hosts=("127.0.0.1",)))
    db = CACHE_DIR / "soak.db"
    db.unlink(missing_ok=True)
    server_args = ["--recognizer", args.recognizer, "--db", str(db)]
    if args.model:
        server_args += ["--model", args.model]
    if args.tracemalloc:
        server_args.append("--tracemalloc")
    async with bench_server(server_args, CACHE_DIR / "soak-server.log") as server, aiohttp.ClientSession() as http:
        base = server.base_url
        print(f"server ready: {server.info}", file=sys.stderr)
        async with http.post(f"{base}/rooms", json={"title": "soak"}) as r:
            room = (await r.json())["room"]
        viewers = [Viewer(f"{base}/rooms/{room}/events") for _ in range(args.viewers)]
        viewer_tasks = [asyncio.create_task(v.run(http)) for v in viewers]
        t0 = time.monotonic()
        until = t0 + args.minutes * 60
        counts = {"completed": 0, "failed": 0, "overloaded": 0}
        pubs = [
            asyncio.create_task(publisher(base, room, i, until, counts, args.session_seconds))
            for i in range(args.sessions)
        ]
        proc = server.ps
        memory: list[tuple[float, float]] = []
        server_memory: list[tuple[float, float]] = []  # the server process alone (the engine core excluded)
        fds: list[tuple[float, float]] = []
        health_ms: list[float] = []

        async def sample_resources() -> None:
            while True:
                _, rss = await asyncio.to_thread(tree_cpu_rss, proc)
                now = time.monotonic() - t0
                memory.append((now, rss / 1e6))
                with contextlib.suppress(psutil.Error):
                    fds.append((now, float(proc.num_fds())))
                    server_memory.append((now, proc.memory_info().rss / 1e6))
                await asyncio.sleep(10.0)

        async def sample_health() -> None:
            while True:
                start = time.perf_counter()
                async with http.get(f"{base}/health") as r:
                    await r.read()
                    if r.status == 200:
                        health_ms.append((time.perf_counter() - start) * 1000)
                await asyncio.sleep(0.5)

        heap: list[tuple[float, dict[str, float]]] = []

        async def sample_heap() -> None:
            while True:
                heap.append((time.monotonic() - t0, (await get_json(http, f"{base}/bench/heap"))["before"]))
                await asyncio.sleep(60.0)

        growth: dict[str, Any] = {}

        async def python_heap() -> None:
            await asyncio.sleep(args.warmup_min * 60)
            await get_json(http, f"{base}/bench/memory")  # the baseline
            while True:
                await asyncio.sleep(30.0)
                growth.update(await get_json(http, f"{base}/bench/memory"))

        samplers = [
            asyncio.create_task(sample_resources()),
            asyncio.create_task(sample_health()),
            asyncio.create_task(sample_heap()),
        ]
        if args.tracemalloc:
            samplers.append(asyncio.create_task(python_heap()))
        last_report = t0
        while not all(p.done() for p in pubs):
            await asyncio.sleep(5.0)
            if time.monotonic() - last_report >= 60:
                last_report = time.monotonic()
                print(
                    f"{(last_report - t0) / 60:5.1f} min: {counts}, RSS {memory[-1][1]:.0f} MB, fds {fds[-1][1]:.0f}",
                    file=sys.stderr,
                )
        await asyncio.gather(*pubs)
        await asyncio.sleep(5.0)  # the last sentences reach the viewers
        for task in samplers:
            task.cancel()
        async with http.get(f"{base}/rooms/{room}/transcript.json") as r:
            exported = {int(s["id"]): s["text"] for s in (await r.json())["sentences"]}
        ready = await get_json(http, f"{base}/ready")
        trimmed = await get_json(http, f"{base}/bench/heap?trim=1")
        for task in viewer_tasks:
            task.cancel()
        await asyncio.gather(*viewer_tasks, *samplers, return_exceptions=True)
    warm = args.warmup_min * 60
    mem_w = [m for m in memory if m[0] >= warm]
    half = (warm + memory[-1][0]) / 2 if memory else 0.0
    server_w = [m for m in server_memory if m[0] >= warm]
    fds_w = [f for f in fds if f[0] >= warm]
    heap_w = [h for h in heap if h[0] >= warm and "in_use" in h[1]]
    seen = {sid: text for v in viewers for sid, text in v.sentences.items()}
    lost = [sid for sid, text in seen.items() if exported.get(sid) != text]
    missed = sum(len(set(exported) - set(v.sentences)) for v in viewers)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "minutes": args.minutes,
        "sessions": args.sessions,
        "viewers": args.viewers,
        "model": server.info.get("model"),
        "sessions_completed": counts["completed"],
        "sessions_failed": counts["failed"],
        "overloaded_msgs": counts["overloaded"],
        "sentences_exported": len(exported),
        "sentences_seen": len(seen),
        "lost": len(lost),
        "viewer_misses": missed,
        "viewer_reconnects": sum(v.reconnects for v in viewers),
        "rss_mb_start": mem_w[0][1] if mem_w else None,
        "rss_mb_end": mem_w[-1][1] if mem_w else None,
        "rss_mb_range": (max(m[1] for m in mem_w) - min(m[1] for m in mem_w)) if mem_w else None,
        "rss_mb_per_hour": slope_per_hour(mem_w),
        "rss_mb_per_hour_second_half": slope_per_hour([m for m in mem_w if m[0] >= half]),
        "server_rss_mb_start": server_w[0][1] if server_w else None,
        "server_rss_mb_end": server_w[-1][1] if server_w else None,
        "server_rss_mb_per_hour": slope_per_hour(server_w),
        "fds_start": fds_w[0][1] if fds_w else None,
        "fds_end": fds_w[-1][1] if fds_w else None,
        "fds_per_hour": slope_per_hour(fds_w),
        "health_ms_p50": pct(health_ms, 50),
        "health_ms_p99": pct(health_ms, 99),
        "health_ms_max": max(health_ms, default=float("nan")),
        "health_requests": len(health_ms),
        "heap_in_use_mb_start": heap_w[0][1]["in_use"] if heap_w else None,
        "heap_in_use_mb_end": heap_w[-1][1]["in_use"] if heap_w else None,
        "heap_in_use_mb_per_hour": slope_per_hour([(h[0], h[1]["in_use"]) for h in heap_w]),
        "heap_free_kept_mb_end": heap_w[-1][1]["free_kept"] if heap_w else None,
        "server_rss_mb_before_trim": trimmed["before"]["rss"],
        "server_rss_mb_after_trim": trimmed.get("after_trim", {}).get("rss"),
        "rooms": ready.get("rooms"),
        "python_heap_growth": growth,
        "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version(), "load_avg": psutil.getloadavg()},
    }
    print_table(result)
    if growth:
        print(f"\nPython heap traced: {growth['traced_mb']:.1f} MB; largest growth since the warm-up:")
        for t in growth["top"][:10]:
            print(f"  {t['size_diff_kb']:+9.1f} kB {t['count_diff']:+7d} blocks  {t['where']}")
    if args.json:
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(result, indent=2), "utf-8")
    held = not lost and not missed and not counts["failed"] and result["health_ms_p99"] < 50
    return 0 if held else 1


def print_table(r: dict[str, Any]) -> None:
    rows = [
        ("duration", f"{r['minutes']:g} min, {r['sessions']} publisher(s), {r['viewers']} viewers, {r['model']}"),
        ("sessions completed / failed", f"{r['sessions_completed']} / {r['sessions_failed']}"),
        ("sentences exported / seen by viewers", f"{r['sentences_exported']} / {r['sentences_seen']}"),
        ("lost (seen, not exported as seen)", str(r["lost"])),
        ("exported, missed by a viewer", str(r["viewer_misses"])),
        ("viewer reconnects", str(r["viewer_reconnects"])),
        ("audio-skipped messages", str(r["overloaded_msgs"])),
        ("RSS MB start -> end (range)", f"{r['rss_mb_start']:.0f} -> {r['rss_mb_end']:.0f} ({r['rss_mb_range']:.0f})"),
        (
            "RSS slope MB/hour (whole run / second half)",
            f"{r['rss_mb_per_hour']:+.1f} / {r['rss_mb_per_hour_second_half']:+.1f}",
        ),
        (
            "server process alone: RSS MB start -> end, slope MB/hour",
            f"{r['server_rss_mb_start']:.0f} -> {r['server_rss_mb_end']:.0f}, {r['server_rss_mb_per_hour']:+.1f}",
        ),
        ("open fds start -> end", f"{r['fds_start']:.0f} -> {r['fds_end']:.0f}"),
        ("fds slope per hour", f"{r['fds_per_hour']:+.1f}"),
        (
            "server C heap in use MB start -> end, slope MB/hour",
            f"{r['heap_in_use_mb_start']} -> {r['heap_in_use_mb_end']}, {r['heap_in_use_mb_per_hour']:+.1f}",
        ),
        ("server C heap free but kept at the end MB", f"{r['heap_free_kept_mb_end']}"),
        (
            "server RSS MB before -> after malloc_trim",
            f"{r['server_rss_mb_before_trim']} -> {r['server_rss_mb_after_trim']}",
        ),
        (
            "/health ms p50 / p99 / max",
            f"{r['health_ms_p50']:.1f} / {r['health_ms_p99']:.1f} / "
            f"{r['health_ms_max']:.1f} ({r['health_requests']} requests)",
        ),
    ]
    print("\n| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--sessions", type=int, default=1, help="publishers at once (default: what this machine holds)")
    p.add_argument("--viewers", type=int, default=50)
    p.add_argument("--warmup-min", type=float, default=3.0, help="left out of the slopes")
    p.add_argument("--model", default=None)
    p.add_argument(
        "--recognizer",
        choices=["vllm", "fake"],
        default="vllm",
        help="fake: the named FakeTranscriber (no model), to look for leaks in everything else fast",
    )
    p.add_argument("--tracemalloc", action="store_true", help="also report the Python heap's growth by source line")
    p.add_argument("--session-seconds", type=float, default=60.0, help="speech per session before it reconnects")
    p.add_argument("--json", default=None)
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
