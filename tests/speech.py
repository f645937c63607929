"""The shared real-speech corpus (``shared/data/speech`` beside the repository) for tests."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from engine.audio.pcm import load_wav

# ``$LIVE_CAPTIONS_SPEECH_DIR`` for a checkout that does not sit beside ``shared`` (a second worktree).
SPEECH_DIR = Path(os.environ.get("LIVE_CAPTIONS_SPEECH_DIR")
                  or Path(__file__).resolve().parents[2] / "shared" / "data" / "speech")


@cache
def manifest() -> dict[str, dict[str, Any]]:
    """Clip id -> manifest entry."""
    with open(SPEECH_DIR / "manifest.jsonl", encoding="utf-8") as f:
        return {e["id"]: e for e in (json.loads(line) for line in f if line.strip())}


def wav_path(clip_id: str) -> Path:
    return SPEECH_DIR / manifest()[clip_id]["wav"]


@cache
def _audio(clip_id: str) -> np.ndarray:
    return load_wav(wav_path(clip_id))


def audio(clip_id: str) -> np.ndarray:
    """16 kHz mono float32 samples of a clip (a fresh copy)."""
    return _audio(clip_id).copy()


def reference(clip_id: str) -> str:
    text = manifest()[clip_id]["text"]
    assert text, f"{clip_id} has no reference transcript"
    return str(text)


def rttm_turns(clip_id: str) -> list[tuple[float, float, str]]:
    """(start_s, end_s, speaker) per RTTM line."""
    turns = []
    for line in (SPEECH_DIR / manifest()[clip_id]["rttm"]).read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "SPEAKER":
            start, dur = float(parts[3]), float(parts[4])
            turns.append((start, start + dur, parts[7]))
    return turns


def pad(samples: np.ndarray, before_s: float = 0.0, after_s: float = 0.0) -> np.ndarray:
    """Add digital silence around a clip."""
    return np.concatenate([np.zeros(int(before_s * 16000), np.float32), samples,
                           np.zeros(int(after_s * 16000), np.float32)])
