"""Engine bench: N concurrent live sessions against the real engine, paced at real time, no transport.

    python -m bench.engine_bench [--sessions 1 2 4] [--windows fit stock] [--model whisper-base] [--json out.json]

Each session streams a different sequence of three LibriSpeech utterances separated by 2.5 s pauses (so the
balanced preset closes each one), in 60 ms chunks at real time, like a microphone. Per run it reports:

- first partial: from the moment the first word's audio was fed to the first partial text (speech onset is the
  VAD's onset, as the locked sentence's ``start`` reports it);
- lock: from the moment the sentence's last speech audio was fed to its locked sentence (p50/p95 over all
  sentences); this includes the endpoint's silence wait, so it is also shown minus that silence;
- queue: requests in the recognizer (finals + partials) plus partials waiting, sampled every 100 ms;
- CPU seconds (this process and its children, i.e. the vLLM engine core) per second of audio streamed, and RSS;
- churn: words shown in partials that the locked text then changed, over words shown (``bench/lib/churn.py``).

Each N runs once per encoder window mode (``--windows``: ``fit`` = the shipped per-request windows, ``stock`` =
Whisper's 30 s window for every request), each mode on an engine of its own, one after the other.
A second table gives, per mode and window size, the engine's own counters: encoder positions, decodes, decode time
p50/p95 (submit to result), generated tokens per second of decode time, and fallbacks (loops redone larger).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.lib.churn import partial_churn
from bench.lib.metrics import print_markdown_table
from engine.asr.windows import WINDOW_MODES
from engine.audio.pcm import CHUNK_SAMPLES, SAMPLE_RATE, load_wav
from engine.config import ENDPOINT_PRESETS, EngineConfig, TranscriberConfig
from engine.protocol import Caption
from engine.stream.engine import CaptionEngine
from engine.stream.runner import StreamResult, stream_audio

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "speech" / "wav"
UTTERANCES = [
    "ls_1988-24833-0001",
    "ls_2412-153948-0000",
    "ls_3752-4944-0000",
    "ls_1995-1837-0001",
    "ls_1272-128104-0000",
    "ls_2412-153948-0001",
    "librivox_sns01_0870",
    "ls_1988-24833-0003",
    "ls_6930-75918-0000",
    "librivox_sns01_0920",
    "ls_1988-24833-0002",
    "ls_2412-153948-0002",
]
PAUSE_S = 2.5


def session_audio(index: int) -> np.ndarray:
    parts = [np.zeros(int(0.5 * SAMPLE_RATE), np.float32)]
    for k in range(3):
        parts += [
            load_wav(DATA / f"{UTTERANCES[(3 * index + k) % len(UTTERANCES)]}.wav"),
            np.zeros(int(PAUSE_S * SAMPLE_RATE), np.float32),
        ]
    return np.concatenate(parts)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def fed_time(result: StreamResult, sample: int) -> float:
    """Wall seconds (since the stream began) at which audio sample ``sample`` had been fed."""
    idx = min(sample // CHUNK_SAMPLES, len(result.fed_at_s) - 1)
    return result.fed_at_s[idx]


def latencies(result: StreamResult) -> tuple[list[float], list[float]]:
    """(first-partial latency of the session's first sentence, lock latency of each sentence), seconds."""
    first_partial: list[float] = []
    locks: list[float] = []
    captions = [(m, t) for m, t in zip(result.messages, result.arrivals_s, strict=True) if isinstance(m, Caption)]
    sentences = result.sentences()
    if sentences:
        onset = fed_time(result, sentences[0].start_ms * SAMPLE_RATE // 1000)
        shown = [t for m, t in captions if m.partial or m.sentences]
        if shown:
            first_partial.append(shown[0] - onset)
    for m, t in captions:
        for s in m.sentences:
            locks.append(t - fed_time(result, s.end_ms * SAMPLE_RATE // 1000))
    return first_partial, locks


def tree_cpu_rss(proc: psutil.Process) -> tuple[float, int]:
    procs = [proc, *proc.children(recursive=True)]
    cpu = rss = 0
    for p in procs:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            rss += p.memory_info().rss
        except psutil.Error:
            continue
    return cpu, rss


async def run_n(engine: CaptionEngine, n: int, mode: str) -> dict[str, Any]:
    """``n`` sessions at once on ``engine`` (window mode ``mode``): its row, the per-window counters of this run
    among them."""
    transcriber: Any = engine.transcriber
    windows_before = transcriber.windows.as_list()
    proc = psutil.Process()
    clips = [session_audio(i) for i in range(n)]
    depth: list[int] = []
    peak_rss = 0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak_rss
        while not done.is_set():
            s = engine.stats()
            depth.append(s["queue_final"] + s["queue_partial"] + s["partials_waiting"])
            peak_rss = max(peak_rss, tree_cpu_rss(proc)[1])
            await asyncio.sleep(0.1)

    cpu0, _ = tree_cpu_rss(proc)
    sampler = asyncio.create_task(sample())
    results = await asyncio.gather(*(stream_audio(engine, c, realtime=True) for c in clips))
    done.set()
    await sampler
    cpu1, _ = tree_cpu_rss(proc)
    first: list[float] = []
    locks: list[float] = []
    lags = [m.latency_ms / 1000 for r in results for m in r.captions() if m.latency_ms is not None]
    for r in results:
        f, lk = latencies(r)
        first += f
        locks += lk
    audio_s = sum(c.size for c in clips) / SAMPLE_RATE
    silence_s = engine.config.endpoint.silence_for(5_000) / 1000
    churn = [partial_churn(m.wire() for m in r.captions()) for r in results]  # churn reads the wire form
    return {
        "mode": mode,
        "sessions": n,
        "sentences": len(locks),
        "expected_sentences": 3 * n,
        "first_partial_s_p50": pct(first, 50),
        "first_partial_s_max": max(first, default=float("nan")),
        "lock_s_p50": pct(locks, 50),
        "lock_s_p95": pct(locks, 95),
        "lock_minus_silence_s_p95": pct(locks, 95) - silence_s,
        "display_lag_s_p50": pct(lags, 50),
        "display_lag_s_p95": pct(lags, 95),
        "queue_p50": pct([float(d) for d in depth], 50),
        "queue_max": max(depth, default=0),
        "cpu_s_per_audio_s": (cpu1 - cpu0) / audio_s,
        "rss_gb": peak_rss / 1e9,
        "wall_s": max(r.wall_s for r in results),
        "churn": sum(c for c, _ in churn) / max(1, sum(w for _, w in churn)),
        "windows": window_delta(windows_before, transcriber.windows.as_list()),
    }


def window_delta(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-window counters (``WindowStats.as_list``) of the decodes between ``before`` and ``after``: the counts
    and sums are differences; the percentiles are those of the recognizer's last decodes."""
    old = {w["window_s"]: w for w in before}
    out = []
    for w in after:
        prior = old.get(w["window_s"], {})
        row = {**w, **{k: w[k] - prior.get(k, 0) for k in ("decodes", "fallbacks", "decode_s", "tokens")}}
        if row["decodes"]:
            out.append(row)
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    print_markdown_table(
        [
            ("mode", "window", "{}"),
            ("sessions", "N", "{:d}"),
            ("sentences", "sent", "{:d}"),
            ("first_partial_s_p50", "1st partial p50", "{:.2f}"),
            ("first_partial_s_max", "max", "{:.2f}"),
            ("lock_s_p50", "lock p50", "{:.2f}"),
            ("lock_s_p95", "lock p95", "{:.2f}"),
            ("lock_minus_silence_s_p95", "p95-silence", "{:.2f}"),
            ("display_lag_s_p50", "lag p50", "{:.2f}"),
            ("display_lag_s_p95", "p95", "{:.2f}"),
            ("churn", "churn", "{:.1%}"),
            ("queue_p50", "queue p50", "{:.0f}"),
            ("queue_max", "max", "{:d}"),
            ("cpu_s_per_audio_s", "CPU s/audio s", "{:.2f}"),
            ("rss_gb", "RSS GB", "{:.2f}"),
        ],
        rows,
    )
    print()
    window_rows = [
        {
            "mode": r["mode"],
            "sessions": r["sessions"],
            **w,
            "tokens_per_s": w["tokens"] / w["decode_s"] if w["decode_s"] else float("nan"),
        }
        for r in rows
        for w in r["windows"]
    ]
    print_markdown_table(
        [
            ("mode", "window mode", "{}"),
            ("sessions", "N", "{:d}"),
            ("window_s", "window s", "{:g}"),
            ("encoder_positions", "encoder positions", "{:d}"),
            ("decodes", "decodes", "{:d}"),
            ("decode_s_p50", "decode s p50", "{:.3f}"),
            ("decode_s_p95", "p95", "{:.3f}"),
            ("tokens_per_s", "tokens/s", "{:.0f}"),
            ("fallbacks", "fallbacks", "{:d}"),
        ],
        window_rows,
    )


async def main(args: argparse.Namespace) -> int:
    rows = []
    model_name = ""
    for mode in args.windows:  # an engine per window mode (``TranscriberConfig.window``), one after the other
        config = EngineConfig(
            transcriber=TranscriberConfig(model=args.model, window=mode),
            endpoint=ENDPOINT_PRESETS[args.preset],
            speakers=not args.no_speakers,
        )
        engine = CaptionEngine(config)
        t0 = time.monotonic()
        await engine.start()
        model_name = engine.model_name
        print(
            f"engine ready in {time.monotonic() - t0:.0f} s: {engine.model_name}, preset {args.preset}, window {mode}",
            file=sys.stderr,
        )
        try:
            # vLLM's first decodes after start are several times slower than the rest: warm up, unmeasured.
            await stream_audio(engine, session_audio(len(UTTERANCES))[: 8 * SAMPLE_RATE], realtime=False)
            for n in args.sessions:
                row = await run_n(engine, n, mode)
                rows.append(row)
                print(f"N={n} {mode}: {json.dumps(row)}", file=sys.stderr)
        finally:
            await engine.close()
    print_table(rows)
    if args.json:
        report = {
            "model": model_name,
            "preset": args.preset,
            "rows": rows,
            "windows": args.windows,
            "machine": {"cpus": psutil.cpu_count()},
            "median_lock_s": statistics.median(r["lock_s_p50"] for r in rows),
        }
        with open(args.json, "w", encoding="utf-8") as f:  # noqa: ASYNC230 (once, after the measurement)
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--model", default=None)
    parser.add_argument("--preset", choices=sorted(ENDPOINT_PRESETS), default="balanced")
    parser.add_argument(
        "--windows",
        nargs="+",
        choices=sorted(WINDOW_MODES),
        default=["fit", "stock"],
        help="encoder window modes to compare, an engine each (default: fit stock)",
    )
    parser.add_argument("--no-speakers", action="store_true")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    sys.exit(asyncio.run(main(parser.parse_args())))
