"""What an editor's correction does to a locked sentence, as pure functions: the new sentence with word times for its
new words, a split into two, and the fixes the room learns from it (``app.rooms.vocabulary``).

Word times: a corrected sentence keeps the times of the words the editor left alone; words put in place of others
share the time the replaced words took, in proportion to their length; words inserted between two others share the
gap between them. A sentence without word times (stored before they existed) gets its words spread over its span.
The room has no audio, so the aligner (which needs it) cannot time them; a stretch an editor retyped was said in
the time the recognizer's words for it took, which is what these keep.
"""

from __future__ import annotations

import dataclasses
import difflib
import re

from engine.protocol import Word

from .store.base import SentenceRecord
from .vocabulary import Fix, learnable

MAX_TERM_WORDS = 4  # a changed stretch longer than this is a rewrite, not a name or a term
MAX_TERMS = 100  # per room: terms editors enter, and learned fixes (each list)
MAX_TERM_CHARS = 64
_EDGE_PUNCTUATION = ".,;:!?\"'()[]{}«»“”‘’…"


def corrected(record: SentenceRecord, text: str, spk: int | None) -> SentenceRecord:
    """``record`` with ``text`` (words re-timed, see the module) and speaker label ``spk``."""
    text = " ".join(text.split())
    return dataclasses.replace(record, text=text, spk=spk, words=retimed(record, text.split()))


def retimed(record: SentenceRecord, new: list[str]) -> tuple[Word, ...]:
    """Times for the words ``new`` of ``record`` after an edit (see the module)."""
    old = list(record.words)
    if not new:
        return ()
    if not old or len(old) != len(record.text.split()):  # no times, or times that do not match its words
        return _spread(new, record.start_ms, record.end_ms)
    out: list[Word] = []
    matcher = difflib.SequenceMatcher(a=[_key(w.w) for w in old], b=[_key(w) for w in new], autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            out += [Word(new[b0 + i], old[a0 + i].start_ms, old[a0 + i].end_ms) for i in range(a1 - a0)]
        elif op in ("replace", "insert"):
            start = old[a0].start_ms if a0 < a1 else (old[a0 - 1].end_ms if a0 > 0 else record.start_ms)
            end = old[a1 - 1].end_ms if a0 < a1 else (old[a0].start_ms if a0 < len(old) else record.end_ms)
            out += _spread(new[b0:b1], start, max(start, end))
    return tuple(out)


def split(record: SentenceRecord, at: int, new_id: int) -> tuple[SentenceRecord, SentenceRecord]:
    """``record`` cut after its first ``at`` words (1 <= ``at`` < its word count): the first part keeps its id, the
    second gets ``new_id``; they meet where the first part's last word ends. Raises ``ValueError`` for an ``at``
    outside the sentence."""
    words = record.text.split()
    if not 0 < at < len(words):
        raise ValueError(f"a split must leave words on both sides: at {at} in a sentence of {len(words)} words")
    times = list(record.words) if len(record.words) == len(words) else list(_spread(words, record.start_ms,
                                                                                   record.end_ms))
    cut = times[at - 1].end_ms
    first = dataclasses.replace(record, text=" ".join(words[:at]), end_ms=max(record.start_ms, cut),
                                words=tuple(times[:at]) if record.words else ())
    second = dataclasses.replace(record, id=new_id, text=" ".join(words[at:]), start_ms=min(record.end_ms, cut),
                                 words=tuple(times[at:]) if record.words else (), original=None, deleted=False)
    return first, second


def learned_fixes(original: str, text: str) -> list[Fix]:
    """What a room learns from an editor's correction of ``original`` (the recognizer's text) into ``text``: for each
    stretch of at most ``MAX_TERM_WORDS`` words put in place of at most as many that looks like a name or a term (a
    capital letter, not just the sentence's first word's; a digit; inner punctuation: "C-SPAN", "3D"), the pair, if
    the two are spelt alike (``app.rooms.vocabulary.learnable``). Case or punctuation changes alone teach nothing."""
    old, new = original.split(), text.split()
    matcher = difflib.SequenceMatcher(a=[_key(w) for w in old], b=[_key(w) for w in new], autojunk=False)
    fixes: list[Fix] = []
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op != "replace" or not 0 < a1 - a0 <= MAX_TERM_WORDS or not 0 < b1 - b0 <= MAX_TERM_WORDS:
            continue
        words = [w for w in (w.strip(_EDGE_PUNCTUATION) for w in new[b0:b1]) if w]
        if not words or not any(_termlike(w, first=(b0 + i == 0)) for i, w in enumerate(words)):
            continue
        fix = learnable(" ".join(old[a0:a1]), " ".join(words)[:MAX_TERM_CHARS])
        if fix is not None and fix not in fixes:
            fixes.append(fix)
    return fixes


def merged_entries(entries: tuple[str, ...], more: list[str]) -> tuple[str, ...]:
    """``entries`` (terms or fixes, ``app.rooms.vocabulary``) with ``more`` added (once each, case-insensitively),
    newest last, at most ``MAX_TERMS`` (the oldest go first)."""
    seen = {t.casefold() for t in entries}
    out = list(entries) + [t for t in dict.fromkeys(more) if t.casefold() not in seen]
    return tuple(out[-MAX_TERMS:])


def _termlike(word: str, first: bool) -> bool:
    if any(c.isdigit() for c in word) or re.search(r"\w[-./&]\w", word):
        return True
    capitals = sum(c.isupper() for c in word)
    return capitals > 1 or (capitals == 1 and (not first or not word[0].isupper()))


def _key(word: str) -> str:
    """A word as compared between the recognizer's text and the editor's: case and edge punctuation ignored."""
    return word.strip(_EDGE_PUNCTUATION).casefold()


def _spread(words: list[str], start_ms: int, end_ms: int) -> tuple[Word, ...]:
    """``words`` over ``start_ms``-``end_ms``, each in proportion to its length (plus one, for the space)."""
    weights = [len(w) + 1 for w in words]
    total = sum(weights)
    span = max(0, end_ms - start_ms)
    out, at = [], 0
    for word, weight in zip(words, weights, strict=True):
        a = start_ms + span * at // total
        at += weight
        out.append(Word(word, a, start_ms + span * at // total))
    return tuple(out)
