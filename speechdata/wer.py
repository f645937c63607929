"""Word error rate for tests and benchmarks: normalise case, punctuation and titles, then jiwer's word alignment.

LibriSpeech references are upper case without punctuation while Whisper writes cased, punctuated text, so both
sides are lower-cased and stripped of punctuation (apostrophes inside words are kept: "he's" stays one word).
References spell out what was said ("MISTER QUILTER") where Whisper writes the title as print does ("Mr.
Quilter"), so a title's abbreviation counts as the spoken word. Contractions and numbers are left as written: "I'm"
for "I AM" or "21" for "TWENTY ONE" is a word error, as a reader who wanted the words said would see it.
"""

from __future__ import annotations

import re

import jiwer

_PUNCT = re.compile(r"[^\w\s']|(?<!\w)'|'(?!\w)")

# The abbreviation of a title, as Whisper prints it, and the word said (each is one word, so word counts stay).
_SPOKEN = {"mr": "mister", "mrs": "missus", "dr": "doctor"}


def normalise(text: str) -> list[str]:
    """Lower-case words of ``text`` without punctuation, titles as said ("Mr." -> "mister"); hyphens split words
    ("twenty-one" -> two words). One word of ``text`` gives at most one word here."""
    return [_SPOKEN.get(w, w) for w in _PUNCT.sub(" ", text.lower().replace("-", " ")).split()]


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
