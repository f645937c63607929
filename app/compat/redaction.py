"""Redaction of numbers a caller asked to keep out of its transcripts (Deepgram's ``redact``): in every result the
caller gets and in everything the room stores, before either sees it.

What is redacted, in the digits Whisper writes (it writes numbers as digits, grouped with spaces or dashes):

- ``pci``: card numbers (13-19 digits in a row, however grouped), expiry dates (``MM/YY``, ``MM/YYYY``) and the
  3-4 digit code after "CVV", "CVC" or "security code";
- ``ssn``: social security numbers (9 digits, plain or grouped 3-2-4);
- ``numbers`` (or ``true``): every number of three digits or more (and what ``pci`` and ``ssn`` redact).

Text not locked yet (a partial: interim results, the room's live line) is still being said, and a number in it may
yet grow into a card number: there every number of three digits or more is masked, and at the lock only the kinds
asked for stay masked. A number split across two sentences (a long pause inside it) is not recognised as one.

A redacted number keeps its shape, its digits masked: ``4111 1111 1111 1111`` becomes ``**** **** **** ****``,
``123-45-6789`` becomes ``***-**-****``. So a sentence keeps its words one for one, with their times, and a partial
keeps its count of settled words: the redacted text lines up with everything the protocols send beside it. Digits
spelt as words ("four one one one") are not recognised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from engine import protocol

KINDS = ("pci", "ssn", "numbers")
_ALIASES = {"true": "numbers", "numbers": "numbers", "pci": "pci", "ssn": "ssn"}
_DIGIT_GROUP = re.compile(r"^\W*\d[\d-]*\W*$")  # a word of digits (and dashes), with punctuation around it
_EXPIRY = re.compile(r"^\W*(0?[1-9]|1[0-2])/(\d{2}|\d{4})\W*$")
_CODE_CUES = ("cvv", "cvc", "cvv2", "security code", "verification code", "card code")
_CUE_REACH = 4  # a card code is the number within this many words after its cue


class RedactError(ValueError):
    """A ``redact`` value this server does not implement."""


def parse_redact(values: Iterable[str]) -> frozenset[str]:
    """``redact`` query values (repeated, or comma-separated) as a set of ``KINDS``; ``false`` adds none. Raises
    ``RedactError`` naming a value that is not implemented (``pii``, ``phi`` and other entity types)."""
    kinds: set[str] = set()
    for value in values:
        for part in (p.strip().lower() for p in value.split(",")):
            if part in ("", "false"):
                continue
            if part not in _ALIASES:
                raise RedactError(f"redact={part!r} is not supported by this server: use pci, ssn or numbers")
            kinds.add(_ALIASES[part])
    return frozenset(kinds)


def _mask(token: str) -> str:
    return re.sub(r"\d", "*", token)


def _digits(token: str) -> str:
    return re.sub(r"\D", "", token)


class Redactor:
    """Masks the numbers of ``kinds`` (see the module's docstring). Stateless between calls."""

    def __init__(self, kinds: frozenset[str]) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise RedactError(f"unknown redaction {sorted(unknown)}")
        self.kinds = kinds

    def tokens(self, tokens: Sequence[str], unlocked: bool = False) -> list[str]:
        """``tokens`` (a transcript's words, in order) with the redacted numbers masked, one for one. ``unlocked``:
        text still being said (a partial), where every number of three digits or more is masked: it may yet grow
        into a card or social security number."""
        out = list(tokens)
        i = 0
        while i < len(out):
            if not _DIGIT_GROUP.match(out[i]):
                if "pci" in self.kinds and _EXPIRY.match(out[i]):
                    out[i] = _mask(out[i])
                i += 1
                continue
            j = i
            while j < len(out) and _DIGIT_GROUP.match(out[j]) and (j == i or not _ends_clause(out[j - 1])):
                j += 1
            if self._redacts(_digits("".join(out[i:j])), out[:i], unlocked):
                out[i:j] = [_mask(t) for t in out[i:j]]
            i = j
        return out

    def _redacts(self, digits: str, before: Sequence[str], unlocked: bool = False) -> bool:
        n = len(digits)
        if ("numbers" in self.kinds or unlocked) and n >= 3:
            return True
        if "pci" in self.kinds and (13 <= n <= 19 or (n in (3, 4) and _cued(before))):
            return True
        return "ssn" in self.kinds and n == 9

    def text(self, text: str, unlocked: bool = False) -> str:
        return " ".join(self.tokens(text.split(), unlocked))

    def words(self, words: Sequence[protocol.Word], unlocked: bool = False) -> list[protocol.Word]:
        masked = self.tokens([w.w for w in words], unlocked)
        return [w if m == w.w else replace(w, w=m) for w, m in zip(words, masked, strict=True)]

    def sentence(self, s: protocol.Sentence) -> protocol.Sentence:
        return replace(s, text=self.text(s.text), words=tuple(self.words(s.words)))

    def message(self, msg: protocol.ServerMessage) -> protocol.ServerMessage:
        """``msg`` as the caller and the room may see it."""
        if isinstance(msg, protocol.Caption):
            return replace(
                msg,
                sentences=[self.sentence(s) for s in msg.sentences],
                partial=self.text(msg.partial, unlocked=True),
                stable_words=self.words(msg.stable_words, unlocked=True),
            )
        if isinstance(msg, protocol.WordTimes):
            return replace(msg, words=tuple(self.words(msg.words)))
        return msg


def _ends_clause(token: str) -> bool:
    """A number followed by a full stop or comma ends there (the next number is another one)."""
    return token.rstrip()[-1:] in (".", ",", ";", ":", "?", "!")


def _cued(before: Sequence[str]) -> bool:
    """A card-code cue ("CVV", "security code") in the few words before a number."""
    near = " ".join(before[-_CUE_REACH:]).lower()
    near = re.sub(r"[^\w\s]", " ", near)
    return any(re.search(rf"\b{cue}\b", near) for cue in _CODE_CUES)
