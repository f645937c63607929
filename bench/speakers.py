"""Speaker-assignment bench: speaker error and DER of streaming labels and after re-clustering.

    python -m bench.speakers [--json out.json] [--preset balanced|low-latency|oracle-turns|all]
                             [--similarity-threshold X] [--recluster-distance X] ...

For each clip with reference speaker turns (RTTM) it runs what a live session runs: Silero VAD and the
endpointer (``engine.audio.vad`` + ``engine.stream.endpoint``) cut the clip into segments, ``SpeakerEmbedder``
embeds those with enough speech, ``SpeakerTracker`` labels them in arrival order, and ``recluster`` relabels
at the end. Two scores, each after the optimal one-to-one mapping of labels onto reference speakers (Hungarian
on overlap time), on 10 ms frames, no collar:

- speaker error: share of reference speech time covered by a segment whose label is wrong (a frame where any
  of several overlapping reference speakers matches counts as right). Speech the VAD missed is not counted:
  this is the assignment's own error.
- DER: (missed + false alarm + confusion) / reference speech time, overlapping speakers counted each.

With turns on, ``guess`` counts the segments whose label differs from the one shown beside their partial text when
they closed (their voice's provisional label, else the label before them): a live sentence that locks before its
embedding is in locks with that label and is corrected by a ``speakers`` message (``engine.stream.labels``), so this
bounds the corrections after a lock (most sentences' embeddings are in by their lock).

``--preset oracle-turns`` cuts segments at the reference turns instead (a diagnostic of assignment alone; a
live session never has those). The ``1-lab`` column is the baseline of labelling everything as one speaker.

The helpers (``segment_clip``, ``score_labels``, ``run_clip``) live in ``bench.lib.speaker_labels`` (the unit tests use
them too); clips and their RTTM turns come from ``speechdata.corpus``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from bench.lib.speaker_labels import CLIPS, ENDPOINTER_PRESETS, ORACLE, ClipResult, alternating_names, run_clip
from engine.speakers.models import DEFAULT_SPEAKER_MODEL, SPEAKER_MODELS
from engine.speakers.turns import TurnConfig


def _table(results: list[ClipResult]) -> str:
    head = (
        f"{'clip':<28} {'preset':<11} {'seg':>3} {'emb':>3} {'ref':>3} {'hyp':>3}/{'rc':<3}"
        f" {'SpkErr':>7} {'->rc':>6} {'1-lab':>6} {'DER':>6} {'->rc':>6} {'miss':>5} {'FA':>5} {'moved':>5}"
        f" {'chg':>7} {'split':>5} {'delay':>5} {'label':>5} {'guess':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        s, c = r.streaming, r.reclustered
        lines.append(
            f"{r.clip:<28} {r.preset:<11} {r.segments:>3} {r.embedded:>3} {r.reference_speakers:>3}"
            f" {s.speakers_found:>3}/{c.speakers_found:<3} {s.speaker_error:>7.1%} {c.speaker_error:>6.1%}"
            f" {r.one_label.speaker_error:>6.1%}"
            f" {s.der:>6.1%} {c.der:>6.1%} {s.missed_s / max(s.reference_s, 1e-9):>5.1%}"
            f" {s.false_alarm_s / max(s.reference_s, 1e-9):>5.1%} {r.relabelled:>5}"
            f" {f'{r.changes_found}/{r.changes}':>7} {r.splits:>5}"
            f" {_p50(r.split_delay_s):>5} {_p50(r.label_delay_s):>5} {r.guessed_wrong:>5}"
        )
    families = {
        "alternating readers": lambda r: r.clip.startswith("alt:"),
        "RTTM clips": lambda r: not r.clip.startswith("alt:"),
    }
    for preset in sorted({r.preset for r in results}):
        for family, member in families.items():
            group = [r for r in results if r.preset == preset and member(r)]
            if not group:
                continue
            ref_s = sum(r.streaming.reference_s for r in group)

            def pooled(pick: str, group: list[ClipResult] = group, ref_s: float = ref_s) -> float:
                scores = [getattr(r, pick) for r in group]
                return sum(x.missed_s + x.false_alarm_s + x.confusion_s for x in scores) / ref_s

            mean_se = float(np.mean([r.streaming.speaker_error for r in group]))
            mean_rc = float(np.mean([r.reclustered.speaker_error for r in group]))
            mean_one = float(np.mean([r.one_label.speaker_error for r in group]))
            right = sum(r.streaming.speakers_found == r.reference_speakers for r in group)
            delays = [d for r in group for d in r.split_delay_s]
            shown = [d for r in group for d in r.label_delay_s]
            lines.append(
                f"{'mean / pooled: ' + family:<28} {preset:<11} {f'{right}/{len(group)} right count':>19}"
                f" {mean_se:>7.1%} {mean_rc:>6.1%} {mean_one:>6.1%} {pooled('streaming'):>6.1%}"
                f" {pooled('reclustered'):>6.1%} {'':>17}"
                f" {f'{sum(r.changes_found for r in group)}/{sum(r.changes for r in group)}':>7}"
                f" {sum(r.splits for r in group):>5} {_p50(delays):>5} {_p50(shown):>5}"
                + (f"  new label shown within 1.5 s: {sum(d <= 1.5 for d in shown)}/{len(shown)}" if shown else "")
                + f"  label at close wrong: {sum(r.guessed_wrong for r in group)}/{sum(r.segments for r in group)}"
            )
    windows = sum(r.windows for r in results)
    if windows:
        speech_s = sum(r.streaming.reference_s for r in results if r.windows)
        lines.append(
            f"turn windows: {windows} embedded over {speech_s:.0f} s of reference speech"
            f" ({windows / speech_s:.2f} per second of speech)"
        )
    segments = sum(r.embedded for r in results)
    if segments:
        cpu_s = sum(r.embed_cpu_s for r in results)
        speech_s = sum(r.embedded_speech_s for r in results)
        lines.append(
            f"embedding: {segments} segments, {speech_s:.0f} s of speech, {cpu_s:.2f} s CPU"
            f" ({1000 * cpu_s / segments:.0f} ms per segment, {1000 * cpu_s / speech_s:.1f} ms per"
            f" second of speech)"
        )
    return "\n".join(lines)


def _p50(values: list[float]) -> str:
    return f"{np.median(values):.2f}" if values else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write per-clip results here")
    parser.add_argument(
        "--preset",
        default="all",
        choices=[*ENDPOINTER_PRESETS, ORACLE, "all"],
        help=f"endpointer preset; 'all' = both presets; '{ORACLE}' = reference turns (diagnostic)",
    )
    parser.add_argument(
        "--clips",
        nargs="*",
        default=[*CLIPS, *alternating_names()],
        help="RTTM clips of the shared folder and alt:<reader>+<reader> turn-taking clips; "
        "<clip>@<seconds>: after that much leading silence",
    )
    parser.add_argument(
        "--turns",
        default="both",
        choices=["on", "off", "both"],
        help="find voice changes inside segments (engine.speakers.turns); 'both' runs each clip twice",
    )
    parser.add_argument(
        "--speaker-model",
        default=DEFAULT_SPEAKER_MODEL,
        choices=sorted(SPEAKER_MODELS),
        help="embedding model; the thresholds below default to the ones fitted for it",
    )
    # Unset thresholds take the chosen model's own (engine.speakers.models).
    for flag, kind in (
        ("--change-similarity", float),
        ("--window-s", float),
        ("--hop-s", float),
        ("--confirm-hop-s", float),
        ("--confirm-windows", int),
        ("--join-margin", float),
        ("--min-turn-s", float),
        ("--similarity-threshold", float),
        ("--min-embed-speech-s", float),
        ("--recluster-distance", float),
        ("--recluster-margin", float),
    ):
        parser.add_argument(flag, type=kind, default=None)
    args = parser.parse_args(argv)
    model = SPEAKER_MODELS[args.speaker_model]
    defaults, tdefaults = model.tracker, model.turns

    def pick(value: float | None, default: float) -> float:
        return default if value is None else value

    config = replace(
        defaults,
        similarity_threshold=pick(args.similarity_threshold, defaults.similarity_threshold),
        min_embed_speech_s=pick(args.min_embed_speech_s, defaults.min_embed_speech_s),
        recluster_distance=pick(args.recluster_distance, defaults.recluster_distance),
        recluster_margin=pick(args.recluster_margin, defaults.recluster_margin),
    )
    hop_s = pick(args.hop_s, tdefaults.hop_s)
    turns = replace(
        tdefaults,
        window_s=pick(args.window_s, tdefaults.window_s),
        hop_s=hop_s,
        confirm_hop_s=min(pick(args.confirm_hop_s, tdefaults.confirm_hop_s), hop_s),
        change_similarity=pick(args.change_similarity, tdefaults.change_similarity),
        join_margin=pick(args.join_margin, tdefaults.join_margin),
        confirm_windows=int(pick(args.confirm_windows, tdefaults.confirm_windows)),
        min_turn_s=pick(args.min_turn_s, tdefaults.min_turn_s),
    )
    presets = list(ENDPOINTER_PRESETS) if args.preset == "all" else [args.preset]
    modes: list[TurnConfig | None] = [None, turns] if args.turns == "both" else [turns if args.turns == "on" else None]
    embedder = model.load()
    results = [
        run_clip(clip, embedder, config, preset, mode)
        for preset in presets
        for mode in modes
        for clip in args.clips
        if not (mode is not None and preset == ORACLE)
    ]
    print(f"model: {model.name}")
    print(f"config: {config}")
    print(f"turns: {turns}")
    print(_table(results))
    if args.json:
        payload = {
            "model": model.name,
            "config": asdict(config),
            "turns": asdict(turns),
            "clips": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
