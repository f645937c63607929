"""Word error rate for tests: normalise case and punctuation, then word-level edit distance.

LibriSpeech references are upper case without punctuation while Whisper writes cased, punctuated text, so both
sides are lower-cased and stripped of punctuation (apostrophes inside words are kept: "he's" stays one word).
"""

from __future__ import annotations

import re

_PUNCT = re.compile(r"[^\w\s']|(?<!\w)'|'(?!\w)")


def normalise(text: str) -> list[str]:
    """Lower-case words of ``text`` without punctuation; hyphens split words ("twenty-one" -> two words)."""
    return _PUNCT.sub(" ", text.lower().replace("-", " ")).split()


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, number of reference words) after ``normalise``."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    previous = list(range(len(hyp) + 1))  # edit distance from an empty reference prefix
    for i, ref_word in enumerate(ref, start=1):
        current = [i]
        for j, hyp_word in enumerate(hyp, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref_word != hyp_word)))
        previous = current
    return previous[-1], len(ref)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate in [0, inf): errors / reference words (an empty reference scores 0 only if both are empty)."""
    errors, words = word_errors(reference, hypothesis)
    if words == 0:
        return 0.0 if errors == 0 else float("inf")
    return errors / words
