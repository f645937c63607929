"""How soon captions settle, in process: the engine fed the shared clips at real time, the shipped way and the way
without early locks, side by side.

    python -m bench.settle [--kinds read noisy conversational] [--modes new noearly] [--parallel 1] [--json out.json]

Each clip (``../shared/data/speech``, English, 1 s of silence before it and 2.5 s after) is streamed once per mode,
each mode on an engine of its own, built in it, one after the other (default: the embedded whisper-base, speaker
labels on). ``--parallel N`` streams N clips at once, for the engine under load.
``--join A B ...`` streams one recording of those clips instead (1 s lead, ``--gap-s`` between them), ``--repeat``
times (``--parallel 3 --repeat 15``: five runs of three sessions at once).

Modes: ``new`` is the shipped engine; ``noearly`` is it without the early lock (every sentence waits for the
endpoint's silence schedule). ``--variant
NAME:SECTION.FIELD=VALUE,...`` adds mode NAME: ``new`` with those ``EngineConfig`` fields changed (section ``turns``:
the speaker service's ``TurnConfig``, the voice-change detector of each new session).

Per mode and clip kind:
- WER of the locked text against the reference (clips that have one; ``speechdata.wer`` normalisation);
- sentences locked, and the extra sentences against ``noearly`` on the same clips (a sentence split early and then
  continued shows up as one more); "split inside": of those splits, the ones inside a sentence of ``noearly``'s text
  of the same speech (``bench.lib.splits``: the sentence went on, where an extra split at a full stop is a real end);
- first text and lock, seconds after the speech reached the session (``engine.observe``: from the VAD's onset and
  end of speech), p50, p95 and the worst; stable: seconds from a settled word's audio (its end, as estimated) to
  the message that settled it;
- flicker: tentative words shown that the next update changed or dropped, over tentative words shown; stable words
  withdrawn (must be 0); what became of the changed words (``bench.lib.churn.flicker_report``):
  shown in a segment that never locked, replaced by other words, or dropped from the locked text;
- CPU seconds of the whole process tree (the engine core included) per second of audio.

``--json`` writes the rows, each clip's locked text per mode, and with ``--wire`` every caption message as sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.lib.churn import flicker_report
from bench.lib.harness import pct, tree_cpu_rss
from bench.lib.metrics import print_markdown_table
from bench.lib.splits import inside_splits
from engine import EngineObserver
from engine.audio.pcm import CHUNK_SAMPLES, SAMPLE_RATE
from engine.config import EngineConfig, SessionOptions, TranscriberConfig
from engine.protocol import Caption
from engine.speakers.models import speaker_model
from engine.speakers.service import SpeakerService
from engine.stream.engine import CaptionEngine
from engine.stream.runner import StreamResult, stream_audio
from speechdata.corpus import audio, manifest, pad
from speechdata.wer import word_errors

MODES = ("new", "noearly")


@dataclass(frozen=True)
class Recording:
    samples: np.ndarray  # 16 kHz float32, silence around the speech included
    kind: str  # the manifest's clip kind, or "joined"
    text: str | None  # reference transcript


def build_recordings(args: argparse.Namespace) -> dict[str, Recording]:
    """The shared clips (1 s of silence before, 2.5 s after), or ``--join``'s one recording ``--repeat`` times."""
    if args.join:
        gap = np.zeros(int(args.gap_s * SAMPLE_RATE), np.float32)
        parts = [np.zeros(SAMPLE_RATE, np.float32)]
        for c in args.join:
            parts += [audio(c), gap]
        text = " ".join(manifest()[c]["text"] or "" for c in args.join)
        joined = Recording(np.concatenate(parts), "joined", text)
        return {f"joined#{k}": joined for k in range(args.repeat)}
    return {
        c: Recording(pad(audio(c), 1.0, 2.5), e["kind"], e["text"])
        for c, e in manifest().items()
        if e["lang"] == "en"
        and e["kind"] in args.kinds
        and (e["text"] or e["kind"] == "conversational")
        and c.startswith(tuple(args.clip_prefix))
    }


class Latencies(EngineObserver):
    def __init__(self) -> None:
        self.first: list[float] = []
        self.lock: list[float] = []

    def first_text(self, latency_s: float) -> None:
        self.first.append(latency_s)

    def locked(self, latency_s: float) -> None:
        self.lock.append(latency_s)


