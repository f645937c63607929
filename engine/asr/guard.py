"""Hallucination guard: decides whether a decoded segment may become caption text.

Only VAD-confirmed speech reaches the recognizer; this catches what still goes wrong. Whisper writes fluent text
for noise ("I'm not sure if I can get it right." was seen here for street noise), repeats itself, and emits stock
phrases on near-silence. Checks, in order: empty text, a very low mean token log-probability, text that compresses
too well (loops), and a known silence-phrase on quiet audio.
"""

from __future__ import annotations

import re

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


def reject_reason(t: Transcript, level_dbfs: float, speech_ms: int, cfg: GuardConfig) -> str | None:
    """Why this transcript must not be shown, or None if it may. ``level_dbfs`` is the segment's RMS level."""
    norm = normalise(t.text)
    if not norm:
        return "empty"
    if speech_ms < cfg.min_speech_ms:
        return "too little speech"
    if t.tokens and t.avg_logprob < cfg.min_avg_logprob:
        return f"low confidence ({t.avg_logprob:.2f})"
    if len(t.text) > 40 and compression_ratio(t.text) > cfg.max_compression_ratio:
        return "repetition"
    if norm in SILENCE_PHRASES and (level_dbfs < cfg.quiet_dbfs or t.avg_logprob < cfg.min_avg_logprob / 2):
        return "silence phrase"
    return None
