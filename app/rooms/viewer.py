"""A room's viewer: one subscriber's bounded queue of the room's messages. A slow viewer's queued partials are
coalesced (newest wins); a viewer that falls ``VIEWER_QUEUE_MAX`` durable events behind is cut off and resumes from
the store when it reconnects, so the server never buffers without bound. A viewer that follows the room only until
it ends (``ends_with_room``: a room's output) is told so through its queue too (``finish``), so its reader waits on
one thing, the queue, and never wakes to look."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from engine.protocol import Caption, ServerMessage

VIEWER_QUEUE_MAX = 512


class ViewerState(StrEnum):
    OPEN = "open"
    FINISHED = "finished"  # the room ended and its audience got everything: what is queued is the last
    ENDED = "ended"  # server shutting down, or the viewer fell too far behind: the stream closes


@dataclass(frozen=True, slots=True)
class Queued:
    """One message in a viewer's queue: the room event ``seq`` it belongs to, and whether it is ``durable`` (a stored
    event, which a reconnecting viewer gets from the store) or passing (a partial or a status)."""

    seq: int
    message: ServerMessage
    durable: bool


class Viewer:
    """One subscriber's queue of ``Queued`` messages. ``get`` returns ``None`` once the stream must end: at once when
    it ended (``ENDED``: what was queued is dropped), after what is queued when it finished (``FINISHED``).

    ``on_overflow`` runs once if the viewer falls too far behind. A reader that stopped reading is blocked in a
    socket write, not in ``get``, so ending the queue alone would not free it: the stream's handler sets this to
    abort its connection (the client's ``EventSource`` reconnects and resumes from the store)."""

    def __init__(self, on_overflow: Callable[[], None] | None = None, editor: bool = False) -> None:
        self.state = ViewerState.OPEN
        self.editor = editor  # gets everything at once (a room's editor), not through the room's delay
        self.on_overflow = on_overflow
        self.ends_with_room = False  # ``Audience.until_end``: finished once the room ended and the audience has all
        self._items: deque[Queued] = deque()
        self._wake = asyncio.Event()

    def put(self, seq: int, message: ServerMessage, durable: bool) -> None:
        if self.state is ViewerState.ENDED:
            return
        last = self._items[-1] if self._items else None
        merged = _coalesced(last.message, message) if last and not last.durable and not durable else None
        if last is not None and merged is not None:
            self._items[-1] = Queued(seq, merged, durable)  # the newer partial or status replaces the unsent one
        elif len(self._items) >= VIEWER_QUEUE_MAX:
            self.end()  # too far behind: the client resumes from the store on reconnect
            if self.on_overflow is not None:
                self.on_overflow()
            return
        else:
            self._items.append(Queued(seq, message, durable))
        self._wake.set()

    def end(self) -> None:
        self.state = ViewerState.ENDED
        self._items.clear()
        self._wake.set()

    def finish(self) -> None:
        """Nothing more is coming (its room ended, and the audience has everything): ``get`` hands out what is
        queued (and what is still put), then ``None``. Does nothing to a viewer that ended."""
        if self.state is ViewerState.OPEN:
            self.state = ViewerState.FINISHED
            self._wake.set()

    async def get(self, timeout_s: float | None) -> Queued | None:
        """The next item, or None once the stream must end (see the class). Raises ``TimeoutError`` after
        ``timeout_s`` with nothing to send (time for a heartbeat); ``None``: it waits as long as it takes."""
        while not self._items:
            if self.state is not ViewerState.OPEN:
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
