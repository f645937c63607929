"""Who speaks in a room: the person a publisher names when it joins, and the room-wide labels of its voices.

A publisher may carry its person's name (``POST /offer``'s ``"name"``, ``?name=`` on WHIP and the streaming APIs):
``person_name`` is the one check every way in applies. Each voice a publishing session hears has the session's own
label (0, 1, 2, ... per session); the room gives each (session, session label) a label of its own (``RoomLabels``),
so voices of different publishers never share one, and a named publisher names each of its voices in the room as
it first gets one (``voice_name``; ``app.rooms.publisher``)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from engine.protocol import Caption, Correction, ServerMessage, Speakers

from .edits import SPEAKER_LABELS

MAX_PERSON_CHARS = 64  # after trimming
PUBLISHER_EDITOR = "publisher"  # the ``editor`` of the names events a publisher's voices get


class BadName(ValueError):
    """A person's name that is refused; the message (a sentence: "the name ...") says why, never what was sent."""


def person_name(value: object) -> str | None:
    """The name a publisher gives (JSON or query value), trimmed; None for none (``None`` or blank). Raises
    ``BadName`` for a value that is not a string, has a control character anywhere (Unicode category C: tab and
    newline too, and unassigned code points), or is over ``MAX_PERSON_CHARS`` characters once trimmed."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadName("the name must be a string")
    if any(unicodedata.category(c).startswith("C") for c in value):
        raise BadName("the name may not contain control characters (tabs, line breaks, ...)")
    name = value.strip()
    if len(name) > MAX_PERSON_CHARS:
        raise BadName(f"the name is at most {MAX_PERSON_CHARS} characters")
    return name or None


def voice_name(name: str, n: int) -> str:
    """What the ``n``-th voice (1-based, in order of appearance) of person ``name``'s microphone is called: the name
    itself for the first, ``"name (n)"`` for the others (two people sharing a laptop)."""
    return name if n == 1 else f"{name} ({n})"


class RoomLabels:
    """A room's next free speaker label: above every label its sentences and names use (``seen``), below
    ``SPEAKER_LABELS`` (the last one is given again once they run out: a label shared by two voices beats a
    publisher that cannot lock its sentences)."""

    def __init__(self, first: int = 0) -> None:
        self.next = min(max(0, first), SPEAKER_LABELS - 1)

    def take(self) -> int:
        label = self.next
        self.next = min(label + 1, SPEAKER_LABELS - 1)
        return label

    def seen(self, labels: Iterable[int | None]) -> None:
        """Labels in use (an event committed here or by another front end, an editor's): new ones go above."""
        top = max((spk for spk in labels if spk is not None), default=-1)
        self.next = max(self.next, min(top + 1, SPEAKER_LABELS - 1))


def labels_in(event: ServerMessage) -> list[int | None]:
    """The speaker labels a room event uses: its sentences', a relabel's, and those it names."""
    if isinstance(event, Caption):
        return [s.spk for s in event.sentences]
    if isinstance(event, Speakers):
        return list(event.relabel.values())
    if isinstance(event, Correction):
        return [*(s.spk for s in event.sentences), *(spk for spk, name in event.names.items() if name)]
    return []
