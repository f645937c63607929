"""Durable room events the store has not taken yet (a full disk), and how read paths add them to what they read
from the store: a room keeps them in order (``Room.unsaved``) until the store takes writes again."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from engine.protocol import ServerMessage

from .store.base import (
    Appended,
    Edits,
    Retimed,
    RoomEvent,
    SentenceRecord,
    Snapshot,
    merged_names,
    reading_order,
)


@dataclass
class NumberedEvent:
    """A durable event with what it changes in the store: as stored, or as numbered here while the store could not
    take it yet (kept in order until it can)."""

    seq: int
    body: RoomEvent
    records: list[SentenceRecord] = field(default_factory=list)
    relabel: dict[int, int] = field(default_factory=dict)
    retimed: Retimed = field(default_factory=dict)
    edits: Edits | None = None


def events_with(events: list[tuple[int, ServerMessage]], pending: list[NumberedEvent],
                after_seq: int) -> list[tuple[int, ServerMessage]]:
    """Stored ``events`` (seq > ``after_seq``) followed by the pending ones the store did not have."""
    stored = events[-1][0] if events else after_seq
    return events + [(e.seq, e.body) for e in pending if e.seq > stored]


def snapshot_with(snapshot: Snapshot, pending: list[NumberedEvent]) -> Snapshot:
    """``snapshot`` (read from the store) completed with the ``pending`` events it did not have."""
    pending = [e for e in pending if e.seq > snapshot.seq]
    if not pending:
        return snapshot
    sentences = {s.id: s for s in snapshot.sentences}
    names = snapshot.names
    for event in pending:
        for r in event.records:
            sentences[r.id] = r
        for sid, spk in event.relabel.items():
            if sid in sentences:
                sentences[sid] = dataclasses.replace(sentences[sid], spk=spk)
        for sid, words in event.retimed.items():
            if sid in sentences:
                sentences[sid] = dataclasses.replace(sentences[sid], words=words)
        if event.edits is not None:
            for r in event.edits.replaced:
                old = sentences.get(r.id)
                sentences[r.id] = dataclasses.replace(r, original=(old.original or old.text) if old else None)
            for sid in event.edits.deleted:
                sentences.pop(sid, None)
            names = merged_names(names, event.edits.names)
    return Snapshot(pending[-1].seq, reading_order([sentences[k] for k in sorted(sentences)]), names)



def stored(stored: Appended, draft: NumberedEvent) -> NumberedEvent:
    return NumberedEvent(stored.event.seq, stored.event, stored.records, draft.relabel, draft.retimed, draft.edits)
