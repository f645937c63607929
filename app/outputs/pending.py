"""The captions one output has taken from its room and not sent yet, in the order the room's audience got them.

The room's audience stream (or, on a resume, its stored events) comes in through ``take``, one durable event at a
time, in seq order: each newly locked sentence of a ``caption`` becomes an ``OutgoingCaption`` at the end of the
queue. What an editor changes before a sentence went out changes what goes out: a ``correction`` replaces a waiting
sentence's text (and speaker), removes a deleted one and puts a split's new part right after the part that stays;
speaker relabels and names are applied too. Once a sentence went out (or while its send is in flight: a retry
sends the same caption) nothing changes it: neither YouTube nor CEA-608 can take a caption back.

An output in a room language (``lang``) takes the room's events as a viewer of that language gets them
(``app.rooms.stream.in_language``): a sentence is taken when its ``translation`` comes (a caption brings none), and a
translation that replaces one (an editor's fix re-translated, a retry of a missing one) changes a waiting caption as
a correction does. A sentence whose translation failed goes out in its source text if it is sent before the retry.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from engine.protocol import Caption, Correction, Sentence, ServerMessage, Speakers, Translation

from ..rooms import in_language
from .layout import SpeakerName
from .spec import Progress
from .target import OutgoingCaption


@dataclass(frozen=True)
class Waiting:
    """A caption in the queue, with ``last``: it is the last sentence of its room event (once it is sent, the
    output's progress moves past the event)."""

    caption: OutgoingCaption
    last: bool


class PendingCaptions:
    """The queue of one output (see the module). ``created_ms``: the room's creation on the wall clock (ms since the
    Unix epoch; sentence times are ms since then). ``start``: what was sent before (sentences it covers are never
    taken again). ``lang``: the room language it sends (None: the spoken one)."""

    def __init__(self, created_ms: int, speaker_name: SpeakerName, start: Progress, lang: str | None = None) -> None:
        self.created_ms = created_ms
        self.lang = lang
        self.speaker_name = speaker_name
        self.start = start
        self.read_to = start.done  # the newest event taken in: the stream resumes after it
        self._items: deque[Waiting] = deque()
        self._newest_id = -1  # the highest sentence id taken: a correction's higher id is a split's new part
        self._voice: tuple[str | None, int | None] | None = None  # (session, spk) of the last sentence taken

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Waiting]:
        return iter(self._items)

    def first(self) -> Waiting | None:
        return self._items[0] if self._items else None

    def pop(self) -> Waiting:
        """Take the first caption out to send it (from then on nothing changes it)."""
        return self._items.popleft()

    def take(self, seq: int, message: ServerMessage, names: Mapping[int, str]) -> bool:
        """A durable room event (``names``: the room's speaker names now). Events up to ``read_to`` were taken
        already and change nothing. Returns whether captions were added."""
        if seq <= self.read_to:
            return False
        self.read_to = seq
        if self.lang is not None:
            message = in_language(message, self.lang, editor=False)
            if isinstance(message, Translation):
                message = (
                    Correction(message.sentences, seq=seq)
                    if message.update
                    else Caption(list(message.sentences), "", seq=seq)
                )
        if isinstance(message, Caption):
            fresh = [s for s in message.sentences if not self.start.covers(seq, s.id)]
            for i, sentence in enumerate(fresh):
                self._items.append(Waiting(self._outgoing(seq, sentence, names), last=i == len(fresh) - 1))
                self._newest_id = max(self._newest_id, sentence.id)
            return bool(fresh)
        if isinstance(message, Correction):
            self._correct(message, names)
        elif isinstance(message, Speakers):
            self._relabel(message.relabel, names)
        return False

    def _outgoing(self, seq: int, s: Sentence, names: Mapping[int, str], voice: bool = True) -> OutgoingCaption:
        changed = self._voice is not None and self._voice != (s.session, s.spk)
        if voice:
            self._voice = (s.session, s.spk)
        return OutgoingCaption(
            seq,
            s.id,
            s.text,
            self.created_ms + s.start_ms,
            self.created_ms + s.end_ms,
            s.spk,
            self.speaker_name(s.spk, names) if s.spk is not None else None,
            changed,
        )

    def _correct(self, correction: Correction, names: Mapping[int, str]) -> None:
        where = {w.caption.sentence_id: i for i, w in enumerate(self._items)}
        items = list(self._items)
        parts: dict[int, list[Sentence]] = {}  # index of a waiting first part -> the split's new parts
        for s in correction.sentences:
            if s.id in where:
                old = items[where[s.id]].caption
                new = dataclasses.replace(
                    old,
                    text=s.text,
                    start_wall_ms=self.created_ms + s.start_ms,
                    end_wall_ms=self.created_ms + s.end_ms,
                    spk=s.spk,
                    speaker=self.speaker_name(s.spk, names) if s.spk is not None else None,
                )
                items[where[s.id]] = dataclasses.replace(items[where[s.id]], caption=new)
            elif s.id > self._newest_id:  # a split's new part: it follows its first part if that still waits
                self._newest_id = s.id
                waiting = [where[o.id] for o in correction.sentences if o.id in where]
                if waiting:
                    parts.setdefault(max(waiting), []).append(s)
        gone = set(correction.deleted)
        rebuilt: deque[Waiting] = deque()
        for i, item in enumerate(items):
            # A new part belongs to the event of its first part (progress counts sentences of that event), and
            # is sent right after it, by the same voice.
            follow = [
                Waiting(
                    dataclasses.replace(self._outgoing(item.caption.seq, s, names, voice=False), speaker_changed=False),
                    last=False,
                )
                for s in parts.get(i, ())
                if not self.start.covers(item.caption.seq, s.id)
            ]
            if item.caption.sentence_id not in gone:
                rebuilt.append(dataclasses.replace(item, last=item.last and not follow))
            if follow:
                follow[-1] = dataclasses.replace(follow[-1], last=item.last)
            rebuilt.extend(follow)
        self._items = rebuilt
        if correction.names:
            self._rename(names)

    def _relabel(self, relabel: Mapping[int, int], names: Mapping[int, str]) -> None:
        self._items = deque(
            dataclasses.replace(
                w,
                caption=dataclasses.replace(
                    w.caption,
                    spk=relabel[w.caption.sentence_id],
                    speaker=self.speaker_name(relabel[w.caption.sentence_id], names),
                ),
            )
            if w.caption.sentence_id in relabel
            else w
            for w in self._items
        )

    def _rename(self, names: Mapping[int, str]) -> None:
        self._items = deque(
            dataclasses.replace(
                w, caption=dataclasses.replace(w.caption, speaker=self.speaker_name(w.caption.spk, names))
            )
            if w.caption.spk is not None
            else w
            for w in self._items
        )
