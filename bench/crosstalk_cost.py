"""What the room's cross-talk arbiter (``engine.stream.crosstalk``) costs the live path: CPU per 60 ms chunk of one
microphone, in a room of 1, 2, 4 and 8 microphones hearing a real meeting (the AMI close-talk channels, each hearing
the others 12 dB down), against the same session work without it, side by side in one run, alternating.

    python -m bench.crosstalk_cost [--json out.json]

A chunk's cost is what the session adds for it: ``Microphone.heard`` (the speech-band power) and ``OwnVoice.judged``
for its VAD windows (wait, judge, learn). The figure to compare with is the session's own budget: 60 ms of audio per
chunk, one core.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from engine import CHUNK_SAMPLES, CrossTalk
from engine.audio.vad import WINDOW
from engine.stream.crosstalk import OwnVoice
from speechdata.corpus import audio

SPEAKERS = ("MEO015", "FEE013", "MEE014", "FEE016")


def meeting(n: int) -> list[np.ndarray]:
    """``n`` microphones: the four close-talk channels (repeated past four), each with the others 12 dB down."""
    sources = [audio(f"ami_seriously_src_{SPEAKERS[i % 4]}") for i in range(n)]
    length = min(s.size for s in sources)
    mix = [s[:length].copy() for s in sources]
    for i in range(n):
        for j in range(n):
            if i != j:
                mix[i] += 10 ** (-12 / 20) * sources[j][:length]
    return mix


def run(mics: list[np.ndarray], arbitrated: bool) -> float:
    """Seconds of CPU per chunk of one microphone (all microphones' work divided by their chunks)."""
    now = [0.0]
    room = CrossTalk(clock=lambda: now[0])
    voices = [OwnVoice(room.microphone(f"m{i}"), WINDOW, lambda _a, _b: None) for i in range(len(mics))]
    chunks = min(m.size for m in mics) // CHUNK_SAMPLES
    probs = np.full(CHUNK_SAMPLES // WINDOW, 0.9, dtype=np.float32)
    position = [0] * len(mics)
    t0 = time.process_time()
    for k in range(chunks):
        now[0] = (k + 1) * CHUNK_SAMPLES / 16000
        for i, mic in enumerate(mics):
            chunk = mic[k * CHUNK_SAMPLES : (k + 1) * CHUNK_SAMPLES]
            if arbitrated:
                voices[i].microphone.heard((k + 1) * CHUNK_SAMPLES, chunk)
                out = voices[i].judged(probs, position[i])
                position[i] += out.size * WINDOW
            else:
                _ = probs.copy()  # what the session does with them anyway
    return (time.process_time() - t0) / (chunks * len(mics))


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.crosstalk_cost", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rows = []
    print("| microphones in the room | without, us per chunk | with, us per chunk | added, % of one core |")
    print("|---|---|---|---|")
    for n in (1, 2, 4, 8):
        mics = meeting(n)
        without, with_ = [], []
        for _ in range(args.rounds):  # alternating, so that the machine's drift falls on both
            without.append(run(mics, False))
            with_.append(run(mics, True))
        a, b = float(np.median(without)), float(np.median(with_))
        share = (b - a) / 0.06 * 100
        rows.append({"microphones": n, "without_us": a * 1e6, "with_us": b * 1e6, "added_core_percent": share})
        print(f"| {n} | {a * 1e6:.1f} | {b * 1e6:.1f} | {share:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
    sys.exit(0)
