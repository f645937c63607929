"""Speaker-embedding models compared: equal error rate on same/different-speaker pairs, and CPU per window.

    python -m bench.speaker_models [--models resemblyzer campplus] [--fit] [--json out.json]

Pairs come from the shared real speech (``shared/data/speech``), in three groups, each scored on its own and
pooled:

- ``read``: the English read clips whose reader is known (LibriSpeech speaker ids, the LibriVox reader ``sns01``,
  LJ Speech, CMU ARCTIC, the Kennedy address), one segment per clip.
- ``noisy``: the noise, babble, reverberation, far-field and telephone versions of read clips against the read
  clips (every pair holds at least one noisy clip; a noisy clip is never paired with the utterance it was made
  from).
- ``meeting``: the AMI clips, cut at their RTTM turns into stretches where one speaker alone talks (overlap
  removed), at least 1 s long.

Two units are scored on the same pairs for every model:

- ``1.5 s``: windows of ``--window-s`` seconds (the turn detector's window, engine/speakers/turns.py), cut end to
  end from each segment and kept when Silero calls at least 60 % of them speech (the detector's rule). Two windows of
  the same segment are never paired (they are too alike to say anything).
- ``segment``: each segment whole, as the speaker tracker embeds closed segments.

Pairs are only formed inside a group (a meeting voice against a read voice is trivially different). A pair is
``same`` when both sides have the same speaker. EER is where false accepts equal false rejects; the ``thr`` column
is the cosine at that point (models differ in scale: a threshold fitted to one does not carry over). CPU is process
time per 1.5 s window, the windows embedded 16 to a batch and one at a time, single-threaded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engine.audio.pcm import SAMPLE_RATE
from engine.audio.vad import WINDOW
from speechdata import corpus
from speechdata.corpus import Turn

GROUPS = ("read", "noisy", "meeting")
MIN_SEGMENT_S = 1.0
MIN_WINDOW_SPEECH = 0.6
SPEECH_PROB = 0.5
_NOISY_SUFFIXES = ("_rvb", "_noise", "_babble", "_farfield", "_telephone")


class Embedder(Protocol):
    def embed(self, segments: list[np.ndarray]) -> np.ndarray: ...


def model_loaders() -> dict[str, Callable[[], Embedder]]:
    """The models this bench knows, by the names ``--speaker-model`` takes."""
    from engine.speakers.models import SPEAKER_MODELS

    return {name: model.load for name, model in SPEAKER_MODELS.items()}


@dataclass(frozen=True)
class Item:
    """One single-speaker stretch of a clip, or one window of it."""

    group: str
    speaker: str
    source: str  # the recorded utterance it comes from (a noisy copy shares its original's)
    segment: int  # index of the segment it belongs to
    audio: np.ndarray


@dataclass(frozen=True)
class Score:
    eer: float  # 0..1
    threshold: float  # cosine at the EER point
    same_median: float
    different_median: float
    same_pairs: int
    different_pairs: int


@dataclass(frozen=True)
class ModelResult:
    model: str
    dim: int
    load_s: float
    window_ms_batched: float  # CPU ms per window, 16 windows a batch
    window_ms_single: float  # CPU ms per window, one a batch
    windows: dict[str, Score]  # group (and "all") -> score of 1.5 s windows
    segments: dict[str, Score]  # same for whole segments


def collect_segments() -> list[Item]:
    """The single-speaker segments of the shared clips, in the three groups (see the module docstring)."""
    by_id = corpus.manifest()
    items: list[Item] = []
    for clip in by_id.values():
        if clip["lang"] != "en":
            continue
        kind = clip["kind"]
        if kind == "conversational" and clip["id"].startswith("ami_") and clip.get("rttm"):
            audio = corpus.audio(clip["id"])
            for start, end, name in _solo_stretches(corpus.turns(clip["id"])):
                piece = audio[round(start * SAMPLE_RATE) : round(end * SAMPLE_RATE)]
                if piece.size >= MIN_SEGMENT_S * SAMPLE_RATE:
                    items.append(Item("meeting", f"ami:{name}", clip["id"], len(items), piece))
            continue
        if kind not in ("read", "noisy"):
            continue
        source = _source_clip(clip)
        speaker = _reader(by_id.get(source, clip))
        if speaker is None:
            continue
        items.append(Item(kind, speaker, source, len(items), corpus.audio(clip["id"])))
    return items


def _source_clip(clip: dict[str, Any]) -> str:
    """Id of the clean utterance a (noisy) clip was made from; a clean clip is its own source."""
    if clip.get("components"):
        return str(clip["components"][0])
    name = str(clip["id"])
    for suffix in _NOISY_SUFFIXES:
        if suffix in name:
            return name[: name.index(suffix)]
    return name


def _reader(clip: dict[str, Any]) -> str | None:
    """A speaker identity of a read clip, or None when unknown."""
    if clip.get("librispeech_speaker"):
        return f"ls:{clip['librispeech_speaker']}"
    name = str(clip["id"])
    for prefix, speaker in (
        ("librivox_sns01", "librivox:sns01"),
        ("ljspeech", "ljspeech"),
        ("cmuarctic", "cmuarctic"),
        ("whisper_jfk", "jfk"),
    ):
        if name.startswith(prefix):
            return speaker
    return None


def _solo_stretches(turns: list[Turn]) -> list[tuple[float, float, str]]:
    """Parts of RTTM turns where no other speaker talks: (start_s, end_s, speaker)."""
    out: list[tuple[float, float, str]] = []
    for turn in turns:
        pieces = [(turn.start_s, turn.end_s)]
        for other in turns:
            if other.speaker == turn.speaker:
                continue
            cut = []
            for start, end in pieces:
                if other.end_s <= start or other.start_s >= end:
                    cut.append((start, end))
                    continue
                if other.start_s > start:
                    cut.append((start, other.start_s))
                if other.end_s < end:
                    cut.append((other.end_s, end))
            pieces = cut
        out.extend((start, end, turn.speaker) for start, end in pieces if end > start)
    return out


def cut_windows(segments: list[Item], window_s: float) -> list[Item]:
    """End-to-end windows of every segment that are mostly speech (Silero), each tagged with its segment."""
    from bench.lib.speaker_labels import clip_probs

    window = round(window_s * SAMPLE_RATE)
    out = []
    for item in segments:
        probs = clip_probs(item.audio)
        for start in range(0, item.audio.size - window + 1, window):
            frames = probs[start // WINDOW : (start + window) // WINDOW]
            if frames.size and float(np.mean(frames >= SPEECH_PROB)) >= MIN_WINDOW_SPEECH:
                out.append(
                    Item(item.group, item.speaker, item.source, item.segment, item.audio[start : start + window])
                )
    return out


def pair_scores(items: list[Item], vectors: np.ndarray) -> dict[str, Score]:
    """EER per group and over all groups' pairs together (see the module docstring for which pairs count)."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = unit @ unit.T
    n = len(items)
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    group = np.array([GROUPS.index(i.group) for i in items])
    speaker = np.array([i.speaker for i in items])
    source = np.array([i.source for i in items])
    segment = np.array([i.segment for i in items])
    noisy = group == GROUPS.index("noisy")
    same = speaker[:, None] == speaker[None, :]
    usable = upper & (segment[:, None] != segment[None, :]) & (source[:, None] != source[None, :])
    read_like = (group == GROUPS.index("read")) | noisy
    masks = {
        "read": usable & (group == GROUPS.index("read"))[:, None] & (group == GROUPS.index("read"))[None, :],
        "noisy": usable & read_like[:, None] & read_like[None, :] & (noisy[:, None] | noisy[None, :]),
        "meeting": usable & (group == GROUPS.index("meeting"))[:, None] & (group == GROUPS.index("meeting"))[None, :],
    }
    masks["all"] = masks["read"] | masks["noisy"] | masks["meeting"]
    return {name: equal_error(cosines[mask & same], cosines[mask & ~same]) for name, mask in masks.items()}


