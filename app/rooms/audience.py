"""A room's audience: its viewers that are not editors, and what they get when.

Without a delay the audience gets everything as it happens, as editors do. With one (``RoomRecord.delay_s``), it
gets durable events through a ``Holdback`` (its module says how), with the live partial text taken out, and no
partials at all; the room's status tells everyone how far behind the audience is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.protocol import Caption, ServerMessage

from .holdback import Holdback
from .store.base import Snapshot, TimedEvent
from .viewer import Viewer


@dataclass(frozen=True, slots=True)
class Lag:
    """How far the audience is behind the editors: events held back, and how long the oldest has waited (ms)."""

    held: int
    behind_ms: int


class Audience:
    """The audience of one room. ``viewers`` is the room's own set (editors among them are skipped);
    ``on_release`` runs when what is held changed (the room broadcasts its status: the held count changed);
    ``ended``: the room has ended already (``end``)."""

    def __init__(
        self, delay_s: float, last_seq: int, viewers: set[Viewer], on_release: Callable[[], None], ended: bool = False
    ) -> None:
        self.delay_s = delay_s
        self._viewers = viewers
        self._on_release = on_release
        self._hold = Holdback(delay_s, released=last_seq) if delay_s > 0 else None
        self._timer: asyncio.TimerHandle | None = None
        self.ended = ended  # the room ended (``end``)

    @property
    def released(self) -> int | None:
        """The newest seq the audience has (None in a room without a delay: everything, as it happens)."""
        return self._hold.released if self._hold is not None else None

    def lag(self) -> Lag:
        """How far the audience is behind (nothing without a delay)."""
        return Lag(self._hold.held, self._hold.behind_ms(time.time())) if self._hold is not None else Lag(0, 0)

    def put(self, seq: int, message: ServerMessage, durable: bool) -> None:
        """A message of the room (``Room._broadcast``)."""
        if self._hold is None:
            self._send(seq, message, durable)
        elif durable:
            if isinstance(message, Caption):  # the live text of the moment it locked: not for a delayed audience
                message = dataclasses.replace(
                    message,
                    partial="",
                    stable=0,
                    stable_words=[],
                    partial_spk=None,
                    partial_session=None,
                    latency_ms=None,
                    open=[],
                )
            self._hold.add(seq, message, time.time())
            self._release(changed=True)

    def seed(self, recent: list[TimedEvent]) -> None:
        """A room loaded from the store: hold again its events of the last ``delay_s`` (committed before the
        restart, or by another front end), due when they would have been."""
        if self._hold is None or not recent:
            return
        self._hold.released = min(self._hold.released, recent[0].seq - 1)
        for event in recent:
            self._hold.add(event.seq, event.message, event.created_ms / 1000)
        self._release()

    def view(self, snapshot: Snapshot, recent: Sequence[TimedEvent] = (), now_s: float | None = None) -> Snapshot:
        """What of ``snapshot`` (read from the store) the audience may see now: without held sentences, as of the
        seq just before the first held event.

        ``recent``: the room's stored captions committed in the last ``delay_s``, read *after* the snapshot, when the
        reader cannot count on what this front end holds: a room read without loading it (never seeded, see
        ``seed``), or a caption committed but not handed to the audience yet. Then nothing from the first caption
        committed less than ``delay_s`` before ``now_s`` (default: now) on is shown either: not its sentences, nor
        any sentence with a higher id (room ids are given out in seq order, so those came with it or after it: a
        split of a held sentence among them)."""
        if self._hold is None:
            return snapshot
        now_s = time.time() if now_s is None else now_s
        held = self._hold.held_sentences()
        first = self._hold.first_held_seq()
        seq = snapshot.seq if first is None else min(snapshot.seq, first - 1)
        bound: int | None = None  # the first sentence id the audience may not see yet
        for event in recent:
            message = event.message
            if isinstance(message, Caption) and message.sentences and event.created_ms / 1000 + self.delay_s > now_s:
                bound = min(s.id for s in message.sentences)
                seq = min(seq, event.seq - 1)
                break
        if not held and bound is None:
            return snapshot
        return Snapshot(
            seq, [s for s in snapshot.sentences if s.id not in held and (bound is None or s.id < bound)], snapshot.names
        )

    def end(self) -> None:
        """The room ended (``POST /rooms/{id}/end``): the viewers that follow it until then (``until_end``) finish
        once the audience has every event held back for it."""
        self.ended = True
        self._finish_if_done()

    def until_end(self, viewer: Viewer) -> None:
        """``viewer`` (of the audience) follows the room until it ends: it finishes (``Viewer.finish``) once the room
        ended and the audience has everything; at once if that is so already."""
        viewer.ends_with_room = True
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self.ended and (self._hold is None or not self._hold.held):
            for viewer in list(self._viewers):
                if viewer.ends_with_room:
                    viewer.finish()

    def replay_until(self) -> int | None:
        """The newest seq a resuming audience viewer may be replayed from the store (None: no limit)."""
        return self._hold.released if self._hold is not None else None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _send(self, seq: int, message: ServerMessage, durable: bool) -> None:
        for viewer in list(self._viewers):
            if not viewer.editor:
                viewer.put(seq, message, durable)

    def _release(self, changed: bool = False) -> None:
        """Send what is due, and set the timer for what is next. ``changed``: something was just held (everyone's
        status tells how far behind the audience is, whether or not anything went)."""
        assert self._hold is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = self._hold.due(time.time())
        for seq, message in due:
            self._send(seq, message, True)
        if due:
            self._finish_if_done()  # (after what it released: a finished viewer hands that out first)
        if due or changed:
            self._on_release()
        next_s = self._hold.next_due_s()
        if next_s is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, next_s - time.time()), self._release)
