"""What one viewer's event stream (``GET /rooms/{id}/events``) sends: its catch-up from the store, then each
message in the form that viewer gets. (The handler, its heartbeat and its socket are ``app.rooms.routes``'.)

An editor's stream has everything at once: partials, the room's vocabulary. An audience stream has what the room's
``Audience`` lets through: in a room with a delay, no partials, and sentences only once released. Either way, what
a catch-up replays from the store is each sentence in its last version: a viewer never sees one an editor replaced.

A stream in a room language (``?lang=es``) has the room's sentences in that language: locked sentences come as
``translation`` events (a catch-up's ``caption`` has each sentence's newest translation, or its source text while it
has none), the captions and corrections of the source language only with what is not text (the open text, which is
still the speaker's words, deleted ids, speaker names), and no word times (they time the source's words). Every
other stream gets no translations but an editor's, which has every language (a catch-up's: each language's
translations so far, after its first ``caption``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from aiohttp import web

from engine import protocol
from engine.protocol import Caption, Correction, Sentence, ServerMessage, Translation, Vocabulary, WordTimes

from .holdback import empty
from .room import Room


class Stream:
    """One viewer's stream of ``room``: ``editor`` (see the module), ``words`` (word times: see the handler),
    ``lang``: a room language to have it in (None: the language spoken)."""

    def __init__(self, room: Room, editor: bool, words: bool, lang: str | None = None) -> None:
        self.room = room
        self.editor = editor
        self.lang = lang
        self.words = words and lang is None

    @property
    def partials(self) -> bool:
        """Whether this viewer gets the open (not yet locked) text."""
        return self.editor or not self.room.audience.delay_s

    async def catch_up(self, response: web.StreamResponse, after: int | None) -> int:
        """Send what the viewer missed: the stored events after ``after``, or the whole room. Returns the seq it
        reflects (live events up to it are skipped)."""
        room, store = self.room, self.room.store
        known = room.seq
        if after is not None and after > known and store.shared:
            # Another front end may be ahead of this one (a viewer moving here; a notice on its way): the store
            # decides whether ``after`` is a seq of this room. (A larger one is not: the viewer gets the whole room.)
            known = await room.read_newest_seq()
        if after is not None and after <= known:
            events = await room.read_events_after(after)  # with what a full disk holds back, from memory
            limit = None if self.editor else room.audience.replay_until()
            if limit is not None:
                events = [(seq, m) for seq, m in events if seq <= limit]  # the rest comes when released
            for seq, message in as_corrected(events):
                await self.send(response, message, seq)
            return events[-1][0] if events else after
        # The audience's view is judged by the store's commit times too: a caption another front end committed
        # that has not reached this one yet is not shown before its delay.
        snapshot = await (room.read_snapshot() if self.editor else room.read_released())
        sentences = [(s.translated(self.lang) if self.lang else s).sentence() for s in snapshot.sentences]
        await self.send(response, Caption(sentences, "", seq=snapshot.seq), snapshot.seq, translated=True)
        if snapshot.names:
            await self.send(response, Correction(names=snapshot.names, seq=snapshot.seq), None)
        if self.editor:  # every language's translations so far, as an editor's stream has each one as it comes
            for lang in room.languages:
                done = tuple(s.translated(lang).sentence() for s in snapshot.sentences if lang in s.translations)
                if done:
                    await self.send(response, Translation(lang, done, seq=snapshot.seq), None)
        if self.editor and (room.terms or room.learned):
            await self.send(response, Vocabulary(room.terms, room.learned, seq=snapshot.seq), None)
        return snapshot.seq

    async def send(
        self, response: web.StreamResponse, message: ServerMessage, event_id: int | None, translated: bool = False
    ) -> None:
        """One event. Some go as their ``id`` alone, which moves the client's ``Last-Event-ID`` on (a resume
        starts after it) and dispatches nothing: a ``words`` update to a viewer that did not ask for word times,
        the vocabulary to the audience, a correction the delay already put into the captions it held, and a
        translation into another language than the stream's. ``translated``: ``message`` is in the stream's
        language already (a catch-up's)."""
        head = f"id: {event_id}\n" if event_id is not None else ""
        if not translated:
            message = in_language(message, self.lang, self.editor)
        if (
            (isinstance(message, WordTimes) and not self.words)
            or (isinstance(message, Vocabulary) and not self.editor)
            or empty(message)
        ):
            if head:
                await response.write(f"{head}\n".encode())
            return
        if isinstance(message, Caption) and message.open is None:  # stored: no open text with it (``Caption.open``)
            message = dataclasses.replace(message, open=[])
        data = protocol.dumps(message, self.words)
        await response.write(f"{head}data: {data}\n\n".encode())


def in_language(message: ServerMessage, lang: str | None, editor: bool) -> ServerMessage:
    """``message`` as a stream in room language ``lang`` (None: the spoken one) has it (see the module); a message
    that has nothing for it comes back ``empty`` (it goes as its id alone)."""
    if isinstance(message, Translation):
        return message if editor or message.lang == lang else dataclasses.replace(message, sentences=())
    if lang is None:
        return message
    if isinstance(message, Caption):
        return dataclasses.replace(message, sentences=[], stable_words=[])
    if isinstance(message, Correction):
        return dataclasses.replace(message, sentences=())
    if isinstance(message, WordTimes):
        return dataclasses.replace(message, words=())
    return message


def as_corrected(events: list[tuple[int, ServerMessage]]) -> list[tuple[int, ServerMessage]]:
    """Replayed ``events`` with each sentence in its last version among them, deleted ones left out. Enough to
    show no replaced text: a correction of a replayed sentence comes after its caption, so it is replayed too (no
    store read, which a crowd of viewers reconnecting at once would each make)."""
    last: dict[int, Sentence | None] = {}
    translated: dict[tuple[str, int], Sentence] = {}  # (lang, id) -> its newest translation among the events
    for _, message in events:
        if isinstance(message, Correction):
            last.update({s.id: s for s in message.sentences})
            last.update(dict.fromkeys(message.deleted))
        elif isinstance(message, Translation):
            translated.update({(message.lang, s.id): s for s in message.sentences})
    if not last and not translated:
        return events

    def latest(sentences: Iterable[Sentence]) -> list[Sentence]:
        return [x for x in (last.get(s.id, s) for s in sentences) if x is not None]

    out: list[tuple[int, ServerMessage]] = []
    for seq, message in events:
        if isinstance(message, Caption):
            message = dataclasses.replace(message, sentences=latest(message.sentences))
        elif isinstance(message, Correction):
            message = dataclasses.replace(message, sentences=tuple(latest(message.sentences)))
        elif isinstance(message, Translation):
            message = dataclasses.replace(
                message,
                sentences=tuple(
                    translated[message.lang, s.id]
                    for s in message.sentences
                    if (message.lang, s.id) in translated and last.get(s.id, s) is not None
                ),
            )
        out.append((seq, message))
    return out
