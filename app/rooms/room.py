"""One room in memory: the composition of its parts (see the package's docstring). The room checks who may view
and edit it, keeps its viewers and publishers, builds the durable events its publishers and editors commit and applies
each delivered event to what it holds in memory before its viewers get it. Its parts: ``Journal`` (the durable events
in seq order, and what the store has not taken yet), ``Sync`` (other front ends' events), ``Speaking`` (the open
text), ``Audience`` (who gets what when), and ``ReadPath`` (how its durable state is read)."""

from __future__ import annotations

import dataclasses
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from engine import CrossTalk, Microphone, normalise_language, primary
from engine.protocol import (
    Caption,
    Correction,
    Languages,
    RoomStatus,
    ServerMessage,
    Speakers,
    Translation,
    Vocabulary,
    Word,
    WordTimes,
)

from ..auth import token_digest
from . import late
from .audience import Audience
from .edits import Change
from .journal import Journal
from .names import PUBLISHER_EDITOR, RoomLabels, labels_in
from .open_text import RemoteOpen
from .publisher import RoomPublisher
from .speaking import Speaking
from .store.base import Edits, RoomEvent, RoomRecord, SentenceRecord, TranscriptStore, merged_names
from .sync import Sync
from .translating import MAX_ROOM_LANGUAGES, RoomTranslating
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


class SharesMicrophone(Protocol):
    """A live session whose microphone a room arbitrates (``engine.Session``)."""

    def share_room(self, microphone: Microphone) -> None: ...


