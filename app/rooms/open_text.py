"""A room's stable open text across front ends (several servers on one shared store, ``TranscriptStore.shared``).

Partials stay with the front end a publisher is connected to: they change several times a second and are never
stored. Their stable words are different: settled, sent once and never withdrawn, they are what readers live on,
and they grow a few times per sentence. So when a publisher's stable text changes, its room announces it through
the store (``TranscriptStore.announce``: PostgreSQL ``NOTIFY``, nothing stored), and every other front end that
holds the room in memory shows it to its viewers as that publisher's open text (all of it stable) until the
sentence locks: the locked caption comes the durable way (``Room.heard``) and takes its place.

- ``Announcer`` sends: one announcement in flight per room, so they arrive in order and a store round trip never
  holds up a publisher; meanwhile the next one waits, one per publisher (its newest text, with the settled words of
  every one it replaced: each stable word is sent once).
- ``RemoteOpen`` receives: each remote publisher's stable text, in the order they started speaking. A body carries
  ``after``, the newest room seq its front end had delivered when it was sent. A publisher's text sent before its
  sentence locked (``after`` < the lock's seq) is stale however late it comes: the lock clears it, and one that
  arrives after the lock is dropped. A text nobody updated or cleared for ``STALE_S`` (its front end went away
  mid-sentence) is dropped too.

Body (JSON, at most ``ANNOUNCE_MAX_BYTES``): ``{"session": ID, "after": SEQ, "text": STABLE_TEXT, "words": [[w,
start_ms, end_ms], ...]}``; ``text`` "" clears the publisher's text; ``words`` are the words that settled since its
previous announcement, on the room's timeline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from engine.protocol import Caption, OpenLine, Word

from .publisher import RoomPublisher
from .store.base import StoreError, TranscriptStore, announce_json

log = logging.getLogger(__name__)

STALE_S = 60.0  # longer than any sentence stays open (the endpointer's segment cap is 25 s)


class Announcer:
    """The sending side for one room. ``post`` never blocks; a store that is not ``shared`` is never called."""

    def __init__(self, room_id: str, store: TranscriptStore) -> None:
        self.room_id = room_id
        self.store = store
        self._waiting: dict[str, dict[str, Any]] = {}  # session -> its next body
        self._task: asyncio.Task[None] | None = None
        self._failing = False  # log a failing store once, not once per word

    def post(self, session: str, after: int, text: str, words: Sequence[Word] = ()) -> None:
        """Announce ``session``'s stable ``text`` ("" clears it) and its newly settled ``words`` (room timeline);
        ``after``: the room's newest delivered seq now."""
        if not self.store.shared:
            return
        carried = self._waiting[session]["words"] if session in self._waiting else []
        self._waiting[session] = {
            "session": session,
            "after": after,
            "text": text,
            "words": carried + [[w.w, w.start_ms, w.end_ms] for w in words],
        }
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._send(), name=f"room-announce-{self.room_id}")

    async def _send(self) -> None:
        while self._waiting:
            session = next(iter(self._waiting))
            body = _fitted(self._waiting.pop(session))
            if body is None:
                log.warning("room %s: session %s's stable text is too long to announce", self.room_id, session)
                continue
            try:
                await self.store.announce(self.room_id, body)
            except StoreError as exc:  # ephemeral: the sentence still reaches everyone once it locks
                if not self._failing:
                    log.warning("room %s: could not announce stable words to other front ends: %s", self.room_id, exc)
                self._failing = True
            else:
                self._failing = False

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


def _fitted(body: dict[str, Any]) -> dict[str, Any] | None:
    """``body`` within ``ANNOUNCE_MAX_BYTES``: without its word times if need be (the text matters most), else
    None. (A sentence is at most 25 s of speech: a few hundred bytes of text; this is a guard, not a path.)"""
    for candidate in (body, {**body, "words": []}):
        try:
            announce_json(candidate)
        except ValueError:
            continue
        return candidate
    return None


@dataclass
class _Text:
    text: str
    after: int
    heard_at_s: float
    started_s: float  # when this open text was first heard here (``RemoteOpen.started``)


