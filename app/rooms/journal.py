"""A room's durable events, one at a time in seq order: each is committed to the store, then delivered (see the
package's docstring). What the store refuses (a full disk) is kept in memory in order and written as soon as it takes
writes again (with the next event, or the registry's sweep: ``retry_unsaved``); captions never wait for a disk.

The journal knows nothing of viewers or publishers: the room gives it two callbacks, one that delivers an event (its
in-memory state, its viewers) and one that tells whoever cares that saving stopped or resumed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from engine.protocol import Caption, Correction, Speakers, Vocabulary, WordTimes

from . import unsaved
from .store.base import RoomEvent, RoomRecord, StoreError, TranscriptStore
from .unsaved import NumberedEvent

log = logging.getLogger(__name__)

Deliver = Callable[[int, RoomEvent], None]  # (seq, event): called with ``Journal.lock`` held, in seq order


class Journal:
    """The durable events of room ``record``. ``deliver`` gets every event committed here or read back from the
    store (other front ends'), once, in seq order; ``saving_changed`` runs when the store stops taking writes
    (``store_error`` says why) and when it takes them again (only then, not once per event).

    ``last_seq`` and ``next_sentence``: the room's newest stored seq and the next sentence id, as loaded."""

    def __init__(
        self,
        record: RoomRecord,
        store: TranscriptStore,
        last_seq: int,
        next_sentence: int,
        deliver: Deliver,
        saving_changed: Callable[[], None],
    ) -> None:
        self.record = record  # what ``_flush`` writes if the store does not have the room yet (fields never change)
        self.store = store
        self.seq = last_seq  # the newest event committed (or kept unsaved) *and* delivered here
        self.next_sentence = next_sentence  # a guess (the store gives out ids); used as is only while unsaved
        self.lock = asyncio.Lock()  # one durable event at a time: seq order = commit order = delivery order
        self.unsaved: list[NumberedEvent] = []
        self.store_error = ""  # why the store refused the last write ("" = saving)
        self.record_saved = True  # False for a room made while the store refused writes (``record_refused``)
        self._deliver = deliver
        self._saving_changed = saving_changed

    @property
    def saving(self) -> bool:
        return not self.store_error

    @property
    def needs_saving(self) -> bool:
        """Something the store has not taken yet: the room itself, or events."""
        return bool(self.unsaved) or not self.record_saved

    @property
    def busy(self) -> bool:
        """An event is being committed or read back (``lock`` is held)."""
        return self.lock.locked()

    def record_refused(self, why: str) -> None:
        """The store refused the room itself (``RoomRegistry.create``): it is written before the first event the
        store takes. Says nothing to anyone (nobody has joined a room this new)."""
        self.record_saved = False
        self.store_error = why

    async def commit(self, event: NumberedEvent, deliver: Deliver | None = None) -> NumberedEvent:
        """Write ``event`` after everything unsaved before it, or keep it in memory if the store refuses, then
        deliver it: through ``deliver`` if given (a publisher's caption goes with what is never stored), else the
        room's callback. Events other front ends stored before it are delivered first. The caller holds ``lock``.
        Returns the event as stored (the store's numbers), or as given while the store refuses. Never raises for a
        store failure: captions go on, and ``saving_changed`` tells of it."""
        unsaved.keep(self.unsaved, event, self.record.id)
        stored = await self._flush(event)
        if stored is None:
            stored = event
        elif stored.seq > self.seq + 1:  # other front ends wrote in between: their events are delivered first
            try:
                await self.deliver_stored(before=stored.seq)
            except StoreError as exc:  # viewers here get them when they reconnect (replayed from the store)
                log.warning("room %s: could not read the events before %d: %s", self.record.id, stored.seq, exc)
        self._delivered(stored.seq, stored.body, deliver or self._deliver)
        return stored

    async def retry_unsaved(self) -> None:
        """Write what the store refused before, if it takes writes again (called by the registry's sweep)."""
        if self.needs_saving and not self.lock.locked():
            async with self.lock:
                await self._flush()

    async def deliver_stored(self, before: int | None = None) -> int:
        """Deliver the stored events after ``seq`` (and before ``before``), in order. The caller holds ``lock``.
        Returns how many. Raises ``StoreError``."""
        count = 0
        for seq, message in await self.store.events_after(self.record.id, self.seq):
            if before is not None and seq >= before:
                break
            if isinstance(message, Caption | Speakers | WordTimes | Correction | Vocabulary):
                self._delivered(seq, message, self._deliver)
                count += 1
        return count

    def _delivered(self, seq: int, body: RoomEvent, deliver: Deliver) -> None:
        """Event ``seq`` is the newest here now (every event before it was delivered): hand it on."""
        self.seq = max(self.seq, seq)
        if isinstance(body, Caption | Correction) and body.sentences:
            self.next_sentence = max(self.next_sentence, max(s.id for s in body.sentences) + 1)
        deliver(seq, body)

    async def _flush(self, current: NumberedEvent | None = None) -> NumberedEvent | None:
        """Write everything the store does not have yet, in order; stop at the first refusal. ``saving_changed``
        runs when saving stops or resumes (only then). Returns ``current`` as stored, if written."""
        written: NumberedEvent | None = None
        room_id = self.record.id
        while self.needs_saving:
            try:
                if not self.record_saved:
                    # The room as it was made (its languages and spoken language too), not as its events left it.
                    await self.store.save_room(self.record)
                    self.record_saved = True
                    continue
                e = self.unsaved[0]
                stored = await self.store.append(room_id, e.body, e.records, e.relabel, e.retimed, e.edits)
            except StoreError as exc:
                stopped = not self.store_error
                self.store_error = str(exc)
                if stopped:
                    log.error("room %s: %s; captions are kept in memory until it recovers", room_id, exc)
                    self._saving_changed()
                return None
            self.unsaved.pop(0)
            if e is current:
                written = unsaved.stored(stored, e)
            elif stored.event.seq != e.seq:
                # Delivered while the store refused, numbered here; another front end wrote into the room
                # meanwhile, so the store numbered it anew. Viewers here saw the old numbers; they get the stored
                # ones when they reconnect. (One box, one store: never happens.)
                log.warning(
                    "room %s: event %d was stored as %d (another front end wrote meanwhile)",
                    room_id,
                    e.seq,
                    stored.event.seq,
                )
                self.seq = max(self.seq, stored.event.seq)
        if self.store_error:
            self.store_error = ""
            log.warning("room %s: the transcript store takes writes again; every caption is saved", room_id)
            self._saving_changed()
        return written
