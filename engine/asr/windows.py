"""Encoder windows that follow the speech, and the loop guard that makes them safe.

Whisper's encoder reads a fixed 30 s window (3000 mel frames, 1500 encoder positions): a 2 s sentence padded with
25 s of silence pays for 30 s of encoder work, and on every partial re-decode again. Here each request runs in the
smallest *window* of a few fixed sizes that covers its audio plus a margin; the encoder then works on
``window_s * 50`` positions (see ``engine.asr.vllm_whisper``, which makes vLLM honour the window).

Whisper was trained on 30 s windows only, and in a short window it sometimes loops (the same sentence twice, a
phrase until the token limit). So every decode is checked (``loop_reason``) and a looping one is decoded again in
the next larger window, up to the stock 30 s window, whose output is taken as it is. ``max_tokens_for`` caps the
tokens a request may write by its audio length, so that a loop ends early instead of filling the decoder.

Everything here is cheap (numpy on at most a few hundred token ids) and, but for ``fall_back``'s log line, pure: it
runs on the event loop.
"""

from __future__ import annotations

import logging
import math
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# The window policy is configuration (``TranscriberConfig.window_policy``): it lives on the engine's ground floor,
# and is named here too for the recognizers and tools that choose windows.
from engine.config import FULL_WINDOW_S as FULL_WINDOW_S
from engine.config import MAX_COMPRESSION_RATIO
from engine.config import STOCK_WINDOW as STOCK_WINDOW
from engine.config import WINDOW_MODES as WINDOW_MODES
from engine.config import WindowPolicy as WindowPolicy

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000
MEL_HOP_SAMPLES = 160  # one log-mel frame per 10 ms

# Measured (docs/benchmarks.md, "Windows"): normal speech yields 3-4 Whisper tokens per second of audio and fast
# speech about 6; a cap well above that never cuts real text and stops a loop within a few seconds of tokens.
TOKENS_PER_AUDIO_S = 10.0
MIN_MAX_TOKENS = 24

# A repeated span this many tokens long or longer, twice in a row, is a loop (a whole clause said twice).
LOOP_MIN_SPAN_TOKENS = 6
# Shorter spans must come three times in a row (a phrase spinning), single tokens five times.
LOOP_MIN_COPIES_SHORT = 3
LOOP_MIN_COPIES_TOKEN = 5
_MIN_COMPRESSION_CHARS = 40  # too short for the ratio to mean anything
_RECENT_DECODES = 2048  # decode times kept per window for percentiles


def encoder_positions(window_s: float) -> int:
    """Encoder positions for a window of ``window_s`` seconds (two mel frames per position)."""
    return round(window_s * SAMPLE_RATE / MEL_HOP_SAMPLES) // 2


def window_samples(window_s: float) -> int:
    """The window in 16 kHz samples: what the feature extractor pads the audio to (``max_length``)."""
    return round(window_s * SAMPLE_RATE)


def max_tokens_for(audio_s: float, cap: int) -> int:
    """Tokens a request of ``audio_s`` seconds may generate: ``cap`` at most, never fewer than a short sentence
    needs."""
    return max(1, min(cap, max(MIN_MAX_TOKENS, math.ceil(audio_s * TOKENS_PER_AUDIO_S))))