def equal_error(same: np.ndarray, different: np.ndarray) -> Score:
    """EER of cosine scores and the threshold where false accepts (different >= t) equal false rejects (same < t)."""
    if same.size == 0 or different.size == 0:
        return Score(float("nan"), float("nan"), float("nan"), float("nan"), int(same.size), int(different.size))
    thresholds = np.unique(np.concatenate([same, different]))
    same_sorted, diff_sorted = np.sort(same), np.sort(different)
    false_reject = np.searchsorted(same_sorted, thresholds, side="left") / same.size
    false_accept = 1.0 - np.searchsorted(diff_sorted, thresholds, side="left") / different.size
    best = int(np.argmin(np.abs(false_accept - false_reject)))
    return Score(
        float((false_accept[best] + false_reject[best]) / 2.0),
        float(thresholds[best]),
        float(np.median(same)),
        float(np.median(different)),
        int(same.size),
        int(different.size),
    )


def cpu_per_window(embedder: Embedder, windows: list[Item], batch: int, rounds: int) -> float:
    """Process CPU milliseconds per window, embedding ``batch`` windows per call."""
    audio = [w.audio for w in windows[: batch * rounds]]
    embedder.embed(audio[:batch])  # warm this batch shape
    start = time.process_time()
    for first in range(0, len(audio), batch):
        embedder.embed(audio[first : first + batch])
    return (time.process_time() - start) * 1000.0 / len(audio)


