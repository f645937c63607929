"""Rooms: named caption channels. Publishers (microphone sessions) post into a room; viewers read it.

A room re-numbers what its publishers send onto one room-level stream:
- sentence ids are room-wide (0, 1, 2, ...), times are milliseconds since the room was created (so sentences of
  successive or concurrent publisher sessions share one timeline), and each sentence names its ``session``;
- every durable event (a ``caption`` carrying newly locked sentences, a ``speakers`` relabel, a ``words`` update
  of a sentence's word times) gets the next room ``seq`` and is committed to the ``TranscriptStore`` *before* any
  viewer sees it; viewers resume from a seq;
- partial text and ``room`` status messages are ephemeral: they repeat the latest seq and are never stored. The
  partial is the open text of every speaking publisher, joined; its ``stable`` count is how many of its leading
  words are settled (a publisher's count, then the next one's only if the first one's text is all settled).

Several front ends on one shared store (PostgreSQL, ``TranscriptStore.shared``) serve the same rooms:
- the store gives out seqs and sentence ids inside each commit, so publishers on different front ends never
  collide; a relabel names room sentence ids, which are the same everywhere;
- each front end delivers every durable event of a room to its viewers in seq order, once: its own commits
  directly, the others' when the store tells of them (``Room.heard``), read back from the table. An event whose seq
  is more than one past what viewers here got first brings in the events between (read from the table), so a late
  or lost notice delays an event, never reorders or drops it;
- what stays per front end, by design: the partial (open) text (a publisher's partials reach the viewers of the
  front end it publishes to), the ``room`` status counts (the publishers and viewers *of this front end*), and
  memory (each front end loads and lets go of rooms itself). A publisher's *stable* words do travel: the room
  announces them through the store, and viewers elsewhere see them as that publisher's open text until its
  sentence locks (``app.room_open``).

Viewers cost no audio and no model work: one small in-memory queue each. A slow viewer's queued partials are
coalesced (newest wins); a viewer that falls ``_VIEWER_QUEUE_MAX`` durable events behind is cut off and resumes
from the store when it reconnects, so the server never buffers without bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from engine import SessionLog
from engine.protocol import Caption, RoomStatus, ServerMessage, Speakers, Word, WordTimes

from .room_open import Announcer, RemoteOpen
from .store import Appended, Retimed, RoomRecord, SentenceRecord, Snapshot, StoreError, TranscriptStore

log = logging.getLogger(__name__)

_VIEWER_QUEUE_MAX = 512
_UNSAVED_MAX = 20_000  # durable events a room keeps in memory while the store refuses writes (~300 B each)
ROOM_ID_BYTES = 12  # 96 random bits, 16 URL-safe characters: not guessable, short enough for a QR code
ROOM_ID_PATTERN = r"[A-Za-z0-9_-]{8,64}"


def new_token(nbytes: int = 16) -> str:
    return secrets.token_urlsafe(nbytes)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison of a presented token with an expected one (``None`` expected = nothing to check)."""
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class ViewerState(StrEnum):
    OPEN = "open"
    ENDED = "ended"  # server shutting down, or the viewer fell too far behind: the stream closes


@dataclass
class RoomStats:
    """Counters over every room of a server (shown by ``/ready``)."""

    viewers_dropped: int = 0  # cut off for falling _VIEWER_QUEUE_MAX durable events behind
    rooms_loaded: int = 0  # rooms brought into memory (created or loaded from the store)
    rooms_evicted: int = 0  # idle rooms that left memory


