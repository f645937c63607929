"""A room's vocabulary, and what it does to the text its publishers lock: names and terms the recognizer gets wrong,
put right before anyone sees the sentence.

Two kinds of entry:
- **terms** an editor enters (before or during the event): a word the recognizer wrote that is spelt almost like a
  term (letters at least ``NEAR`` alike, the same first letter, capitalised by the recognizer as a name, and not a
  sentence's first word unless nearly identical) becomes the term: "Concorde" -> "Concord", "Freyr" -> "Frere";
  two words that make it together count too ("dash wood" -> "Dashwood");
- **learned fixes**: when an editor replaces a stretch the recognizer wrote with a name or term (``learned``), the
  pair is kept, "claifren" -> "Claflin", and the same stretch is replaced wherever it comes again; the term joins
  the terms as well. A fix is learned only where the two are spelt alike (letters at least ``LEARN`` alike), so a
  correction of "to" into "Quilter" (a word lost in noise) teaches nothing that would rewrite every "to".

Limits, measured and known: a word spelt only about two-thirds like its term ("Abby" for "Abbie", "Claifren" for
"Claflin") needs an editor's fix to be learned; a correction of a sentence's first word teaches nothing (the
recognizer capitalises every first word, so nothing there says "name"); and a real name spelt within 80 % of a term
is respelt too ("Westminster Abbey" with the term "Abbie"): the vocabulary is the room's, its editors choose it.

Why not the recognizer's prompt, the usual way to bias Whisper: measured here (``bench/vocabulary.py``), seven
terms as Whisper's previous text made whisper-base drop whole sentences and skip openings, +9 WER points on clips
without any of the terms, and fixed 2 of the 7 misheard occurrences. Rewriting only what is spelt like a term
costs no decode time and touches nothing else.

Entries are plain strings on the wire and in the store: a term as itself, a fix as ``"heard → meant"``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

ARROW = " → "
NEAR = 0.8  # letters alike for a word to become an entered term (difflib ratio, case folded)
NEAR_FIRST_WORD = 0.9  # ... when it opens the sentence (the recognizer capitalises every first word)
LEARN = 0.5  # letters alike for an editor's replacement to become a fix
MIN_TERM_LETTERS = 4
_EDGES = ".,;:!?\"'()[]{}«»“”‘’…"


@dataclass(frozen=True)
class Fix:
    """What the recognizer wrote (``heard``, words case-folded) and what an editor put in its place (``meant``)."""

    heard: str
    meant: str

    def wire(self) -> str:
        return f"{self.heard}{ARROW}{self.meant}"

    @classmethod
    def parse(cls, entry: str) -> Fix | None:
        heard, arrow, meant = entry.partition(ARROW)
        return cls(heard, meant) if arrow and heard and meant else None


def learnable(heard: str, meant: str) -> Fix | None:
    """A fix from an editor's replacement of ``heard`` (the recognizer's words) by ``meant`` (a name or term), if
    the two are spelt alike (see the module)."""
    key = " ".join(_key(w) for w in heard.split())
    if not key or _alike(key, meant) < LEARN:
        return None
    return Fix(key, meant)


class Corrector:
    """Applies a room's vocabulary to text (see the module). ``apply`` is a pure function of the text: the same
    text always comes out the same way, so a partial's settled words and the sentence that locks agree."""

    def __init__(self, terms: Sequence[str] = (), learned: Sequence[str] = ()) -> None:
        fixes = [f for f in (Fix.parse(e) for e in learned) if f is not None]
        # Indexed by their first word (fixes, longest first) and first letter (terms): a word is compared only with
        # the entries it could match, so a long vocabulary costs little per word.
        self._fixes: dict[str, list[tuple[list[str], str]]] = {}
        for f in sorted(fixes, key=lambda f: -len(f.heard.split())):
            self._fixes.setdefault(f.heard.split()[0], []).append((f.heard.split(), f.meant))
        single = [t for t in dict.fromkeys([*terms, *(f.meant for f in fixes)]) if len(t.split()) == 1]
        self._terms: dict[str, list[str]] = {}
        for t in single:
            if sum(c.isalpha() for c in t) >= MIN_TERM_LETTERS:
                self._terms.setdefault(_key(t)[:1], []).append(t)

    def __bool__(self) -> bool:
        return bool(self._fixes or self._terms)

    def apply(self, text: str) -> str:
        """``text`` with the vocabulary's fixes and near-miss terms applied."""
        if not self:
            return text
        words = text.split()
        keys = [_key(w) for w in words]
        out: list[str] = []
        i = 0
        while i < len(words):
            step, replaced = self._at(words, keys, i)
            out.append(replaced if replaced is not None else words[i])
            i += step
        return " ".join(out)

    def _at(self, words: list[str], keys: list[str], i: int) -> tuple[int, str | None]:
        """How many words from ``i`` on are replaced, and by what (``1, None``: none). ``keys``: the words'
        ``_key``."""
        for heard, meant in self._fixes.get(keys[i], ()):
            n = len(heard)
            if keys[i : i + n] == heard:
                return n, _edged(words[i], words[i + n - 1], meant)
        for n in (2, 1):  # two words the recognizer split ("dash wood") first
            if i + n > len(words):
                continue
            stretch = words[i : i + n]
            joined = "".join(keys[i : i + n])
            if n == 2 and (not keys[i] or stretch[0].strip(_EDGES)[-1:] != stretch[0][-1:]):
                continue  # punctuation between the two: they are not one word
            for term in self._terms.get(joined[:1], ()):
                if _key(term) == joined:
                    if n == 1 and stretch[0].strip(_EDGES) == term.strip(_EDGES):
                        break  # already right
                    return n, _edged(stretch[0], stretch[-1], term)
                if n == 1 and self._near(stretch[0], term, first=i == 0):
                    return 1, _edged(stretch[0], stretch[0], term)
                if (
                    n == 2
                    and abs(len(joined) - len(_key(term))) <= 2
                    and _alike(joined, term) >= NEAR
                    and all(_alike(w, term) < NEAR for w in stretch)
                ):  # not a term and the next word
                    return 2, _edged(stretch[0], stretch[-1], term)
        return 1, None

    @staticmethod
    def _near(word: str, term: str, first: bool) -> bool:
        core = word.strip(_EDGES)
        key, target = _key(word), _key(term)
        if not core or not core[0].isupper() or key == target or key[:1] != target[:1]:
            return False
        if _base(key) == _base(target):
            return False  # the same name in another form ("Kate" and the term "Kate's"): the recognizer chose it

        if abs(len(key) - len(target)) > 2:
            return False
        return _alike(key, term) >= (NEAR_FIRST_WORD if first else NEAR)


def _alike(a: str, b: str) -> float:
    """How alike two spellings are, letters only, case folded (0-1)."""
    x, y = re.sub(r"[^\w]", "", a.casefold()), re.sub(r"[^\w]", "", b.casefold())
    return difflib.SequenceMatcher(a=x, b=y, autojunk=False).ratio() if x and y else 0.0


def _base(key: str) -> str:
    """A word without its possessive ending ("kate's" -> "kate")."""
    for ending in ("'s", "’s", "s'", "’"):
        if key.endswith(ending) and len(key) > len(ending):
            return key[: -len(ending)]
    return key


def _key(word: str) -> str:
    return word.strip(_EDGES).casefold()


def _edged(first: str, last: str, replacement: str) -> str:
    """``replacement`` with the punctuation that stood before ``first`` and after ``last``."""
    lead = first[: len(first) - len(first.lstrip(_EDGES))]
    trail = last[len(last.rstrip(_EDGES)) :]
    return f"{lead}{replacement.strip(_EDGES)}{trail}"
