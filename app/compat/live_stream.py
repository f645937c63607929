"""A live caption stream over a WebSocket (FunASR's, Deepgram's and OpenAI Realtime's protocols), in the pieces
every such protocol shares, so that each protocol module only translates messages:

- admission is ``app.ops.admit_publisher``, the one way in of every live session, ``POST /offer`` and WHIP too (the
  server is not stopping, the engine is ready, the server's capacity or the operator's cap has room, then the
  ``?room=`` exists); it raises ``Refused`` with the ``Refusal`` (its reason and when to try again), which each
  protocol answers in its own way, always with ``Retry-After`` where waiting helps, or ``NoRoom``. ``open_live``
  raises ``Refused`` too when the engine will not
  open the session after all (the same refusals); the protocol's socket is open by then, so it closes it with
  ``Refusal.close_code``.
- ``LiveStream`` (``open_live``): the engine session of an admitted stream, configured, publishing into its room,
  registered in ``STREAMS`` so that a stopping server asks it to finish (``stopping``); ``messages`` yields the
  session's messages after each has gone to the room; leaving the ``open_live`` block closes everything once.
- reading the client's messages (``client_messages``, ``ReadAhead``) is ``app.compat.read_ahead``'s.
- ``OnlineText``: append-only text out of the engine's captions (settled words, each once, then the rest of each
  sentence as it locks), for protocols whose clients append what they get (FunASR's online text, OpenAI's deltas).
- ``SpeechWatch``: when speech starts and stops in the session (its own speech events), for protocols that announce
  it (Deepgram's ``SpeechStarted`` and ``UtteranceEnd``, OpenAI's ``input_audio_buffer.speech_started``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web

from engine import (
    EngineError,
    Heard,
    IllegalTransition,
    Session,
    SessionOptions,
    SessionState,
    SpeechEvent,
    SpeechStarted,
    protocol,
)

from ..keys import CONFIG, ENGINE
from ..ops import ADMISSION, STREAMS, Admitted, Refused
from ..rooms import ROOMS, RoomPublisher
from .client_socket import ClientSocket
from .redaction import Redactor

log = logging.getLogger(__name__)


class LiveStream:
    """An admitted stream's engine session and room publisher (see ``open_live``).

    A stream ends for a reason its client is told: the client ends it, goes away, or is cut off
    (``client_socket``); the server stops (``stopping``); or it reaches a limit (``expired``, ``expiry`` says
    which): no audio for ``idle_s`` (keep-alives do not count), or ``max_s`` in all (0: no such limit)."""

    def __init__(
        self,
        session: Session,
        publisher: RoomPublisher | None,
        stop_timeout_s: float,
        idle_s: float = 0.0,
        max_s: float = 0.0,
        redactor: Redactor | None = None,
        sock: ClientSocket | None = None,
    ) -> None:
        self.session = session
        self.redactor = redactor  # what the caller asked to keep out of its results and the room's transcript
        self.publisher = publisher
        self.stopping = asyncio.Event()  # the server is stopping: finish as if the client had ended its audio
        self.ended = asyncio.Event()  # the session has said its last message (``messages`` is over)
        self.expired = asyncio.Event()  # the stream reached a limit: finish as if the client had ended its audio
        self.expiry: Expiry | None = None
        self.idle_s, self.max_s = idle_s, max_s
        self._stop_timeout_s = stop_timeout_s
        self.sock = sock  # its client's socket, when it has one
        self._flushing: asyncio.Task[None] | None = None
        self._flush_again = False
        self._on_flushed: Callable[[int], None] | None = None

    def ending(self) -> bool:
        """The stream is ending whatever its client does: the server stops, a limit was reached, or the client is
        gone (its audio already received is then fed as fast as the engine takes it: ``PcmFeed``'s ``unpaced``)."""
        return self.stopping.is_set() or self.expired.is_set() or (self.sock is not None and not self.sock.open)

    @property
    def stops(self) -> tuple[asyncio.Event, ...]:
        """What ends the client's reading besides the client: the server stopping, the session ending, a limit."""
        return self.stopping, self.ended, self.expired

    async def messages(self) -> AsyncIterator[protocol.ServerMessage]:
        """The session's messages until it ends, each published to the room first (a failing store never costs the
        client its captions), redacted first when the caller asked (``redactor``). ``ended`` is set after the last
        one (not when the consumer stops early: a relay cancelled by a failing handler leaves the rest to
        ``rescue``)."""
        async for msg in self.session.messages():
            if self.redactor is not None:
                msg = self.redactor.message(msg)
            if self.publisher is not None:
                try:
                    await self.publisher.publish(msg)
                except Exception:
                    log.exception("%s: could not publish to room %s", self.session.session_id, self.publisher.room.id)
            yield msg
        self.ended.set()

    async def finish(self) -> None:
        """Lock the open sentence and end the session (its last messages follow), unless it has ended already."""
        if self.session.state is SessionState.LIVE:
            try:
                await asyncio.wait_for(self.session.stop(), self._stop_timeout_s)
            except TimeoutError:
                # Its last sentence is lost; closing ends its messages, so nothing waits on them for ever.
                log.warning("%s: stop took over %.0f s; closed", self.session.session_id, self._stop_timeout_s)
                await self.session.close()

    def flush(self, on_flushed: Callable[[int], None] | None = None) -> None:
        """Lock the open sentence now, in the background (``Session.finalize``), for a client's ``Finalize`` or
        ``commit``: one flush at a time per stream, and a burst of requests while one runs costs one more flush, not
        one each. ``on_flushed`` hears where each flush ended (ms of session audio)."""
        if on_flushed is not None:
            self._on_flushed = on_flushed
        if self._flushing is not None:
            self._flush_again = True
            return
        self._flushing = asyncio.create_task(self._flush(), name=f"{self.session.session_id}-flush")

    async def _flush(self) -> None:
        try:
            again = True
            while again:
                self._flush_again = False
                with contextlib.suppress(IllegalTransition):  # the stream is ending: its stop locks everything
                    flushed_ms = await self.session.finalize()
                    if self._on_flushed is not None:
                        self._on_flushed(flushed_ms)
                again = self._flush_again
        finally:
            self._flushing = None

    async def rescue(self) -> None:
        """The stream's handler ended without finishing (it failed): finish the session and publish its last
        messages to the room all the same, within the stop timeout."""
        if self.ended.is_set():  # (its relay saw the session's last message)
            return
        await self.finish()

        async def drain() -> None:
            async for _msg in self.messages():
                pass

        try:
            await asyncio.wait_for(drain(), self._stop_timeout_s)
        except TimeoutError:
            log.warning("%s: its last messages took over %.0f s", self.session.session_id, self._stop_timeout_s)

    async def watch_limits(self, clock: Callable[[], float] = time.monotonic, every_s: float = 1.0) -> None:
        """Set ``expired`` (and ``expiry``) when the stream reaches a limit; runs until then (or is cancelled)."""
        started = last_audio = clock()
        heard = self.session.audio_s
        while not self.expired.is_set():
            await asyncio.sleep(every_s)
            now = clock()
            if self.session.audio_s != heard:
                heard, last_audio = self.session.audio_s, now
            if self.max_s and now - started >= self.max_s:
                self.expiry = Expiry(
                    "max", f"the stream reached its maximum length of {_span(self.max_s)}; connect again to go on"
                )
            elif self.idle_s and now - last_audio >= self.idle_s:
                self.expiry = Expiry("idle", f"no audio for {_span(self.idle_s)}: the stream is closed")
            else:
                continue
            log.info("%s: %s", self.session.session_id, self.expiry.message)
            self.expired.set()


@dataclass(frozen=True)
class Expiry:
    """Which limit a stream reached (``kind``: ``idle`` or ``max``) and what to tell its client."""

    kind: str
    message: str


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:g} s"


