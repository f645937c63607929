"""One room in memory: its durable events committed in seq order and delivered to its viewers, its publishers'
open text, and what it keeps while the store refuses writes (see the package's docstring)."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.protocol import Caption, Correction, RoomStatus, ServerMessage, Speakers, Vocabulary, Word, WordTimes

from ..auth import token_digest
from . import late, unsaved
from .audience import Audience
from .edits import Change
from .open_text import Announcer, RemoteOpen, open_caption
from .publisher import RoomPublisher
from .store.base import (
    Edits,
    RoomEvent,
    RoomRecord,
    SentenceRecord,
    StoreError,
    TranscriptStore,
    merged_names,
)
from .unsaved import NumberedEvent, ReadPath
from .viewer import VIEWER_QUEUE_MAX, Viewer
from .vocabulary import Corrector

log = logging.getLogger(__name__)

ROOM_ID_PATTERN = r"[A-Za-z0-9_-]{8,64}"


@dataclass
class RoomStats:
    """Counters over every room of a server (shown by ``/ready``)."""

    viewers_dropped: int = 0  # cut off for falling _VIEWER_QUEUE_MAX durable events behind
    rooms_loaded: int = 0  # rooms brought into memory (created or loaded from the store)
    rooms_evicted: int = 0  # idle rooms that left memory
    corrections: int = 0  # editors' corrections committed here (edits, deletions, splits, speaker names)


class Room(ReadPath):
    """In-memory side of one room; created by ``RoomRegistry`` from its stored record. Its durable state is read
    through ``ReadPath``.

    Store failures (a full disk) never hold captions back from viewers: an event the store refuses is broadcast
    all the same, kept in memory in order (``unsaved``), replayed to viewers who (re)connect meanwhile, and written
    as soon as the store takes writes again (the next event, or the registry's sweep). Publishers are told when
    saving stops and when it resumes (``RoomPublisher.saving_changes``)."""

    def __init__(self, record: RoomRecord, store: TranscriptStore, last_seq: int, next_sentence: int,
                 stats: RoomStats | None = None) -> None:
        self.record = record
        self.id = record.id
        self.store = store
        self.stats = stats or RoomStats()
        self.seq = last_seq  # the newest event committed (or kept unsaved) *and* broadcast here
        self._next_sentence = next_sentence  # a guess (the store gives out ids); used as is only while unsaved
        self._lock = asyncio.Lock()  # one durable event at a time: seq order = commit order = broadcast order
        self._heard = last_seq  # the newest seq the store told of (other front ends' commits)
        self._syncing: asyncio.Task[None] | None = None
        self.viewers: set[Viewer] = set()
        self.publishers: dict[str, RoomPublisher] = {}
        self.remote = RemoteOpen()  # stable open text of publishers on other front ends
        self.announcer = Announcer(self.id, store)  # ...and of this front end's, for the others
        self.unsaved: list[NumberedEvent] = []
        self.store_error = ""  # why the store refused the last write ("" = saving)
        self.record_saved = True  # False for a room made while the store refused writes (see RoomRegistry.create)
        self.last_active = time.monotonic()
        self.names = dict(record.names)  # speaker label -> the name editors gave it (kept current by the events)
        self.terms, self.learned = record.terms, record.learned  # the room's vocabulary (likewise)
        self.corrector = Corrector(self.terms, self.learned)  # ... as it rewrites what publishers lock
        self.audience = Audience(record.delay_s, last_seq, self.viewers, self._broadcast_status,
                                 ended=record.ended_ms is not None)

    @property
    def private(self) -> bool:
        return self.record.viewer_token_sha256 is not None

    @property
    def saving(self) -> bool:
        return not self.store_error

    @property
    def needs_saving(self) -> bool:
        """Something the store has not taken yet: the room itself, or events."""
        return bool(self.unsaved) or not self.record_saved

    def idle(self, now: float, idle_s: float) -> bool:
        """Nobody here, nothing unsaved, nothing being written, and no activity for ``idle_s`` seconds."""
        return (not self.viewers and not self.publishers and not self.needs_saving and not self._lock.locked()
                and (self._syncing is None or self._syncing.done()) and now - self.last_active >= idle_s)

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def may_view(self, token: str | None) -> bool:
        expected = self.record.viewer_token_sha256
        return expected is None or self.may_edit(token) or (
            token is not None and hmac.compare_digest(token_digest(token), expected))

    def may_edit(self, token: str | None) -> bool:
        """Whether ``token`` is this room's editor token (the server's token is checked by the caller)."""
        expected = self.record.editor_token_sha256
        return expected is not None and token is not None and hmac.compare_digest(token_digest(token), expected)

    # ---- viewers ---------------------------------------------------------------------------------------------
    def subscribe(self, on_overflow: Callable[[], None] | None = None, editor: bool = False) -> Viewer:
        """Register a viewer. Register *before* reading the store, then skip queued events the read covered.
        ``on_overflow``: see ``Viewer``. ``editor``: it gets everything at once (see ``Audience`` for the rest)."""

        def dropped() -> None:
            self.stats.viewers_dropped += 1
            log.info("room %s: a viewer fell %d events behind and was cut off", self.id, VIEWER_QUEUE_MAX)
            if on_overflow is not None:
                on_overflow()

        viewer = Viewer(on_overflow=dropped, editor=editor)
        self.viewers.add(viewer)
        self.touch()
        self._broadcast_status()
        return viewer

    def unsubscribe(self, viewer: Viewer) -> None:
        self.viewers.discard(viewer)
        viewer.end()
        self.touch()
        self._broadcast_status()

    def open_parts(self) -> list[tuple[str, str, int]]:
        """The text not locked yet, one ``(session, text, stable words)`` per speaking publisher: this front end's
        publishers' partials in the order they joined, then the stable text of publishers on other front ends (all
        of it stable) in the order they started speaking."""
        parts = [(p.session_id, p.partial, p.stable) for p in self.publishers.values() if p.partial]
        return parts + [(session, text, len(text.split())) for session, text in self.remote.texts()]

    def partial(self) -> str:
        """The open text of every speaking publisher, joined (``open_parts``)."""
        return " ".join(text for _, text, _ in self.open_parts())

    def status(self, editor: bool = False) -> RoomStatus:
        """The room's status as its audience sees it, or its editors (``editor``: with the newest seq released)."""
        lag = self.audience.lag()
        return RoomStatus(self.id, bool(self.publishers), len(self.publishers), len(self.viewers), self.saving,
                          seq=self.seq, delay_s=self.audience.delay_s, held=lag.held, behind_ms=lag.behind_ms,
                          released=self.audience.released if editor else None)

    def partial_message(self, latency_ms: int | None = None, stable_words: list[Word] | None = None,
                        words_session: str | None = None) -> Caption:
        """The open text and how many of its leading words are settled (``open_text.open_caption``), with the voice
        now speaking when exactly one publisher is. ``stable_words``: words of publisher ``words_session`` that
        settled with this update (room timeline)."""
        parts = self.open_parts()
        one = self.publishers.get(parts[0][0]) if len(parts) == 1 else None
        return open_caption(parts, one.partial_spk if one is not None else None, self.seq, latency_ms, stable_words,
                            words_session)

    def _broadcast(self, message: ServerMessage, durable: bool) -> None:
        """To the editors now; to the audience now or after the room's delay (``Audience``)."""
        for viewer in list(self.viewers):
            if viewer.editor:
                viewer.put(self.seq, message, durable)
        self.audience.put(self.seq, message, durable)

    def _broadcast_status(self) -> None:
        audience = self.status()
        editors = self.status(editor=True) if self.audience.delay_s else audience  # (the same without a delay)
        for viewer in list(self.viewers):
            viewer.put(self.seq, editors if viewer.editor else audience, False)

    def broadcast_partial(self, latency_ms: int | None = None, stable_words: list[Word] | None = None,
                          words_session: str | None = None) -> None:
        """The open text to every viewer (``partial_message``'s arguments)."""
        self._broadcast(self.partial_message(latency_ms, stable_words, words_session), durable=False)

    # ---- stable open text across front ends (app.rooms.open_text) ------------------------------------------------
    def announce_open(self, session: str, text: str, words: list[Word]) -> None:
        """Tell the other front ends that this front end's publisher ``session`` has ``text`` settled ("": none
        any more), ``words`` newly (room timeline)."""
        self.announcer.post(session, self.seq, text, words)

    def heard_announcement(self, body: dict[str, Any]) -> None:
        """Another front end announced a publisher's stable open text: show it to the viewers here."""
        try:
            changed = self.remote.heard(body)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("room %s: ignoring a malformed announcement (%r)", self.id, exc)
            return
        if changed is not None:
            session, words = changed
            self.broadcast_partial(None, words, session)

    def expire_open(self) -> None:
        """Drop other front ends' open text that nobody updated for a long time (that front end went away)."""
        if self.remote.expire():
            self.broadcast_partial()

    # ---- durable events ----------------------------------------------------------------------------------------
    async def commit_sentences(self, drafts: list[SentenceRecord], latency_ms: int | None = None,
                               stable_words: list[Word] | None = None,
                               words_session: str | None = None) -> list[SentenceRecord]:
        """Give each new sentence of ``drafts`` a room id (their own ``id`` is ignored), commit, then broadcast
        (with ``stable_words`` of ``words_session``: see ``partial_message``; never stored). Returns the records
        (with their room ids)."""
        async with self._lock:
            first = self._next_sentence
            records = [dataclasses.replace(d, id=first + i) for i, d in enumerate(drafts)]
            seq = self.seq + 1
            event = await self._save(NumberedEvent(seq, Caption([r.sentence() for r in records], "", seq=seq), records))
            self._deliver(event.seq, event.body, latency_ms, stable_words, words_session)
            return event.records

    async def commit_relabel(self, relabel: dict[int, int],
                             given: Mapping[int, int | None] | None = None) -> list[SentenceRecord]:
        """Commit corrected speaker labels (room sentence id -> spk), then broadcast them. ``given``: the labels
        the publishing session gave those sentences before; a sentence whose label is not that any more keeps the
        label an editor set (``late``). Returns those sentences, as they are."""
        kept: list[SentenceRecord] = []
        async with self._lock:
            if given is not None and relabel:
                relabel, kept = late.relabel_now(relabel, given, await self.sentences_now(relabel.keys()))
            if relabel:
                seq = self.seq + 1
                event = await self._save(NumberedEvent(seq, Speakers(dict(relabel), seq=seq), relabel=dict(relabel)))
                self._deliver(event.seq, event.body)
        return kept

    async def commit_words(self, sentence_id: int, words: tuple[Word, ...], session: str) -> SentenceRecord | None:
        """Commit the aligner's word times for room sentence ``sentence_id`` (room timeline; they follow the lock)
        as they apply to the sentence now (``late``: after a correction, its words retimed), then broadcast them.
        They replace its stored words. Returns the sentence with them; None when it has none (deleted, or not
        readable while the store fails)."""
        async with self._lock:
            record = (await self.sentences_now({sentence_id})).get(sentence_id)
            if record is None:
                return None
            record = dataclasses.replace(record, words=await late.words_now(record, words))
            seq = self.seq + 1
            body = WordTimes(sentence_id, record.words, seq=seq, session=session)
            event = await self._save(NumberedEvent(seq, body, retimed={sentence_id: record.words}))
            self._deliver(event.seq, event.body)
            return record

    async def commit_edit(self, sentence_id: int, edit: Callable[[SentenceRecord], Awaitable[Change]],
                          editor: str) -> tuple[SentenceRecord, NumberedEvent] | None:
        """Commit what ``edit`` makes of sentence ``sentence_id`` as it is now (read and changed inside the lock,
        so no late update slips in between), as ``commit_correction``. Returns the sentence as it was and the event
        as stored; None when the room has no such sentence (or it was deleted). Raises ``StoreError`` when it cannot
        be read, and what ``edit`` raises."""
        async with self._lock:
            record = await self.read_sentence(sentence_id)
            return None if record is None else (record, await self._correct(await edit(record), editor))

    async def commit_correction(self, change: Change, editor: str) -> NumberedEvent:
        """Commit an editor's correction (``Change``: the ids of a split's new sentences are the store's), then
        broadcast it. Returns the event as stored."""
        async with self._lock:
            return await self._correct(change, editor)

    async def _correct(self, change: Change, editor: str) -> NumberedEvent:
        """``commit_correction`` with ``_lock`` held."""
        seq = self.seq + 1
        new = [dataclasses.replace(r, id=self._next_sentence + i) for i, r in enumerate(change.new)]
        body = Correction(tuple(r.sentence() for r in [*change.replaced, *new]), change.deleted, dict(change.names),
                          editor, seq=seq)
        event = await self._save(NumberedEvent(seq, body, new, edits=Edits(change.replaced, change.deleted,
                                                                     dict(change.names))))
        self._deliver(event.seq, event.body)
        self.stats.corrections += 1
        return event

    async def commit_vocabulary(self, terms: tuple[str, ...], learned: tuple[str, ...]) -> int:
        """Commit the room's vocabulary (``app.rooms.vocabulary``: what publishers lock from now on is spelt by it),
        then broadcast it (editors). Returns the event's seq."""
        async with self._lock:
            seq = self.seq + 1
            event = await self._save(NumberedEvent(seq, Vocabulary(terms, learned, seq=seq),
                                            edits=Edits(vocabulary=(terms, learned))))
            self._deliver(event.seq, event.body)
            return event.seq

    async def retry_unsaved(self) -> None:
        """Write what the store refused before, if it takes writes again (called by the registry's sweep)."""
        if self.needs_saving and not self._lock.locked():
            async with self._lock:
                await self._flush()

    def _deliver(self, seq: int, body: RoomEvent, latency_ms: int | None = None,
                 stable_words: list[Word] | None = None, words_session: str | None = None) -> None:
        """Broadcast durable event ``seq`` (the caller holds ``_lock``, and every event before it was delivered).
        Viewers get captions with the room's live partial text and its stable count (never stored), the
        publisher's latency and its newly settled words."""
        self.seq = max(self.seq, seq)
        if isinstance(body, Caption):
            if body.sentences:
                self._next_sentence = max(self._next_sentence, max(s.id for s in body.sentences) + 1)
            for session in {s.session for s in body.sentences if s.session is not None}:
                self.remote.locked(session, seq)  # the locked sentence takes the place of its announced text
            live = self.partial_message(latency_ms, stable_words, words_session)
            body = dataclasses.replace(body, partial=live.partial, latency_ms=latency_ms, partial_spk=live.partial_spk,
                                       partial_session=live.partial_session, stable=live.stable,
                                       stable_words=live.stable_words)
        elif isinstance(body, Correction):
            self.names = merged_names(self.names, body.names)
            if body.sentences:
                self._next_sentence = max(self._next_sentence, max(s.id for s in body.sentences) + 1)
            for publisher in list(self.publishers.values()):
                publisher.corrected(body)
        elif isinstance(body, Vocabulary):
            self.terms, self.learned = body.terms, body.learned
            self.corrector = Corrector(self.terms, self.learned)
        self._broadcast(body, durable=True)

    async def _save(self, event: NumberedEvent) -> NumberedEvent:
        """Write ``event`` after everything unsaved before it; keep it in memory if the store refuses. The caller
        holds ``_lock``. Returns the event to broadcast: as stored (the store's numbers), or as given while the store
        refuses. Events other front ends committed before it are broadcast first. Never raises for a store failure:
        captions go on, the publishers are told."""
        self.touch()
        unsaved.keep(self.unsaved, event, self.id)
        stored = await self._flush(event)
        if stored is None:
            return event
        if stored.seq > self.seq + 1:  # other front ends wrote in between: their events go to viewers first
            try:
                await self._deliver_stored(before=stored.seq)
            except StoreError as exc:  # viewers here get them when they reconnect (replayed from the store)
                log.warning("room %s: could not read the events before %d: %s", self.id, stored.seq, exc)
        return stored

    async def _flush(self, current: NumberedEvent | None = None) -> NumberedEvent | None:
        """Write everything the store does not have yet, in order; stop at the first refusal. Publishers and
        viewers hear of it when saving stops or resumes (only then). Returns ``current`` as stored, if written."""
        written: NumberedEvent | None = None
        while self.needs_saving:
            try:
                if not self.record_saved:
                    r = self.record
                    await self.store.create_room(r.id, r.title, r.viewer_token_sha256, r.created_ms, r.viewer_token,
                                                 r.editor_token_sha256, r.delay_s)
                    self.record_saved = True
                    continue
                e = self.unsaved[0]
                stored = await self.store.append(self.id, e.body, e.records, e.relabel, e.retimed, e.edits)
            except StoreError as exc:
                stopped = not self.store_error
                self.store_error = str(exc)
                if stopped:
                    log.error("room %s: %s; captions are kept in memory until it recovers", self.id, exc)
                    self._saving_changed()
                return None
            self.unsaved.pop(0)
            if e is current:
                written = unsaved.stored(stored, e)
            elif stored.event.seq != e.seq:
                # Broadcast while the store refused, numbered here; another front end wrote into the room
                # meanwhile, so the store numbered it anew. Viewers here saw the old numbers; they get the stored
                # ones when they reconnect. (One box, one store: never happens.)
                log.warning("room %s: event %d was stored as %d (another front end wrote meanwhile)", self.id,
                            e.seq, stored.event.seq)
                self.seq = max(self.seq, stored.event.seq)
        if self.store_error:
            self.store_error = ""
            log.warning("room %s: the transcript store takes writes again; every caption is saved", self.id)
            self._saving_changed()
        return written

    # ---- events other front ends commit (shared stores) ------------------------------------------------------------
    def heard(self, seq: int | None = None) -> None:
        """The store committed event ``seq`` of this room (``None``: maybe something; look). Viewers here get
        every event up to it, in order, read from the store in the background."""
        if seq is not None and seq <= self.seq:
            return  # delivered already (this front end's own commit, or read with an earlier notice)
        self._heard = max(self._heard, self.seq + 1 if seq is None else seq)
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.create_task(self._sync(), name=f"room-sync-{self.id}")

    async def _sync(self) -> None:
        try:
            async with self._lock:
                # While the store refuses this front end's writes, its seqs here are its own guesses: nothing to
                # read them against (the next commit that gets through brings the others' events in).
                while self._heard > self.seq and not self.unsaved:
                    if not await self._deliver_stored():
                        self._heard = self.seq  # nothing newer stored (a look that found nothing)
        except StoreError as exc:  # the next notice, a viewer's catch-up or the sweep tries again
            log.warning("room %s: could not read new events: %s", self.id, exc)

    async def _deliver_stored(self, before: int | None = None) -> int:
        """Broadcast the stored events after ``self.seq`` (and before ``before``), in order. The caller holds
        ``_lock``. Returns how many."""
        count = 0
        for seq, message in await self.store.events_after(self.id, self.seq):
            if before is not None and seq >= before:
                break
            if isinstance(message, Caption | Speakers | WordTimes | Correction | Vocabulary):
                self._deliver(seq, message)
                count += 1
        return count

    def _saving_changed(self) -> None:
        for publisher in list(self.publishers.values()):
            publisher.saving_changed(self.saving, self.store_error)
        self._broadcast_status()

    # ---- publishers --------------------------------------------------------------------------------------------
    def join(self, session_id: str) -> RoomPublisher:
        """A publisher session joins. Its transport hears of corrections of its sentences through
        ``RoomPublisher.watch``."""
        publisher = RoomPublisher(self, session_id)
        self.publishers[session_id] = publisher
        if not self.saving:
            publisher.saving_changed(False, self.store_error)
        self.touch()
        self._broadcast_status()
        return publisher

    def leave(self, session_id: str) -> None:
        publisher = self.publishers.pop(session_id, None)
        if publisher is not None:
            if publisher.announced:  # it left mid-sentence: the other front ends stop showing its text
                self.announce_open(session_id, "", [])
            self.touch()
            self.broadcast_partial()
            self._broadcast_status()

    def close(self) -> None:
        """Server shutdown: end every viewer's stream (clients reconnect and resume from the store)."""
        if self._syncing is not None:
            self._syncing.cancel()
        self.audience.close()  # what it holds is stored: a restart releases it when due
        self.announcer.close()
        for viewer in list(self.viewers):
            viewer.end()
        self.viewers.clear()

