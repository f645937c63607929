"""A sentence's first partial: is its first word right, and how sure was the decoder of it?

    python -m bench.first_words [--after-ms 200 400 600 800] [--json out.json]

The recognizer alone (the embedded model on vLLM, in process), on every English read and hard clip with a reference
(``bench.lib.clips.pool``): each clip's audio from the pre-roll before its first speech (Silero VAD,
``EndpointConfig.preroll_ms``) to ``--after-ms`` of speech, decoded as the session decodes a segment's first partial.
A first word is *right* when it is one of the reference's first three words (``speechdata.wer``'s normalisation).
The table gives, per length, how many first words were right, wrong or missing, the probability the decoder gave the
right and the wrong ones (quartiles), and, for each candidate floor under which a first word would wait for the next
partial (``PartialConfig.first_show_min_prob``), how many wrong first words it keeps off the screen and how many
right ones it holds back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.clips import pool, speech_bounds
from engine.asr.transcriber import DecodeRequest, Priority
from engine.asr.vllm_backend import VllmTranscriber
from engine.audio.pcm import SAMPLE_RATE
from engine.config import EndpointConfig, TranscriberConfig
from speechdata.corpus import audio
from speechdata.wer import normalise

FLOORS = (0.2, 0.3, 0.4, 0.5, 0.6)


async def decode_first_partials(after_ms: list[int], model: str | None) -> list[dict[str, Any]]:
    """One row per (clip, length): the decoded text, its first word's probability, and whether it was right."""
    recognizer = VllmTranscriber(TranscriberConfig(model=model))
    await recognizer.start()
    preroll_s = EndpointConfig().preroll_ms / 1000
    rows: list[dict[str, Any]] = []
    try:
        for clip_id, text in (*pool("read"), *pool("hard")):
            samples = audio(clip_id)
            onset_s, _end_s = speech_bounds(clip_id)
            reference = normalise(text)
            start = max(0, round((onset_s - preroll_s) * SAMPLE_RATE))
            for ms in after_ms:
                piece = samples[start : round((onset_s + ms / 1000) * SAMPLE_RATE)]
                result = await recognizer.transcribe(DecodeRequest(f"{clip_id}-{ms}", piece, Priority.PARTIAL))
                words = normalise(result.text)
                rows.append(
                    {
                        "clip": clip_id,
                        "after_ms": ms,
                        "text": result.text,
                        "first_prob": result.word_probs[0] if result.word_probs else None,
                        "right": bool(words) and words[0] in reference[:3],
                        "empty": not words,
                    }
                )
    finally:
        await recognizer.close()
    return rows


def quartiles(values: list[float]) -> str:
    """p25 / p50 / p75 of ``values``, or "-"."""
    if not values:
        return "-"
    return " / ".join(f"{np.percentile(values, q):.2f}" for q in (25, 50, 75))


def print_tables(rows: list[dict[str, Any]], after_ms: list[int]) -> None:
    print("| speech | clips | first word right | wrong | nothing | prob. of right p25 / p50 / p75 | of wrong |")
    print("|---|---|---|---|---|---|---|")
    for ms in after_ms:
        at = [r for r in rows if r["after_ms"] == ms]
        right = [r for r in at if r["right"]]
        wrong = [r for r in at if not r["right"] and not r["empty"]]
        print(
            f"| {ms} ms | {len(at)} | {len(right)} | {len(wrong)} | {len(at) - len(right) - len(wrong)} | "
            f"{quartiles([r['first_prob'] for r in right if r['first_prob'] is not None])} | "
            f"{quartiles([r['first_prob'] for r in wrong if r['first_prob'] is not None])} |"
        )
    first = [r for r in rows if r["after_ms"] == after_ms[0]]
    print(f"\nFloors on the first word at {after_ms[0]} ms of speech:\n")
    print("| floor | wrong first words kept off the screen | right ones held back a partial |")
    print("|---|---|---|")
    for floor in FLOORS:
        held = [r for r in first if r["first_prob"] is not None and r["first_prob"] < floor and not r["empty"]]
        wrongs = sum(1 for r in first if not r["right"] and not r["empty"])
        print(
            f"| {floor:g} | {sum(1 for r in held if not r['right'])} of {wrongs} | "
            f"{sum(1 for r in held if r['right'])} of {sum(1 for r in first if r['right'])} |"
        )


async def main(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    rows = await decode_first_partials(args.after_ms, args.model)
    print(f"\n{len(rows)} decodes in {time.monotonic() - t0:.0f} s\n")
    print_tables(rows, args.after_ms)
    if args.json:
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(rows, indent=1), "utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.first_words", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--after-ms",
        type=int,
        nargs="+",
        default=[200, 400, 600, 800],
        help="speech in the first partial (the first is what PartialConfig.first_after_ms decodes)",
    )
    p.add_argument("--model", default=None, help="the recognizer's model (default: the embedded whisper-base)")
    p.add_argument("--json", default=None, help="also write every decode to this JSON file")
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
