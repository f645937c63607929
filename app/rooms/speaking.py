"""What a room's speaking publishers have said that is not locked yet, as its viewers see it: this front end's
publishers' partials, and the stable open text of publishers on other front ends (``app.rooms.open_text``). It is
ephemeral: never stored, it repeats the room's newest seq."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from engine.protocol import Caption, Word

from .open_text import Announcer, OpenPart, RemoteOpen, open_caption, open_lines
from .publisher import RoomPublisher
from .store.base import TranscriptStore

log = logging.getLogger(__name__)


class Speaking:
    """The open text of room ``room_id``. ``publishers`` is the room's own dict (this front end's, in the order they
    joined); ``seq`` gives the room's newest delivered seq; ``broadcast`` sends an (ephemeral) message to every
    viewer of the room."""

    def __init__(
        self,
        room_id: str,
        store: TranscriptStore,
        publishers: Mapping[str, RoomPublisher],
        seq: Callable[[], int],
        broadcast: Callable[[Caption], None],
    ) -> None:
        self.room_id = room_id
        self.publishers = publishers
        self.remote = RemoteOpen()  # stable open text of publishers on other front ends
        self.announcer = Announcer(room_id, store)  # ...and of this front end's, for the others
        self._seq = seq
        self._broadcast = broadcast

    def open_parts(self) -> list[OpenPart]:
        """The text not locked yet, one part per speaking publisher: this front end's publishers' partials in the
        order they joined, then the stable text of publishers on other front ends (all of it stable) in the order
        they started speaking."""
        parts = [OpenPart(p.session_id, p.partial, p.stable) for p in self.publishers.values() if p.partial]
        return parts + [OpenPart(session, text, len(text.split())) for session, text in self.remote.texts()]

    def partial(self) -> str:
        """The open text of every speaking publisher, joined (``open_parts``)."""
        return " ".join(part.text for part in self.open_parts())

    def partial_message(
        self, latency_ms: int | None = None, stable_words: list[Word] | None = None, words_session: str | None = None
    ) -> Caption:
        """The open text and how many of its leading words are settled (``open_text.open_caption``), with the voice
        now speaking when exactly one publisher is, and each speaking publisher's line (``open_text.open_lines``).
        ``stable_words``: words of publisher ``words_session`` that settled with this update (room timeline)."""
        parts = self.open_parts()
        one = self.publishers.get(parts[0][0]) if len(parts) == 1 else None
        return open_caption(
            parts,
            one.partial_spk if one is not None else None,
            self._seq(),
            latency_ms,
            stable_words,
            words_session,
            open_lines(parts, self.publishers, self.remote),
        )

    def broadcast_partial(
        self, latency_ms: int | None = None, stable_words: list[Word] | None = None, words_session: str | None = None
    ) -> None:
        """The open text to every viewer (``partial_message``'s arguments)."""
        self._broadcast(self.partial_message(latency_ms, stable_words, words_session))

    def locked(
        self,
        caption: Caption,
        seq: int,
        latency_ms: int | None = None,
        stable_words: list[Word] | None = None,
        words_session: str | None = None,
    ) -> Caption:
        """Durable ``caption`` ``seq``, being delivered, as viewers get it: its sentences take the place of the
        text their publishers announced from other front ends, and it carries the open text left
        (``partial_message``'s arguments; never stored)."""
        for session in {s.session for s in caption.sentences if s.session is not None}:
            self.remote.locked(session, seq)
        live = self.partial_message(latency_ms, stable_words, words_session)
        return dataclasses.replace(
            caption,
            partial=live.partial,
            latency_ms=latency_ms,
            partial_spk=live.partial_spk,
            partial_session=live.partial_session,
            stable=live.stable,
            stable_words=live.stable_words,
            open=live.open,
        )

    # ---- stable open text across front ends (app.rooms.open_text) ------------------------------------------------
    def announce_open(self, session: str, text: str, words: list[Word]) -> None:
        """Tell the other front ends that this front end's publisher ``session`` has ``text`` settled ("": none
        any more), ``words`` newly (room timeline)."""
        self.announcer.post(session, self._seq(), text, words)

    def heard_announcement(self, body: dict[str, Any]) -> None:
        """Another front end announced a publisher's stable open text: show it to the viewers here."""
        try:
            changed = self.remote.heard(body)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("room %s: ignoring a malformed announcement (%r)", self.room_id, exc)
            return
        if changed is not None:
            session, words = changed
            self.broadcast_partial(None, words, session)

    def expire_open(self) -> None:
        """Drop other front ends' open text that nobody updated for a long time (that front end went away)."""
        if self.remote.expire():
            self.broadcast_partial()

    def close(self) -> None:
        self.announcer.close()
