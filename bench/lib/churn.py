"""Partial churn: how many words a person saw in partial text that the locked sentences then changed.

For each caption message whose partial text changed, the partial's words are compared with the words that were
locked after it, from the point the locked text had reached when the partial was shown: the edit distance
between the partial and that many following locked words counts the words shown that did not survive. Churn is
the sum of those over the sum of words shown. A partial that only lacks its last words (it was cut mid-sentence)
costs nothing; a word that later changed, or a word that never made it into a locked sentence, costs one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from speechdata.wer import normalise


def _edit_distance(a: list[str], b: list[str]) -> int:
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def partial_churn(captions: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(words shown in partials that the locked text changed, words shown in partials) for one session's caption
    messages in arrival order."""
    messages = list(captions)
    locked: list[str] = [w for m in messages for s in m["sentences"] for w in normalise(s["text"])]
    done = 0  # locked words so far
    changed = shown = 0
    last_partial = ""
    for m in messages:
        done += sum(len(normalise(s["text"])) for s in m["sentences"])
        partial = m.get("partial") or ""
        if partial and partial != last_partial:
            words = normalise(partial)
            changed += _edit_distance(words, locked[done : done + len(words)])
            shown += len(words)
        last_partial = partial
    return changed, shown


def _key(word: str) -> str:
    return " ".join(normalise(word))


def _screens(captions: Iterable[dict[str, Any]]) -> tuple[list[tuple[list[str], int, int]], list[str]]:
    """The distinct screen states of a caption stream, as (screen words, first settled index, first tentative index),
    and the locked words at the end: the screen after each message is the locked sentences' words followed by
    ``partial``'s words (split on spaces), the first ``stable`` of those settled, the rest tentative."""
    states: list[tuple[list[str], int, int]] = []
    locked: list[str] = []
    for m in captions:
        locked += [w for s in m["sentences"] for w in s["text"].split()]
        partial = (m.get("partial") or "").split()
        state = (locked + partial, len(locked), len(locked) + min(int(m.get("stable") or 0), len(partial)))
        if not states or states[-1] != state:
            states.append(state)
    return states, locked


def _tail_matches(screen: list[str], tentative_from: int, final: list[str]) -> difflib.SequenceMatcher[str]:
    """The screen's tentative words aligned with the words that finally locked from the same place."""
    tail = [_key(w) for w in screen[tentative_from:]]
    there = final[tentative_from : tentative_from + len(tail) + 2]
    return difflib.SequenceMatcher(None, tail, there, autojunk=False)


@dataclass(frozen=True)
class Flicker:
    """One session's flicker (``flicker_report``): ``changed`` of the ``shown`` tentative word instances did not lock
    as shown, and ``withdrawn`` settled words changed. The changed ones by what became of them: ``never_locked``
    (shown in a segment whose partial then went away with nothing locked: the guard dropped its final, or a later
    segment took the speech over; mostly a lone first word, a filler or a misheard one), ``replaced`` (the locked
    text has other words in their place: a longer decode heard them differently) or ``dropped`` (the locked text
    goes on without them); the three add up to ``changed``."""

    changed: int
    shown: int
    withdrawn: int
    never_locked: int
    replaced: int
    dropped: int

    @property
    def causes(self) -> dict[str, int]:
        """The changed words by what became of them: never locked, replaced or dropped."""
        return {"never_locked": self.never_locked, "replaced": self.replaced, "dropped": self.dropped}


def flicker_report(captions: Iterable[dict[str, Any]]) -> Flicker:
    """``Flicker`` for one session's caption messages in arrival order, as a reader sees them.

    The screen after each message is the locked sentences' words followed by ``partial``'s words (split on spaces);
    its first ``stable`` partial words are settled, the rest tentative. Every tentative word instance shown counts
    once per screen state; it changed when the text finally locked there does not have it (the tail aligned with
    the locked words from the same place, compared without case or punctuation as ``partial_churn`` and WER compare:
    "home." locking as "home," is the same word, and a word inserted before it does not change it; a word that
    never locks changed). This is ``partial_churn`` over the tentative words only: settled words cannot change.
    A settled word (compared exactly) that any later screen changes, drops or shows as tentative again is withdrawn
    (the product promises none)."""
    states, locked = _screens(captions)
    final = [_key(w) for w in locked]
    # Per state: does a later screen, before anything more locks, show no partial at all (the segment went away
    # unlocked)? One pass from the end; the locked length only grows. The stream's last segment, if nothing locked
    # after it, went away too.
    vanishes = [False] * len(states)
    empty_after: dict[int, bool] = {len(locked): True}
    for k in range(len(states) - 1, -1, -1):
        screen, settled_from, _ = states[k]
        vanishes[k] = empty_after.get(settled_from, False)
        empty_after[settled_from] = vanishes[k] or len(screen) == settled_from
    changed = shown = withdrawn = 0
    causes = {"never_locked": 0, "replaced": 0, "dropped": 0}
    for k, (screen, settled_from, tentative_from) in enumerate(states):
        shown += len(screen) - tentative_from
        for op, i1, i2, _j1, _j2 in _tail_matches(screen, tentative_from, final).get_opcodes():
            if op in ("replace", "delete"):
                changed += i2 - i1
                causes["never_locked" if vanishes[k] else "replaced" if op == "replace" else "dropped"] += i2 - i1
        if k + 1 < len(states):  # the next screen keeps each settled word, settled or locked (and so on, by chain)
            nxt, _, nxt_tentative = states[k + 1]
            withdrawn += sum(
                1 for p in range(settled_from, tentative_from) if p >= nxt_tentative or nxt[p] != screen[p]
            )
    return Flicker(changed, shown, withdrawn, **causes)


def flicker(captions: Iterable[dict[str, Any]]) -> tuple[int, int, int]:
    """(tentative words that changed, tentative words shown, stable words withdrawn): ``flicker_report``'s counts."""
    r = flicker_report(captions)
    return r.changed, r.shown, r.withdrawn


def flicker_causes(captions: Iterable[dict[str, Any]]) -> dict[str, int]:
    """What became of the tentative words ``flicker`` counts as changed (``Flicker``): never locked, replaced or
    dropped."""
    return flicker_report(captions).causes
