"""Partial churn: how many words a person saw in partial text that the locked sentences then changed.

For each caption message whose partial text changed, the partial's words are compared with the words that were
locked after it, from the point the locked text had reached when the partial was shown: the edit distance
between the partial and that many following locked words counts the words shown that did not survive. Churn is
the sum of those over the sum of words shown. A partial that only lacks its last words (it was cut mid-sentence)
costs nothing; a word that later changed, or a word that never made it into a locked sentence, costs one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.wer import normalise


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
