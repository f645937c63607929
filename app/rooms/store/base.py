"""The transcript store's interface: every room, every locked sentence, speaker relabel and word-time update,
durably.

Two backends share it, and the rest of the server does not care which one it has:
- ``sqlite.SqliteStore``: one SQLite file (or ``:memory:``) for one server on one box (the default);
- ``postgres.PostgresStore``: a PostgreSQL database (``postgresql://...``) shared by several front ends.
``open_store(target)`` (this package's ``__init__``) picks the backend from the target.

Contracts both keep:
- ``append`` returns only after the event is committed. Callers broadcast an event only after that, so nothing a
  viewer ever saw can be missing after a restart.
- Numbering is the store's: ``append`` gives the event the room's next ``seq`` and its new sentences the room's
  next sentence ids *inside the write transaction*, so two writers (two front ends on one database) never collide
  and commit order is seq order (an event with seq N is committed before seq N + 1 is given out). The numbers the
  caller put in the draft are only its guess; what was stored comes back in ``Appended``.
- ``watch(on_commit, on_missed, on_announce)``: a store that other processes write to (``shared``) calls
  ``on_commit(room, seq)`` for every event committed by anyone (this process included), soon after the commit, and
  ``on_missed()`` when notices may have been lost (a dropped connection): then every room should look at the store
  again. Commit notices carry no content: the events are read from the store, so a late, lost or repeated notice
  costs a read, never an event.
- ``announce(room, body)``: an ephemeral message to the other processes that serve the room (``on_announce(room,
  body)`` there, never here): live state that is not stored (a publisher's stable open text). Never stored, never
  replayed; one may be lost (a dropped connection). Announcements sent one after another (each awaited) arrive in
  that order. A ``body`` whose JSON is over ``ANNOUNCE_MAX_BYTES`` is refused (``ValueError``). A store only this
  process writes has no one to tell: it sends nothing.
- Every failure of the database is a ``StoreError`` (a full disk, a lost server, a newer schema, a closed store).

Schema (both backends; the version is SQLite's ``user_version`` or PostgreSQL's ``schema_version`` table):
- ``rooms``: id, created_ms (wall clock, ms since the Unix epoch: the room's timeline starts there), title,
  viewer_token_sha256 (NULL = open to anyone who knows the id; tokens are checked against this digest) and
  viewer_token itself: the room's QR code and viewer links must carry it whoever asks for them (the server's admin
  included). Keeping it adds no exposure: whoever can read the database can read the transcripts it protects.
  Rooms made before it was kept have NULL there; their QR code needs the viewer token presented.
  editor_token_sha256 (the editor token's digest; the token itself is never kept: it can change the transcript),
  delay_s (the audience's hold-back delay), names (JSON ``{"spk": name}``: speaker names editors and
  named publishers gave), terms and learned (JSON lists: the room's vocabulary, see ``protocol.Vocabulary``), all
  kept current by the events;
  ended_ms (when an editor ended the room: its HLS playlist closes; NULL while it runs), outputs (JSON list: where
  its captions go, ``app.outputs``), languages (JSON list of BCP 47 codes: what its sentences are translated
  into, ``app.rooms.translating``; kept current by "languages" events) and language (the Whisper language code
  its sessions speak, set when it is made; NULL for rooms made before it was kept: English).
- ``events``: (room, seq) -> kind ("caption" | "speakers" | "words" | "correction" | "vocabulary" | "translation" |
  "languages"), the message as
  sent to viewers (JSON) and created_ms (when it was committed). ``seq`` is the room-level sequence number that
  viewers resume from (SSE ``Last-Event-ID``).
- ``sentences``: (room, id) -> session, text, start_ms, end_ms (room timeline), spk (updated by relabels), words:
  the word times as JSON ``[[word, start_ms, end_ms], ...]`` on the room timeline (NULL when not known; replaced by
  a "words" event: the aligner's times, which follow the lock, as the room applied them to the sentence's text
  then, ``app.rooms.late``), original (the recognizer's text once an editor changed it, else NULL), deleted (1
  once an editor removed it: kept for the history, never shown) and translations (JSON ``{"lang": text}``: the
  newest translation into each room language, replaced by each "translation" event; NULL for none).
"""

from __future__ import annotations

import dataclasses
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from engine import protocol

MEMORY = ":memory:"
SPOKEN_DEFAULT = "en"  # the language spoken in a room made without one (and in rooms made before it was kept)
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# The largest ``announce`` body (its JSON, UTF-8): half of PostgreSQL's 8000-byte NOTIFY payload limit, which leaves
# room for the envelope (room id, sender) and for bodies that grow a little over time.
ANNOUNCE_MAX_BYTES = 4000


