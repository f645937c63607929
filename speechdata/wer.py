"""Word error rate for tests and benchmarks: normalise case and punctuation, then jiwer's word alignment.

LibriSpeech references are upper case without punctuation while Whisper writes cased, punctuated text, so both
sides are lower-cased and stripped of punctuation (apostrophes inside words are kept: "he's" stays one word).
"""

from __future__ import annotations

import re

import jiwer

_PUNCT = re.compile(r"[^\w\s']|(?<!\w)'|'(?!\w)")


def normalise(text: str) -> list[str]:
    """Lower-case words of ``text`` without punctuation; hyphens split words ("twenty-one" -> two words)."""
    return _PUNCT.sub(" ", text.lower().replace("-", " ")).split()


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, number of reference words) after ``normalise``."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not ref:
        return len(hyp), 0  # jiwer refuses an empty reference
    if not hyp:
        return len(ref), len(ref)
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    return out.substitutions + out.deletions + out.insertions, len(ref)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate in [0, inf): errors / reference words (an empty reference scores 0 only if both are empty)."""
    errors, words = word_errors(reference, hypothesis)
    if words == 0:
        return 0.0 if errors == 0 else float("inf")
    return errors / words
