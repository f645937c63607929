"""The bench server: the real app (``create_app``) in its own process, so its CPU is measured apart from the
clients', with the recognizer chosen by flag and a small stats route for the benches.

    python -m bench.serve --recognizer vllm [--model whisper-tiny.en] [--no-speakers] [--port 0] [--mode engine]
    python -m bench.serve --recognizer fake [--fake-delay-s 0.05]

``--mode`` (``bench/lib/modes.py``): ``engine``, the server as shipped; ``engine-stock``, with Whisper's 30 s window
for every request; ``baseline``, the serialized one-at-a-time baseline; ``engine-unbounded``, every session admitted.
A mode is the server's configuration from its start: a bench compares modes on servers of their own.

It prints one JSON line ``{"port": P, "model": ..., "pid": ...}`` on stdout once the model is loaded and the
server listens (loopback only, ``--loopback-only`` ICE), and exits cleanly on SIGTERM/SIGINT. Routes added:

- ``GET /bench/stats``: engine stats, ingest totals of live peers, and the engine queue depth sampled every
  100 ms since the previous call (``depth``: finals + partials in the recognizer + partials waiting).
- ``GET /bench/memory`` (with ``--tracemalloc``): the source lines whose Python allocations grew most since the
  first call (leak hunting: call once after warm-up, again later).
- ``GET /bench/heap[?collect=1][&trim=1]``: the C heap as glibc sees it (bytes in use, bytes free but kept, RSS);
  ``collect=1`` then runs a full garbage collection and reports the heap after it (memory that comes back was held
  by unreachable reference cycles), ``trim=1`` then returns free memory to the system (``malloc_trim``). Growth
  that trimming gives back is fragmentation, not a leak.

``--recognizer fake`` uses the named ``FakeTranscriber`` (no model at all) for ``bench/pipeline.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import logging
import os
import signal
import sys
import time
from dataclasses import replace
from typing import Any

from aiohttp import web

from app.config import AudioDecoder, IceConfig, ServerConfig
from app.server import create_app, engine_config, freeze_startup_objects
from app.webrtc.keys import PEERS
from bench.lib.modes import MODES, SerializedTranscriber, mode_config, mode_max_sessions, with_settings
from engine.asr.fake import FakeTranscriber
from engine.asr.transcriber import Priority, Transcriber
from engine.config import ENDPOINT_PRESETS, TranscriberConfig
from engine.settings import member_of, values_of
from engine.stream.engine import CaptionEngine
from engine.stream.scheduler import BACKGROUND_FLOOR_S


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--recognizer", choices=["vllm", "fake"], default="vllm")
    p.add_argument("--mode", choices=MODES, default="engine", help="the decode policy (bench/lib/modes.py)")
    p.add_argument("--model", default=None, help="as the server's --model (default: the embedded whisper-base)")
    p.add_argument("--preset", choices=sorted(ENDPOINT_PRESETS), default="balanced")
    p.add_argument("--cpu-threads", type=int, default=0, help="as the server's --cpu-threads")
    p.add_argument(
        "--cpu-decoder-threads",
        type=int,
        default=TranscriberConfig().cpu_decoder_threads,
        help="as the server's --cpu-decoder-threads",
    )
    p.add_argument("--no-speakers", action="store_true")
    p.add_argument("--fake-delay-s", type=float, default=0.05, help="FakeTranscriber's answer delay")
    p.add_argument(
        "--audio-decoder",
        type=member_of(AudioDecoder),
        choices=values_of(AudioDecoder),
        default=AudioDecoder.DIRECT,
        help="as the server's --audio-decoder ('aiortc': the old 48 kHz stereo + resample path)",
    )
    p.add_argument("--ptime-ms", type=int, default=60, help="as the server's --ptime-ms (0: the sender's choice)")
    p.add_argument(
        "--vad-batch-interval-ms",
        type=int,
        default=None,
        help="the VAD's least time between batches (default: the engine's; 0: one call per push)",
    )
    p.add_argument(
        "--file-floor-s",
        type=float,
        default=BACKGROUND_FLOOR_S,
        help="how long a file's segment waits for live speech to pause before it decodes regardless "
        "(0: it never waits for live partials)",
    )
    p.add_argument(
        "--file-max-segment-ms", type=int, default=None, help="the longest segment of a file (default: the engine's)"
    )
    p.add_argument(
        "--max-sessions",
        default="auto",
        help="as the server's --max-sessions (default auto: its capacity; mode engine-unbounded admits 256)",
    )
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="an engine setting with no flag of its own, e.g. partial.interval_s=0.6 (repeatable)",
    )
    p.add_argument("--port", type=int, default=0, help="0 = any free port (printed)")
    p.add_argument("--db", default=None, help="SQLite transcript store (default: in memory)")
    p.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace Python allocations; GET /bench/memory shows the growth since its first call",
    )
    return p


async def serve(args: argparse.Namespace) -> None:
    max_sessions = mode_max_sessions(args.mode, None if args.max_sessions == "auto" else int(args.max_sessions))
    config = ServerConfig(
        model=args.model,
        preset=args.preset,
        speakers=not args.no_speakers,
        ice=IceConfig(hosts=("127.0.0.1",), loopback_only=True),
        max_sessions=max_sessions,
        max_lag_s=2.0,
        db_path=args.db,
        audio_decoder=args.audio_decoder,
        ptime_ms=args.ptime_ms,
        cpu_threads=args.cpu_threads,
        cpu_decoder_threads=args.cpu_decoder_threads,
    )
    base = with_settings(mode_config(args.mode, engine_config(config)), args.settings)
    inner: Transcriber
    if args.recognizer == "fake":
        inner = FakeTranscriber(delay_s=args.fake_delay_s, capacity=1024, name="fake")
    else:
        from engine.asr.vllm_backend import VllmTranscriber

        inner = VllmTranscriber(base.transcriber)
    transcriber = SerializedTranscriber(inner, serialized=args.mode == "baseline")
    if args.vad_batch_interval_ms is not None:
        base = replace(base, vad=replace(base.vad, batch_interval_ms=args.vad_batch_interval_ms))
    if args.file_max_segment_ms is not None:
        base = replace(base, file_endpoint=replace(base.file_endpoint, max_segment_ms=args.file_max_segment_ms))
    engine = CaptionEngine(base, transcriber, background_floor_s=args.file_floor_s)
    t0 = time.monotonic()
    await engine.start()
    freeze_startup_objects()  # as the server does once its engine is up
    app = create_app(config, engine=engine)
    depth: list[tuple[float, int]] = []

    async def stats(request: web.Request) -> web.Response:
        peers = list(request.app[PEERS].values())
        samples = list(depth)
        depth.clear()
        done = list(transcriber.completed)
        transcriber.completed.clear()
        body: dict[str, Any] = {
            "engine": engine.stats(),
            "mode": args.mode,
            "peers": len(peers),
            "ingest_audio_s": sum(p.ingest.audio_s for p in peers),
            "ingest_skipped_s": sum(p.ingest.skipped_s for p in peers),
            "lock_wait_s": round(transcriber.waited_s, 3),
            "depth": [d for _, d in samples],
            # seconds from submit to result of each request completed since the previous call, by kind
            "final_s": [round(s, 3) for p, s in done if p == Priority.FINAL],
            "partial_s": [round(s, 3) for p, s in done if p == Priority.PARTIAL],
        }
        return web.json_response(body)

    baseline: list[Any] = []

    async def memory(request: web.Request) -> web.Response:
        """The 20 source lines whose live Python allocations grew most since the first call (``--tracemalloc``)."""
        import gc
        import tracemalloc

        if not tracemalloc.is_tracing():
            return web.json_response({"error": "start the bench server with --tracemalloc"}, status=409)
        gc.collect()
        snap = tracemalloc.take_snapshot()
        if not baseline:
            baseline.append(snap)
            return web.json_response({"baseline": True, "traced_mb": tracemalloc.get_traced_memory()[0] / 1e6})
        top = snap.compare_to(baseline[0], "lineno")[:20]
        return web.json_response(
            {
                "traced_mb": tracemalloc.get_traced_memory()[0] / 1e6,
                "top": [
                    {"where": str(t.traceback), "size_diff_kb": round(t.size_diff / 1e3, 1), "count_diff": t.count_diff}
                    for t in top
                ],
            }
        )

    async def heap(request: web.Request) -> web.Response:
        from bench.lib.heap import glibc_heap, trim

        body: dict[str, Any] = {"before": glibc_heap()}
        if request.query.get("collect") == "1":
            import gc

            t0 = time.perf_counter()
            body["collected_objects"] = gc.collect()
            body["collect_ms"] = round((time.perf_counter() - t0) * 1000, 1)
            body["after_collect"] = glibc_heap()
        if request.query.get("trim") == "1":
            trim()
            body["after_trim"] = glibc_heap()
        return web.json_response(body)

    app.router.add_get("/bench/stats", stats)
    app.router.add_get("/bench/heap", heap)
    app.router.add_get("/bench/memory", memory)

    async def sample() -> None:
        while True:
            s = engine.stats()
            depth.append((time.monotonic(), s["queue_final"] + s["queue_partial"] + s["partials_waiting"]))
            del depth[:-20_000]
            await asyncio.sleep(0.1)

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    sampler = asyncio.create_task(sample())
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    print(
        json.dumps(
            {
                "port": runner.addresses[0][1],
                "model": engine.model_name,
                "mode": args.mode,
                "pid": os.getpid(),
                "start_s": round(time.monotonic() - t0, 1),
            }
        ),
        flush=True,
    )
    try:
        await done.wait()
    finally:
        sampler.cancel()
        await runner.cleanup()
        await engine.close()


def main() -> int:
    faulthandler.enable()  # a crash in native code (codecs, ONNX, SRTP) leaves a trace in the log
    args = build_parser().parse_args()
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(1)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("app.webrtc.peer").setLevel(logging.INFO)  # connect/close per session, for the record
    for name in ("engine.stream.engine", "engine.asr.vllm_backend", "engine.asr.align_service", "app.ops.admission"):
        logging.getLogger(name).setLevel(logging.INFO)  # capacity, warm-up timing, threads, refusals
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