def run_model(name: str, load: Callable[[], Embedder], segments: list[Item], windows: list[Item]) -> ModelResult:
    started = time.perf_counter()
    embedder = load()
    load_s = time.perf_counter() - started
    window_vectors = np.concatenate(
        [embedder.embed([w.audio for w in windows[i : i + 64]]) for i in range(0, len(windows), 64)]
    )
    segment_vectors = np.concatenate([embedder.embed([s.audio]) for s in segments])
    return ModelResult(
        model=name,
        dim=int(window_vectors.shape[1]),
        load_s=load_s,
        window_ms_batched=cpu_per_window(embedder, windows, 16, 4),
        window_ms_single=cpu_per_window(embedder, windows, 1, 32),
        windows=pair_scores(windows, window_vectors),
        segments=pair_scores(segments, segment_vectors),
    )


def fit_thresholds(reference: ModelResult, target: ModelResult) -> dict[str, float]:
    """Thresholds for the target model, from the pairs of this bench.

    - The turn detector's ``change_similarity`` (is this 1.5 s window another voice?) is the target's EER threshold
      on 1.5 s window pairs, all groups pooled.
    - The tracker's thresholds (``SpeakerConfig``: a segment against a speaker's centroid, and re-clustering) are the
      reference model's tuned ones (the defaults, tuned for Resemblyzer on ``bench/speakers.py``, where they sit
      above Resemblyzer's EER point), carried over: each keeps its relative position between the median
      different-speaker and the median same-speaker cosine of whole-segment pairs; a margin (a difference of cosines)
      scales with the distance between the two medians.

    Carrying ``change_similarity`` over the same way put it at the target's median same-speaker window cosine, where
    the detector's check that two deviating windows agree with each other failed often, and it missed changes
    (docs/benchmarks.md, "Speaker-embedding models").
    """
    from engine.speakers.tracker import SpeakerConfig

    tracker = SpeakerConfig()

    ref, tgt = reference.segments["all"], target.segments["all"]
    spread = (tgt.same_median - tgt.different_median) / (ref.same_median - ref.different_median)

    def carry(cosine: float) -> float:
        return tgt.different_median + (cosine - ref.different_median) * spread

    return {
        "similarity_threshold": round(carry(tracker.similarity_threshold), 2),
        "recluster_distance": round(1.0 - carry(1.0 - tracker.recluster_distance), 2),
        "recluster_margin": round(tracker.recluster_margin * spread, 2),
        "change_similarity": round(target.windows["all"].threshold, 2),
    }


def print_table(results: list[ModelResult]) -> None:
    print("| model | unit | group | EER | thr | same med | diff med | pairs same/diff |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for result in results:
        for unit, scores in (("1.5 s", result.windows), ("segment", result.segments)):
            for group, s in scores.items():
                print(
                    f"| {result.model} | {unit} | {group} | {100 * s.eer:.1f} % | {s.threshold:.3f} | "
                    f"{s.same_median:.3f} | {s.different_median:.3f} | {s.same_pairs}/{s.different_pairs} |"
                )
    print()
    print("| model | dim | load s | CPU ms / 1.5 s window (16 a batch) | (1 a batch) |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r.model} | {r.dim} | {r.load_s:.1f} | {r.window_ms_batched:.1f} | {r.window_ms_single:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    known = model_loaders()
    parser.add_argument("--models", nargs="+", default=list(known), choices=list(known))
    parser.add_argument("--window-s", type=float, default=1.5)
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    parser.add_argument(
        "--fit",
        action="store_true",
        help="print each model's thresholds derived from these pairs (``fit_thresholds``; needs "
        "resemblyzer in --models): the values of engine.speakers.models",
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    segments = collect_segments()
    windows = cut_windows(segments, args.window_s)
    counts = {g: (sum(s.group == g for s in segments), sum(w.group == g for w in windows)) for g in GROUPS}
    print(f"segments / windows per group: {counts}", file=sys.stderr)
    results = []
    for name in args.models:
        print(f"embedding with {name} ...", file=sys.stderr)
        results.append(run_model(name, known[name], segments, windows))
    print_table(results)
    fits: dict[str, dict[str, float]] = {}
    if args.fit:
        reference = next((r for r in results if r.model == "resemblyzer"), None)
        if reference is None:
            parser.error("--fit needs resemblyzer among --models (its thresholds are the ones carried over)")
        fits = {r.model: fit_thresholds(reference, r) for r in results if r is not reference}
        print()
        for model, fit in fits.items():
            print(f"{model}: {fit}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "window_s": args.window_s,
                    "segments_windows": counts,
                    "results": [asdict(r) for r in results],
                    "fit": fits,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
