"""Where to break a caption into lines: the rules of broadcast subtitles, for files and for screens.

A caption of words is laid out in as few lines of at most ``max_chars`` characters as it needs, and among the
layouts with that many lines the one that reads best: a break after punctuation is best, before a conjunction or
preposition next, never after an article or a preposition (it would dangle at the line end), never inside a name
(two capitalised words), and lines of similar length are preferred. The rules follow the Netflix Timed Text Style
Guide and the BBC subtitle guidelines. ``static/js/line-breaks.js`` implements the same rules for the kiosk and the
widget (a test keeps the two word lists equal).
"""

from __future__ import annotations

from collections.abc import Sequence

# A line may start with these (break before them): conjunctions, prepositions, relative pronouns.
BREAK_BEFORE = frozenset(
    "and but or nor so yet because although though while whereas unless until if when whenever where wherever "
    "whether than that which who whom whose what how why after before since as once of to in on at for with from "
    "by about into onto over under between through during without within against among across behind beyond "
    "upon toward towards like".split()
)
# A line never ends with these: articles, determiners, prepositions and the like belong with the next word.
NO_BREAK_AFTER = frozenset(
    "a an the this that these those my your his her its our their of to in on at for with from by into onto "
    "and or but mr mrs ms dr st very".split()
)
CLAUSE_END = tuple(",;:")
SENTENCE_END = tuple(".?!")

# Costs of a break after word i (before word i + 1); lower is better.
COST_SENTENCE = 0.0
COST_CLAUSE = 1.0
COST_BEFORE_CONJUNCTION = 3.0
COST_PLAIN = 6.0
COST_DANGLING = 14.0
COST_IN_NAME = 20.0
COST_IMBALANCE = 4.0  # per line, per line-width between its width and an even share of the text


def _bare(word: str) -> str:
    return word.strip("\"'()[]“”‘’").lower()


def break_cost(before: str, after: str) -> float:
    """How bad a line (or cue) break between the words ``before`` and ``after`` reads."""
    if before.endswith(SENTENCE_END):
        return COST_SENTENCE
    if before.endswith(CLAUSE_END):
        return COST_CLAUSE
    if _bare(before) in NO_BREAK_AFTER:
        return COST_DANGLING
    if before[:1].isupper() and after[:1].isupper():
        return COST_IN_NAME
    if _bare(after) in BREAK_BEFORE:
        return COST_BEFORE_CONJUNCTION
    return COST_PLAIN


def line_count(words: Sequence[str], max_chars: int) -> int | None:
    """The fewest lines of at most ``max_chars`` that hold ``words`` in order (greedy filling is optimal for the
    count), or None when a single word is longer than a line."""
    lines, width = 0, -1
    for w in words:
        if len(w) > max_chars:
            return None
        if width < 0 or width + 1 + len(w) > max_chars:
            lines, width = lines + 1, len(w)
        else:
            width += 1 + len(w)
    return lines


def break_lines(words: Sequence[str], max_chars: int, max_lines: int) -> list[str] | None:
    """``words`` as at most ``max_lines`` lines of at most ``max_chars`` characters (single spaces), in as few
    lines as possible and the best-reading breaks among those; None when they do not fit."""
    need = line_count(words, max_chars)
    if need is None or need > max_lines:
        return None
    if need <= 1:
        return [" ".join(words)] if words else []
    n = len(words)
    widths = [0]
    for w in words:
        widths.append(widths[-1] + len(w))

    def width(i: int, j: int) -> int:  # words[i:j] on one line
        return widths[j] - widths[i] + (j - i - 1)

    ideal = width(0, n) / need
    # best[k][j]: (cost, start of the last line) of laying words[:j] out in k lines. Each line costs the break
    # that ends it plus how far its width is from an even share (balanced lines read best).
    inf = float("inf")
    best: list[list[tuple[float, int]]] = [[(inf, -1)] * (n + 1) for _ in range(need + 1)]
    best[0][0] = (0.0, -1)
    for k in range(1, need + 1):
        for j in range(1, n + 1):
            for i in range(j - 1, -1, -1):
                if width(i, j) > max_chars:
                    break
                prev = best[k - 1][i][0]
                if prev == inf:
                    continue
                cost = prev + COST_IMBALANCE * abs(width(i, j) - ideal) / max_chars
                if j < n:
                    cost += break_cost(words[j - 1], words[j])
                if cost < best[k][j][0]:
                    best[k][j] = (cost, i)
    lines: list[str] = []
    j = n
    for k in range(need, 0, -1):
        i = best[k][j][1]
        lines.insert(0, " ".join(words[i:j]))
        j = i
    return lines
