"""Pipeline bench: what everything but the model costs per live session.

    python -m bench.pipeline [--sessions 1 16 64] [--seconds 60] [--json out.json]
    python -m bench.pipeline --sessions 16 64 --fronts old unbatched new --repeat 2   # old and new front ends compared

The real server runs as a subprocess (``bench/serve.py --recognizer fake --no-speakers``) with the recognizer
replaced by the named ``FakeTranscriber`` (engine/asr/fake.py: answers after 50 ms without computing anything), so
what its process tree spends is the rest of the path: WebRTC receive (ICE, DTLS/SRTP, RTP), Opus decode, resample
to 16 kHz, the batched Silero VAD, endpointing, partial/final scheduling, the mailbox and the data-channel send.
Speaker embeddings are a model and are off unless ``--speakers`` (the real speaker encoder: segment embeddings
and the turn detector's windows); their CPU is then counted on the speaker thread alone (``speaker %/session``).

The N clients run in this process (aiortc forwarding Ogg Opus packets, no re-encoding) and are not measured. The
CPU window is the span in which all N clients were streaming; the audio the server actually received in that
window (``/bench/stats`` ingest totals) normalises it, so a client process that cannot keep 64 streams at real time
does not flatter the result:

- ``% core/session``: server CPU seconds / wall seconds / N, in % of one core;
- ``% core/session RT``: server CPU seconds per second of audio received per session (the same at real time);
- ``idle``: the server's own CPU with no session (subtracted in ``marginal``);
- ``VAD busy``: wall time of the VAD worker's batches per session (an upper bound of its CPU: it includes waiting
  for the GIL and for a core).

``--fronts`` names the front ends measured (``FRONTS``): ``new`` is the server as it is, its clients sending 60 ms
Opus packets as browsers do when the answer asks for them (``a=ptime:60``); ``old`` is the server before 2026-11-24:
20 ms packets (``--ptime-ms 0``), received through aiortc's decoder thread at 48 kHz stereo then the resampler
(``--audio-decoder aiortc``), the VAD run once per push (``--vad-batch-interval-ms 0``); ``unbatched`` is ``new``
with the VAD run once per push instead of batched every 30 ms (``VadConfig.batch_interval_ms``); ``p20`` is ``new``
with 20 ms packets (senders that ignore ``a=ptime``), ``direct`` is ``p20`` without the VAD batching.
With several, one server per front end runs side by side (each idle but for the step under way) and each N is
measured on each in turn, the order alternating from one N to the next and from one ``--repeat`` to the next, so
that the load of other jobs falls on all alike; the ratios of server CPU per second of audio are printed last.
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

from bench.lib.clips import CACHE_DIR, session_clip
from bench.lib.harness import CpuTrace, bench_server, get_json, pct, run_clients
from bench.lib.metrics import partial_lags, print_markdown_table


async def poll_stats(http: aiohttp.ClientSession, url: str, out: list[tuple[float, dict[str, Any]]]) -> None:
    while True:
        out.append((time.monotonic(), await get_json(http, url)))
        await asyncio.sleep(1.0)


def _interp(points: list[tuple[float, float]], t: float) -> float:
    return float(np.interp(t, [p[0] for p in points], [p[1] for p in points]))


async def run_step(
    server: Any,
    http: aiohttp.ClientSession,
    trace: CpuTrace,
    n: int,
    idle_pct: float,
    args: argparse.Namespace,
    frame_ms: int = 20,
) -> dict[str, Any]:
    clips = [session_clip(i, args.seconds, args.pause_s, frame_ms) for i in range(n)]
    polled: list[tuple[float, dict[str, Any]]] = []
    me = psutil.Process()
    client_cpu0 = sum(me.cpu_times()[:2])
    poller = asyncio.create_task(poll_stats(http, f"{server.base_url}/bench/stats", polled))
    try:
        run = await run_clients(server.base_url, [c.ogg for c in clips], connect_concurrency=args.connect_concurrency)
    finally:
        poller.cancel()
    client_cpu = sum(me.cpu_times()[:2]) - client_cpu0
    t0, t1 = run.all_live_s, run.first_done_s
    window = t1 - t0
    cpu = trace.cpu_between(t0, t1)
    live = [(t, float(s["ingest_audio_s"])) for t, s in polled if s["peers"] == n]
    received = _interp(live, t1) - _interp(live, t0) if len(live) >= 2 else float("nan")
    vad = [(t, float(s["engine"]["vad_busy_s"])) for t, s in polled]
    vad_s = _interp(vad, t1) - _interp(vad, t0) if len(vad) >= 2 else float("nan")
    spk = [(t, float(s["engine"].get("speaker_cpu_s", 0.0))) for t, s in polled]
    spk_s = _interp(spk, t1) - _interp(spk, t0) if len(spk) >= 2 else float("nan")
    lags = partial_lags([msg for c in run.clients for _, msg in c.messages if msg["type"] == "caption"])
    overloaded = sum(1 for c in run.clients for _, msg in c.messages if msg.get("code") == "overloaded")
    failures = [c.error for c in run.clients if c.error]
    per_session = 100 * cpu / window / n if window > 0 else float("nan")
    return {
        "sessions": n,
        "window_s": round(window, 1),
        "connect_s": round(t0 - run.t0, 1),
        "server_cpu_pct": 100 * cpu / window if window > 0 else float("nan"),
        "cpu_pct_per_session": per_session,
        "marginal_pct_per_session": (100 * cpu / window - idle_pct) / n if window > 0 else float("nan"),
        "realtime_factor": received / window / n if window > 0 else float("nan"),
        "cpu_pct_per_session_rt": 100 * cpu / (received / n) / n if received and received > 0 else float("nan"),
        "vad_wall_pct_per_session": 100 * vad_s / window / n if window > 0 else float("nan"),
        "speaker_cpu_pct_per_session": 100 * spk_s / window / n if window > 0 else float("nan"),
        "lag_s_p95": pct(lags, 95),
        "overloaded_msgs": overloaded,
        "failures": failures[:5],
        "rss_gb": trace.peak_rss(run.t0, run.t1) / 1e9,
        "client_cpu_pct": 100 * client_cpu / (run.t1 - run.t0),
    }


FRONTS: dict[str, tuple[int, list[str]]] = {  # name: (ms of audio per Opus packet sent, bench.serve flags)
    "new": (60, []),
    "unbatched": (60, ["--vad-batch-interval-ms", "0"]),
    "p20": (20, ["--ptime-ms", "0"]),
    "direct": (20, ["--ptime-ms", "0", "--vad-batch-interval-ms", "0"]),
    "old": (20, ["--ptime-ms", "0", "--audio-decoder", "aiortc", "--vad-batch-interval-ms", "0"]),
}

COLUMNS = [
    ("front", "front end", "{}"),
    ("sessions", "N", "{:d}"),
    ("window_s", "window s", "{:.0f}"),
    ("server_cpu_pct", "server % core", "{:.1f}"),
    ("cpu_pct_per_session", "% core/session", "{:.2f}"),
    ("marginal_pct_per_session", "marginal", "{:.2f}"),
    ("realtime_factor", "audio rx/real time", "{:.2f}"),
    ("cpu_pct_per_session_rt", "% core/session RT", "{:.2f}"),
    ("vad_wall_pct_per_session", "VAD busy %/session", "{:.2f}"),
    ("speaker_cpu_pct_per_session", "speaker %/session", "{:.2f}"),
    ("lag_s_p95", "lag p95 s", "{:.2f}"),
    ("overloaded_msgs", "skips", "{:d}"),
    ("rss_gb", "RSS GB", "{:.2f}"),
    ("client_cpu_pct", "clients % core", "{:.0f}"),
]


def print_table(rows: list[dict[str, Any]]) -> None:
    print_markdown_table(COLUMNS, rows)


def print_ratios(rows: list[dict[str, Any]], fronts: list[str]) -> None:
    """Server CPU per second of audio received, each front end against the first, per N (mean over repeats)."""
    print()
    base = fronts[0]
    for n in sorted({r["sessions"] for r in rows}):
        cost = {
            f: float(np.nanmean([r["cpu_pct_per_session_rt"] for r in rows if r["sessions"] == n and r["front"] == f]))
            for f in fronts
        }
        parts = [f"{f} {cost[f]:.2f}" for f in fronts]
        ratios = [f"{f}/{base} {cost[f] / cost[base]:.2f}" for f in fronts[1:] if cost[base] > 0]
        print(f"N={n}: % core/session RT " + ", ".join(parts) + "; " + ", ".join(ratios))


async def main(args: argparse.Namespace) -> int:
    print(f"encoding clips into {CACHE_DIR} ...", file=sys.stderr)
    for i in range(max(args.sessions)):
        for frame_ms in sorted({FRONTS[f][0] for f in args.fronts}):
            session_clip(i, args.seconds, args.pause_s, frame_ms)
    server_args = ["--recognizer", "fake", "--fake-delay-s", str(args.fake_delay_s)]
    if not args.speakers:
        server_args.append("--no-speakers")
    rows: list[dict[str, Any]] = []
    fronts = args.fronts
    async with contextlib.AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(
                bench_server([*server_args, *FRONTS[d][1]], CACHE_DIR / f"pipeline-server-{d}.log")
            )
            for d in fronts
        ]
        traces = [CpuTrace(server.ps) for server in servers]
        samplers = [asyncio.create_task(trace.run()) for trace in traces]
        try:
            async with aiohttp.ClientSession() as http:
                await asyncio.sleep(2.0)
                t0 = time.monotonic()
                await asyncio.sleep(args.idle_s)
                idles = [100 * trace.cpu_between(t0, time.monotonic()) / (time.monotonic() - t0) for trace in traces]
                idle_pct = max(idles)
                print(f"idle servers: {', '.join(f'{i:.2f}' for i in idles)} % of one core", file=sys.stderr)
                for rep in range(args.repeat):
                    for step, n in enumerate(args.sessions):
                        order = list(range(len(fronts)))
                        if (rep + step) % 2:  # each N alternates between repeats, and neighbouring Ns differ
                            order.reverse()
                        for k in order:
                            await asyncio.sleep(3.0)
                            row = {
                                "front": fronts[k],
                                **await run_step(servers[k], http, traces[k], n, idles[k], args, FRONTS[fronts[k]][0]),
                            }
                            rows.append(row)
                            print(json.dumps(row), file=sys.stderr)
        finally:
            for sampler in samplers:
                sampler.cancel()
    rows.sort(key=lambda r: (r["sessions"], fronts.index(r["front"])))
    print(
        f"\nfake recognizer ({args.fake_delay_s * 1000:.0f} ms), speakers {'on' if args.speakers else 'off'}, "
        f"{args.seconds:g} s per session; "
        f"idle server {idle_pct:.2f} % of one core\n"
    )
    print_table(rows)
    if len(fronts) > 1:
        print_ratios(rows, fronts)
    if args.json:
        report = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "idle_pct": idle_pct,
            "machine": {
                "cpus": psutil.cpu_count(),
                "python": platform.python_version(),
                "load_avg": psutil.getloadavg(),
            },
            "rows": rows,
            "args": vars(args),
        }
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(report, indent=2, default=str), "utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.pipeline", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--seconds", type=float, default=60.0, help="speech + pauses per session")
    p.add_argument("--pause-s", type=float, default=2.5)
    p.add_argument("--fake-delay-s", type=float, default=0.05)
    p.add_argument("--idle-s", type=float, default=10.0, help="how long to measure the idle server first")
    p.add_argument("--connect-concurrency", type=int, default=8)
    p.add_argument(
        "--speakers",
        action="store_true",
        help="run the real speaker encoder too (segment embeddings and turn windows); its CPU per session "
        "is reported on its own",
    )
    p.add_argument(
        "--fronts",
        nargs="+",
        choices=sorted(FRONTS),
        default=["new"],
        help="front ends to measure (see above); several: one server each, measured in alternating order",
    )
    p.add_argument("--repeat", type=int, default=1, help="measure every N this many times (alternating order)")
    p.add_argument("--json", default=None)
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
