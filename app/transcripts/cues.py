"""Subtitle cues from locked sentences: what the SRT and WebVTT files are made of.

A transcript's sentences are as long as the speaker made them (the endpointer joins sentences said close
together), but a subtitle must fit the picture and the reader: ``build_cues`` splits the words of each speaker's
turn into cues of at most ``max_lines`` lines of at most ``max_chars`` characters (whatever is displayed counted,
a speaker mark too), each on screen ``min_ms`` to ``max_ms``, cut at word times. Among the ways to cut a turn it
picks the one that reads best (a dynamic programme over the word boundaries): cuts after a sentence or a clause,
not inside a name or after an article; no cue across a long pause; no cue too short to read or too fast to read
when another cut avoids it.

Display times: a cue is up while its words are said, and the pauses around it give it the time its reading speed
needs (``max_cps`` characters per second): it stays on into the following silence, and may appear up to
``lead_ms`` before its first word, into the silence before it. Neighbours share a pause: a cue that needs the
pause after it pushes the next cue's lead-in out, and a cue that reads fast enough without it leaves it to the
next. Never two cues on screen at once, ``gap_ms`` between them where the pause allows, and no cue up while
another cue's words are said: each keeps to its own words and the silence around them.

A new cue begins at each change of speaker (or of publisher, in a room), and its first line opens with the mark
of ``speakers`` (``SPEAKER_STYLES``): a dialogue dash by default, the way subtitles mark a new speaker when no name
is shown (Netflix's English style guide: a hyphen without a space, "-Are you coming?"), ``>>`` for US broadcast
captions (">> Are you coming?"), the name ("Speaker 2: Are you coming?") for people who want names in the text,
or nothing. The names stay in the files either way: WebVTT carries them in a voice span (``exports``).

Words come from the sentences' word times; a sentence without them (stored before word times existed, or sent by
a page without them) has its words spread over its time by length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from engine.protocol import Word

from ..rooms import SentenceRecord
from .line_breaks import break_cost, break_lines, line_count

MAX_INNER_PAUSE_MS = 1500  # a pause this long inside a cue would show words long before they are said
_PAUSE_COST_PER_S = 8.0  # pauses inside a cue past half a second
_SHORT_COST = 40.0  # a cue that cannot stay min_ms on screen
_SPEED_COST = 20.0  # per unit of reading speed over the limit (1.0 = twice max_cps)
_CUE_COST = 1.0  # each cue: between equally good cuts, fewer and fuller cues
# A cut where the speaker paused lands between two words for sure (the VAD saw the pause); a cut inside continuous
# speech relies on estimated word times and may clip a word.
PAUSE_MS = 120
_CUT_AT_PAUSE = -1.5

# How a new speaker's turn is marked in the cue text: a mark and what joins it to the first word.
SPEAKER_STYLES = ("dash", "chevrons", "label", "none")
_MARKS = {"dash": "-", "chevrons": ">> "}


@dataclass(frozen=True)
class CueRules:
    """Limits of a cue. Defaults: Netflix's English rules (42 characters, 2 lines, 5/6 s to 7 s, 20 characters per
    second for adult programmes, 2 frames between cues); ``lead_ms``: how long before its first word a cue may
    appear when it needs the time to be read (a little: the BBC's guidelines allow up to 1.5 s ahead of the speech,
    Netflix's time a cue to the audio and let it run on after; on bench.cues' recording 0.5 s brings all but 4 of
    185 cues to 20 characters per second, 1 s one more)."""

    max_chars: int = 42
    max_lines: int = 2
    min_ms: int = 833
    max_ms: int = 7000
    max_cps: float = 20.0
    gap_ms: int = 83
    lead_ms: int = 500


@dataclass(frozen=True)
class Cue:
    """One subtitle: shown [start_ms, end_ms), ``lines`` as displayed (a speaker mark is in the first line), spoken
    by ``spk`` in publisher ``session``; ``words`` are the words it holds, in order."""

    start_ms: int
    end_ms: int
    lines: tuple[str, ...]
    spk: int | None
    session: str
    words: tuple[Word, ...]

    @property
    def chars(self) -> int:
        """Characters displayed (spaces and marks counted, line breaks not): what reading speed is measured in."""
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
            pieces = [w.w[i : i + max_chars] for i in range(0, len(w.w), max_chars)]
            step = (w.end_ms - w.start_ms) / len(pieces)
            words += [
                Word(p, round(w.start_ms + k * step), round(w.start_ms + (k + 1) * step)) for k, p in enumerate(pieces)
            ]
        if not words:
            continue
        if turns and turns[-1].spk == s.spk and turns[-1].session == s.session:
            turns[-1].words += words
        else:
            turns.append(_Turn(s.spk, s.session, words))
    return turns


def speaker_name(spk: int | None, names: Mapping[int, str] | None = None) -> str:
    """The name a room's editors gave label ``spk`` (``names``), else 0-based server labels read as "Speaker 1",
    "Speaker 2", ...; unknown is "Speaker ?"."""
    if spk is not None and names and names.get(spk):
        return names[spk]
    return "Speaker ?" if spk is None else f"Speaker {spk + 1}"


def label_for(spk: int | None, names: Mapping[int, str] | None = None) -> str:
    """The name label of a speaker ("Speaker 2:", "Dr. Lee:"); empty when the speaker is unknown."""
    return "" if spk is None else f"{speaker_name(spk, names)}:"


def speaker_mark(style: str, spk: int | None, changed: bool, names: Mapping[int, str] | None = None) -> str:
    """What opens the first line of a turn of ``spk`` in ``style`` (one of ``SPEAKER_STYLES``), the joint to the
    first word included: "-" (the dash touches the word), ">> ", "Speaker 2: ", or "". ``changed``: another
    speaker's turn (or another publisher's) came before this one; the dash and the chevrons mark only a change
    (the first speaker of a transcript needs no mark), the label names every turn of a known speaker."""
    if style == "label":
        label = label_for(spk, names)
        return f"{label} " if label else ""
    if style not in SPEAKER_STYLES:
        raise ValueError(f"speaker style must be one of {', '.join(SPEAKER_STYLES)}")
    return _MARKS.get(style, "") if changed else ""


def build_cues(
    sentences: Sequence[SentenceRecord],
    rules: CueRules = CueRules(),
    speakers: str = "dash",
    names: Mapping[int, str] | None = None,
) -> list[Cue]:
    """The cues of a transcript, in time order, each new speaker's first cue opening with the mark of
    ``speakers`` (``speaker_mark``; ``names``: the speakers' names). Every word of every sentence is in exactly
    one cue, in order."""
    turns = _turns(sentences, rules.max_chars)
    cues: list[Cue] = []
    floor = 0  # where the previous cue ends at the earliest (``_plan``): the next cannot start before
    for t, turn in enumerate(turns):
        next_start = turns[t + 1].words[0].start_ms if t + 1 < len(turns) else None
        mark = speaker_mark(speakers, turn.spk, t > 0, names)
        count = line_count(_shown([w.w for w in turn.words[:1]], 0, 1, mark, rules), rules.max_chars)
        if mark and (count is None or count > rules.max_lines):
            mark = ""  # the limits leave no room for a mark (tiny max_chars with one line)
        cut = _cut_turn(turn.words, mark, floor, not cues, next_start, rules)
        floor = cut.floor_ms
        for c in cut.cues:
            w = turn.words[c.first : c.end]
            cues.append(Cue(w[0].start_ms, w[-1].end_ms, tuple(c.lines), turn.spk, turn.session, tuple(w)))
    return _timed(cues, rules)


def _cut_turn(
    words: list[Word], mark: str, floor: int, first: bool, next_start: int | None, rules: CueRules
) -> _TurnCut:
    """The best cut of one turn into cues, in order, and where the last one ends at the earliest (the next turn's
    ``floor``). ``floor``: the previous cue's earliest end;
    ``first``: no cue before this turn.

    The search counts lines by greedy filling, word by word as a cue grows (cheap); the lines of the chosen cues
    are broken afterwards. Each state also carries the earliest end of the cue that reaches it, so that a cue's
    room (``_plan``) knows how much of the pause before it the cue before left."""
    n = len(words)
    texts = [w.w for w in words]
    # The cost of a cut after word j - 1, the same whichever cue ends there.
    cut_cost = [
        break_cost(texts[j - 1], texts[j])
        + (_CUT_AT_PAUSE if words[j].start_ms - words[j - 1].end_ms >= PAUSE_MS else 0.0)
        for j in range(1, n)
    ] + [0.0]
    needs = [_need_ms(chars, rules) for chars in range(rules.max_lines * (rules.max_chars + 1))]
    inf = float("inf")
    best: list[tuple[float, int, int]] = [(inf, -1, 0)] * (n + 1)
    best[0] = (0.0, -1, floor)
    for i in range(n):
        if best[i][0] == inf:
            continue
        before = best[i][2]
        pause_cost = 0.0
        lines = width = letters = 0  # greedy filling so far: lines, width of the last one, characters and spaces
        for j in range(i + 1, n + 1):
            if j > i + 1:
                pause = words[j - 1].start_ms - words[j - 2].end_ms
                if pause > MAX_INNER_PAUSE_MS:
                    break
                pause_cost += _PAUSE_COST_PER_S * max(0, pause - 500) / 1000
                if words[j - 1].end_ms - words[i].start_ms > rules.max_ms:
                    break
                size = len(texts[j - 1])  # at most max_chars (``_turns``)
                if width + 1 + size > rules.max_chars:
                    lines, width = lines + 1, size
                else:
                    width += 1 + size
                letters += 1 + size  # with the space before it
            else:
                shown = _shown(texts, i, j, mark, rules)
                count = line_count(shown, rules.max_chars)
                if count is None:
                    break
                lines, width, letters = count, _last_line_width(shown, rules.max_chars), sum(map(len, shown))
                letters += len(shown) - 1  # the spaces between them
            if lines > rules.max_lines:
                break  # longer never fits again
            chars = letters - (lines - 1)  # no space at a line break
            follow = words[j].start_ms if j < n else next_start
            plan = _plan(words[i].start_ms, words[j - 1].end_ms, needs[chars], before, first and i == 0, follow, rules)
            cost = best[i][0] + _CUE_COST + pause_cost + _display_cost(plan, chars, rules) + cut_cost[j - 1]
            if cost < best[j][0]:
                best[j] = (cost, i, plan.end_ms)
    out: list[_Cut] = []
    j = n
    while j > 0:
        i = best[j][1]
        broken = break_lines(_shown(texts, i, j, mark, rules), rules.max_chars, rules.max_lines)
        assert broken is not None  # the search kept only cues that fit
        out.append(_Cut(i, j, broken))
        j = i
    return _TurnCut(out[::-1], best[n][2])


def _last_line_width(words: list[str], max_chars: int) -> int:
    """The width of the last line when ``words`` fill lines of ``max_chars`` greedily (as ``line_count``)."""
    width = -1
    for w in words:
        width = len(w) if width < 0 or width + 1 + len(w) > max_chars else width + 1 + len(w)
    return max(width, 0)


def _shown(texts: list[str], i: int, j: int, mark: str, rules: CueRules) -> list[str]:
    """The words of a cue of ``texts[i:j]`` as laid out in lines: the turn's first cue opens with the mark, kept
    on the line of the first word (alone on a line it would waste one) unless the two are longer than a line."""
    if not mark or i > 0:
        return list(texts[i:j])
    if j > 0 and len(mark) + len(texts[0]) <= rules.max_chars:
        return [f"{mark}{texts[0]}", *texts[1:j]]
    return [mark.rstrip(), *texts[:j]]


@dataclass(frozen=True, slots=True)
class _Cut:
    """One cue of a turn's best cut: the turn's words ``[first, end)``, laid out in ``lines``."""

    first: int
    end: int
    lines: list[str]


@dataclass(frozen=True, slots=True)
class _TurnCut:
    """A turn's best cut into cues, and where its last cue ends at the earliest (ms: the next turn's ``floor``)."""

    cues: list[_Cut]
    floor_ms: int


class _Plan(NamedTuple):  # a tuple: the cut search makes one per candidate cue
    """A cue's earliest display times given the cue before it (ms): shown [start_ms, end_ms), ``limit_ms`` the latest
    end the following words allow, ``need_ms`` the time reading needs; ``lost``: no time within its reach is enough."""

    start_ms: int
    end_ms: int
    limit_ms: int
    need_ms: int
    lost: bool


def _need_ms(chars: int, rules: CueRules) -> int:
    """Time on screen for ``chars`` characters at ``max_cps`` (rounded up: never a hair over), at least ``min_ms``,
    at most ``max_ms``."""
    return min(rules.max_ms, max(rules.min_ms, math.ceil(chars * 1000 / rules.max_cps)))


def _plan(
    first_ms: int, last_ms: int, need: int, floor: int, first: bool, follow: int | None, rules: CueRules
) -> _Plan:
    """Earliest display of a cue whose words are said [first_ms, last_ms] and read in ``need`` ms (``_need_ms``),
    the previous cue ending at ``floor`` (``first``: there is none) and the next cue's first word at ``follow``
    (None: no next cue).

    The cue starts as early as reading needs allow (up to ``lead_ms`` before its first word, or further where
    ``min_ms`` needs it: a one-word cue right before the next speaker), never before the previous
    cue's end plus ``gap_ms``, nor so early that its words no longer fit in ``max_ms``; and ends as early as its
    reading allows, so that the following cue has the most room. When the gap does not fit between the two
    speakers (less than ``gap_ms`` of silence) the cues touch."""
    early = floor + (0 if first else rules.gap_ms)
    if follow is None:
        limit0 = None
    elif follow - rules.gap_ms >= min(last_ms, follow):
        limit0 = follow - rules.gap_ms
    else:
        limit0 = follow  # the next speaker follows at once: touch, keeping every word of this cue up
    if early > first_ms:
        start = max(first_ms, floor)  # no silence before the first word: start when the previous cue goes
    else:
        lo = max(early, min(first_ms, last_ms - rules.max_ms))
        read = max(lo, first_ms - rules.lead_ms)
        start = read if limit0 is None else max(lo, min(read, limit0 - rules.min_ms))
    limit = start + rules.max_ms if limit0 is None else min(limit0, start + rules.max_ms)
    limit = max(limit, start + 1)  # players drop a cue whose end is not after its start
    lost = start + need > limit
    end = min(limit, max(last_ms, start + (rules.min_ms if lost else need)))
    return _Plan(start, max(end, start + 1), limit, need, lost)


def _display_cost(plan: _Plan, chars: int, rules: CueRules) -> float:
    """Penalty for a cue that cannot stay up ``min_ms`` or cannot be read at ``max_cps`` in its room."""
    room = plan.limit_ms - plan.start_ms
    cost = _SHORT_COST if room < rules.min_ms else 0.0
    cps = chars * 1000 / max(room, 1)
    if cps > rules.max_cps:
        cost += _SPEED_COST * (cps / rules.max_cps - 1)
    return cost


def _timed(cues: list[Cue], rules: CueRules) -> list[Cue]:
    """Display times. Forward, each cue as early as it may (``_plan``: the earliest end leaves the next cue the
    most room); backward, each cue as close to its words as the next one's final start allows: it starts at its
    first word and stays into the pause after as long as reading needs, and only what the pause after cannot give
    comes from a lead-in. A cue no time can make readable takes all that its neighbours leave."""
    plans: list[_Plan] = []
    for k, c in enumerate(cues):
        follow = cues[k + 1].start_ms if k + 1 < len(cues) else None
        plans.append(
            _plan(
                c.start_ms,
                c.end_ms,
                _need_ms(c.chars, rules),
                plans[-1].end_ms if plans else 0,
                not plans,
                follow,
                rules,
            )
        )
    out: list[Cue] = []
    next_start: int | None = None
    for c, p in zip(reversed(cues), reversed(plans), strict=True):
        limit = p.limit_ms if next_start is None else min(p.limit_ms, max(p.end_ms, next_start - rules.gap_ms))
        if p.lost:
            start, end = p.start_ms, limit
        else:
            at = max(c.start_ms, p.start_ms)  # where it would rather start: at its first word
            end = min(limit, max(c.end_ms, at + p.need_ms))
            start = max(p.start_ms, min(at, end - p.need_ms))
        end = max(min(end, start + rules.max_ms), start + 1)
        out.append(Cue(start, end, c.lines, c.spk, c.session, c.words))
        next_start = start
    return out[::-1]