class StoreError(RuntimeError):
    """The database cannot be opened or written (disk full, lost server, newer schema, closed store)."""


@dataclass(frozen=True)
class RoomRecord:
    id: str
    created_ms: int
    title: str
    viewer_token_sha256: str | None
    viewer_token: str | None = None  # None for open rooms, and for private rooms made before it was kept
    editor_token_sha256: str | None = None  # None for rooms made before editors existed (the server token edits them)
    delay_s: float = 0.0  # the audience sees each durable event this long after it was committed
    names: dict[int, str] = field(default_factory=dict)  # speaker label -> the name editors gave it
    terms: tuple[str, ...] = ()  # the room's vocabulary: entered by editors...
    learned: tuple[str, ...] = ()  # ...and learned from their corrections
    ended_ms: int | None = None  # when an editor ended it (ms since the Unix epoch)
    outputs: tuple[dict[str, Any], ...] = ()  # where its captions go besides its viewers (``app.outputs``)
    languages: tuple[str, ...] = ()  # what its sentences are translated into (BCP 47; ``app.rooms.translating``)
    language: str = SPOKEN_DEFAULT  # what its sessions speak (a Whisper language code), set when it is made


@dataclass(frozen=True)
class SentenceRecord:
    """One locked sentence on its room's timeline (milliseconds since the room was created)."""

    id: int
    session: str
    text: str
    start_ms: int
    end_ms: int
    spk: int | None
    words: tuple[protocol.Word, ...] = ()  # on the same timeline; empty when not known
    original: str | None = None  # the recognizer's text, once an editor changed it
    deleted: bool = False  # removed by an editor (snapshots leave it out unless asked)
    translations: dict[str, str] = field(default_factory=dict)  # room language -> its newest translation

    def sentence(self) -> protocol.Sentence:
        """As it appears in a viewer's ``caption.sentences``."""
        return protocol.Sentence(self.id, self.text, self.start_ms, self.end_ms, self.spk, self.session, self.words)

    def translated(self, lang: str) -> SentenceRecord:
        """The sentence in room language ``lang``: its translation for text (the source text while it has none), no
        word times (they are the source's words)."""
        return dataclasses.replace(self, text=self.translations.get(lang, self.text), words=())


@dataclass(frozen=True)
class Snapshot:
    """Everything a late viewer needs: the room's sentences (current speaker labels) as of event ``seq``."""

    seq: int
    sentences: list[SentenceRecord]
    names: dict[int, str] = field(default_factory=dict)  # speaker names editors gave, as of ``seq``


@dataclass(frozen=True)
class TimedEvent:
    """A stored event and when it was committed (ms since the Unix epoch)."""

    seq: int
    created_ms: int
    message: protocol.ServerMessage


@dataclass(frozen=True)
class Edits:
    """What an editor's event changes in the stored room besides new sentences (``TranscriptStore.append``)."""

    replaced: tuple[SentenceRecord, ...] = ()  # sentences' new text, times, label and words (the original is kept)
    deleted: tuple[int, ...] = ()  # sentence ids removed
    names: dict[int, str] = field(default_factory=dict)  # speaker names that changed ("" = back to the default)
    vocabulary: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # the room's new (terms, learned)
    translations: dict[int, dict[str, str]] = field(default_factory=dict)  # sentence id -> {lang: its new text}
    languages: tuple[str, ...] | None = None  # the room's new languages


RoomEvent = (
    protocol.Caption
    | protocol.Speakers
    | protocol.WordTimes
    | protocol.Correction
    | protocol.Vocabulary
    | protocol.Translation
    | protocol.Languages
)
Retimed = dict[int, tuple[protocol.Word, ...]]  # room sentence id -> its new word times (room timeline)


@dataclass(frozen=True)
class Appended:
    """An event as committed: its ``seq`` and its sentences' ids are the ones the store gave out."""

    event: RoomEvent
    records: list[SentenceRecord]


class Counters(NamedTuple):
    """Where a room's numbering continues: its ``last_seq`` (0 before any event) and the ``next_id`` a new sentence
    gets."""

    last_seq: int
    next_id: int


