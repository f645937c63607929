"""How an output writes a sentence on screen: subtitle lines (at most ``max_lines`` of ``max_chars``, broken where
they read best) and speakers' display names.

Both come from ``app.transcripts`` (the rules of the SRT and WebVTT files), handed in by the composition root
(``app.server``): ``app.outputs`` sits beside ``app.transcripts`` in the layers and does not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

# ``break_lines(words, max_chars, max_lines)``: the words as at most ``max_lines`` lines of at most ``max_chars``,
# in as few lines as possible with the best-reading breaks, or None when they do not fit.
BreakLines = Callable[[Sequence[str], int, int], list[str] | None]
# ``speaker_name(spk, names)``: the display name of speaker label ``spk`` ("Speaker 2", or an editor's name).
SpeakerName = Callable[[int | None, Mapping[int, str] | None], str]

MAX_CHARS = 42  # broadcast subtitles: 2 lines of at most 42 characters (as the room's SRT files)
MAX_LINES = 2
CLAUSE_END = tuple(",;:.?!")
LOOK_BACK_WORDS = 4  # a frame may end up to this many words early to end at punctuation


@dataclass(frozen=True)
class Layout:
    """The project's line breaking and speaker names (see the module)."""

    break_lines: BreakLines
    speaker_name: SpeakerName


@dataclass(frozen=True)
class Frame:
    """One screenful of a sentence: its ``lines``, and ``offset`` (0-1), how far into the sentence's text it begins
    (its share of the sentence's time: frames of a long sentence follow one another while it is said)."""

    lines: tuple[str, ...]
    offset: float


def frames(text: str, break_lines: BreakLines, max_chars: int = MAX_CHARS, max_lines: int = MAX_LINES) -> list[Frame]:
    """``text`` as screenfuls of at most ``max_lines`` lines of at most ``max_chars`` characters, in order. A
    sentence that fits is one frame; a longer one is cut into as few as fit, each cut at the end of a clause when
    one is near. A word longer than a line is cut into pieces."""
    words = [piece for w in text.split() for piece in _pieces(w, max_chars)]
    total = max(1, sum(len(w) + 1 for w in words))
    out: list[Frame] = []
    done = 0  # characters of the words already in frames, a space each
    while words:
        take = _fitting(words, max_chars, max_lines)
        if take < len(words):
            for back in range(take, max(1, take - LOOK_BACK_WORDS), -1):
                if words[back - 1].endswith(CLAUSE_END) and back * 2 >= take:
                    take = back
                    break
        lines = break_lines(words[:take], max_chars, max_lines) or [" ".join(words[:take])]
        out.append(Frame(tuple(lines), done / total))
        done += sum(len(w) + 1 for w in words[:take])
        words = words[take:]
    return out


def _fitting(words: Sequence[str], max_chars: int, max_lines: int) -> int:
    """How many leading words fit in ``max_lines`` lines of ``max_chars`` (filled greedily: the most that fit); at
    least one."""
    lines, width = 0, -1
    for i, w in enumerate(words):
        if width < 0 or width + 1 + len(w) > max_chars:
            if lines == max_lines:
                return max(1, i)
            lines, width = lines + 1, len(w)
        else:
            width += 1 + len(w)
    return len(words)


def _pieces(word: str, max_chars: int) -> list[str]:
    return [word[i : i + max_chars] for i in range(0, len(word), max_chars)]