@contextlib.asynccontextmanager
async def open_live(
    app: web.Application,
    admitted: Admitted,
    options: SessionOptions,
    configure: bool = True,
    redactor: Redactor | None = None,
    sock: ClientSocket | None = None,
) -> AsyncIterator[LiveStream]:
    """The engine session of ``admitted``, configured with ``options`` (``configure=False``: the caller configures
    it before the first audio, once its client has said how) and joined to its room, registered in ``STREAMS``
    while the block runs (a stop there also hurries ``sock``, its client's socket), its limits watched
    (``LiveStream.watch_limits``). Leaving the block leaves the room,
    closes the session and frees the slot (whatever happened); leaving it by an error first finishes the session
    and publishes its last sentence (``LiveStream.rescue``): no words are lost to a failing handler. Raises
    ``Refused`` when the engine will not open the session after all (``Admission.refusal_for``)."""
    try:
        try:
            session = app[ENGINE].open_session(options)
        except EngineError as exc:  # (EngineNotReady is one)
            raise Refused(app[ADMISSION].refusal_for(exc)) from None
        if configure:
            session.configure(options)
        publisher = None
        if admitted.room is not None:
            # The room object fetched at admission may have left memory meanwhile (as in POST /offer).
            room = await app[ROOMS].get(admitted.room.id) or admitted.room
            publisher = room.join(session.session_id, admitted.name)
            room.share_microphone(session.session_id, session)
        config = app[CONFIG]
        stream = LiveStream(
            session, publisher, config.stop_timeout_s, config.stream_idle_s, config.stream_max_s, redactor, sock
        )
        limits = asyncio.create_task(stream.watch_limits(), name=f"{session.session_id}-limits")
        try:

            def stop() -> None:  # the server stops: finish, and give a client that does not read a short wait
                stream.stopping.set()
                if sock is not None:
                    sock.hurry()

            with app[STREAMS].running(session, stop):
                try:
                    yield stream
                except Exception:
                    log.exception("%s: the stream failed; finishing its open sentence", session.session_id)
                    await stream.rescue()
                    raise
        finally:
            limits.cancel()
            flushing = stream._flushing
            if flushing is not None:
                flushing.cancel()
            await asyncio.gather(limits, *(t for t in (flushing,) if t is not None), return_exceptions=True)
            if publisher is not None:
                publisher.leave()
            await session.close()
    finally:
        admitted.slot.release()