class Viewer:
    """One subscriber's queue of ``(seq, message, durable)``. ``get`` returns ``None`` once the stream must end.

    ``on_overflow`` runs once if the viewer falls too far behind. A reader that stopped reading is blocked in a
    socket write, not in ``get``, so ending the queue alone would not free it: the stream's handler sets this to
    abort its connection (the client's ``EventSource`` reconnects and resumes from the store)."""

    def __init__(self, on_overflow: Callable[[], None] | None = None) -> None:
        self.state = ViewerState.OPEN
        self.on_overflow = on_overflow
        self._items: deque[tuple[int, ServerMessage, bool]] = deque()
        self._wake = asyncio.Event()

    def put(self, seq: int, message: ServerMessage, durable: bool) -> None:
        if self.state is ViewerState.ENDED:
            return
        last = self._items[-1] if self._items else None
        merged = _coalesced(last[1], message) if last and not last[2] and not durable else None
        if last is not None and merged is not None:
            self._items[-1] = (seq, merged, durable)  # the newer partial or status replaces the unsent one
        elif len(self._items) >= _VIEWER_QUEUE_MAX:
            self.end()  # too far behind: the client resumes from the store on reconnect
            if self.on_overflow is not None:
                self.on_overflow()
            return
        else:
            self._items.append((seq, message, durable))
        self._wake.set()

    def end(self) -> None:
        self.state = ViewerState.ENDED
        self._items.clear()
        self._wake.set()

    async def get(self, timeout_s: float) -> tuple[int, ServerMessage, bool] | None:
        """The next item; raises ``TimeoutError`` after ``timeout_s`` with nothing to send (time for a heartbeat)."""
        while not self._items:
            if self.state is ViewerState.ENDED:
                return None
            self._wake.clear()
            await asyncio.wait_for(self._wake.wait(), timeout_s)
        if self.state is ViewerState.ENDED:
            return None
        return self._items.popleft()


def _coalesced(unsent: ServerMessage, newer: ServerMessage) -> ServerMessage | None:
    """What replaces an unsent partial or status when a newer one comes, or None if both must go. Stable words
    are sent once each: a partial that carries some is replaced only by one carrying the same publisher's next
    words, and takes them along (a message never mixes two publishers' words)."""
    if type(unsent) is not type(newer):
        return None
    if not isinstance(unsent, Caption) or not unsent.stable_words:
        return newer
    if isinstance(newer, Caption) and newer.stable_words and newer.partial_session == unsent.partial_session:
        return dataclasses.replace(newer, stable_words=[*unsent.stable_words, *newer.stable_words])
    return None


@dataclass
class _Event:
    """A durable event: as stored, or as numbered here while the store could not take it yet (kept in order until it
    can)."""

    seq: int
    body: Caption | Speakers | WordTimes
    records: list[SentenceRecord] = field(default_factory=list)
    relabel: dict[int, int] = field(default_factory=dict)
    retimed: Retimed = field(default_factory=dict)


