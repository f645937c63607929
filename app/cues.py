"""Subtitle cues from locked sentences: what the SRT and WebVTT files are made of.

A transcript's sentences are as long as the speaker made them (the endpointer joins sentences said close
together), but a subtitle must fit the picture and the reader: ``build_cues`` splits the words of each speaker's
turn into cues of at most ``max_lines`` lines of at most ``max_chars`` characters (the speaker's label counted),
each on screen ``min_ms`` to ``max_ms``, cut at word times. Among the ways to cut a turn it picks the one that
reads best (a dynamic programme over the word boundaries): cuts after a sentence or a clause, not inside a name or
after an article; no cue across a long pause; no cue too short to read when a neighbour can take its words. Each
cue then stays on screen into the following silence (up to the next cue, less ``gap_ms``) until its reading speed
is at most ``max_cps`` characters per second, where the pause allows.

A new cue begins at each change of speaker, the first cue of a turn starting with the label ("Speaker 2: ").
Words come from the sentences' word times; a sentence without them (stored before word times existed, or sent by
a page without them) has its words spread over its time by length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.protocol import Word

from .line_breaks import break_cost, break_lines, line_count
from .store import SentenceRecord

MAX_INNER_PAUSE_MS = 1500  # a pause this long inside a cue would show words long before they are said
_PAUSE_COST_PER_S = 8.0  # pauses inside a cue past half a second
_SHORT_COST = 40.0  # a cue that cannot stay min_ms on screen
_SPEED_COST = 20.0  # per unit of reading speed over the limit (1.0 = twice max_cps)
_CUE_COST = 1.0  # each cue: between equally good cuts, fewer and fuller cues
# A cut where the speaker paused lands between two words for sure (the VAD saw the pause); a cut inside continuous
# speech relies on estimated word times and may clip a word.
PAUSE_MS = 120
_CUT_AT_PAUSE = -1.5


@dataclass(frozen=True)
class CueRules:
    """Limits of a cue. Defaults: Netflix's English rules (42 characters, 2 lines, 5/6 s to 7 s, 20 characters per
    second for adult programmes, 2 frames between cues)."""

    max_chars: int = 42
    max_lines: int = 2
    min_ms: int = 833
    max_ms: int = 7000
    max_cps: float = 20.0
    gap_ms: int = 83


@dataclass(frozen=True)
class Cue:
    """One subtitle: shown [start_ms, end_ms), ``lines`` as displayed (the label is in the first line), spoken by
    ``spk`` in publisher ``session``; ``words`` are the words it holds, in order."""

    start_ms: int
    end_ms: int
    lines: tuple[str, ...]
    spk: int | None
    session: str
    words: tuple[Word, ...]

    @property
    def chars(self) -> int:
        return sum(len(line) for line in self.lines)


@dataclass
class _Turn:
    spk: int | None
    session: str
    words: list[Word]


def sentence_words(s: SentenceRecord) -> list[Word]:
    """The sentence's words with times: its own, or its text spread over [start_ms, end_ms] by word length."""
    if s.words:
        return list(s.words)
    texts = s.text.split()
    if not texts:
        return []
    total = sum(len(t) + 1 for t in texts)
    span = max(0, s.end_ms - s.start_ms)
    out, done = [], 0
    for t in texts:
        a = s.start_ms + span * done // total
        done += len(t) + 1
        out.append(Word(t, a, s.start_ms + span * done // total))
    return out


def _turns(sentences: Sequence[SentenceRecord], max_chars: int) -> list[_Turn]:
    """Consecutive sentences of one speaker in one session, as one word list; words longer than a line are cut
    into line-long pieces (a URL, a run of digits) so that every word fits somewhere."""
    turns: list[_Turn] = []
    for s in sentences:
        words = []
        for w in sentence_words(s):
            if len(w.w) <= max_chars:
                words.append(w)
                continue
            pieces = [w.w[i:i + max_chars] for i in range(0, len(w.w), max_chars)]
            step = (w.end_ms - w.start_ms) / len(pieces)
            words += [Word(p, round(w.start_ms + k * step), round(w.start_ms + (k + 1) * step))
                      for k, p in enumerate(pieces)]
        if not words:
            continue
        if turns and turns[-1].spk == s.spk and turns[-1].session == s.session:
            turns[-1].words += words
        else:
            turns.append(_Turn(s.spk, s.session, words))
    return turns


def speaker_name(spk: int | None) -> str:
    """0-based server labels read as "Speaker 1", "Speaker 2", ...; unknown is "Speaker ?"."""
    return "Speaker ?" if spk is None else f"Speaker {spk + 1}"


def label_for(spk: int | None) -> str:
    """The label that opens a speaker's turn; empty when the speaker is unknown."""
    return "" if spk is None else f"{speaker_name(spk)}:"


def build_cues(sentences: Sequence[SentenceRecord], rules: CueRules = CueRules()) -> list[Cue]:
    """The cues of a transcript, in time order. Every word of every sentence is in exactly one cue, in order."""
    turns = _turns(sentences, rules.max_chars)
    cues: list[Cue] = []
    for t, turn in enumerate(turns):
        next_start = turns[t + 1].words[0].start_ms if t + 1 < len(turns) else None
        label = label_for(turn.spk)
        count = line_count(_shown([w.w for w in turn.words[:1]], 0, 1, label, rules), rules.max_chars)
        if label and (count is None or count > rules.max_lines):
            label = ""  # the limits leave no room for a label (tiny max_chars with one line)
        for i, j, lines in _cut_turn(turn.words, label, next_start, rules):
            w = turn.words[i:j]
            cues.append(Cue(w[0].start_ms, w[-1].end_ms, tuple(lines), turn.spk, turn.session, tuple(w)))
    return _timed(cues, rules)


def _cut_turn(words: list[Word], label: str, next_start: int | None,
              rules: CueRules) -> list[tuple[int, int, list[str]]]:
    """The best cut of one turn into cues: ``(first word, end word, lines)`` for each cue, in order.

    The search only counts lines (greedy filling: cheap); the lines of the chosen cues are broken afterwards."""
    n = len(words)
    texts = [w.w for w in words]
    inf = float("inf")
    best: list[tuple[float, int]] = [(inf, -1)] * (n + 1)
    best[0] = (0.0, -1)
    for i in range(n):
        if best[i][0] == inf:
            continue
        shown: list[str] = []
        pause_cost = 0.0
        for j in range(i + 1, n + 1):
            if j > i + 1:
                pause = words[j - 1].start_ms - words[j - 2].end_ms
                if pause > MAX_INNER_PAUSE_MS:
                    break
                pause_cost += _PAUSE_COST_PER_S * max(0, pause - 500) / 1000
                if words[j - 1].end_ms - words[i].start_ms > rules.max_ms:
                    break
                shown.append(texts[j - 1])
            else:
                shown = _shown(texts, i, j, label, rules)
            count = line_count(shown, rules.max_chars)
            if count is None or count > rules.max_lines:
                break  # longer never fits again
            chars = sum(map(len, shown)) + len(shown) - count  # one space between words, none at line breaks
            follow = words[j].start_ms if j < n else next_start
            cost = best[i][0] + _CUE_COST + pause_cost + _display_cost(words[i].start_ms, words[j - 1].end_ms,
                                                                       follow, chars, rules)
            if j < n:
                cost += break_cost(texts[j - 1], texts[j])
                if words[j].start_ms - words[j - 1].end_ms >= PAUSE_MS:
                    cost += _CUT_AT_PAUSE
            if cost < best[j][0]:
                best[j] = (cost, i)
    out: list[tuple[int, int, list[str]]] = []
    j = n
    while j > 0:
        i = best[j][1]
        lines = break_lines(_shown(texts, i, j, label, rules), rules.max_chars, rules.max_lines)
        assert lines is not None  # the search kept only cues that fit
        out.append((i, j, lines))
        j = i
    return out[::-1]


def _shown(texts: list[str], i: int, j: int, label: str, rules: CueRules) -> list[str]:
    """The words of a cue of ``texts[i:j]`` as laid out in lines: the turn's first cue opens with the label, kept
    on the line of the first word (alone on a line it would waste one) unless the two are longer than a line."""
    if not label or i > 0:
        return list(texts[i:j])
    if j > 0 and len(label) + 1 + len(texts[0]) <= rules.max_chars:
        return [f"{label} {texts[0]}", *texts[1:j]]
    return [label, *texts[:j]]


def _display_cost(start: int, spoken_end: int, follow: int | None, chars: int, rules: CueRules) -> float:
    """Penalty for a cue that cannot stay up ``min_ms`` or cannot be read at ``max_cps`` before ``follow``."""
    room = rules.max_ms if follow is None else min(rules.max_ms, max(follow - rules.gap_ms, spoken_end) - start)
    cost = _SHORT_COST if room < rules.min_ms else 0.0
    cps = chars * 1000 / max(room, 1)
    if cps > rules.max_cps:
        cost += _SPEED_COST * (cps / rules.max_cps - 1)
    return cost


def _timed(cues: list[Cue], rules: CueRules) -> list[Cue]:
    """Display times: from the first word to as long as reading needs (at least ``min_ms``, the time of the words,
    ``chars / max_cps``), at most ``max_ms`` and not past the next cue less ``gap_ms``; a cue that is still too
    short (the next speaker follows at once) starts earlier, into the silence before it."""
    out: list[Cue] = []
    for k, c in enumerate(cues):
        start = c.start_ms
        prev_end = out[-1].end_ms if out else 0
        start = max(start, prev_end)  # never before the previous cue is gone
        want = max(c.end_ms, start + rules.min_ms, start + round(c.chars * 1000 / rules.max_cps))
        end = min(want, start + rules.max_ms)
        if k + 1 < len(cues):
            follow = cues[k + 1].start_ms
            limit = follow - rules.gap_ms
            end = min(end, limit if limit >= min(c.end_ms, follow) else follow)
            if end - start < rules.min_ms:
                start = max(prev_end + (rules.gap_ms if out else 0), end - rules.min_ms, 0)
                start = min(start, c.start_ms)
        end = max(end, start + 1)  # players drop a cue whose end is not after its start
        out.append(Cue(start, end, c.lines, c.spk, c.session, c.words))
    return out
