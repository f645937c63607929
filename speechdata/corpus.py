"""The shared real-speech corpus: ``shared/data/speech`` beside the repository, or ``LIVE_CAPTIONS_SPEECH_DIR``.

``manifest.jsonl`` names each clip (``id``), its WAV file (``wav``, 16 kHz mono), its reference transcript (``text``,
empty where there is none) and its reference speaker turns (``rttm``, null where there are none).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from engine.audio.pcm import SAMPLE_RATE, load_wav


def _speech_dir() -> Path:
    """``shared/data/speech`` beside the repository, or beside a folder above it (a git worktree kept in a
    subfolder); ``LIVE_CAPTIONS_SPEECH_DIR`` overrides."""
    if os.environ.get("LIVE_CAPTIONS_SPEECH_DIR"):
        return Path(os.environ["LIVE_CAPTIONS_SPEECH_DIR"])
    parents = Path(__file__).resolve().parents[2:]
    found = [p / "shared" / "data" / "speech" for p in parents if (p / "shared" / "data" / "speech").is_dir()]
    return found[0] if found else parents[0] / "shared" / "data" / "speech"


SPEECH_DIR = _speech_dir()


@dataclass(frozen=True)
class Turn:
    """A reference speaker turn from an RTTM file; seconds from the clip's start."""

    start_s: float
    end_s: float
    speaker: str


@cache
def manifest() -> dict[str, dict[str, Any]]:
    """Clip id -> manifest entry, in the manifest's order."""
    with open(SPEECH_DIR / "manifest.jsonl", encoding="utf-8") as f:
        return {e["id"]: e for e in (json.loads(line) for line in f if line.strip())}


def wav_path(clip_id: str) -> Path:
    return SPEECH_DIR / str(manifest()[clip_id]["wav"])


@cache
def _audio(clip_id: str) -> np.ndarray:
    return load_wav(wav_path(clip_id))


def audio(clip_id: str) -> np.ndarray:
    """16 kHz mono float32 samples of a clip (a fresh copy)."""
    return _audio(clip_id).copy()


def reference(clip_id: str) -> str:
    """The clip's reference transcript (fails for a clip without one)."""
    text = manifest()[clip_id]["text"]
    assert text, f"{clip_id} has no reference transcript"
    return str(text)


def read_rttm(path: Path) -> list[Turn]:
    """Speaker turns of an RTTM file (``SPEAKER file chan start dur <NA> <NA> name ...`` lines)."""
    turns = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0] == "SPEAKER":
            start, duration = float(fields[3]), float(fields[4])
            turns.append(Turn(start, start + duration, fields[7]))
    return turns


def turns(clip_id: str) -> list[Turn]:
    """The clip's reference speaker turns (fails for a clip without an RTTM file)."""
    rttm = manifest()[clip_id]["rttm"]
    assert rttm, f"{clip_id} has no reference speaker turns"
    return read_rttm(SPEECH_DIR / rttm)


def pad(samples: np.ndarray, before_s: float = 0.0, after_s: float = 0.0) -> np.ndarray:
    """Add digital silence around a clip."""
    return np.concatenate(
        [np.zeros(int(before_s * SAMPLE_RATE), np.float32), samples, np.zeros(int(after_s * SAMPLE_RATE), np.float32)]
    )