class RemoteOpen:
    """The receiving side for one room: the stable open text of publishers on other front ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._texts: dict[str, _Text] = {}  # session -> its stable text, in the order they started speaking
        self._locked: dict[str, int] = {}  # session -> seq of the newest caption delivered here with its sentences

    def heard(self, body: dict[str, Any]) -> tuple[str, list[Word]] | None:
        """Take an announcement. Returns ``(session, newly settled words)`` when what viewers see changed, else
        None. Raises ``ValueError`` (or ``KeyError``/``TypeError``) for a body that is not one."""
        session, after, text = str(body["session"]), int(body["after"]), str(body["text"])
        words = [Word(str(w), int(a), int(b)) for w, a, b in body.get("words") or ()]
        if after < self._locked.get(session, 0):
            return None  # sent before that sentence locked: it is in the transcript now
        if not text:
            return (session, []) if self._texts.pop(session, None) is not None else None
        old = self._texts.get(session)
        now = self._clock()
        self._texts[session] = _Text(text, after, now, now if old is None else old.started_s)
        return (session, words) if old is None or old.text != text or words else None

    def locked(self, session: str, seq: int) -> bool:
        """Event ``seq``, delivered here, locked sentences of ``session``: its text announced before that goes.
        Returns whether anything went."""
        self._locked[session] = max(self._locked.get(session, 0), seq)
        text = self._texts.get(session)
        if text is not None and text.after < seq:
            del self._texts[session]
            return True
        return False

    def texts(self) -> list[tuple[str, str]]:
        """``(session, stable text)`` of every remote publisher with open text, in the order they started."""
        return [(session, t.text) for session, t in self._texts.items()]

    def started(self) -> dict[str, float]:
        """When (``clock``: ``time.monotonic`` unless told otherwise) each remote publisher's open text was first
        heard here, by session: when its first words showed on this front end."""
        return {session: t.started_s for session, t in self._texts.items()}

    def expire(self) -> bool:
        """Drop texts not heard of for ``STALE_S``; returns whether any went."""
        now = self._clock()
        stale = [s for s, t in self._texts.items() if now - t.heard_at_s >= STALE_S]
        for session in stale:
            del self._texts[session]
        return bool(stale)


class OpenPart(NamedTuple):
    """One speaking publisher's text not locked yet: its session, the text, and how many of its leading words are
    settled (``Speaking.open_parts``)."""

    session: str
    text: str
    stable: int


def open_caption(
    parts: Sequence[OpenPart],
    voice: int | None,
    seq: int,
    latency_ms: int | None = None,
    stable_words: list[Word] | None = None,
    words_session: str | None = None,
    lines: Sequence[OpenLine] = (),
) -> Caption:
    """A room's open text as its viewers get it: ``parts`` (``Speaking.open_parts``) joined, with how many of its
    leading words are settled (``merged_stable``), and ``lines`` (``open_lines``), the same text one line per
    speaking publisher (``Caption.open``). ``voice``: the label of the voice speaking, given only when one publisher
    has open text (several speaking at once have one merged partial, and one label for it would misname someone;
    each of ``lines`` has its own). ``stable_words``: words of publisher ``words_session`` that settled with this
    update (room timeline); ``partial_session`` names that publisher when no voice is named. ``seq``: the room's
    newest."""
    session = parts[0].session if voice is not None else words_session if stable_words else None
    return Caption(
        [],
        " ".join(part.text for part in parts),
        latency_ms=latency_ms,
        seq=seq,
        partial_spk=voice,
        partial_session=session,
        stable=merged_stable(parts),
        stable_words=list(stable_words or ()),
        open=list(lines),
    )


def open_lines(
    parts: Sequence[OpenPart], publishers: Mapping[str, RoomPublisher], remote: RemoteOpen
) -> list[OpenLine]:
    """``parts`` (``Speaking.open_parts``) one line each (``Caption.open``), in the order their open texts started
    showing here (a tie keeps ``parts``' order): one of this front end's ``publishers`` when its partial did
    (``RoomPublisher.started``), with its voice's label; another front end's when ``remote`` first heard it."""
    started = remote.started()
    lines = []
    for part in parts:
        p = publishers.get(part.session)
        at = p.started if p is not None else started.get(part.session, 0.0)
        lines.append((at, OpenLine(part.session, part.text, part.stable, p.partial_spk if p is not None else None)))
    return [line for _, line in sorted(lines, key=lambda item: item[0])]


def merged_stable(parts: Sequence[OpenPart]) -> int:
    """How many leading words of the joined texts of ``parts`` (``Speaking.open_parts``) are settled: the first
    part's stable words, plus the next part's only if all of the first is settled, and so on."""
    count = 0
    for part in parts:
        words = len(part.text.split())
        count += min(part.stable, words)
        if part.stable < words:
            break
    return count
