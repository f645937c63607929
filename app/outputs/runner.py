"""One output at work: it follows its room's audience stream and sends each newly locked sentence to its target, in
order, one at a time.

Two tasks per output. The *reader* subscribes to the room as an audience viewer (so it gets what the audience gets,
when it gets it: after the room's hold-back delay, corrected) and moves each durable event into the output's queue
(``PendingCaptions``) at once, so the room never waits for it. The *sender* takes the queue's first caption and
hands it to the target; a failed send is tried again with the same caption after a backoff (0.5 s doubling to
30 s, or the destination's ``Retry-After``), never skipped and never sent twice by the output; a permanent
failure stops the output with the error shown. A slow or dead destination therefore costs the room nothing: the
queue grows instead, up to ``MAX_WAITING`` captions; then the reader lets go of the room's stream, and once the
queue has drained to half it subscribes again and reads what it missed from the store (each sentence as it now is,
as a resuming viewer gets it).

When the room ends (``POST /rooms/{id}/end``) the output sends what the audience still gets (what the delay holds,
too), then stops. Its viewer says so (``Audience.until_end``: the viewer finishes once the room ended and the
audience has everything), so a quiet output waits on its viewer alone and takes no wake-up until something happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from enum import StrEnum
from typing import Any, Protocol

from ..rooms import Room, RoomRegistry, StoreError, ViewerState, as_corrected
from .backoff import Backoff
from .layout import Layout
from .pending import PendingCaptions, Waiting
from .spec import OutputSpec, Progress, redacted_url
from .target import OutgoingCaption, Target, TargetError

log = logging.getLogger(__name__)

MAX_WAITING = 512  # captions an output holds unsent before it lets go of the room's stream (as a viewer is cut off)
RESUBSCRIBE_S = 0.5  # a reader cut off from its room's stream (or whose room closed) follows it again after this
STORE_RETRY_S = 2.0  # a store that cannot be read is asked again after this long


class OutputState(StrEnum):
    """Where an output is. ``connected``: following its room, everything it took is sent; ``sending``: a send is
    in flight; ``retrying``: the last send failed, the same caption goes again after a wait; ``failed``: the
    destination refused for good (``last_error`` says why), nothing more is sent; ``stopped``: removed, its room
    ended and everything went out, or the server is stopping."""

    CONNECTED = "connected"
    SENDING = "sending"
    RETRYING = "retrying"
    FAILED = "failed"
    STOPPED = "stopped"


class RunnerEvents(Protocol):
    """What an output tells its registry (metrics, saving its progress)."""

    def caption_sent(self, runner: OutputRunner) -> None: ...

    def send_failed(self, runner: OutputRunner) -> None: ...


class OutputRunner:
    """One output of room ``room_id`` (see the module). ``target`` None: it could not be made (``error`` says why);
    the output shows ``failed``. ``spec.progress``: where to resume (None: where the audience is now)."""

    def __init__(
        self,
        room_id: str,
        spec: OutputSpec,
        target: Target | None,
        rooms: RoomRegistry,
        layout: Layout,
        events: RunnerEvents,
        error: str | None = None,
    ) -> None:
        self.room_id = room_id
        self.spec = spec
        self.target = target
        self.rooms = rooms
        self.layout = layout
        self.events = events
        self.progress = spec.progress
        self.state = OutputState.FAILED if target is None else OutputState.STOPPED  # until started
        self.sent = 0
        self.last_sent_ms: int | None = None
        self.last_error = error
        self.queue: PendingCaptions | None = None
        self._current: Waiting | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # the queue got captions, or the input ended
        self._room_for_more = asyncio.Event()  # the queue drained to half: the reader may read again
        self._idle = asyncio.Event()  # nothing waits and nothing is in flight
        self._input_done = False
        self._reader_error: Exception | None = None
        self._closing = False
        self._where = f"room {room_id} output {spec.id} ({spec.kind} {redacted_url(spec.url)})"

    @property
    def behind(self) -> int:
        """Captions taken from the room and not sent yet (the one in flight included)."""
        return (len(self.queue) if self.queue is not None else 0) + (self._current is not None)

    def view(self) -> dict[str, Any]:
        """What ``GET /rooms/{id}/outputs`` shows of it."""
        return {
            **self.spec.public(),
            "state": self.state.value,
            "sent": self.sent,
            "last_sent_ms": self.last_sent_ms,
            "last_error": self.last_error,
            "behind": self.behind,
            "status": self.target.status() if self.target is not None else {},
        }

    def start(self) -> None:
        """Start following the room (needs the running event loop). An output without a target stays failed."""
        if self.target is not None and self._task is None:
            self.state = OutputState.CONNECTED
            self._task = asyncio.create_task(self._run(), name=f"output-{self.room_id}-{self.spec.id}")

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop: after up to ``grace_s`` for what waits to go out (a stopping server's last sentences), then at
        once; a send in flight is abandoned (it went out or not: the next start sends it again if its
        acknowledgement was not kept). Lets go of the target. Safe to call twice."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None and not task.done() and grace_s > 0 and self.behind:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace_s)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.state is not OutputState.FAILED:
            self.state = OutputState.STOPPED
        if self.target is not None:
            try:
                await self.target.close()
            except Exception:  # a target's failure to let go must not stop the others
                log.exception("%s: closing its target failed", self._where)

    # ---- the two tasks ---------------------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._follow()
        except Exception as exc:  # a bug must show on the output, not end it silently
            log.exception("%s: stopped by an unexpected error", self._where)
            why = str(exc) if isinstance(exc, LookupError) else f"internal error: {type(exc).__name__}: {exc}"
            self.state, self.last_error = OutputState.FAILED, why

    async def _follow(self) -> None:
        room = await self._room()
        if room is None:
            return
        self.progress = self.progress or Progress(audience_seq(room))
        self.queue = PendingCaptions(room.record.created_ms, self.layout.speaker_name, self.progress, self.spec.lang)
        reader = asyncio.create_task(self._read(), name=f"output-read-{self.room_id}-{self.spec.id}")
        try:
            await self._send_all()
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if self.target is not None:  # the room ended or the destination refused: nothing more goes out
            await self.target.close()

    async def _room(self) -> Room | None:
        """The room in memory (loaded if it is not: a subscription keeps it there); None when it is gone."""
        while True:
            try:
                room = await self.rooms.get(self.room_id)
            except StoreError as exc:
                log.warning("%s: cannot load the room (%s); trying again", self._where, exc)
                await asyncio.sleep(STORE_RETRY_S)
                continue
            if room is None:
                self.state, self.last_error = OutputState.FAILED, "the room does not exist"
            return room

    async def _read(self) -> None:
        """The room's audience stream into the queue (see the module). An unexpected error is handed to the sender,
        which stops the output with it once what was taken is sent."""
        try:
            await self._read_stream()
        except Exception as exc:
            log.exception("%s: reading the room failed", self._where)
            self._reader_error = exc
            self._wake.set()

    async def _read_stream(self) -> None:
        assert self.queue is not None
        while not self._closing:
            room = await self._room()  # again each time: an idle room may have left memory meanwhile
            if room is None:
                raise LookupError("the room does not exist")
            viewer = room.subscribe()
            room.audience.until_end(viewer)
            try:
                await self._catch_up(room)
                while len(self.queue) < MAX_WAITING:
                    item = await viewer.get(None)  # an item, the room's end, or a cut-off: nothing to look at meanwhile
                    if item is None and viewer.state is ViewerState.FINISHED:
                        self._input_done = True  # the room ended and its audience has everything
                        self._wake.set()
                        return
                    if item is None:
                        break  # cut off, or the room closed: subscribe again
                    if item.durable and self.queue.take(item.seq, item.message, room.names):
                        self._wake.set()
            finally:
                room.unsubscribe(viewer)
            if len(self.queue) >= MAX_WAITING:
                log.warning(
                    "%s: %d captions wait for the destination; reading on from the store once half are sent",
                    self._where,
                    len(self.queue),
                )
                self._room_for_more.clear()
                await self._room_for_more.wait()
            else:
                await asyncio.sleep(RESUBSCRIBE_S)  # (once per cut-off, not a poll: a cut-off is rare)

    async def _catch_up(self, room: Room) -> None:
        """Take the stored events after what the queue has, as a resuming audience viewer gets them: up to what the
        audience has, each sentence in its last version among them (``app.rooms.stream.as_corrected``)."""
        assert self.queue is not None
        after = self.queue.read_to
        while True:
            try:
                events = await room.read_events_after(after)
                limit = room.audience.replay_until()
                if limit is not None:
                    events = [(seq, m) for seq, m in events if seq <= limit]
                events = as_corrected(events)
                break
            except StoreError as exc:
                log.warning("%s: cannot read the room's events (%s); trying again", self._where, exc)
                await asyncio.sleep(STORE_RETRY_S)
        added = False
        for seq, message in events:
            added = self.queue.take(seq, message, room.names) or added
        if added:
            self._wake.set()

    async def _send_all(self) -> None:
        """Send what the queue holds, in order, until the room ended and everything went out, or the destination
        refused for good."""
        assert self.queue is not None and self.progress is not None
        while True:
            current = self.queue.first()
            if current is None:
                self._idle.set()
                self._room_for_more.set()
                if self._reader_error is not None:
                    raise self._reader_error
                if self._input_done:
                    self.state = OutputState.STOPPED
                    log.info("%s: the room ended; every caption went out (%d)", self._where, self.sent)
                    return
                self.state = OutputState.CONNECTED
                self._wake.clear()
                await self._wake.wait()
                continue
            self._idle.clear()
            self._current = self.queue.pop()
            if not await self._deliver(current.caption):
                return
            self.progress = self.progress.after(current.caption.seq, current.caption.sentence_id, current.last)
            self._current = None
            self.sent += 1
            self.last_sent_ms = int(time.time() * 1000)
            if len(self.queue) <= MAX_WAITING // 2:
                self._room_for_more.set()
            self.events.caption_sent(self)

    async def _deliver(self, caption: OutgoingCaption) -> bool:
        """Send ``caption`` until the target takes it (True) or refuses for good (False: the output failed)."""
        assert self.target is not None
        backoff = Backoff()
        while True:
            self.state = OutputState.SENDING
            try:
                await self.target.send(caption)
            except TargetError as exc:
                error = exc
            except Exception as exc:  # a target's own bug: shown and retried, never a silent end of the output
                log.exception("%s: sending failed unexpectedly", self._where)
                # its text may quote what the destination sent (failures): the editor sees only its type
                error = TargetError(f"internal error ({type(exc).__name__})")
            else:
                self.last_error = None
                return True
            self.last_error = str(error)
            self.events.send_failed(self)
            if error.permanent:
                self.state = OutputState.FAILED
                log.error("%s: stopped: %s", self._where, error)
                return False
            wait_s = backoff.next_s(error)
            log.warning("%s: %s; sentence %d again in %.1f s", self._where, error, caption.sentence_id, wait_s)
            self.state = OutputState.RETRYING
            await asyncio.sleep(wait_s)


def audience_seq(room: Room) -> int:
    """The newest seq the room's audience has: where a new output starts."""
    released = room.audience.released
    return room.seq if released is None else released
