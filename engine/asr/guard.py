"""Hallucination guard: decides whether a decoded segment may become caption text.

Only VAD-confirmed speech reaches the recognizer; this catches what still goes wrong. Whisper writes fluent text
for noise ("I'm not sure if I can get it right." was seen here for street noise), repeats itself, and emits stock
phrases on near-silence. Checks, in order: empty text, a very low mean token log-probability, text that compresses
too well (loops), and a known silence-phrase on quiet audio.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from engine.asr.transcriber import Transcript
from engine.asr.windows import compression_ratio
from engine.config import GuardConfig

# Phrases Whisper is known to produce from silence or noise (subtitle credits and stock closers), normalised.
SILENCE_PHRASES = frozenset(
    {
        "thank you",
        "thank you very much",
        "thanks for watching",
        "thank you for watching",
        "thanks for watching and see you next time",
        "please subscribe",
        "subscribe to my channel",
        "you",
        "bye",
        "bye bye",
        "so",
        "oh",
        "the end",
        "subtitles by the amaraorg community",
        "i'm not sure if i can get it right",
    }
)

_NORMALISE = re.compile(r"[^\w' ]+")
# Whisper's non-speech tags: [BLANK_AUDIO], [Music], (music), (laughs), *applause*, ♪ ... ♪. Captions show words.
_NONSPEECH = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|[♪♫]+")


def strip_nonspeech(text: str) -> str:
    """``text`` without Whisper's non-speech tags and with spaces folded: what may reach the screen."""
    return " ".join(_NONSPEECH.sub(" ", text).split())


def normalise(text: str) -> str:
    """Lower case, punctuation dropped, spaces folded (the form WER and phrase matching use)."""
    return " ".join(_NORMALISE.sub(" ", text.lower()).split())


class RejectKind(StrEnum):
    """Why the guard drops a transcript; the value is the label of the stats and logs."""

    EMPTY = "empty"
    TOO_LITTLE_SPEECH = "too little speech"
    LOW_CONFIDENCE = "low confidence"
    REPETITION = "repetition"
    SILENCE_PHRASE = "silence phrase"


@dataclass(frozen=True, slots=True)
class Rejection:
    """The guard's verdict on a transcript it drops: the kind, and the mean token log-probability it judged by
    (``LOW_CONFIDENCE`` only; None otherwise)."""

    kind: RejectKind
    avg_logprob: float | None = None

    def __str__(self) -> str:
        """The reason as logged, e.g. ``low confidence (-1.23)``."""
        if self.avg_logprob is None:
            return self.kind.value
        return f"{self.kind.value} ({self.avg_logprob:.2f})"


def reject_reason(t: Transcript, level_dbfs: float, speech_ms: int, cfg: GuardConfig) -> Rejection | None:
    """Why this transcript must not be shown, or None if it may. ``level_dbfs`` is the segment's RMS level."""
    norm = normalise(t.text)
    if not norm:
        return Rejection(RejectKind.EMPTY)
    if speech_ms < cfg.min_speech_ms:
        return Rejection(RejectKind.TOO_LITTLE_SPEECH)
    if t.tokens and t.avg_logprob < cfg.min_avg_logprob:
        return Rejection(RejectKind.LOW_CONFIDENCE, t.avg_logprob)
    if len(t.text) > 40 and compression_ratio(t.text) > cfg.max_compression_ratio:
        return Rejection(RejectKind.REPETITION)
    if norm in SILENCE_PHRASES and (level_dbfs < cfg.quiet_dbfs or t.avg_logprob < cfg.min_avg_logprob / 2):
        return Rejection(RejectKind.SILENCE_PHRASE)
    return None