def tandem_repeat(tokens: Sequence[int]) -> tuple[int, int] | None:
    """The worst immediate repetition in ``tokens`` as (span length, copies), if it counts as a loop.

    A loop is a span of at least ``LOOP_MIN_SPAN_TOKENS`` tokens said twice in a row, a shorter span of two or
    more tokens three times in a row, or one token five times in a row. Natural speech repeats a word or two
    ("very, very"); it rarely repeats a whole clause verbatim back to back, and a false alarm only costs one
    decode in a larger window.
    """
    a = np.asarray(tokens, dtype=np.int64)
    n = a.size
    worst: tuple[int, int] | None = None
    for span in range(1, n // 2 + 1):
        same = a[:-span] == a[span:]
        if not same.any():
            continue
        # Longest run of positions i with a[i] == a[i + span]: the region it covers holds run + span tokens.
        padded = np.concatenate(([False], same, [False]))
        edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
        run = int((edges[1::2] - edges[0::2]).max())
        copies = (run + span) // span
        if copies < 2:
            continue
        looping = (
            span >= LOOP_MIN_SPAN_TOKENS
            or (span >= 2 and copies >= LOOP_MIN_COPIES_SHORT)
            or copies >= LOOP_MIN_COPIES_TOKEN
        )
        if looping and (worst is None or span * copies > worst[0] * worst[1]):
            worst = (span, copies)
    return worst


def loop_start(tokens: Sequence[int]) -> int | None:
    """Where the earliest looping repetition in ``tokens`` (as ``tandem_repeat`` judges loops) repeats for the first
    time: ``tokens[:loop_start(tokens)]`` is the text up to and including its first copy. None if nothing loops."""
    a = np.asarray(tokens, dtype=np.int64)
    first: int | None = None
    for span in range(1, a.size // 2 + 1):
        same = a[:-span] == a[span:]
        if not same.any():
            continue
        padded = np.concatenate(([False], same, [False]))
        edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
        for start, end in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
            copies = (end - start + span) // span
            looping = (
                span >= LOOP_MIN_SPAN_TOKENS
                or (span >= 2 and copies >= LOOP_MIN_COPIES_SHORT)
                or copies >= LOOP_MIN_COPIES_TOKEN
            )
            if looping and copies >= 2 and (first is None or start + span < first):
                first = start + span
    return first


def compression_ratio(text: str) -> float:
    """Bytes over zlib-compressed bytes: Whisper's loop measure (above ~2.4 the text repeats itself)."""
    raw = text.encode("utf-8")
    return len(raw) / max(1, len(zlib.compress(raw)))


def loop_reason(tokens: Sequence[int], text: str, hit_token_cap: bool) -> str | None:
    """Why this decode looks like a loop (and deserves a larger window), or None.

    ``tokens``: the generated text tokens (no special tokens); ``hit_token_cap``: the decode stopped at
    ``max_tokens`` rather than at end-of-text.
    """
    if hit_token_cap:
        return "token cap"
    repeat = tandem_repeat(tokens)
    if repeat is not None:
        return f"repeated {repeat[0]}-token span x{repeat[1]}"
    if len(text) > _MIN_COMPRESSION_CHARS and compression_ratio(text) > MAX_COMPRESSION_RATIO:
        return f"compression ratio {compression_ratio(text):.2f}"
    return None


def fall_back(request_id: str, window_s: float, reason: str | None, larger_s: float) -> float:
    """A decode of ``request_id`` looped in ``window_s`` (``loop_reason``: ``reason``): log it, and return the window
    it is decoded again in, ``larger_s`` (the policy's next window; seconds)."""
    log.info("request %s looped in a %g s window (%s): decoding again in %g s", request_id, window_s, reason, larger_s)
    return larger_s


@dataclass
class WindowCounters:
    """What one window size did since start: decodes, loops sent on to a larger window, cost."""

    window_s: float
    decodes: int = 0  # decodes run in this window, looping ones included
    fallbacks: int = 0  # of those, loops decoded again in a larger window
    decode_s: float = 0.0  # summed wall time of those decodes (submit to result, queueing included)
    tokens: int = 0  # summed generated tokens
    recent_s: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT_DECODES))

    def as_dict(self) -> dict[str, float | int]:
        recent = np.asarray(self.recent_s, dtype=np.float64)
        p50, p95 = np.percentile(recent, [50, 95]) if recent.size else (float("nan"), float("nan"))
        return {
            "window_s": self.window_s,
            "encoder_positions": encoder_positions(self.window_s),
            "decodes": self.decodes,
            "fallbacks": self.fallbacks,
            "decode_s": round(self.decode_s, 3),
            "decode_s_p50": round(float(p50), 3),
            "decode_s_p95": round(float(p95), 3),
            "tokens": self.tokens,
        }


class WindowStats:
    """Per-window counters of a recognizer (engine stats: ``recognizer.windows``)."""

    def __init__(self) -> None:
        self._by_window: dict[float, WindowCounters] = {}

    def record(self, window_s: float, decode_s: float, tokens: int, fell_back: bool) -> None:
        c = self._by_window.setdefault(window_s, WindowCounters(window_s))
        c.decodes += 1
        c.fallbacks += int(fell_back)
        c.decode_s += decode_s
        c.tokens += tokens
        c.recent_s.append(decode_s)

    def as_list(self) -> list[dict[str, float | int]]:
        """One dict per window used so far, smallest first (percentiles over the last 2048 decodes)."""
        return [self._by_window[w].as_dict() for w in sorted(self._by_window)]
