"""Speaker-embedding memory: does the encoder's memory grow with the batch sizes it meets?

    python -m bench.embed_memory [--batches 160] [--seed 1] [--speaker-model resemblyzer|campplus] [--json out.json]

Embeds ``--batches`` random batches of 1-8 segments of 1-11 s of real read speech (what a live server meets: any
number of segments closing together, any length) and prints RSS after every 40 batches and the process CPU time
per call. torch's CPU LSTM keeps a compiled kernel per batch shape; ``SpeakerEmbedder`` pads batches to a few
shapes so that this stays flat after the first batches. CAM++ runs on onnxruntime, whose memory arena grows to the
largest batch met and is then reused.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import psutil

from engine.speakers.models import DEFAULT_SPEAKER_MODEL, SPEAKER_MODEL_NAMES, speaker_model
from speechdata.corpus import audio


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=160)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--speaker-model", choices=SPEAKER_MODEL_NAMES, default=DEFAULT_SPEAKER_MODEL)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    embedder = speaker_model(args.speaker_model).load()
    proc = psutil.Process()
    clip = audio("ls_2412-153948-0000")
    rng = np.random.default_rng(args.seed)
    rows = [{"batches": 0, "rss_mb": round(proc.memory_info().rss / 1e6, 1), "cpu_ms_per_call": None}]
    cpu = 0.0
    print("| batches | RSS MB | CPU ms per call |\n|---|---|---|")
    print(f"| 0 | {rows[0]['rss_mb']} | |")
    for i in range(1, args.batches + 1):
        segments = [clip[: int(rng.uniform(1.0, 11.0) * 16000)] for _ in range(int(rng.integers(1, 9)))]
        t0 = time.process_time()
        embedder.embed(segments)
        cpu += time.process_time() - t0
        if i % 40 == 0 or i == args.batches:
            rows.append(
                {
                    "batches": i,
                    "rss_mb": round(proc.memory_info().rss / 1e6, 1),
                    "cpu_ms_per_call": round(cpu / i * 1000, 1),
                }
            )
            print(f"| {i} | {rows[-1]['rss_mb']} | {rows[-1]['cpu_ms_per_call']} |", flush=True)
    if args.json:
        args.json.write_text(
            json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
