"""Durable room events the store has not taken yet (a full disk), and how read paths add them to what they read
from the store: a room's journal keeps them in order (``Room.unsaved``, ``app.rooms.journal``) until the store takes
writes again. ``ReadPath`` is the room's side of it: every reader of a room's durable state goes through it."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from engine.protocol import Caption, Correction, ServerMessage

from .audience import Audience
from .store.base import (
    Appended,
    Edits,
    Retimed,
    RoomEvent,
    SentenceRecord,
    Snapshot,
    StoreError,
    TimedEvent,
    TranscriptStore,
    merged_names,
    reading_order,
)

log = logging.getLogger(__name__)

UNSAVED_MAX = 20_000  # durable events a room keeps in memory while the store refuses writes (~300 B each)


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


class ReadPath:
    """A room's durable state as it is now: the store's events and sentences with what it has not taken yet.

    Each read takes the unsaved events *before* it reads the store: an event written while the read runs is then in
    one or the other, never in neither."""

    id: str
    store: TranscriptStore
    audience: Audience

    @property
    def unsaved(self) -> list[NumberedEvent]:
        """The events the store has not taken yet, oldest first (the room's)."""
        raise NotImplementedError

    async def read_snapshot(self, deleted: bool = False) -> Snapshot:
        """Every sentence as it is now (``deleted``: deleted ones too, marked), with the speaker names, as of the
        newest event stored or kept unsaved. Raises ``StoreError``."""
        pending = list(self.unsaved)
        return snapshot_with(await self.store.snapshot(self.id, deleted=deleted), pending)

    async def read_released(self) -> Snapshot:
        """What the room's audience has been given: every sentence in its last version, deleted ones left out, and in
        a room with a delay only those released (``Audience.view``), judged by what this front end holds back *and*
        by the store's commit times, so that a room read without loading it (file reads load nothing), or a caption
        another front end committed that has not reached this one yet, shows nothing early. Raises ``StoreError``."""
        snapshot = await self.read_snapshot()
        delay_s = self.audience.delay_s
        if not delay_s:
            return snapshot
        now_ms = int(time.time() * 1000)
        # Read after the snapshot: a caption committed between the two reads is among these, never only in the
        # snapshot.
        recent = await self.store.timed_events(self.id, since_ms=now_ms - math.ceil(delay_s * 1000), kind="caption")
        return self.audience.view(snapshot, recent, now_ms / 1000)

    async def read_events_after(self, after_seq: int) -> list[tuple[int, ServerMessage]]:
        """The durable events after ``after_seq``, in seq order: the stored ones, then those kept unsaved. Raises
        ``StoreError``."""
        pending = list(self.unsaved)
        return events_with(await self.store.events_after(self.id, after_seq), pending, after_seq)

    async def read_newest_seq(self) -> int:
        """The seq of the newest event stored (by any front end) or kept unsaved. Raises ``StoreError``."""
        pending = list(self.unsaved)
        return max((await self.store.counters(self.id)).last_seq, pending[-1].seq if pending else 0)

    async def read_commit_times(self, since_ms: int = 0) -> dict[int, int]:
        """When each sentence locked by a caption committed at or after ``since_ms`` was committed, by sentence id
        (both in ms since the Unix epoch): the store's commit times, which are the same on every front end, and now
        for a sentence the store has not taken yet. Raises ``StoreError``."""
        pending = list(self.unsaved)
        events = await self.store.timed_events(self.id, since_ms=since_ms, kind="caption")
        committed: dict[int, int] = {}
        for event in events:
            if isinstance(event.message, Caption):
                for s in event.message.sentences:
                    committed[s.id] = event.created_ms
        now_ms = int(time.time() * 1000)
        for numbered in pending:
            if isinstance(numbered.body, Caption):
                for r in numbered.records:
                    committed.setdefault(r.id, now_ms)
        return committed

    async def read_corrections(self) -> list[TimedEvent]:
        """Every ``correction`` event with its commit time (ms since the Unix epoch), in seq order: the stored
        ones, then those the store has not taken yet (committed: now). Raises ``StoreError``."""
        pending = list(self.unsaved)
        events = await self.store.timed_events(self.id, kind="correction")
        stored = events[-1].seq if events else 0
        now_ms = int(time.time() * 1000)
        return events + [
            TimedEvent(e.seq, now_ms, e.body) for e in pending if e.seq > stored and isinstance(e.body, Correction)
        ]

    async def read_sentences(self, ids: Collection[int]) -> dict[int, SentenceRecord]:
        """Sentences ``ids`` as they are now, by id (those the room has and did not delete); what this costs is
        theirs, not the room's. Raises ``StoreError``."""
        pending = list(self.unsaved)
        snapshot = snapshot_with(await self.store.snapshot(self.id, ids=ids), pending)
        return {s.id: s for s in snapshot.sentences if s.id in ids}

    async def read_sentence(self, sentence_id: int) -> SentenceRecord | None:
        """Sentence ``sentence_id`` as it is now; None when the room has none (or it was deleted). Raises
        ``StoreError``."""
        return (await self.read_sentences({sentence_id})).get(sentence_id)

    async def sentences_now(self, ids: Collection[int]) -> dict[int, SentenceRecord]:
        """``read_sentences`` for a late update, which goes on when the store fails: then it is what the unsaved
        events alone say (a sentence they do not hold is left out)."""
        try:
            return await self.read_sentences(ids)
        except StoreError as exc:
            log.warning("room %s: could not read sentences %s: %s", self.id, sorted(ids), exc)
            return {s.id: s for s in snapshot_with(Snapshot(0, []), list(self.unsaved)).sentences if s.id in ids}


def keep(pending: list[NumberedEvent], event: NumberedEvent, room_id: str) -> None:
    """Add ``event`` to room ``room_id``'s ``pending`` events, the oldest dropped past ``UNSAVED_MAX`` (memory is
    bounded; what goes is lost)."""
    pending.append(event)
    if len(pending) > UNSAVED_MAX:
        lost = pending.pop(0)
        log.error(
            "room %s: over %d events could not be saved; event %d is dropped from memory",
            room_id,
            UNSAVED_MAX,
            lost.seq,
        )


def events_with(
    events: list[tuple[int, ServerMessage]], pending: list[NumberedEvent], after_seq: int
) -> list[tuple[int, ServerMessage]]:
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
            for sid, changed in event.edits.translations.items():
                if sid in sentences:
                    old = sentences[sid]
                    sentences[sid] = dataclasses.replace(old, translations={**old.translations, **changed})
            names = merged_names(names, event.edits.names)
    return Snapshot(pending[-1].seq, reading_order([sentences[k] for k in sorted(sentences)]), names)


def stored(stored: Appended, draft: NumberedEvent) -> NumberedEvent:
    return NumberedEvent(stored.event.seq, stored.event, stored.records, draft.relabel, draft.retimed, draft.edits)