class TranscriptStore(ABC):
    """Opened by ``open_store(target)``; ``close()`` is idempotent."""

    shared = False  # True when other processes (front ends) write the same rooms: see ``watch``
    where = ""  # what the store is, for logs (never a password)
    errors = 0  # operations that failed with ``StoreError`` since open (the server's metrics count them)

    async def create_room(
        self,
        room_id: str,
        title: str = "",
        *,
        viewer_token_sha256: str | None = None,
        created_ms: int | None = None,
        viewer_token: str | None = None,
        editor_token_sha256: str | None = None,
        delay_s: float = 0.0,
        languages: Sequence[str] = (),
        language: str = SPOKEN_DEFAULT,
    ) -> RoomRecord:
        """Store a new room made of these fields (``save_room``); ``created_ms``: now unless given."""
        return await self.save_room(
            RoomRecord(
                room_id,
                now_ms() if created_ms is None else created_ms,
                title,
                viewer_token_sha256,
                viewer_token,
                editor_token_sha256,
                delay_s,
                languages=tuple(languages),
                language=language,
            )
        )

    async def save_room(self, record: RoomRecord) -> RoomRecord:
        """Store new room ``record`` as it is (every field: its languages and spoken language too); an id that
        exists already is a ``StoreError``."""
        await self._insert_room(record)
        return record

    @abstractmethod
    async def _insert_room(self, record: RoomRecord) -> None:
        """``create_room``'s write: ``INSERT INTO rooms (id, created_ms, title, viewer_token_sha256, viewer_token,
        editor_token_sha256, delay_s, languages, language)`` with ``room_row(record)``."""

    @abstractmethod
    async def room(self, room_id: str) -> RoomRecord | None: ...

    @abstractmethod
    async def set_ended(self, room_id: str, ended_ms: int | None) -> None:
        """Mark the room ended at ``ended_ms`` (None: running again)."""

    @abstractmethod
    async def set_outputs(self, room_id: str, outputs: Sequence[dict[str, Any]]) -> None:
        """Replace the room's outputs (JSON objects)."""

    @abstractmethod
    async def rooms_with_outputs(self) -> list[str]:
        """Ids of the rooms that have outputs and did not end (a starting server runs them)."""

    @abstractmethod
    async def counters(self, room_id: str) -> Counters:
        """Where the room's numbering continues (``Counters(0, 0)`` for a room with nothing yet)."""

    @abstractmethod
    async def next_label(self, room_id: str) -> int:
        """One above the highest speaker label the room's sentences (deleted ones too) and speaker names use (0 for
        none): where a loaded room's voice labels continue (``app.rooms.names.RoomLabels``)."""

    @abstractmethod
    async def append(
        self,
        room_id: str,
        event: RoomEvent,
        sentences: Sequence[SentenceRecord] = (),
        relabel: dict[int, int] | None = None,
        retimed: Retimed | None = None,
        edits: Edits | None = None,
    ) -> Appended:
        """Commit one room event atomically: the event as viewers get it, its new sentences, any speaker
        relabels, any new word times (``retimed``: they replace the stored sentences' words, so the caller makes
        them the words of each sentence's text as it is) and an editor's ``edits``. A ``Caption``'s sentences are
        ``sentences`` in order; a ``Correction``'s are its replaced ones, then ``sentences`` (a split's new one).
        The event gets the room's next seq and the new sentences the room's next ids (see the module's contracts);
        returns them as stored."""

    @abstractmethod
    async def events_after(self, room_id: str, after_seq: int) -> list[tuple[int, protocol.ServerMessage]]:
        """Events with ``seq > after_seq`` in order, as ``(seq, message)``."""

    @abstractmethod
    async def snapshot(self, room_id: str, deleted: bool = False, ids: Collection[int] | None = None) -> Snapshot:
        """The room's sentences (in ``reading_order``; ``deleted``: with the ones editors removed; ``ids``: only
        those of them with these ids, which is what costs, not the room's size), its speaker names and the seq they
        reflect, read in one transaction (consistent)."""

    @abstractmethod
    async def timed_events(self, room_id: str, since_ms: int = 0, kind: str | None = None) -> list[TimedEvent]:
        """Events committed at or after ``since_ms`` (ms since the Unix epoch), of ``kind`` only if given, in seq
        order, with their commit times."""

    def watch(
        self,
        on_commit: Callable[[str, int], None],
        on_missed: Callable[[], None],
        on_announce: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        """Hear of events other processes commit, and of what they ``announce`` (see the module's contracts). A
        store that only this process writes has nothing to tell: the default does nothing."""
        del on_commit, on_missed, on_announce

    async def announce(self, room_id: str, body: dict[str, Any]) -> None:
        """Send ``body`` (JSON-able) to the other processes serving ``room_id`` (see the module's contracts). The
        default (a store no other process writes) sends nothing."""
        del room_id, body

    @abstractmethod
    async def close(self) -> None: ...


def numbered(event: RoomEvent, records: Sequence[SentenceRecord], seq: int, first_id: int) -> Appended:
    """``event`` and its ``records`` renumbered: the event gets ``seq``, the sentences ids from ``first_id`` on."""
    renumbered = [dataclasses.replace(r, id=first_id + i) for i, r in enumerate(records)]
    if isinstance(event, protocol.Caption):
        return Appended(dataclasses.replace(event, seq=seq, sentences=[r.sentence() for r in renumbered]), renumbered)
    if isinstance(event, protocol.Correction):  # its replaced sentences keep their ids; a split's new one is renumbered
        drafts = {r.id for r in records}
        kept = tuple(s for s in event.sentences if s.id not in drafts)
        return Appended(
            dataclasses.replace(event, seq=seq, sentences=kept + tuple(r.sentence() for r in renumbered)), renumbered
        )
    return Appended(dataclasses.replace(event, seq=seq), renumbered)


def event_json(event: RoomEvent) -> tuple[str, str]:
    """``(kind, body)`` of an event as stored: the message viewers get, word times included."""
    body = event.wire(words=True) if isinstance(event, protocol.Caption | protocol.Correction) else event.wire()
    return body["type"], json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def announce_json(body: dict[str, Any]) -> str:
    """``body`` as an ``announce`` sends it; ``ValueError`` if it is over ``ANNOUNCE_MAX_BYTES``."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if len(text.encode("utf-8")) > ANNOUNCE_MAX_BYTES:
        raise ValueError(f"an announcement of {len(text.encode('utf-8'))} bytes (at most {ANNOUNCE_MAX_BYTES})")
    return text


def reading_order(records: Sequence[SentenceRecord]) -> list[SentenceRecord]:
    """``records`` (in id order: the order they locked) as a transcript reads them: each publisher session's
    sentences in order of start, in the places its sentences hold, so that a split's new part (a new id) follows the
    sentence it came from while sessions speaking at once keep the order their sentences locked in."""
    out = list(records)
    slots: dict[str, list[int]] = {}
    for i, r in enumerate(out):
        slots.setdefault(r.session, []).append(i)
    for places in slots.values():
        ordered = sorted((out[i] for i in places), key=lambda r: (r.start_ms, r.id))
        for i, r in zip(places, ordered, strict=True):
            out[i] = r
    return out


def names_json(names: dict[int, str]) -> str | None:
    return json.dumps({str(k): v for k, v in sorted(names.items())}, ensure_ascii=False) if names else None


def names_from_json(raw: str | None) -> dict[int, str]:
    return {int(k): str(v) for k, v in json.loads(raw).items()} if raw else {}


def label_after(top_spk: int | None, names: str | None) -> int:
    """``next_label`` from the highest ``spk`` of a room's sentences (None: none has one) and its ``names`` column."""
    return max([-1 if top_spk is None else int(top_spk), *names_from_json(names)]) + 1


def merged_names(old: dict[int, str], changed: dict[int, str]) -> dict[int, str]:
    """``old`` with ``changed`` applied ("" removes a name)."""
    names = {**old, **changed}
    return {k: v for k, v in names.items() if v}


def outputs_json(outputs: Sequence[dict[str, Any]]) -> str | None:
    return json.dumps(list(outputs), separators=(",", ":"), ensure_ascii=False) if outputs else None


def outputs_from_json(raw: str | None) -> tuple[dict[str, Any], ...]:
    return tuple(dict(o) for o in json.loads(raw)) if raw else ()


def terms_json(terms: Sequence[str]) -> str | None:
    return json.dumps(list(terms), ensure_ascii=False) if terms else None


def terms_from_json(raw: str | None) -> tuple[str, ...]:
    return tuple(str(t) for t in json.loads(raw)) if raw else ()


def words_json(words: Sequence[protocol.Word]) -> str | None:
    if not words:
        return None
    return json.dumps([[w.w, w.start_ms, w.end_ms] for w in words], separators=(",", ":"), ensure_ascii=False)


def words_from_json(raw: str | None) -> tuple[protocol.Word, ...]:
    if not raw:
        return ()
    return tuple(protocol.Word(str(w), int(a), int(b)) for w, a, b in json.loads(raw))


def now_ms() -> int:
    return int(time.time() * 1000)


# A room's row as both backends read it: ``room_record`` takes the columns in this order.
ROOM_COLUMNS = (
    "id, created_ms, title, viewer_token_sha256, viewer_token, editor_token_sha256, delay_s, names, terms, "
    "learned, ended_ms, outputs, languages, language"
)


def room_row(record: RoomRecord) -> tuple[Any, ...]:
    """A new room's row: ``id, created_ms, title, viewer_token_sha256, viewer_token, editor_token_sha256, delay_s,
    languages, language`` (the other columns start empty)."""
    return (
        record.id,
        record.created_ms,
        record.title,
        record.viewer_token_sha256,
        record.viewer_token,
        record.editor_token_sha256,
        record.delay_s,
        terms_json(record.languages),
        record.language,
    )


def room_record(row: Sequence[Any]) -> RoomRecord:
    """A room from its row (``SELECT {ROOM_COLUMNS}``)."""
    return RoomRecord(
        row[0],
        int(row[1]),
        row[2],
        row[3],
        row[4],
        row[5],
        float(row[6]),
        names_from_json(row[7]),
        terms_from_json(row[8]),
        terms_from_json(row[9]),
        None if row[10] is None else int(row[10]),
        outputs_from_json(row[11]),
        terms_from_json(row[12]),
        row[13] or SPOKEN_DEFAULT,
    )


# What both backends write and read in table ``sentences``, whatever their SQL dialect: the parameters of each
# statement, in the order of its placeholders, and the records back from the columns.
SENTENCE_COLUMNS = "id, session, text, start_ms, end_ms, spk, words, original, deleted, translations"


def sentence_rows(room_id: str, records: Sequence[SentenceRecord], locked_ms: int) -> list[tuple[Any, ...]]:
    """``INSERT INTO sentences (room, id, session, text, start_ms, end_ms, spk, locked_ms, words)``."""
    return [
        (room_id, s.id, s.session, s.text, s.start_ms, s.end_ms, s.spk, locked_ms, words_json(s.words)) for s in records
    ]


def relabel_rows(room_id: str, relabel: dict[int, int]) -> list[tuple[Any, ...]]:
    """``UPDATE sentences SET spk = ? WHERE room = ? AND id = ?``."""
    return [(spk, room_id, sid) for sid, spk in relabel.items()]


def retimed_rows(room_id: str, retimed: Retimed) -> list[tuple[Any, ...]]:
    """``UPDATE sentences SET words = ? WHERE room = ? AND id = ?``."""
    return [(words_json(words), room_id, sid) for sid, words in retimed.items()]


def replaced_rows(room_id: str, replaced: Sequence[SentenceRecord]) -> list[tuple[Any, ...]]:
    """``UPDATE sentences SET ... text = ?, start_ms = ?, end_ms = ?, spk = ?, words = ? WHERE room = ? AND id = ?``."""
    return [(r.text, r.start_ms, r.end_ms, r.spk, words_json(r.words), room_id, r.id) for r in replaced]


def vocabulary_row(room_id: str, vocabulary: tuple[Sequence[str], Sequence[str]]) -> tuple[Any, ...]:
    """``UPDATE rooms SET terms = ?, learned = ? WHERE id = ?``."""
    terms, learned = vocabulary
    return terms_json(terms), terms_json(learned), room_id


def languages_row(room_id: str, languages: Sequence[str]) -> tuple[Any, ...]:
    """``UPDATE rooms SET languages = ? WHERE id = ?``."""
    return terms_json(languages), room_id


def translations_from_json(raw: str | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in json.loads(raw).items()} if raw else {}


def translated_json(stored: str | None, changed: dict[str, str]) -> str | None:
    """A sentence's ``translations`` column once ``changed`` ({lang: text}) is applied to what it holds."""
    merged = {**translations_from_json(stored), **changed}
    return json.dumps(dict(sorted(merged.items())), ensure_ascii=False) if merged else None


def renamed_json(stored: str | None, changed: dict[int, str]) -> str | None:
    """A room's ``names`` column once ``changed`` is applied to what it holds (``stored``)."""
    return names_json(merged_names(names_from_json(stored), changed))


def snapshot(seq: int, rows: Sequence[Sequence[Any]], names: str | None) -> Snapshot:
    """A snapshot from its rows (``SELECT {SENTENCE_COLUMNS} ... ORDER BY id``) and the room's ``names`` column."""
    records = [
        SentenceRecord(
            int(sid),
            session,
            text,
            int(start),
            int(end),
            spk,
            words_from_json(words),
            original,
            bool(gone),
            translations_from_json(translations),
        )
        for sid, session, text, start, end, spk, words, original, gone, translations in rows
    ]
    return Snapshot(seq, reading_order(records), names_from_json(names))