def stable_after_spoken(result: StreamResult) -> list[float]:
    """Seconds from when each settled word's audio (its estimated end) was fed to when it was sent as stable."""
    out = []
    for m, at in zip(result.messages, result.arrivals_s, strict=True):
        if isinstance(m, Caption):
            for w in m.stable_words:
                chunk = min(len(result.fed_at_s) - 1, w.end_ms * SAMPLE_RATE // 1000 // CHUNK_SAMPLES)
                out.append(at - result.fed_at_s[chunk])
    return out


def parse_variant(text: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """``NAME:SECTION.FIELD=VALUE[,SECTION.FIELD=VALUE...]`` (``p5:partial.stable_min_prob=0.5``): the shipped
    engine with those ``EngineConfig`` fields changed, as mode NAME; section ``turns`` is the speaker service's
    ``TurnConfig`` (``nojoin:turns.join_margin=0``)."""
    name, _, spec = text.partition(":")
    if not name or name in MODES or not spec:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: NAME:SECTION.FIELD=VALUE,... with a new NAME")
    changes: dict[str, dict[str, Any]] = {}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        section, _, name_ = key.strip().partition(".")
        if not section or not name_ or not value:
            raise argparse.ArgumentTypeError(f"--variant {text!r}: {item!r} is not SECTION.FIELD=VALUE")
        changes.setdefault(section, {})[name_] = json.loads(value)
    return name, changes


def mode_engine(base: EngineConfig, mode: str, variants: dict[str, dict[str, dict[str, Any]]]) -> CaptionEngine:
    """An engine (not started) in ``mode``: one of ``MODES`` or a ``--variant`` of ``new``, whose section ``turns``
    changes the speaker service's ``TurnConfig`` (each session's voice-change detector takes it)."""
    changes = variants.get(mode, {})
    config = replace(
        base,
        **{
            section: replace(getattr(base, section), **fields)
            for section, fields in changes.items()
            if section != "turns"
        },
    )
    if mode == "noearly":
        config = replace(config, endpoint=replace(config.endpoint, sentence_pause_ms=0))
    speakers = None
    if config.speakers:
        model = speaker_model(config.speaker_model)
        speakers = SpeakerService(
            model.tracker, load=model.load, turns=replace(model.turns, **changes.get("turns", {}))
        )
    return CaptionEngine(config, speakers=speakers)


async def main(args: argparse.Namespace) -> int:
    recordings = build_recordings(args)
    clips = list(recordings)
    variants = dict(args.variant)
    args.modes = [*args.modes, *variants]
    base = EngineConfig(
        transcriber=TranscriberConfig(model=args.model, cpu_threads=args.cpu_threads), speakers=not args.no_speakers
    )
    me = psutil.Process()
    rows: dict[str, dict[str, Any]] = {m: {"by_kind": {}, "cpu_s": 0.0, "audio_s": 0.0} for m in args.modes}
    sentences: dict[str, dict[str, int]] = {m: {} for m in args.modes}
    texts: dict[str, dict[str, str]] = {m: {} for m in args.modes}
    locked_texts: dict[str, dict[str, list[str]]] = {m: {} for m in args.modes}
    wires: dict[str, dict[str, list[dict[str, Any]]]] = {m: {} for m in args.modes}
    groups = [clips[i : i + args.parallel] for i in range(0, len(clips), args.parallel)]
    t_start = time.monotonic()
    for mode in args.modes:
        engine = mode_engine(base, mode, variants)
        await engine.start()
        try:
            if args.warmup:
                await stream_audio(engine, recordings[clips[0]].samples[: 10 * 16_000], realtime=True)
            for k, group in enumerate(groups):
                seen = Latencies()
                engine.observers.add(seen)
                await asyncio.sleep(1.0)  # the engine core busy-waits ~1 s after activity
                c0 = tree_cpu_rss(me)[0]
                results = await asyncio.gather(
                    *(
                        stream_audio(
                            engine, recordings[c].samples, realtime=True, options=SessionOptions(language="en")
                        )
                        for c in group
                    )
                )
                spent = tree_cpu_rss(me)[0] - c0
                engine.observers.remove(seen)
                row = rows[mode]
                row["cpu_s"] += spent
                for clip, result in zip(group, results, strict=True):
                    entry = recordings[clip]
                    by = row["by_kind"].setdefault(
                        entry.kind,
                        {
                            "errors": 0,
                            "words": 0,
                            "sentences": 0,
                            "flickered": 0,
                            "tentative": 0,
                            "withdrawn": 0,
                            "never_locked": 0,
                            "replaced": 0,
                            "dropped": 0,
                            "first": [],
                            "lock": [],
                            "stable": [],
                        },
                    )
                    wire = [m.wire() for m in result.messages if isinstance(m, Caption)]
                    locked = [s for m in wire for s in m["sentences"]]
                    if entry.text:
                        e, w = word_errors(entry.text, " ".join(s["text"] for s in locked))
                        by["errors"] += e
                        by["words"] += w
                    by["sentences"] += len(locked)
                    sentences[mode][clip] = len(locked)
                    texts[mode][clip] = " | ".join(s["text"] for s in locked)
                    locked_texts[mode][clip] = [s["text"] for s in locked]
                    if args.wire:
                        wires[mode][clip] = wire
                    by["stable"] += stable_after_spoken(result)
                    seen_flicker = flicker_report(wire)
                    by["flickered"] += seen_flicker.changed
                    by["tentative"] += seen_flicker.shown
                    by["withdrawn"] += seen_flicker.withdrawn
                    for cause, n in seen_flicker.causes.items():
                        by[cause] += n
                    row["audio_s"] += result.audio_s
                # Latencies are per engine, not per clip: give them to the group's first kind.
                by = row["by_kind"][recordings[group[0]].kind]
                by["first"] += seen.first
                by["lock"] += seen.lock
                print(
                    f"{mode}: group {k + 1}/{len(groups)} done ({time.monotonic() - t_start:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            await engine.close()
    table = []
    for mode in args.modes:
        for kind, by in sorted(rows[mode]["by_kind"].items()):
            extra = None
            inside = placed = 0
            if "noearly" in sentences and mode != "noearly":
                same = [c for c in sentences[mode] if recordings[c].kind == kind and c in sentences["noearly"]]
                old_n = sum(sentences["noearly"][c] for c in same)
                extra = (sum(sentences[mode][c] for c in same) - old_n) / old_n if old_n else None
                for c in same:
                    i, n = inside_splits(locked_texts[mode][c], locked_texts["noearly"][c])
                    inside, placed = inside + i, placed + n
            wer = by["errors"] / by["words"] if by["words"] else float("nan")
            table.append(
                {
                    "mode": mode,
                    "kind": kind,
                    "wer": wer,
                    "sentences": by["sentences"],
                    "extra_sentences": float("nan") if extra is None else extra,
                    "inside_splits": inside if extra is not None else float("nan"),
                    "first_p50": pct(by["first"], 50),
                    "first_p95": pct(by["first"], 95),
                    "lock_p50": pct(by["lock"], 50),
                    "lock_p95": pct(by["lock"], 95),
                    "stable_p50": pct(by["stable"], 50),
                    "stable_p95": pct(by["stable"], 95),
                    "first_max": max(by["first"], default=float("nan")),
                    "lock_max": max(by["lock"], default=float("nan")),
                    "flicker": by["flickered"] / by["tentative"] if by["tentative"] else float("nan"),
                    "flickered": by["flickered"],
                    "withdrawn": by["withdrawn"],
                    "never_locked": by["never_locked"],
                    "replaced": by["replaced"],
                    "dropped": by["dropped"],
                    "cpu_per_audio_s": rows[mode]["cpu_s"] / max(1e-9, rows[mode]["audio_s"]),
                }
            )
    columns = [
        ("mode", "mode", "{}"),
        ("kind", "kind", "{}"),
        ("wer", "WER", "{:.2%}"),
        ("sentences", "sentences", "{:d}"),
        ("extra_sentences", "vs noearly", "{:+.0%}"),
        ("inside_splits", "split inside", "{}"),
        ("first_p50", "first p50", "{:.2f}"),
        ("first_p95", "p95", "{:.2f}"),
        ("lock_p50", "lock p50", "{:.2f}"),
        ("lock_p95", "p95", "{:.2f}"),
        ("stable_p50", "stable p50", "{:.2f}"),
        ("stable_p95", "p95", "{:.2f}"),
        ("first_max", "first max", "{:.2f}"),
        ("lock_max", "lock max", "{:.2f}"),
        ("flicker", "flicker", "{:.1%}"),
        ("flickered", "changed", "{:d}"),
        ("never_locked", "of which never locked", "{:d}"),
        ("replaced", "replaced", "{:d}"),
        ("dropped", "dropped", "{:d}"),
        ("withdrawn", "withdrawn", "{:d}"),
        ("cpu_per_audio_s", "CPU s/audio s", "{:.2f}"),
    ]
    print(f"\n{len(clips)} clips, parallel {args.parallel}, {time.monotonic() - t_start:.0f} s\n")
    print_markdown_table(columns, table)
    if args.json:
        report = json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "args": vars(args),
                "rows": table,
                "sentences": sentences,
                "texts": texts,
                "locked": locked_texts,
                **({"wire": wires} if args.wire else {}),
            },
            indent=2,
            default=str,
        )
        await asyncio.to_thread(Path(args.json).write_text, report, "utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.settle", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kinds", nargs="+", default=["read", "noisy", "conversational"])
    p.add_argument("--modes", nargs="+", choices=MODES, default=["new", "noearly"])
    p.add_argument(
        "--variant",
        action="append",
        type=parse_variant,
        default=[],
        metavar="NAME:SECTION.FIELD=VALUE",
        help="one more mode: the shipped engine with EngineConfig fields changed (repeatable), e.g. "
        "p5:partial.stable_min_prob=0.5,partial.show_min_prob=0.3",
    )
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--clip-prefix", nargs="+", default=[""], help="only clips whose id starts so")
    p.add_argument(
        "--join",
        nargs="+",
        default=None,
        help="instead: one recording of these clips in order (1 s lead, --gap-s between), --repeat times",
    )
    p.add_argument("--gap-s", type=float, default=2.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--model", default=None)
    p.add_argument("--cpu-threads", type=int, default=0, help="the CPU engine core's threads (0: one per core)")
    p.add_argument("--no-speakers", action="store_true")
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--json", default=None)
    p.add_argument(
        "--wire",
        action="store_true",
        help="the JSON also holds every clip's caption messages as sent, per mode (for diagnosis)",
    )
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