class SpeechWatch:
    """When speech starts and stops in ``session`` and how far its VAD has heard, from the session's own speech
    events (``Session.watch_speech``), for protocols that announce them. ``ready`` hands out the events told so far,
    in order (every segment, however short; a change of voice is the old segment's stop then the new one's start),
    ``wait`` waits for one; ``speaking`` (the segment open) and ``heard_ms``
    (how far the VAD has heard) are as of the last event handed out. A protocol whose messages depend on both the
    speech events and the session's messages hands out the events told before each message first (the session
    tells a segment's stop before it posts the sentence it makes). Close it (``close``) when the stream ends."""

    def __init__(self, session: Session) -> None:
        self._told: collections.deque[SpeechEvent] = collections.deque()
        self._arrived = asyncio.Event()
        self._stop = session.watch_speech(self._tell)
        self.speaking: SpeechStarted | None = None
        self.heard_ms = 0

    def _tell(self, event: SpeechEvent) -> None:
        self._told.append(event)
        self._arrived.set()

    def ready(self) -> list[SpeechEvent]:
        """The events told and not handed out yet, in order."""
        out = list(self._told)
        self._told.clear()
        self._arrived.clear()
        for event in out:
            if isinstance(event, Heard):
                self.heard_ms = max(self.heard_ms, event.position_ms)
            elif isinstance(event, SpeechStarted):
                self.speaking = event
            elif self.speaking is not None and self.speaking.index == event.index:
                self.speaking = None
        return out

    async def wait(self) -> None:
        """Return once an event waits to be handed out."""
        while not self._told:
            self._arrived.clear()
            await self._arrived.wait()

    def close(self) -> None:
        self._stop()


class OnlineText:
    """Append-only online text: the engine's stable words (``Caption.stable``: settled, they lock exactly as shown),
    each sent once; when a sentence locks, its words not sent yet go out. Word counts are of the text not locked
    yet."""

    def __init__(self) -> None:
        self._sent = 0  # words of the unlocked text already sent

    def partial(self, text: str, stable: int) -> list[str]:
        """New settled words of the unlocked text ``text``, whose first ``stable`` words are settled (may be none)."""
        if stable <= self._sent:
            return []
        out = text.split()[self._sent : stable]
        self._sent = stable
        return out

    def locked(self, text: str) -> list[str]:
        """A sentence locked: its words not sent as online text yet."""
        words = text.split()
        rest = words[self._sent :]
        self._sent = max(0, self._sent - len(words))
        return rest
