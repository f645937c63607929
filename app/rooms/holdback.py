"""A room's hold-back delay: the audience gets each durable event ``delay_s`` after it was committed, so that an
editor's correction made meanwhile is the only version it ever sees.

- A ``caption`` (newly locked sentences) and a ``translation`` (those sentences in a room language) are due
  ``delay_s`` after their commit. Every other event (a correction of a
  sentence already out, a relabel, word times) has no delay of its own, but events leave in seq order: one goes when
  it is due and everything before it has gone. So viewers resume by seq exactly as without a delay.
- While a caption is held, later events that touch its sentences change it in place (``add``): a correction
  replaces the sentence's text (or removes it), a relabel its label, word times its words; a held translation
  is replaced by a newer one of the same sentence and language (the re-translation of a correction) and loses the
  sentences a correction removed. What touched only held
  sentences leaves the later event (it would tell viewers of a change they never saw); an event left with nothing
  still goes, as its seq alone.
- Nothing here is the only copy: every held event is in the store. A restart builds the queue again from the
  store's recent events (``RoomRegistry``), due when they would have been.

Pure bookkeeping on a clock the caller passes in (seconds); the room runs the timer (``Room``).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass

from engine.protocol import Caption, Correction, Sentence, ServerMessage, Speakers, Translation, WordTimes

MAX_DELAY_S = 30.0


@dataclass
class _Held:
    seq: int
    message: ServerMessage
    due_s: float
    committed_s: float


class Holdback:
    """The events a delay room's audience has not got yet, in seq order."""

    def __init__(self, delay_s: float, released: int = 0) -> None:
        self.delay_s = delay_s
        self.released = released  # the newest seq released (or passed straight through)
        self._held: deque[_Held] = deque()

    @property
    def held(self) -> int:
        """Events waiting."""
        return len(self._held)

    def behind_ms(self, now_s: float) -> int:
        """How long the oldest waiting event has waited (0 when none waits)."""
        return int((now_s - self._held[0].committed_s) * 1000) if self._held else 0

    def held_sentences(self) -> set[int]:
        """Ids of the sentences the audience has not seen yet."""
        return {s.id for h in self._held if isinstance(h.message, Caption) for s in h.message.sentences}

    def first_held_seq(self) -> int | None:
        return self._held[0].seq if self._held else None

    def add(self, seq: int, message: ServerMessage, committed_s: float) -> None:
        """Durable event ``seq``, committed at ``committed_s``: held until due (see the module). Events come in seq
        order; one at or below what was already released or held is ignored (a repeat)."""
        last = self._held[-1].seq if self._held else self.released
        if seq <= last:
            return
        message = self._touch_held(message)
        news = isinstance(message, Caption) or (isinstance(message, Translation) and bool(message.sentences))
        due = committed_s + self.delay_s if news else committed_s
        self._held.append(_Held(seq, message, due, committed_s))

    def due(self, now_s: float) -> list[tuple[int, ServerMessage]]:
        """The events to release now, in order (each once)."""
        out: list[tuple[int, ServerMessage]] = []
        while self._held and self._held[0].due_s <= now_s:
            item = self._held.popleft()
            self.released = item.seq
            out.append((item.seq, item.message))
        return out

    def next_due_s(self) -> float | None:
        """When the next event is due (the first waiting one's time), or None."""
        return self._held[0].due_s if self._held else None

    def _touch_held(self, message: ServerMessage) -> ServerMessage:
        """Apply ``message`` to the held captions and translations it touches; returns what is left of it for the
        audience."""
        if isinstance(message, Translation | Correction):
            message = self._touch_translations(message)
        held = {s.id: h for h in self._held if isinstance(h.message, Caption) for s in h.message.sentences}
        if not held:
            return message
        if isinstance(message, Correction):
            taken: set[int] = set()
            after: tuple[_Held, int] | None = None  # the held sentence a split's new part follows
            for sentence in message.sentences:
                if sentence.id in held:
                    _replace(held[sentence.id], sentence.id, [sentence])
                    after = (held[sentence.id], sentence.id)
                elif after is not None:  # a split of a held sentence: its new part is held with it
                    _replace(after[0], after[1], None, add=sentence)
                    after = (after[0], sentence.id)
                else:
                    continue
                taken.add(sentence.id)
            for sid in message.deleted:
                if sid in held:
                    _replace(held[sid], sid, [])
                    taken.add(sid)
            return dataclasses.replace(
                message,
                sentences=tuple(s for s in message.sentences if s.id not in taken),
                deleted=tuple(i for i in message.deleted if i not in taken),
            )
        if isinstance(message, Speakers):
            for sid, spk in message.relabel.items():
                if sid in held:
                    _update(held[sid], sid, spk=spk)
            return dataclasses.replace(message, relabel={k: v for k, v in message.relabel.items() if k not in held})
        if isinstance(message, WordTimes) and message.id in held:
            _update(held[message.id], message.id, words=message.words)
        return message

    def _touch_translations(self, message: Translation | Correction) -> Translation | Correction:
        """A re-translation replaces the held translation of its sentences (same language); a correction's removed
        sentences leave the held translations. Returns what is left of ``message``."""
        langs = [h for h in self._held if isinstance(h.message, Translation)]
        if not langs:
            return message
        if isinstance(message, Correction):
            gone = set(message.deleted)
            for h in langs:
                assert isinstance(h.message, Translation)
                h.message = dataclasses.replace(
                    h.message, sentences=tuple(s for s in h.message.sentences if s.id not in gone)
                )
            return message
        taken: set[int] = set()
        for h in langs:
            old = h.message
            assert isinstance(old, Translation)
            if old.lang != message.lang:
                continue
            newer = {s.id: s for s in message.sentences if s.id in {o.id for o in old.sentences}}
            if newer:
                missing = {i for i in old.missing if i not in newer} | {i for i in message.missing if i in newer}
                h.message = dataclasses.replace(
                    old, sentences=tuple(newer.get(o.id, o) for o in old.sentences), missing=tuple(sorted(missing))
                )
                taken |= newer.keys()
        return dataclasses.replace(
            message,
            sentences=tuple(s for s in message.sentences if s.id not in taken),
            missing=tuple(i for i in message.missing if i not in taken),
        )


def empty(message: ServerMessage) -> bool:
    """A correction or relabel with nothing left in it for the audience (``Holdback`` took it into held captions):
    it goes as its seq alone."""
    if isinstance(message, Correction):
        return not message.sentences and not message.deleted and not message.names
    if isinstance(message, Translation):
        return not message.sentences
    return isinstance(message, Speakers) and not message.relabel


def _replace(item: _Held, sid: int, by: list[Sentence] | None, add: Sentence | None = None) -> None:
    """Held caption ``item`` with sentence ``sid`` replaced by ``by`` (``[]``: removed; None: kept), and ``add``
    (a split's new part) right after it."""
    assert isinstance(item.message, Caption)
    out: list[Sentence] = []
    for s in item.message.sentences:
        if s.id != sid:
            out.append(s)
            continue
        out += [s] if by is None else by
        if add is not None:
            out.append(add)
    item.message = dataclasses.replace(item.message, sentences=out)


def _update(item: _Held, sid: int, **changes: object) -> None:
    assert isinstance(item.message, Caption)
    item.message = dataclasses.replace(
        item.message,
        sentences=[
            dataclasses.replace(s, **changes) if s.id == sid else s  # type: ignore[arg-type]
            for s in item.message.sentences
        ],
    )
