"""What every translation engine is: a batch of sentences in, their translations out, blocking, called off the
event loop (``engine.translate.service`` runs the engines in its one worker thread).

Languages are BCP 47 tags (``engine.translate.languages``); engines translate by the primary subtag unless one has a
mode for the whole tag. Errors: ``TranslationError`` (the engine failed, timed out, answered nonsense, or the
service is full or closed: the caller keeps the source text and may retry later) and its ``UnsupportedPair`` (no
engine makes this pair: retrying does not help).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.errors import EngineError


class TranslationError(EngineError):
    """A translation could not be made now: the caller keeps the source text and may retry."""


class UnsupportedPair(TranslationError):
    """No engine translates from this language into that one (asking again will not help)."""


@dataclass(frozen=True)
class TranslationRequest:
    """Sentences ``texts`` (in order) to translate from ``source`` into ``target`` (BCP 47 tags).

    ``context``: the sentences just before them, in the source language, for engines that read context
    (``Translator.uses_context``); they are never translated back. Apertium ignores it."""

    source: str
    target: str
    texts: tuple[str, ...]
    context: tuple[str, ...] = ()


class Translator(Protocol):
    """One translation engine.

    ``translate`` blocks (subprocesses, an HTTP call) and is called from one thread at a time (the service's
    worker); it returns exactly one text per input text, in order, or raises ``TranslationError``. ``close`` lets
    its processes and connections go; it is safe to call twice (a ``translate`` after it may start them again or
    raise ``TranslationError``)."""

    name: str  # short, for logs and ``GET /languages`` ("apertium", "chat")
    # Whether ``TranslationRequest.context`` changes its output: the service merges requests of several rooms into
    # one call only where it does not (each room's context is its own).
    uses_context: bool

    def targets(self, source: str) -> frozenset[str]:
        """The languages (primary subtags) it translates ``source`` (a tag) into; never ``source`` itself."""
        ...

    def translate(self, request: TranslationRequest) -> list[str]:
        """``request.texts`` translated (see the class)."""
        ...

    def close(self) -> None:
        """Let its processes and connections go; safe twice."""
        ...
