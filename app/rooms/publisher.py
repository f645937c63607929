"""A publisher session's side of its room: it maps the session's sentence ids, times and speaker labels onto the
room's and posts every message the session sends. The room is seen through ``RoomPort``, the few calls a publisher
makes, so this module does not import the room's.

Speaker labels: each voice the session labels (0, 1, 2, ... per session) gets a room-wide label from the room
(``RoomLabels``) the first time it locks a sentence, shows in a partial or is relabelled to; everything the room
stores and shows carries that one. A named publisher (``names.person_name``) names each new voice before anything
that uses its label is broadcast: its first voice is the person, the next ones ``"name (2)"``, ... (a microphone two
people share); a sentence without a label (the session's labels are off) is the person's too. The session's own
client keeps the session's labels: it gets the session's messages as they are, and corrections mapped back."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Protocol

from engine import SessionLog
from engine.protocol import Caption, Correction, Original, Sentence, ServerMessage, Speakers, Word, WordTimes

from .edits import corrected
from .names import RoomLabels, voice_name
from .store.base import RoomRecord, SentenceRecord
from .vocabulary import Corrector

log = logging.getLogger(__name__)


class RoomPort(Protocol):
    """What a publisher calls on its room (``app.rooms.room.Room``)."""

    id: str
    record: RoomRecord
    labels: RoomLabels

    async def commit_sentences(
        self, drafts: list[SentenceRecord], latency_ms: int | None, settled: list[Word], session: str
    ) -> list[SentenceRecord]: ...

    def broadcast_partial(
        self, latency_ms: int | None = None, stable_words: list[Word] | None = None, session: str | None = None
    ) -> None: ...

    async def commit_relabel(
        self, relabel: dict[int, int], given: Mapping[int, int | None] | None = None
    ) -> list[SentenceRecord]: ...

    async def commit_words(self, sentence_id: int, words: tuple[Word, ...], session: str) -> SentenceRecord | None: ...

    async def commit_names(self, names: Mapping[int, str]) -> None: ...

    async def commit_original(self, sentence_id: int, lang: str, text: str) -> None: ...

    def announce_open(self, session: str, text: str, words: list[Word]) -> None: ...

    def leave(self, session_id: str) -> None: ...

    corrector: Corrector


# A split's new sentence has no id in the session that published the original: on that session's channel it gets
# this plus its room id (far above any session's own ids, which count from 0).
SPLIT_ID_BASE = 1_000_000_000


class RoomPublisher:
    """A publisher session's view of its room: maps its session sentence ids and times onto the room's.

    ``publish`` takes every message the session sends to its own client, in order, and returns once anything
    durable in it is committed. ``name``: the person publishing (checked by ``names.person_name``), None: unnamed.
    """

    def __init__(self, room: RoomPort, session_id: str, name: str | None = None) -> None:
        self.room = room
        self.session_id = session_id
        self.name = name
        # Session audio time 0 is (about) now: shift its times onto the room's timeline.
        self.offset_ms = max(0, int(time.time() * 1000) - room.record.created_ms)
        self.partial = ""
        self.stable = 0  # how many leading words of ``partial`` are settled
        self.started = 0.0  # time.monotonic() when ``partial`` last went from empty to words (``open_text.open_lines``)
        self.partial_spk: int | None = None  # the room label of the voice speaking ``partial``, when it is known
        self.announced = ""  # the stable text the other front ends were last told of
        self._saving: asyncio.Queue[tuple[bool, str]] = asyncio.Queue()  # see ``saving_changes``
        self._ids: dict[int, int] = {}  # session sentence id -> room sentence id
        self._session_ids: dict[int, int] = {}  # and back
        self._given: dict[int, int | None] = {}  # room sentence id -> the (room) label the session gave it last
        self._labels: dict[int | None, int] = {}  # session speaker label -> room label (None: see the module)
        self._session_labels: dict[int, int | None] = {}  # and back
        self._on_correction: Callable[[Correction], None] | None = None
        self._log = SessionLog(log, session_id)

    def watch(self, on_correction: Callable[[Correction], None]) -> None:
        """Hear of changes to this session's sentences after they locked, with its own sentence ids, times and labels
        (for its client): editors' corrections, the names of its voices, and the room's vocabulary respelling a
        sentence as it locks. Called by a transport whose client takes ``correction`` messages, right after
        ``Room.join``."""
        self._on_correction = on_correction

    def corrected(self, correction: Correction) -> None:
        """Called by the room: a correction (an editor's, or a publisher's names). This session's client gets the
        part about its sentences (ids, times and labels its own; a split's new part with ``SPLIT_ID_BASE`` + its
        room id; a label that is none of its voices' stays the room's), and the names it can use: its voices', by
        its labels, and those of other labels its sentences here carry (not clashing with one of its own)."""
        if self._on_correction is None:
            return
        mine = [s for s in correction.sentences if s.session == self.session_id]
        sentences = tuple(
            dataclasses.replace(
                s,
                id=self._session_ids.get(s.id, SPLIT_ID_BASE + s.id),
                start_ms=max(0, s.start_ms - self.offset_ms),
                end_ms=max(0, s.end_ms - self.offset_ms),
                spk=self._session_label(s.spk),
                session=None,
                words=tuple(w.shifted(-self.offset_ms) for w in s.words),
            )
            for s in mine
        )
        deleted = tuple(self._session_ids[i] for i in correction.deleted if i in self._session_ids)
        carried = {s.spk for s in mine if s.spk not in self._session_labels} - set(self._labels)
        names: dict[int, str] = {}
        for label, name in correction.names.items():
            if label in self._session_labels:
                spk = self._session_labels[label]
                if spk is not None:
                    names[spk] = name
            elif label in carried:
                names[label] = name
        if sentences or deleted or names:
            self._on_correction(Correction(sentences, deleted, names, correction.editor))

    def _session_label(self, label: int | None) -> int | None:
        """Room label ``label`` as this session's client knows it (its own label for its voices)."""
        return self._session_labels.get(label, label) if label is not None else None

    async def _label_voices(self, labels: Iterable[int | None]) -> None:
        """Give each session label of ``labels`` without one its room label; a named publisher names the new ones,
        committed before anything that uses them is broadcast (see the module). ``None`` (no label) is a voice of a
        named publisher's only."""
        names: dict[int, str] = {}
        for spk in labels:
            if spk in self._labels or (spk is None and self.name is None):
                continue
            label = self.room.labels.take()
            self._labels[spk] = label
            self._session_labels.setdefault(label, spk)  # (labels run out: the last one is shared; the first keeps it)
            if self.name is not None:
                names[label] = voice_name(self.name, len(self._labels))
        if names:
            await self.room.commit_names(names)

    async def publish(self, message: ServerMessage) -> None:
        if isinstance(message, Caption):
            new = [s for s in message.sentences if s.id not in self._ids]
            speaking = None if message.is_final or not message.partial.strip() else message.partial_spk
            await self._label_voices([*(s.spk for s in new), *(() if speaking is None else (speaking,))])
            self._open_text("" if message.is_final else message.partial, message.stable)
            self.partial_spk = self._labels.get(speaking) if self.partial and speaking is not None else None
            settled = [w.shifted(self.offset_ms) for w in message.stable_words]
            if new:
                drafts = [self._respelt(s) for s in new]
                records = await self.room.commit_sentences(drafts, message.latency_ms, settled, self.session_id)
                for s, r in zip(new, records, strict=True):
                    self._ids[s.id] = r.id
                    self._session_ids[r.id] = s.id
                    self._given[r.id] = r.spk
                self._tell_respelt(new, records)
            else:
                self.room.broadcast_partial(message.latency_ms, settled, self.session_id)
            self._announce(bool(new), settled)
        elif isinstance(message, Speakers):
            mine = {k: v for k, v in message.relabel.items() if k in self._ids}
            await self._label_voices(mine.values())
            relabel = {self._ids[k]: self._labels[v] for k, v in mine.items()}
            kept = await self.room.commit_relabel(relabel, {sid: self._given.get(sid) for sid in relabel})
            self._given.update(relabel)
            self._tell_current(kept)  # their labels are an editor's: the client's relabel must not stay
        elif isinstance(message, WordTimes):
            sid = self._ids.get(message.id)
            if sid is not None:  # else the room never got its sentence (its publish failed): nothing to time
                now = await self.room.commit_words(
                    sid, tuple(w.shifted(self.offset_ms) for w in message.words), self.session_id
                )
                if now is not None and [w.w for w in now.words] != [w.w for w in message.words]:
                    self._tell_current([now])  # corrected or respelt: the client's words must not stay either
        elif isinstance(message, Original):
            sid = self._ids.get(message.id)
            if sid is not None:
                await self.room.commit_original(sid, message.lang, message.text)

    def _open_text(self, text: str, stable: int) -> None:
        """The session's open text as the room shows it: spelt by the room's vocabulary, its settled words and the
        rest each on their own (so the settled count stays a count of the words shown)."""
        words = text.split()
        stable = min(stable, len(words))
        fix = self.room.corrector
        settled, rest = fix.apply(" ".join(words[:stable])), fix.apply(" ".join(words[stable:]))
        was_open, self.partial = bool(self.partial), " ".join(filter(None, (settled, rest)))
        self.stable = len(settled.split())
        if self.partial and not was_open:  # its first words show: its line goes after those already speaking
            self.started = time.monotonic()

    def _respelt(self, s: Sentence) -> SentenceRecord:
        """Locked sentence ``s`` on the room's timeline with its room label, spelt by the room's vocabulary (words
        re-timed as an editor's correction's are)."""
        spk = self._labels.get(s.spk, s.spk)  # (``_label_voices`` gave it one, unless it has none)
        record = SentenceRecord(
            -1,
            self.session_id,
            s.text,
            s.start_ms + self.offset_ms,
            s.end_ms + self.offset_ms,
            spk,
            tuple(w.shifted(self.offset_ms) for w in s.words),
        )
        text = self.room.corrector.apply(s.text)
        return record if text == s.text else corrected(record, text, spk)

    def _tell_respelt(self, new: list[Sentence], records: list[SentenceRecord]) -> None:
        """The session's client gets the sentences the room's vocabulary respelt, as a correction."""
        changed = [
            dataclasses.replace(s, text=r.text, words=tuple(w.shifted(-self.offset_ms) for w in r.words))
            for s, r in zip(new, records, strict=True)
            if r.text != s.text
        ]
        if changed and self._on_correction is not None:
            self._on_correction(Correction(tuple(changed), editor="vocabulary"))

    def _tell_current(self, records: list[SentenceRecord]) -> None:
        """The session's client gets ``records`` (its sentences, as they now are in the room) as a correction: it
        takes the session's own ``words`` and ``speakers`` messages, which know nothing of editors, and this comes
        right after them (``watch``)."""
        if records:
            self.corrected(Correction(tuple(r.sentence() for r in records)))

    async def saving_changes(self) -> AsyncIterator[tuple[bool, str]]:
        """``(saving, why not)`` each time the room's store stops or starts taking its writes again, beginning
        with the state at ``join`` when it was not saving. Runs until the caller stops reading."""
        while True:
            yield await self._saving.get()

    def saving_changed(self, saving: bool, why: str) -> None:
        """Called by the room: the store stopped (``why``) or resumed taking writes."""
        self._saving.put_nowait((saving, why))

    def _announce(self, locked: bool, settled: list[Word]) -> None:
        """Tell the other front ends when this publisher's stable text changed (``app.rooms.open_text``)."""
        text = " ".join(self.partial.split()[: self.stable])
        if text == self.announced and not settled and not (locked and text):  # (a lock clears what was announced)
            return
        self.announced = text
        if text or not locked:  # text gone because its sentence locked: the lock clears it everywhere by itself
            self.room.announce_open(self.session_id, text, settled)

    def leave(self) -> None:
        self.room.leave(self.session_id)
        self._log.info("left room %s", self.room.id)
