"""Scores of a meeting captioned into one room (``bench.meeting``): what a meeting's deaf colleague would check.

Inputs are plain: each microphone's words (text and session time, which is the clip's time: a session's sample 0 is
its first audio), the reference turns (RTTM) and each speaker's reference text.

- ``cp_wer``: speaker-attributed WER as CHiME scores meetings (concatenated minimum-permutation WER): each speaker's
  reference against one hypothesis stream (a microphone, or a voice label), the assignment that makes the fewest
  errors; streams and speakers left over count as insertions and deletions.
- ``wrong_mic``: words a microphone captioned that its owner did not say (not matched in the alignment of its text
  with the owner's reference) while only *other* people were speaking (by the reference turns, with ``slack_s``
  either side): a neighbour's voice captioned from the wrong microphone. (The alignment keeps the turns' looseness
  from blaming a microphone for its owner's own words: the AMI turns start a speaker late here and there.)
- ``duplicates``: words captioned from two microphones at once (the same words, in a run, within ``window_s``):
  said once, shown twice.
- Both as shares of the words said (the reference's).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from speechdata.corpus import Turn
from speechdata.wer import normalise, word_errors


@dataclass(frozen=True)
class HeardWord:
    """One captioned word: its microphone (or voice label), its text, and its time on the clip (seconds)."""

    stream: str
    text: str
    t_s: float


def cp_wer(references: Mapping[str, str], hypotheses: Mapping[str, str]) -> tuple[float, dict[str, str]]:
    """(cpWER, speaker -> the hypothesis stream assigned to it). Exhaustive over assignments for up to 8 streams,
    else the Hungarian assignment of the pairwise error counts (the same optimum for this cost)."""
    from scipy.optimize import linear_sum_assignment

    speakers, streams = list(references), list(hypotheses)
    ref_words = {s: len(normalise(references[s])) for s in speakers}
    hyp_words = {h: len(normalise(hypotheses[h])) for h in streams}
    total_ref = sum(ref_words.values())
    if total_ref == 0:
        return 0.0, {}
    errors = np.zeros((len(speakers), len(streams)))
    for i, s in enumerate(speakers):
        for j, h in enumerate(streams):
            e, _n = word_errors(references[s], hypotheses[h])
            errors[i, j] = e - ref_words[s] - hyp_words[h]  # what assigning them saves over leaving both alone
    base = total_ref + sum(hyp_words.values())
    if not streams:
        return base / total_ref, {}
    rows, cols = linear_sum_assignment(np.minimum(errors, 0.0))
    assigned = {speakers[r]: streams[c] for r, c in zip(rows, cols, strict=True) if errors[r, c] < 0}
    saved = sum(errors[speakers.index(s), streams.index(h)] for s, h in assigned.items())
    return (base + saved) / total_ref, assigned


def speaking_at(turns: Sequence[Turn], t_s: float, slack_s: float) -> set[str]:
    """The speakers whose reference turn covers ``t_s`` (widened by ``slack_s``)."""
    return {t.speaker for t in turns if t.start_s - slack_s <= t_s <= t.end_s + slack_s}


def unmatched(reference: Sequence[str], hypothesis: Sequence[str]) -> list[bool]:
    """For each hypothesis token, whether a minimum-edit alignment with ``reference`` leaves it unmatched (an
    insertion or a substitution)."""
    n, m = len(reference), len(hypothesis)
    cost = np.zeros((n + 1, m + 1), dtype=np.int32)
    cost[:, 0] = np.arange(n + 1)
    cost[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i, j] = min(
                cost[i - 1, j] + 1, cost[i, j - 1] + 1, cost[i - 1, j - 1] + (reference[i - 1] != hypothesis[j - 1])
            )
    out = [True] * m
    i, j = n, m
    while i > 0 and j > 0:
        if cost[i, j] == cost[i - 1, j - 1] + (reference[i - 1] != hypothesis[j - 1]):
            out[j - 1] = reference[i - 1] != hypothesis[j - 1]
            i, j = i - 1, j - 1
        elif cost[i, j] == cost[i, j - 1] + 1:
            j -= 1
        else:
            i -= 1
    return out


def wrong_mic(
    words: Sequence[HeardWord],
    owner: Mapping[str, str],
    turns: Sequence[Turn],
    references: Mapping[str, str],
    slack_s: float = 0.5,
) -> int:
    """Words captioned from a microphone that its owner did not say while someone else was speaking."""
    count = 0
    for stream in {w.stream for w in words}:
        mine = sorted((w for w in words if w.stream == stream), key=lambda w: w.t_s)
        tokens = [(w, t) for w in mine for t in normalise(w.text)]
        missing = unmatched(normalise(references.get(owner[stream], "")), [t for _w, t in tokens])
        for (w, _t), unknown in zip(tokens, missing, strict=True):
            speaking = speaking_at(turns, w.t_s, slack_s)
            if unknown and speaking and owner[stream] not in speaking:
                count += 1
    return count


def duplicates(words: Sequence[HeardWord], window_s: float = 1.0) -> int:
    """Words also captioned from another microphone within ``window_s``, in runs of two or more (a copy of a voice
    repeats its words in order; two people saying one word at once, "menu" and "menu, right", is a conversation)."""
    tokens = [HeardWord(w.stream, t, w.t_s) for w in sorted(words, key=lambda w: w.t_s) for t in normalise(w.text)]
    by_stream: dict[str, list[HeardWord]] = {}
    for t in tokens:
        by_stream.setdefault(t.stream, []).append(t)
    counted: set[tuple[str, int]] = set()
    for a, b in itertools.permutations(by_stream, 2):
        mine, theirs = by_stream[a], by_stream[b]
        matched = [any(o.text == w.text and abs(o.t_s - w.t_s) <= window_s for o in theirs) for w in mine]
        for i, hit in enumerate(matched):
            if hit and ((i > 0 and matched[i - 1]) or (i + 1 < len(matched) and matched[i + 1])):
                counted.add((a, i))
    # Each copied word was counted on both microphones: once for the pair.
    return len(counted) // 2


def turn_ends(turns: Sequence[Turn], merge_gap_s: float = 0.5) -> list[tuple[str, float, float]]:
    """(speaker, start, end) of each speaker's turns, turns of one speaker less than ``merge_gap_s`` apart merged."""
    out: list[tuple[str, float, float]] = []
    for speaker in sorted({t.speaker for t in turns}):
        mine = sorted((t for t in turns if t.speaker == speaker), key=lambda t: t.start_s)
        start, end = mine[0].start_s, mine[0].end_s
        for t in mine[1:]:
            if t.start_s - end < merge_gap_s:
                end = max(end, t.end_s)
            else:
                out.append((speaker, start, end))
                start, end = t.start_s, t.end_s
        out.append((speaker, start, end))
    return sorted(out, key=lambda x: x[2])
