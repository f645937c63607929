"""What an editor's correction does to a locked sentence, as pure functions: the new sentence with word times for its
new words, a split into two, and the fixes the room learns from it (``app.rooms.vocabulary``).

Word times: a corrected sentence keeps the times of the words the editor left alone; words put in place of others
share the time the replaced words took, in proportion to their length; words inserted between two others share the
gap between them. A sentence without word times (stored before they existed) gets its words spread over its span.
The room has no audio, so the aligner (which needs it) cannot time them; a stretch an editor retyped was said in
the time the recognizer's words for it took, which is what these keep.

Cost: which words an editor left alone comes from a word diff (``diff``) whose work is bounded whatever the texts
(at most ``MAX_DIFF_STEPS`` steps: about 25 ms of Python for the worst text the editors' limits allow): past that,
the words between the common beginning and end count as one changed stretch, and the new ones are spread over the
time the old ones took. It is still more than the event loop should spend: callers run ``corrected`` and
``learned_fixes`` in a worker thread.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from engine.protocol import Word

from .store.base import SentenceRecord
from .vocabulary import Fix, learnable

MAX_TERM_WORDS = 4  # a changed stretch longer than this is a rewrite, not a name or a term
MAX_TERMS = 100  # per room: terms editors enter, and learned fixes (each list)
MAX_TERM_CHARS = 64
SPEAKER_LABELS = 1000  # an editor may give a sentence, or a name, any speaker label from 0 to SPEAKER_LABELS - 1
# The diff's budget: steps of its search (a word compared, or a diagonal tried): about 25 ms of Python at most.
MAX_DIFF_STEPS = 100_000
_EDGE_PUNCTUATION = ".,;:!?\"'()[]{}«»“”‘’…"


@dataclass(frozen=True)
class Change:
    """An editor's correction (``Room.commit_correction``): sentences ``replaced`` in their new form (a split's first
    part), ids ``deleted``, speaker ``names`` changed ("" = back to the default) and ``new``: a split's new part (the
    room gives it its id)."""

    replaced: tuple[SentenceRecord, ...] = ()
    deleted: tuple[int, ...] = ()
    names: dict[int, str] = field(default_factory=dict)
    new: tuple[SentenceRecord, ...] = ()


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
    for op, a0, a1, b0, b1 in diff([_key(w.w) for w in old], [_key(w) for w in new]):
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
    times = (
        list(record.words) if len(record.words) == len(words) else list(_spread(words, record.start_ms, record.end_ms))
    )
    cut = times[at - 1].end_ms
    first = dataclasses.replace(
        record,
        text=" ".join(words[:at]),
        end_ms=max(record.start_ms, cut),
        words=tuple(times[:at]) if record.words else (),
    )
    second = dataclasses.replace(
        record,
        id=new_id,
        text=" ".join(words[at:]),
        start_ms=min(record.end_ms, cut),
        words=tuple(times[at:]) if record.words else (),
        original=None,
        deleted=False,
    )
    return first, second


def learned_fixes(original: str, text: str) -> list[Fix]:
    """What a room learns from an editor's correction of ``original`` (the recognizer's text) into ``text``: for each
    stretch of at most ``MAX_TERM_WORDS`` words put in place of at most as many that looks like a name or a term (a
    capital letter, not just the sentence's first word's; a digit; inner punctuation: "C-SPAN", "3D"), the pair, if
    the two are spelt alike (``app.rooms.vocabulary.learnable``). Case or punctuation changes alone teach nothing."""
    old, new = original.split(), text.split()
    fixes: list[Fix] = []
    for op, a0, a1, b0, b1 in diff([_key(w) for w in old], [_key(w) for w in new]):
        if op != "replace" or not 0 < a1 - a0 <= MAX_TERM_WORDS or not 0 < b1 - b0 <= MAX_TERM_WORDS:
            continue
        words = [w for w in (w.strip(_EDGE_PUNCTUATION) for w in new[b0:b1]) if w]
        if not words or not any(_termlike(w, first=(b0 + i == 0)) for i, w in enumerate(words)):
            continue
        fix = learnable(" ".join(old[a0:a1]), " ".join(words)[:MAX_TERM_CHARS])
        if fix is not None and fix not in fixes:
            fixes.append(fix)
    return fixes


Opcode = tuple[Literal["equal", "replace", "delete", "insert"], int, int, int, int]


def diff(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """How ``b`` differs from ``a``, as ``difflib.SequenceMatcher.get_opcodes`` says it (``(tag, a0, a1, b0, b1)``,
    covering both in order): the common beginning and end, and between them a shortest edit script (Myers' O(ND)
    diff). Bounded: the script is searched for at most ``MAX_DIFF_STEPS`` steps; one that needs more makes the
    middle one ``replace`` (or ``delete``, ``insert``). Work: O(len(a) + len(b) + ``MAX_DIFF_STEPS``)."""
    n, m = len(a), len(b)
    head = 0
    while head < n and head < m and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    middle = _matches(a[head : n - tail], b[head : m - tail], MAX_DIFF_STEPS) or []
    blocks = [(0, 0, head), *((head + i, head + j, k) for i, j, k in middle), (n - tail, m - tail, tail)]
    ops: list[Opcode] = []
    i = j = 0
    for bi, bj, size in [*blocks, (n, m, 0)]:
        if i < bi or j < bj:
            ops.append(("replace" if i < bi and j < bj else "delete" if i < bi else "insert", i, bi, j, bj))
        if size:
            if ops and ops[-1][0] == "equal":  # blocks that touch are one
                ops[-1] = ("equal", ops[-1][1], bi + size, ops[-1][3], bj + size)
            else:
                ops.append(("equal", bi, bi + size, bj, bj + size))
        i, j = bi + size, bj + size
    return ops


def _matches(a: Sequence[str], b: Sequence[str], budget: int) -> list[tuple[int, int, int]] | None:
    """The runs ``(i, j, size)`` that ``a`` and ``b`` share in a shortest edit script between them (Myers, "An O(ND)
    Difference Algorithm and Its Variations", 1986: the greedy forward search, then back along its trace), in order;
    None when finding it takes more than ``budget`` steps."""
    n, m = len(a), len(b)
    if not n or not m:
        return []
    top = n + m
    offset = top + 1
    v = [0] * (2 * top + 3)  # v[offset + k]: how far along a the furthest path on diagonal k (x - y) reaches
    trace: list[list[int]] = []
    steps = 0
    for d in range(top + 1):
        trace.append(v[offset - d - 1 : offset + d + 2])  # what step d starts from (diagonals -d-1 .. d+1)
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]  # down: a word of b inserted
            else:
                x = v[offset + k - 1] + 1  # right: a word of a deleted
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[offset + k] = x
            steps += 1 + x - start
            if x >= n and y >= m:
                return _runs(trace, d, n, m)
        if steps > budget:
            return None
    return None  # (never reached: d = n + m always ends)


def _runs(trace: list[list[int]], d_end: int, n: int, m: int) -> list[tuple[int, int, int]]:
    """The shared runs of the path that ``_matches`` found to (``n``, ``m``) in ``d_end`` edits, from its trace."""
    runs: list[tuple[int, int, int]] = []
    x, y = n, m
    for d in range(d_end, -1, -1):
        before = trace[d]  # diagonal k is at before[k + d + 1]
        k = x - y
        if d == 0:
            px = py = 0
            sx = 0
        else:
            down = k == -d or (k != d and before[k - 1 + d + 1] < before[k + 1 + d + 1])
            pk = k + 1 if down else k - 1
            px = before[pk + d + 1]
            py = px - pk
            sx = px if down else px + 1  # where the snake after the edit began
        if x > sx:
            runs.append((sx, sx - k, x - sx))
        x, y = px, py
    return runs[::-1]


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
