"""Sentences split early: where one way of locking ended a sentence that a whole decode of the same speech reads
as going on.

An early lock ends a sentence after a short pause when its text ends with a full stop. Some of those splits are
real sentence ends that the silence schedule used to join into one caption (fine: captions read better in
sentences); the ones that hurt are splits inside a sentence, where the speaker paused, Whisper guessed a full stop,
and the sentence then continued. ``inside_splits`` tells them apart with the other run's text of the same speech
(the engine without early locks decodes the whole stretch at once): a split is inside a sentence when that text
has neither a sentence boundary nor sentence-final punctuation at the same word.
"""

from __future__ import annotations

import difflib

from speechdata.wer import normalise

_ENDS = (".", "?", "!", "。", "？", "！")


def _words(sentences: list[str]) -> tuple[list[str], list[str], set[int]]:
    """(raw words, normalised keys, indexes of the first word of every sentence but the first)."""
    raw: list[str] = []
    starts: set[int] = set()
    for k, text in enumerate(sentences):
        if k and raw:
            starts.add(len(raw))
        raw += [w for w in text.split() if normalise(w)]
    return raw, [" ".join(normalise(w)) for w in raw], starts


def inside_splits(sentences: list[str], reference: list[str]) -> tuple[int, int]:
    """(splits of ``sentences`` inside a sentence of ``reference``, splits that could be placed in it) for the
    locked sentences of one run and of the reference run on the same audio. A split is placed when the word before
    it matches a word of the reference run (difflib over the words without case or punctuation)."""
    _, keys, starts = _words(sentences)
    ref_raw, ref_keys, ref_starts = _words(reference)
    where: dict[int, int] = {}
    for block in difflib.SequenceMatcher(None, keys, ref_keys, autojunk=False).get_matching_blocks():
        where.update((block.a + i, block.b + i) for i in range(block.size))
    inside = placed = 0
    for start in sorted(starts):
        j = where.get(start - 1)
        if j is None:
            continue
        placed += 1
        if j + 1 not in ref_starts and j + 1 < len(ref_raw) and not ref_raw[j].rstrip("\"')”’»]").endswith(_ENDS):
            inside += 1
    return inside, placed
