"""A long recording built from the shared English clips with random pauses between them, and its reference words
(``bench.cues``, ``bench.upload``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from speechdata.corpus import audio, manifest
from speechdata.wer import normalise

SR = 16_000
GAP_S = (0.3, 1.5)


@dataclass(frozen=True)
class Piece:
    """One clip in the recording: [start_s, end_s) and the pauses on either side."""

    clip: str
    start_s: float
    end_s: float
    gap_before_s: float
    gap_after_s: float


GROUPS = ("read", "noisy", "dialogue", "meeting")


def group_of(clip: str) -> str:
    """read / noisy (read speech with noise, reverb or a telephone band) / dialogue (the constructed LibriSpeech
    turn-taking clips) / meeting (AMI: spontaneous, overlapping, disfluent)."""
    if clip.startswith("ami_"):
        return "meeting"
    if clip.startswith("libri_"):
        return "dialogue"
    return str(manifest()[clip]["kind"])


def build_recording(
    minutes: float,
    groups: tuple[str, ...] = ("read", "noisy", "dialogue"),
    seed: int = 7,
    gap_s: tuple[float, float] = GAP_S,
) -> tuple[np.ndarray, list[Piece]]:
    """The clips of ``groups`` in a shuffled order with random pauses, again in a new order until the recording is
    ``minutes`` long."""
    clips = sorted(c for c, e in manifest().items() if e["lang"] == "en" and e["text"] and group_of(c) in groups)
    rng = random.Random(seed)
    parts: list[np.ndarray] = [np.zeros(SR // 2, np.float32)]
    placed: list[tuple[str, float, float, float]] = []
    t = 0.5
    while t < minutes * 60:
        order = clips[:]
        rng.shuffle(order)
        for c in order:
            a = audio(c)
            gap = rng.uniform(*gap_s)
            placed.append((c, t, t + a.size / SR, gap))
            parts += [a, np.zeros(int(gap * SR), np.float32)]
            t += a.size / SR + int(gap * SR) / SR
    pieces = [Piece(c, s, e, placed[k - 1][3] if k else 0.5, g) for k, (c, s, e, g) in enumerate(placed)]
    return np.concatenate(parts), pieces


def reference_words(pieces: list[Piece]) -> tuple[list[str], list[int]]:
    """The recording's reference words in order (``normalise``d), and the index of the piece each belongs to."""
    words: list[str] = []
    owner: list[int] = []
    for k, p in enumerate(pieces):
        ws = normalise(manifest()[p.clip]["text"])
        words += ws
        owner += [k] * len(ws)
    return words, owner
