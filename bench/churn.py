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
            changed += _edit_distance(words, locked[done:done + len(words)])
            shown += len(words)
        last_partial = partial
    return changed, shown


def _key(word: str) -> str:
    return " ".join(normalise(word))


def flicker(captions: Iterable[dict[str, Any]]) -> tuple[int, int, int]:
    """(tentative words that changed, tentative words shown, stable words withdrawn) for one session's caption
    messages in arrival order, as a reader sees them.

    The screen after each message is the locked sentences' words followed by ``partial``'s words (split on spaces);
    its first ``stable`` partial words are settled, the rest tentative. Every tentative word instance shown counts
    once per screen state; it changed when the text finally locked there does not have it (the tail aligned with
    the locked words from the same place, compared without case or punctuation as ``partial_churn`` and WER compare:
    "home." locking as "home," is the same word, and a word inserted before it does not change it; a word that
    never locks changed). This is ``partial_churn`` over the tentative words only: settled words cannot change.
    A settled word (compared exactly) that any later screen changes, drops or shows as tentative again is withdrawn
    (the product promises none)."""
    states: list[tuple[list[str], int, int]] = []  # (screen words, first settled index, first tentative index)
    locked: list[str] = []
    for m in captions:
        locked += [w for s in m["sentences"] for w in s["text"].split()]
        partial = (m.get("partial") or "").split()
        state = (locked + partial, len(locked), len(locked) + min(int(m.get("stable") or 0), len(partial)))
        if not states or states[-1] != state:
            states.append(state)
    final = [_key(w) for w in locked]
    changed = shown = withdrawn = 0
    for k, (screen, settled_from, tentative_from) in enumerate(states):
        tail = [_key(w) for w in screen[tentative_from:]]
        there = final[tentative_from:tentative_from + len(tail) + 2]
        kept = sum(b.size for b in difflib.SequenceMatcher(None, tail, there, autojunk=False).get_matching_blocks())
        shown += len(tail)
        changed += len(tail) - kept
        if k + 1 < len(states):  # the next screen keeps each settled word, settled or locked (and so on, by chain)
            nxt, _, nxt_tentative = states[k + 1]
            withdrawn += sum(1 for p in range(settled_from, tentative_from)
                             if p >= nxt_tentative or nxt[p] != screen[p])
    return changed, shown, withdrawn