class Room:
    """In-memory side of one room; created by ``RoomRegistry`` from its stored record.

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
        self.unsaved: list[_Event] = []
        self.store_error = ""  # why the store refused the last write ("" = saving)
        self.record_saved = True  # False for a room made while the store refused writes (see RoomRegistry.create)
        self.last_active = time.monotonic()

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
        return expected is None or (token is not None and hmac.compare_digest(token_digest(token), expected))

    # ---- viewers ---------------------------------------------------------------------------------------------
    def subscribe(self, on_overflow: Callable[[], None] | None = None) -> Viewer:
        """Register a viewer. Register *before* reading the store, then skip queued events the read covered.
        ``on_overflow``: see ``Viewer``."""

        def dropped() -> None:
            self.stats.viewers_dropped += 1
            log.info("room %s: a viewer fell %d events behind and was cut off", self.id, _VIEWER_QUEUE_MAX)
            if on_overflow is not None:
                on_overflow()

        viewer = Viewer(on_overflow=dropped)
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

    def status(self) -> RoomStatus:
        return RoomStatus(self.id, bool(self.publishers), len(self.publishers), len(self.viewers), self.saving,
                          seq=self.seq)

    def partial_message(self, latency_ms: int | None = None, stable_words: list[Word] | None = None,
                        words_session: str | None = None) -> Caption:
        """The open text and how many of its leading words are settled; with the voice now speaking when exactly
        one publisher is (several speaking at once have one merged partial, and one label for it would misname
        someone). ``stable_words``: words of publisher ``words_session`` that settled with this update (room
        timeline); ``partial_session`` names that publisher when no voice is named."""
        parts = self.open_parts()
        one = self.publishers.get(parts[0][0]) if len(parts) == 1 else None
        spk = one.partial_spk if one is not None else None
        session = one.session_id if one is not None and spk is not None else words_session if stable_words else None
        return Caption([], " ".join(text for _, text, _ in parts), latency_ms=latency_ms, seq=self.seq,
                       partial_spk=spk, partial_session=session, stable=merged_stable(parts),
                       stable_words=list(stable_words or ()))

    def _broadcast(self, message: ServerMessage, durable: bool) -> None:
        for viewer in list(self.viewers):
            viewer.put(self.seq, message, durable)

    def _broadcast_status(self) -> None:
        self._broadcast(self.status(), durable=False)

    def broadcast_partial(self, latency_ms: int | None = None, stable_words: list[Word] | None = None,
                          words_session: str | None = None) -> None:
        """The open text to every viewer (``partial_message``'s arguments)."""
        self._broadcast(self.partial_message(latency_ms, stable_words, words_session), durable=False)

    # ---- stable open text across front ends (app.room_open) -------------------------------------------------------
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

    # ---- what the store does not have yet (read paths add it to what they read) -----------------------------------
    # Take ``pending()`` *before* reading the store: an event written while the read runs is then in one or the other.
    def pending(self) -> list[_Event]:
        return list(self.unsaved)

    @staticmethod
    def events_with(events: list[tuple[int, ServerMessage]], pending: list[_Event],
                    after_seq: int) -> list[tuple[int, ServerMessage]]:
        """Stored ``events`` (seq > ``after_seq``) followed by the pending ones the store did not have."""
        stored = events[-1][0] if events else after_seq
        return events + [(e.seq, e.body) for e in pending if e.seq > stored]

    @staticmethod
    def snapshot_with(snapshot: Snapshot, pending: list[_Event]) -> Snapshot:
        """``snapshot`` (read from the store) completed with the ``pending`` events it did not have."""
        pending = [e for e in pending if e.seq > snapshot.seq]
        if not pending:
            return snapshot
        sentences = {s.id: s for s in snapshot.sentences}
        for event in pending:
            for r in event.records:
                sentences[r.id] = r
            for sid, spk in event.relabel.items():
                if sid in sentences:
                    sentences[sid] = dataclasses.replace(sentences[sid], spk=spk)
            for sid, words in event.retimed.items():
                if sid in sentences:
                    sentences[sid] = dataclasses.replace(sentences[sid], words=words)
        return Snapshot(pending[-1].seq, [sentences[k] for k in sorted(sentences)])

    # ---- durable events ----------------------------------------------------------------------------------------
    async def commit_sentences(self, make: list[tuple[str, str, int, int, int | None, tuple[Word, ...]]],
                               latency_ms: int | None = None, stable_words: list[Word] | None = None,
                               words_session: str | None = None) -> list[SentenceRecord]:
        """Give each new sentence ``(session, text, start_ms, end_ms, spk, words)`` a room id, commit, then
        broadcast (with ``stable_words`` of ``words_session``: see ``partial_message``; never stored). Returns the
        records (with their room ids)."""
        async with self._lock:
            first = self._next_sentence
            records = [SentenceRecord(first + i, *fields) for i, fields in enumerate(make)]
            seq = self.seq + 1
            event = await self._save(_Event(seq, Caption([r.sentence() for r in records], "", seq=seq), records))
            self._deliver(event.seq, event.body, latency_ms, stable_words, words_session)
            return event.records

    async def commit_relabel(self, relabel: dict[int, int]) -> None:
        """Commit corrected speaker labels (room sentence id -> spk), then broadcast them."""
        if not relabel:
            return
        async with self._lock:
            seq = self.seq + 1
            event = await self._save(_Event(seq, Speakers(dict(relabel), seq=seq), relabel=dict(relabel)))
            self._deliver(event.seq, event.body)

    async def commit_words(self, sentence_id: int, words: tuple[Word, ...], session: str) -> None:
        """Commit better word times for room sentence ``sentence_id`` (room timeline; the aligner's, which follow
        the lock), then broadcast them. They replace the sentence's stored words."""
        async with self._lock:
            seq = self.seq + 1
            body = WordTimes(sentence_id, words, seq=seq, session=session)
            event = await self._save(_Event(seq, body, retimed={sentence_id: words}))
            self._deliver(event.seq, event.body)

    async def retry_unsaved(self) -> None:
        """Write what the store refused before, if it takes writes again (called by the registry's sweep)."""
        if self.needs_saving and not self._lock.locked():
            async with self._lock:
                await self._flush()

    def _deliver(self, seq: int, body: Caption | Speakers | WordTimes, latency_ms: int | None = None,
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
        self._broadcast(body, durable=True)

    async def _save(self, event: _Event) -> _Event:
        """Write ``event`` after everything unsaved before it; keep it in memory if the store refuses. The caller
        holds ``_lock``. Returns the event to broadcast: as stored (the store's numbers), or as given while the store
        refuses. Events other front ends committed before it are broadcast first. Never raises for a store failure:
        captions go on, the publishers are told."""
        self.touch()
        self.unsaved.append(event)
        if len(self.unsaved) > _UNSAVED_MAX:
            lost = self.unsaved.pop(0)
            log.error("room %s: over %d events could not be saved; event %d is dropped from memory",
                      self.id, _UNSAVED_MAX, lost.seq)
        stored = await self._flush(event)
        if stored is None:
            return event
        if stored.seq > self.seq + 1:  # other front ends wrote in between: their events go to viewers first
            try:
                await self._deliver_stored(before=stored.seq)
            except StoreError as exc:  # viewers here get them when they reconnect (replayed from the store)
                log.warning("room %s: could not read the events before %d: %s", self.id, stored.seq, exc)
        return stored

    async def _flush(self, current: _Event | None = None) -> _Event | None:
        """Write everything the store does not have yet, in order; stop at the first refusal. Publishers and
        viewers hear of it when saving stops or resumes (only then). Returns ``current`` as stored, if written."""
        written: _Event | None = None
        while self.needs_saving:
            try:
                if not self.record_saved:
                    r = self.record
                    await self.store.create_room(r.id, r.title, r.viewer_token_sha256, r.created_ms, r.viewer_token)
                    self.record_saved = True
                    continue
                e = self.unsaved[0]
                stored = await self.store.append(self.id, e.body, e.records, e.relabel, e.retimed)
            except StoreError as exc:
                stopped = not self.store_error
                self.store_error = str(exc)
                if stopped:
                    log.error("room %s: %s; captions are kept in memory until it recovers", self.id, exc)
                    self._saving_changed()
                return None
            self.unsaved.pop(0)
            if e is current:
                written = _stored(stored, e)
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
            if isinstance(message, Caption | Speakers | WordTimes):
                self._deliver(seq, message)
                count += 1
        return count

    def _saving_changed(self) -> None:
        for publisher in list(self.publishers.values()):
            publisher.saving_changed(self.saving, self.store_error)
        self._broadcast_status()

    # ---- publishers --------------------------------------------------------------------------------------------
    def join(self, session_id: str) -> RoomPublisher:
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
        self.announcer.close()
        for viewer in list(self.viewers):
            viewer.end()
        self.viewers.clear()


class RoomPublisher:
    """A publisher session's view of its room: maps its session sentence ids and times onto the room's.

    ``publish`` takes every message the session sends to its own client, in order, and returns once anything
    durable in it is committed.
    """

    def __init__(self, room: Room, session_id: str) -> None:
        self.room = room
        self.session_id = session_id
        # Session audio time 0 is (about) now: shift its times onto the room's timeline.
        self.offset_ms = max(0, int(time.time() * 1000) - room.record.created_ms)
        self.partial = ""
        self.stable = 0  # how many leading words of ``partial`` are settled
        self.partial_spk: int | None = None  # the label of the voice speaking ``partial``, when the session knows it
        self.announced = ""  # the stable text the other front ends were last told of
        self._saving: asyncio.Queue[tuple[bool, str]] = asyncio.Queue()  # see ``saving_changes``
        self._ids: dict[int, int] = {}  # session sentence id -> room sentence id
        self._log = SessionLog(log, session_id)

    async def publish(self, message: ServerMessage) -> None:
        if isinstance(message, Caption):
            self.partial = "" if message.is_final else message.partial
            self.stable = min(message.stable, len(self.partial.split())) if self.partial else 0
            self.partial_spk = message.partial_spk if self.partial else None
            settled = [w.shifted(self.offset_ms) for w in message.stable_words]
            new = [s for s in message.sentences if s.id not in self._ids]
            if new:
                records = await self.room.commit_sentences(
                    [(self.session_id, s.text, s.start + self.offset_ms, s.end + self.offset_ms, s.spk,
                      tuple(w.shifted(self.offset_ms) for w in s.words)) for s in new],
                    message.latency_ms, settled, self.session_id)
                for s, r in zip(new, records, strict=True):
                    self._ids[s.id] = r.id
            else:
                self.room.broadcast_partial(message.latency_ms, settled, self.session_id)
            self._announce(bool(new), settled)
        elif isinstance(message, Speakers):
            await self.room.commit_relabel({self._ids[k]: v for k, v in message.relabel.items() if k in self._ids})
        elif isinstance(message, WordTimes):
            sid = self._ids.get(message.id)
            if sid is not None:  # else the room never got its sentence (its publish failed): nothing to time
                await self.room.commit_words(sid, tuple(w.shifted(self.offset_ms) for w in message.words),
                                             self.session_id)

    async def saving_changes(self) -> AsyncIterator[tuple[bool, str]]:
        """``(saving, why not)`` each time the room's store stops or starts taking its writes again, beginning
        with the state at ``join`` when it was not saving. Runs until the caller stops reading."""
        while True:
            yield await self._saving.get()

    def saving_changed(self, saving: bool, why: str) -> None:
        """Called by the room: the store stopped (``why``) or resumed taking writes."""
        self._saving.put_nowait((saving, why))

    def _announce(self, locked: bool, settled: list[Word]) -> None:
        """Tell the other front ends when this publisher's stable text changed (``app.room_open``)."""
        text = " ".join(self.partial.split()[: self.stable])
        if text == self.announced and not settled and not (locked and text):  # (a lock clears what was announced)
            return
        self.announced = text
        if text or not locked:  # text gone because its sentence locked: the lock clears it everywhere by itself
            self.room.announce_open(self.session_id, text, settled)

    def leave(self) -> None:
        self.room.leave(self.session_id)
        self._log.info("left room %s", self.room.id)


class RoomRegistry:
    """The rooms this server knows. A room is in memory while someone uses it (a publisher, a viewer, unsaved
    events) and for ``idle_s`` after; then a sweep every ``sweep_s`` lets it go, and it loads again from the store
    on demand. Reads that only look (status, transcript, QR code) get a detached copy and load nothing."""

    def __init__(self, store: TranscriptStore, idle_s: float = 300.0, sweep_s: float = 30.0) -> None:
        self.store = store
        self.idle_s = idle_s
        self.sweep_s = sweep_s
        self.stats = RoomStats()
        self._rooms: dict[str, Room] = {}
        self._loading = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the sweep, and hear of other front ends' commits and announcements (needs the running event
        loop)."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="room-sweep")
            self.store.watch(self._heard, self._missed, self._announced)

    def _heard(self, room_id: str, seq: int) -> None:
        room = self._rooms.get(room_id)
        if room is not None:  # a room not in memory reads the store when it loads
            room.heard(seq)

    def _missed(self) -> None:
        for room in self._rooms.values():
            room.heard()

    def _announced(self, room_id: str, body: dict[str, Any]) -> None:
        room = self._rooms.get(room_id)
        if room is not None:  # a room not in memory has no viewers here
            room.heard_announcement(body)

    async def create(self, title: str = "", private: bool = False,
                     unsaved_ok: bool = False) -> tuple[Room, str | None]:
        """A new room with an unguessable id; ``private`` rooms get a viewer token (kept with the room: its QR code
        and links carry it). Raises ``StoreError`` if the store cannot take it, unless ``unsaved_ok``: then the
        room lives in memory and is written with its events once the store takes writes again (a microphone
        session's own room: captions must not wait for a disk)."""
        viewer_token = new_token() if private else None
        record = RoomRecord(secrets.token_urlsafe(ROOM_ID_BYTES), int(time.time() * 1000), title[:200],
                            token_digest(viewer_token) if viewer_token else None, viewer_token)
        room = Room(record, self.store, 0, 0, self.stats)
        try:
            await self.store.create_room(record.id, record.title, record.viewer_token_sha256, record.created_ms,
                                         record.viewer_token)
        except StoreError as exc:
            if not unsaved_ok:
                raise
            room.record_saved = False
            room.store_error = str(exc)
            log.error("room %s: %s; kept in memory until the store recovers", room.id, exc)
        self._add(room)
        log.info("room %s created%s", room.id, " (viewer token required)" if private else "")
        return room, viewer_token

    async def get(self, room_id: str, keep: bool = True) -> Room | None:
        """The room, or ``None`` if there is none. ``keep=False`` (a read that only looks): a room not in memory
        comes back detached (never registered, not to be joined or subscribed to), so reads never pin rooms."""
        room = self._rooms.get(room_id)
        if room is not None:
            if keep:
                room.touch()
            return room
        async with self._loading:  # two first requests for one stored room must not build two Room objects
            room = self._rooms.get(room_id)
            if room is None:
                record = await self.store.room(room_id)
                if record is None:
                    return None
                last_seq, next_id = await self.store.counters(room_id)
                room = Room(record, self.store, last_seq, next_id, self.stats)
                if keep:
                    self._add(room)
            return room

    def _add(self, room: Room) -> Room:
        self._rooms[room.id] = room
        self.stats.rooms_loaded += 1
        return room

    async def sweep(self) -> int:
        """Let idle rooms go and retry unsaved events; returns how many rooms left memory."""
        now = time.monotonic()
        for room in [r for r in self._rooms.values() if r.needs_saving]:
            await room.retry_unsaved()
        if self.store.shared:  # a safety net under the store's notices: rooms with viewers look once a sweep
            for room in self._rooms.values():
                if room.viewers:
                    room.heard()
                room.expire_open()
        idle = [room_id for room_id, room in self._rooms.items() if room.idle(now, self.idle_s)]
        for room_id in idle:
            del self._rooms[room_id]
        self.stats.rooms_evicted += len(idle)
        return len(idle)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            try:
                await self.sweep()
            except Exception:  # a sweep must never end the sweeping
                log.exception("room sweep failed")

    def snapshot_stats(self) -> dict[str, Any]:
        """Counts for ``/ready`` and ``/metrics``: rooms in memory and their viewers now, totals since start."""
        return {"in_memory": len(self._rooms), "viewers": sum(len(r.viewers) for r in self._rooms.values()),
                "loaded": self.stats.rooms_loaded,
                "evicted": self.stats.rooms_evicted, "viewers_dropped": self.stats.viewers_dropped,
                "unsaved_events": sum(len(r.unsaved) for r in self._rooms.values()),
                "unsaved_rooms": sum(not r.record_saved for r in self._rooms.values())}

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for room in self._rooms.values():
            room.close()


def merged_stable(parts: list[tuple[str, str, int]]) -> int:
    """How many leading words of the joined texts of ``parts`` (``Room.open_parts``) are settled: the first
    part's stable words, plus the next part's only if all of the first is settled, and so on."""
    count = 0
    for _, text, stable in parts:
        words = len(text.split())
        count += min(stable, words)
        if stable < words:
            break
    return count


def _stored(stored: Appended, draft: _Event) -> _Event:
    return _Event(stored.event.seq, stored.event, stored.records, draft.relabel, draft.retimed)
