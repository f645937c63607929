"""Fit the speaker thresholds on data instead of by hand: a grid over the cosines that decide labels.

    python -m bench.speaker_fit [--speaker-model campplus|resemblyzer] [--assign X ...] [--change X ...]
                                [--join X ...] [--leads S ...] [--json fit.json]

``similarity_threshold`` (``SpeakerConfig``: a segment below it to every known speaker opens a new one),
``change_similarity`` (``TurnConfig``: a window below it to the turn's voice may be another voice) and
``join_margin`` (``TurnConfig``: how far above that a window must be to join the turn's voice) are run over a grid
through the same streaming path as ``bench/speakers.py --turns on`` (VAD, endpointer, turn detector, online
tracker), on the fitting set: the alternating-reader clips built from the shared LibriSpeech/LibriVox utterances
(``alt:...``, speaker ids from the file names) and the two constructed RTTM dialogues. ``--leads`` runs each fitting
clip after each of those leading silences as well: the detector's windows then fall elsewhere in the speech, as they
do from one live session to the next. Each setting is scored by pooled streaming DER over the fitting set, plus a
penalty of 5 points per clip with the wrong number of labels (a viewer notices a phantom speaker more than a few
mislabelled frames). The AMI meeting clips are reported for the chosen setting and the shipped one as a held-out
check, not fitted on: far-field overlapping meeting speech is not what the thresholds should bend to, and their DER
is mostly speech the VAD misses.

Each model has its own cosine scale, so the grid defaults to steps around the model's shipped thresholds
(``engine.speakers.models``). Embeddings and VAD probabilities are computed once per distinct audio span and reused
across settings (they do not depend on the thresholds), so the grid costs little more than one run.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import bench.lib.speaker_labels as spk
from engine.speakers.models import DEFAULT_SPEAKER_MODEL, SPEAKER_MODELS
from engine.speakers.service import Embedder
from engine.speakers.tracker import SpeakerConfig
from engine.speakers.turns import TurnConfig

FIT_RTTM = ("libri_3spk_turns", "libri_2spk_overlap_dialogue")
HELD_OUT = tuple(c for c in spk.CLIPS if c not in FIT_RTTM)
WRONG_COUNT_PENALTY = 0.05


class MemoEmbedder:
    """An embedder with each distinct audio span embedded once (keyed by its bytes)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.cache: dict[bytes, np.ndarray] = {}

    def embed(self, segments: list[np.ndarray]) -> np.ndarray:
        keys = [hashlib.blake2b(np.ascontiguousarray(s).tobytes(), digest_size=16).digest() for s in segments]
        todo = [i for i, k in enumerate(keys) if k not in self.cache]
        if todo:
            for i, vector in zip(todo, self.inner.embed([segments[i] for i in todo]), strict=True):
                self.cache[keys[i]] = vector
        return np.stack([self.cache[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)


@dataclass(frozen=True)
class Setting:
    assign: float
    change: float
    join: float
    der: float  # pooled streaming DER over the fitting set
    speaker_error: float  # pooled share of speech time under a wrong label
    wrong_count: int  # clips with the wrong number of labels
    label_p50_s: float  # new label shown, p50 over the fitting set's changes
    objective: float


def _pooled(results: list[spk.ClipResult]) -> tuple[float, float]:
    ref = sum(r.streaming.reference_s for r in results)
    der = sum(r.streaming.missed_s + r.streaming.false_alarm_s + r.streaming.confusion_s for r in results) / ref
    error = sum(r.streaming.confusion_s for r in results) / ref
    return der, error


def evaluate(clips: list[str], embedder: Any, config: SpeakerConfig, turns: TurnConfig) -> list[spk.ClipResult]:
    return [spk.run_clip(clip, embedder, config, "balanced", turns) for clip in clips]


def score(assign: float, change: float, join: float, results: list[spk.ClipResult]) -> Setting:
    der, error = _pooled(results)
    wrong = sum(r.streaming.speakers_found != r.reference_speakers for r in results)
    delays = [d for r in results for d in r.label_delay_s]
    return Setting(
        assign,
        change,
        join,
        der,
        error,
        wrong,
        float(np.median(delays)) if delays else float("nan"),
        der + WRONG_COUNT_PENALTY * wrong,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speaker-model", default=DEFAULT_SPEAKER_MODEL, choices=sorted(SPEAKER_MODELS))
    parser.add_argument(
        "--assign",
        type=float,
        nargs="+",
        default=None,
        help="similarity_threshold values (new speaker below this cosine); default: the model's "
        "-0.06 to +0.06 in steps of 0.03",
    )
    parser.add_argument(
        "--change",
        type=float,
        nargs="+",
        default=None,
        help="change_similarity values (a window unlike the turn below this cosine); default: the "
        "model's -0.10 to +0.05 in steps of 0.05",
    )
    parser.add_argument(
        "--join",
        type=float,
        nargs="+",
        default=None,
        help="join_margin values (a window joins the turn's voice only this far above the change "
        "cosine); default: the model's",
    )
    parser.add_argument(
        "--leads",
        type=float,
        nargs="+",
        default=[0.0],
        help="run each fitting clip after each of these leading silences, seconds",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    model = SPEAKER_MODELS[args.speaker_model]
    shipped_config, shipped_turns = model.tracker, model.turns
    assigns = args.assign or [round(shipped_config.similarity_threshold + d, 2) for d in (-0.06, -0.03, 0, 0.03, 0.06)]
    changes = args.change or [round(shipped_turns.change_similarity + d, 2) for d in (-0.10, -0.05, 0, 0.05)]
    joins = args.join or [shipped_turns.join_margin]
    embedder = MemoEmbedder(model.load())
    fit_clips = [
        f"{clip}@{lead:g}" if lead else clip for lead in args.leads for clip in (*FIT_RTTM, *spk.alternating_names())
    ]
    settings = []
    for assign, change, join in itertools.product(assigns, changes, joins):
        config = replace(shipped_config, similarity_threshold=assign)
        turns = replace(shipped_turns, change_similarity=change, join_margin=join)
        setting = score(assign, change, join, evaluate(fit_clips, embedder, config, turns))
        settings.append(setting)
        print(json.dumps(asdict(setting)), file=sys.stderr)
    best = min(
        settings,
        key=lambda s: (
            round(s.objective, 6),
            abs(s.assign - shipped_config.similarity_threshold),
            abs(s.change - shipped_turns.change_similarity),
            abs(s.join - shipped_turns.join_margin),
        ),
    )
    print(
        f"model: {model.name}; fitting set: {len(fit_clips)} clips ({', '.join(FIT_RTTM)} and"
        f" {len(fit_clips) // len(args.leads) - len(FIT_RTTM)} alternating-reader clips, after leading silences"
        f" of {', '.join(f'{lead:g}' for lead in args.leads)} s); objective = pooled streaming DER"
        f" + {WRONG_COUNT_PENALTY:.0%} per clip with the wrong number of labels\n"
    )
    print(
        "| similarity_threshold | change_similarity | join_margin | DER | speaker error | wrong count |"
        " new label p50 s | objective |"
    )
    print("|---|---|---|---|---|---|---|---|")
    shipped = (shipped_config.similarity_threshold, shipped_turns.change_similarity, shipped_turns.join_margin)
    for s in settings:
        mark = " (best)" if s is best else (" (shipped)" if (s.assign, s.change, s.join) == shipped else "")
        print(
            f"| {s.assign:.2f}{mark} | {s.change:.2f} | {s.join:.2f} | {s.der:.1%} | {s.speaker_error:.1%} |"
            f" {s.wrong_count} | {s.label_p50_s:.2f} | {s.objective:.3f} |"
        )
    held: dict[str, Any] = {}
    print("\nheld out (AMI meeting clips, not fitted on):\n")
    print("| setting | DER | speaker error | right count |")
    print("|---|---|---|---|")
    for name, (assign, change, join) in (("shipped", shipped), ("best", (best.assign, best.change, best.join))):
        results = evaluate(
            list(HELD_OUT),
            embedder,
            replace(shipped_config, similarity_threshold=assign),
            replace(shipped_turns, change_similarity=change, join_margin=join),
        )
        der, error = _pooled(results)
        right = sum(r.streaming.speakers_found == r.reference_speakers for r in results)
        held[name] = {
            "assign": assign,
            "change": change,
            "join": join,
            "der": der,
            "speaker_error": error,
            "right": right,
        }
        print(f"| {name} ({assign:.2f}, {change:.2f}, {join:.2f}) | {der:.1%} | {error:.1%} | {right}/{len(results)} |")
    if args.json:
        args.json.write_text(
            json.dumps({"settings": [asdict(s) for s in settings], "best": asdict(best), "held_out": held}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
