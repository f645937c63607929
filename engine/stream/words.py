"""Word times: where each word of a locked sentence was said.

Best, where the engine has the checkpoint: Whisper's own cross-attention alignment (``engine.asr.align``), to
within a syllable; ``place_words`` then only puts it on the session's timeline. Without it (or when the aligner is
behind), the decoded text alone does not say when each word was spoken. Two things do, roughly:
- the VAD's speech probability every 32 ms of the segment: words are said during speech, and a pause inside a
  segment (shorter than the endpoint's silence wait) falls between two words;
- Whisper's timestamp tokens, when the decode asked for them (``TranscriberConfig.timestamps``): which stretch of
  the text belongs to which stretch of the audio.

``place_words`` lays each stretch's words along the speech inside that stretch (or the whole segment's speech),
each word taking time in proportion to its length, with the word boundaries nearest to each inner pause moved onto
the pause. Measured in docs/benchmarks.md ("Word times").
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from engine.asr.align import AlignedWord
from engine.asr.timestamps import TimedSpan
from engine.protocol import Word

MIN_PAUSE_MS = 128  # four VAD windows of non-speech inside a segment: a break between two words
_WORD_OVERHEAD = 2.0  # letters' worth of time each word takes beyond its letters (onsets, short gaps)
# Matching pauses to word boundaries: a boundary's distance from the pause (seconds of speech) plus how unlikely
# a pause is there. Speakers pause at the ends of sentences and clauses; a long pause elsewhere is rare, a short
# one (a breath, a stop consonant) less so. A pause left unmatched (inside a word) costs _SKIP.
_UNLIKELY = {"sentence": 0.0, "clause": 0.25, "none": 0.8}
_LONG_PAUSE_MS = 400.0  # from here a pause counts as fully "long"
_SKIP = 1.5
# Speech time a word takes, per unit of ``_weights`` (a letter, or the overhead of a word), at the slowest a
# speaker is taken to talk: read English runs at ~50-60 ms per unit. Speech far longer than its text needs means
# the recognizer left some of it out (Whisper sometimes ends a decode early, after a sentence); the text is then
# laid from the start at this pace up to the pause nearest to where it would end, and the rest gets no words,
# instead of the text being stretched over speech it does not belong to.
_SLOWEST_MS_PER_UNIT = 110.0


class _SpeechAxis:
    """The speech time of [start, end) ms: maps "ms of speech so far" to real ms and back, skipping non-speech."""

    def __init__(self, runs: list[tuple[float, float]]) -> None:
        self.runs = runs  # speech runs (start ms, end ms), in order, non-empty
        self.cum = [0.0]
        for a, b in runs:
            self.cum.append(self.cum[-1] + (b - a))

    @property
    def total(self) -> float:
        return self.cum[-1]

    def real(self, x: float, leaving: bool) -> float:
        """Real ms at speech time ``x``. At a run boundary, ``leaving`` (a word's end) picks the end of the run
        before the pause; otherwise the start of the run after it (a word's start)."""
        x = min(max(x, 0.0), self.total)
        i = bisect.bisect_left(self.cum, x) if leaving else bisect.bisect_right(self.cum, x)
        i = min(max(i, 1), len(self.runs))
        a, _ = self.runs[i - 1]
        return a + (x - self.cum[i - 1])

    def pauses(self) -> list[tuple[float, float]]:
        """The pauses between runs: (speech-time position, length in ms)."""
        return [(self.cum[i + 1], self.runs[i + 1][0] - self.runs[i][1]) for i in range(len(self.runs) - 1)]


def speech_runs(
    probs: np.ndarray, start_ms: float, window_ms: float, threshold: float, lo_ms: float, hi_ms: float
) -> list[tuple[float, float]]:
    """Runs of speech inside [lo_ms, hi_ms): windows of ``probs`` (one per ``window_ms`` from ``start_ms``) at or
    above ``threshold``, joined across gaps shorter than ``MIN_PAUSE_MS``. The whole interval when it holds no
    speech window."""
    runs: list[tuple[float, float]] = []
    for i in np.flatnonzero(probs >= threshold).tolist():
        a = max(lo_ms, start_ms + i * window_ms)
        b = min(hi_ms, start_ms + (i + 1) * window_ms)
        if b <= a:
            continue
        if runs and a - runs[-1][1] < MIN_PAUSE_MS:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((a, b))
    return runs or [(lo_ms, max(hi_ms, lo_ms + 1.0))]


def _weights(words: Sequence[str]) -> list[float]:
    return [sum(ch.isalnum() for ch in w) + _WORD_OVERHEAD for w in words]


def _kind(word: str) -> str:
    end = word.rstrip("\"')]”’")[-1:]
    return "sentence" if end in ".?!" else "clause" if end in ",;:" else "none"


def _match_pauses(words: list[str], bounds: list[float], pauses: list[tuple[float, float]]) -> list[tuple[int, float]]:
    """Which word boundary each pause falls on: ``(boundary index, pause position)`` in order, the boundaries
    strictly increasing. A dynamic programme over (pause, last boundary used), O(pauses x words)."""
    n = len(words)
    if n < 2 or not pauses:
        return []
    inf = float("inf")
    cost = [0.0] + [inf] * (n - 1)  # cost[b]: pauses so far handled, the last one put on boundary b (0 = none)
    choices: list[list[int]] = []  # per pause: for each b, the previous b (b itself when this pause was skipped)
    for p, length in pauses:
        weight = min(1.0, length / _LONG_PAUSE_MS)
        new = [c + _SKIP for c in cost]
        back = list(range(n))
        best, best_b = cost[0], 0  # min of cost[0..j-1]
        for j in range(1, n):
            here = best + abs(bounds[j] - p) / 1000 + weight * _UNLIKELY[_kind(words[j - 1])]
            if here < new[j]:
                new[j], back[j] = here, best_b
            if cost[j] < best:
                best, best_b = cost[j], j
        cost = new
        choices.append(back)
    b = min(range(n), key=lambda j: cost[j])
    out = []
    for k in range(len(pauses) - 1, -1, -1):
        prev = choices[k][b]
        if prev != b:
            out.append((b, pauses[k][0]))
        b = prev
    return out[::-1]


def _covered(total: float, pauses: list[tuple[float, float]], total_w: float) -> float:
    """How much of the speech time ``total`` the words cover: all of it, unless it is far longer than the words
    need at the slowest pace; then up to the pause nearest to where the words would end at that pace."""
    need = total_w * _SLOWEST_MS_PER_UNIT
    if total <= need:
        return total
    after = [p for p, _ in pauses if p >= need * 0.5]
    return min(after, key=lambda p: abs(p - need)) if after else total


def _lay_out(words: list[str], axis: _SpeechAxis) -> list[Word]:
    """Spread ``words`` over the speech they cover by length, with each pause put on the likeliest boundary
    (``_match_pauses``) and the words between two such anchors spread by length again."""
    weights = _weights(words)
    total_w = sum(weights)
    all_pauses = axis.pauses()
    covered = _covered(axis.total, all_pauses, total_w)
    pauses = [(p, length) for p, length in all_pauses if p < covered]
    bounds = [0.0]
    for w in weights:
        bounds.append(bounds[-1] + w * covered / total_w)
    anchors = [(0, 0.0), *_match_pauses(words, bounds, pauses), (len(words), covered)]
    placed = [0.0] * (len(words) + 1)
    for (k0, x0), (k1, x1) in pairwise(anchors):  # spread each piece between its anchors
        w_sum = sum(weights[k0:k1])
        x = x0
        for j in range(k0, k1):
            placed[j] = x
            x += weights[j] * (x1 - x0) / w_sum
        placed[k1] = x1
    out = []
    for j, text in enumerate(words):
        start = axis.real(placed[j], leaving=False)
        end = axis.real(placed[j + 1], leaving=True)
        out.append(Word(text, round(start), max(round(end), round(start))))
    return out


_ONSET_PULL_MS = 200  # a word that starts this soon after the speech resumes starts where it resumed


def _aligned_words(
    aligned: Sequence[AlignedWord], audio_start_ms: float, runs: list[tuple[float, float]]
) -> list[Word]:
    """Whisper's aligned words on the session's timeline, snapped to the VAD's pauses: the warp's path is 20 ms
    coarse and smoothed, so across a pause it runs on into the silence or enters the next word late. An end in a
    pause moves back to the end of the speech before it; a start in a pause, or within ``_ONSET_PULL_MS`` after
    the speech resumes, moves to where it resumed. Inside continuous speech the alignment stands."""
    starts = [a for a, _ in runs]
    ends = [b for _, b in runs]
    out = []
    for w in aligned:
        start = audio_start_ms + w.start_s * 1000
        end = audio_start_ms + w.end_s * 1000
        i = bisect.bisect_right(starts, start)  # runs[i - 1] is the last run starting at or before ``start``
        if i < len(runs) and (i == 0 or start >= ends[i - 1]):  # in a pause (or before the first run)
            start = starts[i]
        elif i > 0 and start - starts[i - 1] <= _ONSET_PULL_MS:
            start = starts[i - 1]
        k = bisect.bisect_left(ends, end)  # the first run ending at or after ``end``
        if k < len(runs) and end < starts[k] and k > 0:  # in the pause before run k
            end = ends[k - 1]
        out.append(Word(w.text, round(start), round(max(end, start))))
    return _off_pauses(out, runs)


def _off_pauses(words: list[Word], runs: list[tuple[float, float]]) -> list[Word]:
    """No word across a pause: the warp lets a short word take the silence beside it (a reader's last word cut short,
    the next reader's first word starting in the previous one's tail). A word holding a pause goes to the side after
    it when the word before ends a sentence or clause, to the side before it when the word itself does, else to the
    side where more of it is speech; its neighbour takes the speech it leaves (OpenAI's ``transcribe`` does the
    same with punctuation and word length, without a VAD)."""
    out = list(words)
    pauses = [(runs[i][1], runs[i + 1][0]) for i in range(len(runs) - 1)]
    for j, w in enumerate(out):
        inside = [(a, b) for a, b in pauses if w.start_ms < a and b < w.end_ms]
        if not inside:
            continue
        a, b = max(inside, key=lambda p: p[1] - p[0])
        after_mark = j > 0 and _kind(out[j - 1].w) != "none"
        own_mark = _kind(w.w) != "none"
        if after_mark or (not own_mark and w.end_ms - b >= a - w.start_ms):
            out[j] = Word(w.w, round(b), w.end_ms)
            if j > 0 and out[j - 1].end_ms < a:
                out[j - 1] = Word(out[j - 1].w, out[j - 1].start_ms, round(a))
        else:
            out[j] = Word(w.w, w.start_ms, round(a))
            if j + 1 < len(out) and out[j + 1].start_ms < b:
                nxt = out[j + 1]
                out[j + 1] = Word(nxt.w, round(b), max(nxt.end_ms, round(b)))
    return out


def place_words(
    text: str,
    speech_start_ms: float,
    speech_end_ms: float,
    probs: np.ndarray,
    threshold: float,
    window_ms: float,
    spans: Sequence[TimedSpan] = (),
    audio_start_ms: float = 0.0,
    aligned: Sequence[AlignedWord] = (),
) -> list[Word]:
    """Start and end ms of every word of ``text`` (split on whitespace), inside [speech_start_ms, speech_end_ms].

    ``probs``: the segment's VAD speech probabilities, one per ``window_ms`` from ``speech_start_ms``; windows at
    or above ``threshold`` are speech. ``aligned``: the words as Whisper's cross-attention placed them
    (``engine.asr.align``), in seconds from ``audio_start_ms`` (the start of the decoded audio): used when they
    are exactly the text's words. Otherwise ``spans``: Whisper's timed stretches of the same decode, on the same
    clock, used when their words are exactly the text's words; the words are laid along the speech by length.
    Times are monotonic: each word starts at or after the previous one's end.
    """
    words = text.split()
    if not words:
        return []
    lo, hi = float(speech_start_ms), max(float(speech_end_ms), float(speech_start_ms) + 1.0)
    if aligned and [w.text for w in aligned] == words:
        runs = speech_runs(probs, lo, window_ms, threshold, lo, hi)
        return _monotonic(_aligned_words(aligned, audio_start_ms, runs), lo, hi)
    groups: list[tuple[list[str], float, float]] = [(words, lo, hi)]
    span_words = [s.text.split() for s in spans]
    if spans and [w for ws in span_words for w in ws] == words:
        groups = []
        for span, ws in zip(spans, span_words, strict=True):
            if not ws:
                continue
            a = min(max(audio_start_ms + span.start_s * 1000, lo), hi)
            b = min(max(audio_start_ms + span.end_s * 1000, a), hi)
            groups.append((ws, a, b))
    out: list[Word] = []
    for ws, a, b in groups:
        if out:
            a = max(a, out[-1].end_ms)
            b = max(b, a)
        runs = speech_runs(probs, lo, window_ms, threshold, a, b) if b > a else [(a, a + 1.0)]
        out.extend(_lay_out(ws, _SpeechAxis(runs)))
    return _monotonic(out, lo, hi)


def _monotonic(out: list[Word], lo: float, hi: float) -> list[Word]:
    """Clamp into the sentence and make the times monotonic (rounding and degenerate spans can break both)."""
    last = round(lo)
    fixed = []
    for w in out:
        start = min(max(w.start_ms, last), round(hi))
        end = min(max(w.end_ms, start), round(hi))
        fixed.append(Word(w.w, start, end))
        last = end
    return fixed