class Room(ReadPath):
    """In-memory side of one room; created by ``RoomRegistry`` from its stored record. Its durable state is read
    through ``ReadPath``.

    Store failures (a full disk) never hold captions back from viewers: an event the store refuses is broadcast
    all the same and kept (``Journal``), and replayed to viewers who (re)connect meanwhile (``ReadPath``). Publishers
    are told when saving stops and when it resumes (``RoomPublisher.saving_changes``)."""

    def __init__(
        self,
        record: RoomRecord,
        store: TranscriptStore,
        last_seq: int,
        next_sentence: int,
        stats: RoomStats | None = None,
        next_label: int = 0,
    ) -> None:
        self.record = record
        self.id = record.id
        self.store = store  # what ``ReadPath`` reads; the journal writes to the same one
        self.stats = stats or RoomStats()
        self.journal = Journal(record, store, last_seq, next_sentence, self._deliver, self._saving_changed)
        self.sync = Sync(self.journal)
        self.viewers: set[Viewer] = set()
        self.publishers: dict[str, RoomPublisher] = {}
        self.crosstalk = CrossTalk()  # which of its microphones each voice belongs to (``share_microphone``)
        self.speaking = Speaking(
            self.id, store, self.publishers, lambda: self.seq, lambda message: self._broadcast(message, durable=False)
        )
        self.last_active = time.monotonic()
        self.names = dict(record.names)  # speaker label -> the name editors gave it (kept current by the events)
        self.labels = RoomLabels(next_label)  # the next free speaker label (``app.rooms.names``; likewise)
        self.terms, self.learned = record.terms, record.learned  # the room's vocabulary (likewise)
        self.corrector = Corrector(self.terms, self.learned)  # ... as it rewrites what publishers lock
        self.language = record.language  # what its sessions speak (a Whisper language code; never changes)
        self.languages = record.languages  # what its sentences are translated into (kept current by the events)
        self.translating: RoomTranslating | None = None  # set by the registry where translation engines run
        # lang -> the sentences whose text in it is the words said (``commit_original``: this front end's or
        # another's), since the room came into memory
        self._originals: dict[str, set[int]] = {}
        self.audience = Audience(
            record.delay_s, last_seq, self.viewers, self._broadcast_status, ended=record.ended_ms is not None
        )

    # The parts' state as other modules and the tests read it, on the room (``Journal``, ``Speaking``).
    @property
    def seq(self) -> int:
        """The newest event committed (or kept unsaved) *and* broadcast here."""
        return self.journal.seq

    @property
    def unsaved(self) -> list[NumberedEvent]:
        return self.journal.unsaved

    @property
    def saving(self) -> bool:
        return self.journal.saving

    @property
    def needs_saving(self) -> bool:
        return self.journal.needs_saving

    @property
    def remote(self) -> RemoteOpen:
        return self.speaking.remote

    @property
    def private(self) -> bool:
        return self.record.viewer_token_sha256 is not None

    def idle(self, now: float, idle_s: float) -> bool:
        """Nobody here, nothing unsaved, nothing being written or read, and no activity for ``idle_s`` seconds."""
        return (
            not self.viewers
            and not self.publishers
            and not self.needs_saving
            and not self.journal.busy
            and not self.sync.busy
            and not (self.translating is not None and self.translating.busy)
            and now - self.last_active >= idle_s
        )

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def may_view(self, token: str | None) -> bool:
        expected = self.record.viewer_token_sha256
        return (
            expected is None
            or self.may_edit(token)
            or (token is not None and hmac.compare_digest(token_digest(token), expected))
        )

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

    def status(self, editor: bool = False) -> RoomStatus:
        """The room's status as its audience sees it, or its editors (``editor``: with the newest seq released)."""
        lag = self.audience.lag()
        return RoomStatus(
            self.id,
            bool(self.publishers),
            len(self.publishers),
            len(self.viewers),
            self.saving,
            seq=self.seq,
            delay_s=self.audience.delay_s,
            held=lag.held,
            behind_ms=lag.behind_ms,
            released=self.audience.released if editor else None,
        )

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

    # ---- open text (``Speaking``) ----------------------------------------------------------------------------
    def partial(self) -> str:
        return self.speaking.partial()

    def partial_message(
        self, latency_ms: int | None = None, stable_words: list[Word] | None = None, words_session: str | None = None
    ) -> Caption:
        return self.speaking.partial_message(latency_ms, stable_words, words_session)

    def broadcast_partial(
        self, latency_ms: int | None = None, stable_words: list[Word] | None = None, words_session: str | None = None
    ) -> None:
        self.speaking.broadcast_partial(latency_ms, stable_words, words_session)

    def announce_open(self, session: str, text: str, words: list[Word]) -> None:
        self.speaking.announce_open(session, text, words)

    def heard_announcement(self, body: dict[str, Any]) -> None:
        self.speaking.heard_announcement(body)

    def expire_open(self) -> None:
        self.speaking.expire_open()

    # ---- durable events ----------------------------------------------------------------------------------------
    async def commit_sentences(
        self,
        drafts: list[SentenceRecord],
        latency_ms: int | None = None,
        stable_words: list[Word] | None = None,
        words_session: str | None = None,
    ) -> list[SentenceRecord]:
        """Give each new sentence of ``drafts`` a room id (their own ``id`` is ignored), commit, then broadcast
        (with ``stable_words`` of ``words_session``: see ``partial_message``; never stored). Returns the records
        (with their room ids)."""
        async with self.journal.lock:
            first = self.journal.next_sentence
            records = [dataclasses.replace(d, id=first + i) for i, d in enumerate(drafts)]
            seq = self.seq + 1
            body = Caption([r.sentence() for r in records], "", seq=seq)
            event = await self._commit(NumberedEvent(seq, body, records), latency_ms, stable_words, words_session)
        if self.translating is not None:  # after the broadcast: translation never holds a caption back
            self.translating.locked(event.records)
        return event.records

    async def commit_relabel(
        self, relabel: dict[int, int], given: Mapping[int, int | None] | None = None
    ) -> list[SentenceRecord]:
        """Commit corrected speaker labels (room sentence id -> spk), then broadcast them. ``given``: the labels
        the publishing session gave those sentences before; a sentence whose label is not that any more keeps the
        label an editor set (``late``). Returns those sentences, as they are."""
        kept: list[SentenceRecord] = []
        async with self.journal.lock:
            if given is not None and relabel:
                relabel, kept = late.relabel_now(relabel, given, await self.sentences_now(relabel.keys()))
            if relabel:
                seq = self.seq + 1
                await self._commit(NumberedEvent(seq, Speakers(dict(relabel), seq=seq), relabel=dict(relabel)))
        return kept

    async def commit_words(self, sentence_id: int, words: tuple[Word, ...], session: str) -> SentenceRecord | None:
        """Commit the aligner's word times for room sentence ``sentence_id`` (room timeline; they follow the lock)
        as they apply to the sentence now (``late``: after a correction, its words retimed), then broadcast them.
        They replace its stored words. Returns the sentence with them; None when it has none (deleted, or not
        readable while the store fails)."""
        async with self.journal.lock:
            record = (await self.sentences_now({sentence_id})).get(sentence_id)
            if record is None:
                return None
            record = dataclasses.replace(record, words=await late.words_now(record, words))
            seq = self.seq + 1
            body = WordTimes(sentence_id, record.words, seq=seq, session=session)
            await self._commit(NumberedEvent(seq, body, retimed={sentence_id: record.words}))
            return record

    async def commit_edit(
        self, sentence_id: int, edit: Callable[[SentenceRecord], Awaitable[Change]], editor: str
    ) -> tuple[SentenceRecord, NumberedEvent] | None:
        """Commit what ``edit`` makes of sentence ``sentence_id`` as it is now (read and changed inside the lock,
        so no late update slips in between), as ``commit_correction``. Returns the sentence as it was and the event
        as stored; None when the room has no such sentence (or it was deleted). Raises ``StoreError`` when it cannot
        be read, and what ``edit`` raises."""
        async with self.journal.lock:
            record = await self.read_sentence(sentence_id)
            return None if record is None else (record, await self._correct(await edit(record), editor))

    async def commit_correction(self, change: Change, editor: str) -> NumberedEvent:
        """Commit an editor's correction (``Change``: the ids of a split's new sentences are the store's), then
        broadcast it. Returns the event as stored."""
        async with self.journal.lock:
            return await self._correct(change, editor)

    async def commit_translation(
        self,
        lang: str,
        texts: Mapping[int, str],
        sources: Mapping[int, str] | None = None,
        update: bool = False,
        missing: Collection[int] = (),
        editor: str = "",
        original: bool = False,
    ) -> NumberedEvent | None:
        """Commit sentences' translations into room language ``lang`` (id -> text), then broadcast them (see
        ``protocol.Translation``). ``sources``: id -> the source text each translates; one whose sentence reads
        otherwise now (an editor changed it meanwhile), or that is gone, is left out. ``missing``: ids whose
        translation failed, sent with the source text and not stored as a translation. ``original``: the texts are
        the words said in ``lang`` (``commit_original``); an engine's translation (no ``editor``) of a sentence
        that has one here is left out. Returns the event as stored, None when nothing was left to commit."""
        async with self.journal.lock:
            now = await self.sentences_now(texts.keys())
            said = self._originals.setdefault(lang, set())
            kept = {
                sid: text
                for sid, text in sorted(texts.items())
                if sid in now
                and (sources is None or sources.get(sid) == now[sid].text)
                and (original or editor or sid not in said)
            }  # an engine's never replaces the words said
            if not kept:
                return None
            seq = self.seq + 1
            gaps = tuple(sid for sid in kept if sid in missing)
            body = Translation(
                lang,
                tuple(dataclasses.replace(now[sid], text=text, words=()).sentence() for sid, text in kept.items()),
                update,
                gaps,
                editor,
                seq=seq,
                original=original,
            )
            stored = {sid: {lang: text} for sid, text in kept.items() if sid not in gaps}
            return await self._commit(NumberedEvent(seq, body, edits=Edits(translations=stored)))

    async def commit_languages(self, languages: tuple[str, ...]) -> int:
        """Commit the room's languages (what its sentences are translated into from now on), then broadcast them. A
        language added gets the sentences so far translated (``RoomTranslating.added``). Returns the event's
        seq."""
        before = self.languages
        async with self.journal.lock:
            seq = self.seq + 1
            event = await self._commit(
                NumberedEvent(seq, Languages(languages, seq=seq), edits=Edits(languages=languages))
            )
        added = [lang for lang in languages if lang not in before]
        if added and self.translating is not None:
            history = (await self.read_snapshot()).sentences
            for lang in added:
                self.translating.added(lang, history)
        return event.seq

    async def commit_original(self, sentence_id: int, lang: str, text: str) -> None:
        """Keep the words said in sentence ``sentence_id`` (captioned in English by Whisper's translate task) as the
        sentence in ``lang``, a Whisper code (``protocol.Original``): ``lang`` becomes a room language if it is
        not one (and there is room for it), so that viewers, files and outputs can ask for it."""
        lang = normalise_language(lang)
        if primary(lang) == self.language or not text.strip():
            return  # (the speaker spoke the room's language: its sentence is the original)
        if lang not in self.languages:
            if len(self.languages) >= MAX_ROOM_LANGUAGES:
                log.info("room %s: no original in %s kept (it has %d languages)", self.id, lang, len(self.languages))
                return
            await self.commit_languages((*self.languages, lang))
        await self.commit_translation(lang, {sentence_id: text}, original=True)

    async def commit_names(self, names: Mapping[int, str]) -> None:
        """Commit the names a publisher gives its voices' new labels (``RoomPublisher``), then broadcast them: a
        ``correction`` with only ``names``, editor ``"publisher"``, not counted as an editor's. A label that has a
        name already (an editor's) keeps it."""
        async with self.journal.lock:
            fresh = {spk: name for spk, name in names.items() if spk not in self.names}
            if fresh:
                await self._correct(Change(names=fresh), PUBLISHER_EDITOR, counted=False)

    async def _correct(self, change: Change, editor: str, counted: bool = True) -> NumberedEvent:
        """``commit_correction`` with the journal's lock held (``counted``: in ``stats.corrections``)."""
        seq = self.seq + 1
        new = [dataclasses.replace(r, id=self.journal.next_sentence + i) for i, r in enumerate(change.new)]
        body = Correction(
            tuple(r.sentence() for r in [*change.replaced, *new]), change.deleted, dict(change.names), editor, seq=seq
        )
        event = await self._commit(
            NumberedEvent(seq, body, new, edits=Edits(change.replaced, change.deleted, dict(change.names)))
        )
        if counted:
            self.stats.corrections += 1
        if self.translating is not None:  # the audience of each language gets the corrected text's translation
            self.translating.corrected(change.replaced)
            self.translating.locked(event.records)
        return event

    async def commit_vocabulary(self, terms: tuple[str, ...], learned: tuple[str, ...]) -> int:
        """Commit the room's vocabulary (``app.rooms.vocabulary``: what publishers lock from now on is spelt by it),
        then broadcast it (editors). Returns the event's seq."""
        async with self.journal.lock:
            seq = self.seq + 1
            event = await self._commit(
                NumberedEvent(seq, Vocabulary(terms, learned, seq=seq), edits=Edits(vocabulary=(terms, learned)))
            )
            return event.seq

    async def _commit(
        self,
        event: NumberedEvent,
        latency_ms: int | None = None,
        stable_words: list[Word] | None = None,
        words_session: str | None = None,
    ) -> NumberedEvent:
        """``Journal.commit`` (the caller holds its lock): stored, or kept while the store refuses, then delivered
        (``_deliver``, with what a publisher's caption carries that is never stored). Returns the event as stored."""
        self.touch()
        return await self.journal.commit(
            event, lambda seq, body: self._deliver(seq, body, latency_ms, stable_words, words_session)
        )

    async def retry_unsaved(self) -> None:
        """``Journal.retry_unsaved`` (the registry's sweep)."""
        await self.journal.retry_unsaved()

    def _deliver(
        self,
        seq: int,
        body: RoomEvent,
        latency_ms: int | None = None,
        stable_words: list[Word] | None = None,
        words_session: str | None = None,
    ) -> None:
        """Apply durable event ``seq`` to what the room holds in memory and broadcast it (called by the journal, with
        its lock held, once every event before it was delivered). Viewers get captions with the room's live partial
        text and its stable count (never stored), the publisher's latency and its newly settled words."""
        self.labels.seen(labels_in(body))  # new voices' labels go above these (an editor's, another front end's)
        if isinstance(body, Caption):
            body = self.speaking.locked(body, seq, latency_ms, stable_words, words_session)
        elif isinstance(body, Correction):
            self.names = merged_names(self.names, body.names)
            for publisher in list(self.publishers.values()):
                publisher.corrected(body)
        elif isinstance(body, Vocabulary):
            self.terms, self.learned = body.terms, body.learned
            self.corrector = Corrector(self.terms, self.learned)
        elif isinstance(body, Languages):
            self.languages = body.languages
        elif isinstance(body, Translation) and body.original:  # (this front end's, or another's)
            self._originals.setdefault(body.lang, set()).update(s.id for s in body.sentences)
        self._broadcast(body, durable=True)

    def heard(self, seq: int | None = None) -> None:
        """The store committed event ``seq`` of this room (another front end's; ``Sync.heard``)."""
        self.sync.heard(seq)

    def _saving_changed(self) -> None:
        for publisher in list(self.publishers.values()):
            publisher.saving_changed(self.saving, self.journal.store_error)
        self._broadcast_status()

    # ---- publishers --------------------------------------------------------------------------------------------
    def join(self, session_id: str, name: str | None = None) -> RoomPublisher:
        """A publisher session joins, as person ``name`` (``names.person_name``; None: unnamed). Its transport hears
        of corrections of its sentences through ``RoomPublisher.watch``."""
        publisher = RoomPublisher(self, session_id, name)
        self.publishers[session_id] = publisher
        if not self.saving:
            publisher.saving_changed(False, self.journal.store_error)
        self.touch()
        self._broadcast_status()
        return publisher

    def share_microphone(self, session_id: str, session: SharesMicrophone) -> None:
        """Publisher ``session_id``'s live audio joins the room's cross-talk arbiter (``engine.stream.crosstalk``):
        a voice heard by several of the room's microphones is captioned from the one it is loudest at only. Called
        by every live transport right after ``join``; the microphone leaves with the publisher."""
        if session_id in self.publishers and session_id not in self.crosstalk.microphones:
            session.share_room(self.crosstalk.microphone(session_id))

    def leave(self, session_id: str) -> None:
        microphone = self.crosstalk.microphones.get(session_id)
        if microphone is not None:
            microphone.close()
        publisher = self.publishers.pop(session_id, None)
        if publisher is not None:
            if publisher.announced:  # it left mid-sentence: the other front ends stop showing its text
                self.announce_open(session_id, "", [])
            self.touch()
            self.broadcast_partial()
            self._broadcast_status()

    def close(self) -> None:
        """Server shutdown: end every viewer's stream (clients reconnect and resume from the store)."""
        self.sync.close()
        if self.translating is not None:
            self.translating.close()
        self.audience.close()  # what it holds is stored: a restart releases it when due
        self.speaking.close()
        for viewer in list(self.viewers):
            viewer.end()
        self.viewers.clear()
