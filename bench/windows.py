"""Window bench: the same clips decoded in Whisper's stock 30 s window and under window policies.

    python -m bench.windows [--policies stock fit:4,8,15,30:1.0 fit:2,4,8,15,30:0.5] [--prefixes] [--json out.json]
    python -m bench.windows --stream [--realtime --parallel 5] [--policies stock fit]

A policy is ``stock`` or ``fit:<buckets, s>:<margin, s>`` (the recognizer's ``--window`` and its buckets and margin).
Every English clip of ``shared/data/speech`` with a reference transcript and at most 25 s long (read, noisy and
conversational) is decoded whole, as a final would be, under each policy: each policy on a recognizer of its own,
one after the other.
With ``--prefixes`` each clip is also decoded as the partials of a live session would see it: its first 1, 1.5,
2, ... s (every 0.5 s), and each prefix's text is compared with the stock window's text of the same prefix.

With ``--stream`` the clips instead go through the whole live pipeline (Silero VAD, endpointing, partials,
finals; speaker labels off) as fast as the engine takes them, every English clip with a reference of any length
(the 40-64 s multi-speaker dialogues and meetings included), and the WER is that of the locked captions.

Per policy it reports WER against the references (locked-text quality), clips whose first decode looped (and
were decoded again in a larger window), texts that differ from stock, decode time summed and per clip, and the
per-window counters of the engine (encoder positions, decodes, fallbacks, decode time, tokens/s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from engine.asr.transcriber import DecodeRequest, Priority
from engine.asr.vllm_backend import VllmTranscriber
from engine.config import EngineConfig, TranscriberConfig, WindowMode
from engine.stream.engine import CaptionEngine
from engine.stream.runner import stream_audio
from speechdata.corpus import audio, manifest, pad
from speechdata.wer import word_errors

MAX_CLIP_S = 25.0


def policy_config(model: str | None, name: str) -> TranscriberConfig:
    """The recognizer's configuration under policy ``name``: ``stock``, or ``fit:4,8,15,30:1.0`` (the windows'
    buckets and the margin, in s: ``TranscriberConfig.window_buckets_s`` and ``window_margin_s``). Raises
    ``ValueError`` for another name or bad buckets."""
    if name == "stock":
        return TranscriberConfig(model=model, window=WindowMode.STOCK)
    kind, buckets, margin = name.split(":")
    if kind != "fit":
        raise ValueError(f"unknown policy {name!r}")
    config = TranscriberConfig(
        model=model,
        window=WindowMode.FIT,
        window_buckets_s=tuple(float(b) for b in buckets.split(",")),
        window_margin_s=float(margin),
    )
    config.window_policy()  # (checks the buckets)
    return config


def policy_name(text: str) -> str:
    """``--policies`` items, checked (``policy_config``)."""
    try:
        policy_config(None, text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"policy {text!r}: stock or fit:<buckets, s>:<margin, s> ({exc})") from exc
    return text


def bench_clips(kinds: list[str]) -> list[str]:
    return [
        c
        for c, e in manifest().items()
        if e["lang"] == "en" and e["text"] and e["duration_s"] <= MAX_CLIP_S and e["kind"] in kinds
    ]


async def decode(t: VllmTranscriber, request_id: str, samples: Any) -> tuple[str, float, int]:
    r = await t.transcribe(DecodeRequest(request_id, samples, Priority.FINAL))
    return r.text, r.decode_s, r.fallbacks


async def run_stream(args: argparse.Namespace) -> dict[str, Any]:
    """Locked-caption WER per policy: every clip streamed through the live pipeline of an engine in that policy,
    ``--parallel`` clips at a time (a round)."""
    names = list(args.policies)
    windows: dict[str, list[dict[str, float | int]]] = {}
    totals: dict[str, dict[str, Any]] = {n: {"errors": 0, "words": 0, "wall_s": 0.0, "by_kind": {}} for n in names}
    texts: dict[str, dict[str, str]] = {n: {} for n in names}
    clips = [
        c
        for c, e in manifest().items()
        if e["lang"] == "en" and e["text"] and e["kind"] in args.kinds and c.startswith(tuple(args.clip_prefix))
    ]
    rounds = [clips[i : i + args.parallel] for i in range(0, len(clips), args.parallel)]
    for n in names:
        engine = CaptionEngine(EngineConfig(transcriber=policy_config(args.model, n), speakers=False))
        await engine.start()
        try:
            for k, group in enumerate(rounds):
                results = await asyncio.gather(
                    *(stream_audio(engine, pad(audio(c), 0.5, 2.5), realtime=args.realtime) for c in group)
                )
                for clip, result in zip(group, results, strict=True):
                    e, w = word_errors(manifest()[clip]["text"], result.text())
                    row = totals[n]
                    row["errors"] += e
                    row["words"] += w
                    row["wall_s"] += result.wall_s
                    by = row["by_kind"].setdefault(manifest()[clip]["kind"], [0, 0])
                    by[0] += e
                    by[1] += w
                    texts[n][clip] = result.text()
                print(
                    f"{n} round {k + 1}/{len(rounds)}: {totals[n]['errors'] / max(1, totals[n]['words']):.2%}",
                    flush=True,
                )
            t: Any = engine.transcriber
            windows[n] = t.windows.as_list()
        finally:
            await engine.close()
    return {
        "clips": len(clips),
        "stream": True,
        "realtime": args.realtime,
        "parallel": args.parallel,
        "texts": texts,
        "policies": {
            n: {
                "wer": r["errors"] / max(1, r["words"]),
                "wall_s": r["wall_s"],
                "wer_by_kind": {k: e / max(1, w) for k, (e, w) in r["by_kind"].items()},
                "windows": windows[n],
            }
            for n, r in totals.items()
        },
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.stream:
        return await run_stream(args)
    names = list(args.policies)
    windows: dict[str, list[dict[str, float | int]]] = {}
    rows: dict[str, dict[str, Any]] = {
        n: {"errors": 0, "words": 0, "decode_s": [], "looped": [], "texts": {}} for n in names
    }
    prefix_rows: dict[str, dict[str, Any]] = {n: {"errors": 0, "words": 0, "decode_s": [], "looped": 0} for n in names}
    prefix_texts: dict[str, dict[tuple[str, float], str]] = {n: {} for n in names}
    clips = bench_clips(args.kinds)
    for n in names:
        t = VllmTranscriber(policy_config(args.model, n))
        await t.start()
        try:
            for clip in clips:
                samples = audio(clip)
                text, secs, fallbacks = await decode(t, f"{clip}-{n}", samples)
                e, w = word_errors(manifest()[clip]["text"], text)
                row = rows[n]
                row["errors"] += e
                row["words"] += w
                row["decode_s"].append(secs)
                row["texts"][clip] = text
                if fallbacks:
                    row["looped"].append(clip)
                if args.prefixes:
                    for end_s in [s / 2 for s in range(2, int(2 * min(args.max_prefix_s, len(samples) / 16_000)) + 1)]:
                        part = samples[: int(end_s * 16_000)]
                        prefix_texts[n][clip, end_s], secs, fallbacks = await decode(t, f"{clip}-{n}-{end_s}", part)
                        prefix_rows[n]["decode_s"].append(secs)
                        prefix_rows[n]["looped"] += int(fallbacks > 0)
                print(f"{n} {clip}: {rows[n]['decode_s'][-1]:.2f}s", flush=True)
            windows[n] = t.windows.as_list()
        finally:
            await t.close()
    if "stock" in names:  # each prefix's text against the stock window's text of the same prefix
        for n in names:
            for key, text in prefix_texts[n].items():
                e, w = word_errors(prefix_texts["stock"][key], text)
                prefix_rows[n]["errors"] += e
                prefix_rows[n]["words"] += w
    out: dict[str, Any] = {"clips": len(clips), "policies": {}}
    stock_texts = rows.get("stock", {}).get("texts", {})
    for n in names:
        row = rows[n]
        changed = [c for c, x in row["texts"].items() if stock_texts and x != stock_texts.get(c)]
        out["policies"][n] = {
            "wer": row["errors"] / max(1, row["words"]),
            "decode_s_total": sum(row["decode_s"]),
            "decode_s_p50": statistics.median(row["decode_s"]),
            "looped": row["looped"],
            "differs_from_stock": changed,
            "windows": windows[n],
        }
        if args.prefixes:
            p = prefix_rows[n]
            out["policies"][n]["prefix"] = {
                "decodes": len(p["decode_s"]),
                "wer_vs_stock": p["errors"] / max(1, p["words"]),
                "decode_s_total": sum(p["decode_s"]),
                "looped": p["looped"],
            }
    out["texts"] = {n: rows[n]["texts"] for n in names}
    return out


def print_tables(out: dict[str, Any]) -> None:
    print(f"\n{out['clips']} clips\n")
    if out.get("stream"):
        kinds = sorted({k for p in out["policies"].values() for k in p["wer_by_kind"]})
        print("| policy | locked WER | " + " | ".join(kinds) + " | wall s |")
        print("|---|---|" + "---|" * len(kinds) + "---|")
        for n, p in out["policies"].items():
            print(
                f"| {n} | {100 * p['wer']:.2f}% | "
                + " | ".join(f"{100 * p['wer_by_kind'].get(k, float('nan')):.2f}%" for k in kinds)
                + f" | {p['wall_s']:.0f} |"
            )
        print_windows(out)
        return
    print(
        "| policy | WER | decode s total | p50 | looped (redone) | texts differing from stock | prefix WER vs stock "
        "| prefix decode s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n, p in out["policies"].items():
        pre = p.get("prefix")
        prefix = f"{100 * pre['wer_vs_stock']:.2f}% | {pre['decode_s_total']:.1f}" if pre else "- | -"
        print(
            f"| {n} | {100 * p['wer']:.2f}% | {p['decode_s_total']:.1f} | {p['decode_s_p50']:.2f} | "
            f"{len(p['looped'])} | {len(p['differs_from_stock'])} | {prefix} |"
        )
    print_windows(out)


def print_windows(out: dict[str, Any]) -> None:
    print("\n| policy | window s | encoder positions | decodes | fallbacks | decode s mean | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for n, p in out["policies"].items():
        for w in p["windows"]:
            mean = w["decode_s"] / max(1, w["decodes"])
            print(
                f"| {n} | {w['window_s']:g} | {w['encoder_positions']} | {w['decodes']} | {w['fallbacks']} | "
                f"{mean:.3f} | {w['tokens'] / max(1e-9, w['decode_s']):.0f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--policies",
        nargs="+",
        type=policy_name,
        default=["stock", "fit:4,8,15,30:1.0", "fit:2,4,8,15,30:1.0", "fit:4,8,15,30:2.0"],
    )
    ap.add_argument("--model", default=None)
    ap.add_argument("--prefixes", action="store_true", help="also decode 0.5 s-step prefixes (as partials)")
    ap.add_argument("--stream", action="store_true", help="locked-caption WER through the live pipeline")
    ap.add_argument("--realtime", action="store_true", help="with --stream: pace the audio like a microphone")
    ap.add_argument("--clip-prefix", nargs="+", default=[""], help="with --stream: only clips whose id starts so")
    ap.add_argument("--parallel", type=int, default=1, help="with --stream: sessions streaming at once")
    ap.add_argument("--max-prefix-s", type=float, default=6.0, help="longest prefix decoded with --prefixes")
    ap.add_argument("--kinds", nargs="+", default=["read", "noisy", "conversational"], help="clip kinds to use")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.monotonic()
    out = asyncio.run(run(args))
    out["wall_s"] = time.monotonic() - t0
    print_tables(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
