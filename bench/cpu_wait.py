"""One speaker's decodes on a CPU recognizer under OpenMP's wait settings and thread counts: wall time and CPU.

    python -m bench.cpu_wait [--configs default cpu_decoder_threads=0 GOMP_SPINCOUNT=10000 OMP_NUM_THREADS=1]
                             [--rounds 2] [--json out.json]

The engine core's OpenMP threads (torch's libgomp) spin for a while after each parallel region before they sleep;
while one speaker talks on two threads, the second one's share shows in ``bench.profile`` as "its second compute
thread". Each configuration is an environment the recognizer's process starts with (``default``: none), or
``cpu_decoder_threads=N`` (``TranscriberConfig.cpu_decoder_threads``: the threads of the engine steps that only
generate text; the shipped 1 against 0, as many as the encoder's), run in a process of its own (the engine core reads
its environment as it spawns), rounds alternating the order of configurations. Each run
starts the embedded model on vLLM in process, then decodes, one at a time with 0.3 s between them as a speaker's
partials come, the first 1.5, 3 and 4.5 s of eight read clips, twice: the decodes' wall time (p50, mean) and the
process tree's CPU over them, with what it spent in the 5 s after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.lib.harness import ROOT, tree_cpu_rss

DEFAULT_CONFIGS = ("default", "cpu_decoder_threads=0", "GOMP_SPINCOUNT=10000", "OMP_NUM_THREADS=1")
# How ``cpu_decoder_threads=N`` reaches the child (a setting of the recognizer, not of OpenMP).
_DECODER_THREADS_ENV = "BENCH_CPU_DECODER_THREADS"
LENGTHS_S = (1.5, 3.0, 4.5)  # a growing sentence's partials
GAP_S = 0.3  # between two decodes, as between a speaker's partials


async def measure() -> dict[str, Any]:
    """One run in this process (its environment already set): decode times and the CPU of this process tree."""
    from engine.asr.transcriber import DecodeRequest, Priority
    from engine.asr.vllm_backend import VllmTranscriber
    from engine.audio.pcm import SAMPLE_RATE
    from engine.config import TranscriberConfig
    from speechdata.corpus import audio, manifest

    decoder_threads = os.environ.get(_DECODER_THREADS_ENV)
    config = TranscriberConfig()
    if decoder_threads is not None:
        config = TranscriberConfig(cpu_decoder_threads=int(decoder_threads))
    recognizer = VllmTranscriber(config)
    await recognizer.start()
    reads = [e for e in manifest().values() if e["lang"] == "en" and e["kind"] == "read" and e["text"]]
    clips = [audio(e["id"]) for e in reads[:8]]
    me = psutil.Process()
    walls: list[float] = []
    try:
        await asyncio.sleep(3.0)  # whatever the start-up left spinning stops
        cpu0, t0 = tree_cpu_rss(me)[0], time.monotonic()
        for rep in range(2):
            for i, clip in enumerate(clips):
                for length_s in LENGTHS_S:
                    start = time.monotonic()
                    await recognizer.transcribe(
                        DecodeRequest(
                            f"r{rep}-{i}-{length_s:g}", clip[: round(length_s * SAMPLE_RATE)], Priority.PARTIAL
                        )
                    )
                    walls.append(time.monotonic() - start)
                    await asyncio.sleep(GAP_S)
        cpu1, t1 = tree_cpu_rss(me)[0], time.monotonic()
        await asyncio.sleep(5.0)
        cpu2 = tree_cpu_rss(me)[0]
    finally:
        await recognizer.close()
    return {
        "decode_s_p50": float(np.median(walls)),
        "decode_s_mean": float(np.mean(walls)),
        "cpu_s": cpu1 - cpu0,
        "wall_s": t1 - t0,
        "decode_wall_s": sum(walls),
        "cpu_s_after": cpu2 - cpu1,
        "threads": recognizer.cpu_threads,
    }


def run_config(config: str) -> dict[str, Any]:
    """``measure`` in a process of its own with ``config``'s environment."""
    env = dict(os.environ)
    if config != "default":
        key, _, value = config.partition("=")
        env[_DECODER_THREADS_ENV if key == "cpu_decoder_threads" else key] = value
    out = subprocess.run(
        [sys.executable, "-m", "bench.cpu_wait", "--child"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{config}: exit {out.returncode}: {out.stderr[-2000:]}")
    return {"config": config, **json.loads(lines[-1])}


def main(args: argparse.Namespace) -> int:
    if args.child:
        print(json.dumps(asyncio.run(measure())), flush=True)
        return 0
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        order = list(args.configs) if round_ % 2 == 0 else list(reversed(args.configs))
        for config in order:
            row = run_config(config) | {"round": round_ + 1}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    print("| config | round | decode p50 s | mean s | CPU-s | CPU-s per decode-second | CPU-s in the 5 s after |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (args.configs.index(r["config"]), r["round"])):
        print(
            f"| {r['config']} | {r['round']} | {r['decode_s_p50']:.3f} | {r['decode_s_mean']:.3f} | "
            f"{r['cpu_s']:.1f} | {r['cpu_s'] / r['decode_wall_s']:.2f} | {r['cpu_s_after']:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.cpu_wait", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--configs",
        nargs="+",
        default=list(DEFAULT_CONFIGS),
        help="configurations to compare: default, cpu_decoder_threads=N, or NAME=VALUE (an environment variable each)",
    )
    p.add_argument("--rounds", type=int, default=2, help="each configuration this many times, order alternating")
    p.add_argument("--json", default=None, help="also write every run to this JSON file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p


if __name__ == "__main__":
    sys.exit(main(build_parser().parse_args()))
