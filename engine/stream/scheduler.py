"""Decode scheduling across all sessions: finals first, at most one partial per session, latest audio wins.

Policy: a session that wants a partial joins a waiting set; it is not given a request id yet, so the audio it will
send is chosen only when a slot frees up (newest audio wins, stale requests never pile up). A session that asks while
its own partial runs joins the waiting set as that one finishes: an ask is never dropped (sessions ask as VAD results
come in; for a sender ahead of real time they come seldom, a second of audio at a time, and what made the partial due,
the first words or a pause, may be over by the next ones). Partials run at most ``max_inflight`` at a time across
sessions, and none starts while a final is in flight, with one exception: a session whose speaker has paused
(``closing``: that partial is about to become its final) starts at once, as a final would, and holds the others back
while it runs, as a final does. The others wait in this order: sessions whose sentence shows nothing yet (their first
words), then the least recently served. A running partial is not aborted for newer audio (on CPU that starved partials
entirely), with one exception: once its speaker has paused after words it did not hear, it is
restarted on all of them (``restart_partial``), because that decode is the one the sentence's lock waits for; a
pause allows one restart. When its segment ends it is cancelled so that the final goes first, unless it
already covers all of the segment's speech: then it *is* the final decode, and the session adopts it instead of
starting the same work again (``adopt_partial``).

Every decode is charged to the recognizer's measured load (``engine.stream.load``): how busy it is, what a partial
costs in each encoder window, and so how often each session may have one (``partial_share``, ``partial_cost_s``): the
recognizer's time that finals leave, split fairly among the sessions speaking, so that partials thin out evenly under
load before a final has to wait.

Files (uploads, ``SessionOptions.background``) decode behind all of that, at the recognizer's lowest priority:
``background`` runs at most ``max_background`` of their segments at once, never while a live final is in flight,
and otherwise only while live speech leaves the recognizer alone (no partial running or waiting, and none asked for
in the last ``LIVE_QUIET_S``), unless the segment has waited ``background_floor_s``: under constant live speech a
file still gets a segment every few seconds. Why so strict: on a CPU one engine step encodes a file's whole segment,
and a live partial that arrives meanwhile waits for that step (measured in ``bench/upload.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from engine.asr.transcriber import DecodeRequest, Priority, Transcriber, Transcript
from engine.observe import EngineObserver
from engine.stream.load import FINAL, RecognizerLoad

log = logging.getLogger(__name__)

BACKGROUND_FLOOR_S = 3.0  # a file segment that has waited this long for live speech to pause goes regardless
LIVE_QUIET_S = 1.0  # live speech has paused once no session has spoken or asked for a decode in this long
# A client counts as alone once no other has asked for a partial in this long: longer than the pause between two
# sentences, so that other speakers who have paused still count, and than a partial's interval under load.
ALONE_AFTER_S = 3.0
# However busy the finals keep the recognizer, partials together may still take this share of what they are given
# (``partial_share``): a speaker keeps seeing words, less often.
MIN_PARTIAL_PART = 0.25


class PartialClient(Protocol):
    """What the scheduler needs from a session."""

    session_id: str

    @property
    def last_partial_started_s(self) -> float:
        """When its last partial request was made (the client's clock); 0 if never."""
        ...

    @property
    def closing(self) -> bool:
        """Its speaker paused: the next partial is probably its final, so it goes first."""
        ...

    @property
    def first_words(self) -> bool:
        """Its open sentence shows no text yet: the next partial brings its first words (it goes before the partials
        of sentences already on screen)."""
        ...

    def partial_request(self) -> DecodeRequest | None:
        """The request for the session's newest audio (the client sets ``last_partial_started_s``), or None if a
        partial is no longer wanted."""
        ...

    def on_partial(self, request: DecodeRequest, result: Transcript) -> None: ...

    def on_partial_failed(self, request: DecodeRequest, exc: BaseException) -> None: ...


@dataclass(frozen=True, slots=True)
class _Running:
    """A session's partial decode in flight: its request and the task running it."""

    request: DecodeRequest
    task: asyncio.Task[Transcript | None]


class DecodeScheduler:
    """Owns every partial task; finals are awaited by their sessions through ``final``."""

    def __init__(
        self,
        transcriber: Transcriber,
        max_inflight_partials: int,
        max_background: int = 1,
        background_floor_s: float = BACKGROUND_FLOOR_S,
        observer: EngineObserver | None = None,
        load: RecognizerLoad | None = None,
        window_for: Callable[[float], float] | None = None,
    ) -> None:
        """``observer`` hears of every decode that finishes (``EngineObserver.decoded``); ``load`` is charged with
        every decode (a fresh one if None); ``window_for``: the encoder window (s) a request of that much audio (s)
        decodes in (None: the audio's own length, for recognizers without windows)."""
        self.transcriber = transcriber
        self.observer = observer if observer is not None else EngineObserver()
        self.load = load if load is not None else RecognizerLoad()
        self._window_for = window_for
        self.max_inflight_partials = max(1, max_inflight_partials)
        self.max_background = max(1, max_background)
        self._background = 0  # file segments decoding now (slots handed to waiters included)
        # File segments waiting for their turn: (resolved when let in, monotonic time it began to wait).
        self._background_waiting: deque[tuple[asyncio.Future[None], float]] = deque()
        self.background_floor_s = background_floor_s
        self._floor_timer: asyncio.TimerHandle | None = None
        self._live_at = float("-inf")  # monotonic time a live session last spoke or asked for a decode
        self._waiting: dict[str, PartialClient] = {}
        self._again: dict[str, PartialClient] = {}  # asked while their partial ran: they wait once it finishes
        self._running: dict[str, _Running] = {}
        self._closing: set[str] = set()  # sessions whose running partial started as closing (it holds partials back)
        # Monotonic time each client last spoke: had new speech in its open segment (``note_speaking``), or asked for
        # a partial. ``alone``, ``speaking``: a paced session asks seldom under load, but speaks all the same.
        self._asked: dict[str, float] = {}
        self._finals = 0
        self._idle_waiters: dict[str, list[asyncio.Future[None]]] = {}  # ``idle`` callers, by session id
        self.partials_done = 0
        self.partial_decode_ema_s = 0.0  # smoothed wall time of a partial decode

    @property
    def finals_inflight(self) -> int:
        return self._finals

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def alone(self, client: PartialClient) -> bool:
        """True while no other client has asked for a partial in the last ``ALONE_AFTER_S`` (or has one waiting or
        running) and no final is decoding: the client is the only one speaking, and a request of its own waits for
        nothing but its own partial."""
        me = client.session_id
        if self._finals or any(sid != me for sid in self._waiting) or any(sid != me for sid in self._running):
            return False
        self._forget_quiet(time.monotonic())
        return all(sid == me for sid in self._asked)

    def note_speaking(self, client: PartialClient) -> None:
        """The client's open segment has new speech (whether or not a partial is due): it counts as speaking
        (``speaking``, ``alone``) and live speech holds files back (``background``)."""
        now = time.monotonic()
        self._live_at = self._asked[client.session_id] = now

    def speaking_sessions(self) -> set[str]:
        """The ids of the sessions ``speaking`` counts."""
        self._forget_quiet(time.monotonic())
        return set(self._asked)

    def speaking(self) -> int:
        """Sessions that spoke (``note_speaking``) or asked for a partial in the last ``ALONE_AFTER_S``: those speaking
        now (their partials share the recognizer)."""
        self._forget_quiet(time.monotonic())
        return len(self._asked)

    def partial_share(self, total: float, per_session: float) -> float:
        """The share of the recognizer's time one speaking session's partials may take: of ``total`` (the share all
        partials and finals together may fill), what the finals leave now (at least ``MIN_PARTIAL_PART`` of it),
        split evenly among the sessions speaking, and at most ``per_session``. 0 when ``total`` is 0 (no pacing)."""
        if total <= 0:
            return 0.0
        left = max(total - self.load.busy(FINAL), MIN_PARTIAL_PART * total)
        share = left / max(1, self.speaking())
        return min(share, per_session) if per_session > 0 else share

    def partial_cost_s(self, audio_s: float) -> float:
        """The expected cost (recognizer seconds) of a partial decode of ``audio_s`` seconds of audio: the measured
        cost of its encoder window (0 before anything was measured)."""
        window = self._window_for(audio_s) if self._window_for is not None else audio_s
        return self.load.cost_s(window)

    def _forget_quiet(self, now: float) -> None:
        """Drop from ``_asked`` the clients that have not asked for ``ALONE_AFTER_S`` (gone quiet, or closed)."""
        for sid in [sid for sid, t in self._asked.items() if now - t >= ALONE_AFTER_S]:
            del self._asked[sid]

    def is_busy(self, client: PartialClient) -> bool:
        """True while the client has a partial waiting or running."""
        return client.session_id in self._waiting or client.session_id in self._running

    async def idle(self, client: PartialClient) -> None:
        """Return once the client has no partial waiting or running (one it asks for meanwhile included)."""
        while self.is_busy(client):
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.setdefault(client.session_id, []).append(fut)
            await fut

    def want_partial(self, client: PartialClient) -> None:
        """Ask for a partial of the client's newest audio: a no-op if one is already waiting; if one is running,
        the client waits for the next slot once that one has finished (unless it is cancelled or adopted)."""
        now = time.monotonic()
        self._forget_quiet(now)  # (here too: ``alone`` may never be asked, and sessions come and go)
        self._live_at = self._asked[client.session_id] = now
        if client.session_id in self._running:
            self._again[client.session_id] = client
            return
        if client.session_id in self._waiting:
            return
        self._waiting[client.session_id] = client
        self._pump()

    def restart_partial(self, client: PartialClient) -> None:
        """Cancel the client's running partial and ask for a new one of its newest audio at once. For a client whose
        speaker paused after words the running one did not hear (``Partials.want``): it is ``closing``, so its new
        partial goes ahead of the others waiting."""
        self._again.pop(client.session_id, None)
        entry = self._running.pop(client.session_id, None)
        self._closing.discard(client.session_id)
        if entry is not None:
            entry.task.cancel()
        self.want_partial(client)

    def running_partial(self, client: PartialClient) -> DecodeRequest | None:
        """The request of the client's partial decode in flight, if any."""
        entry = self._running.get(client.session_id)
        return entry.request if entry else None

    def cancel_partial(self, client: PartialClient) -> None:
        """Drop the client's waiting partial and cancel its running one (its segment ended)."""
        self._waiting.pop(client.session_id, None)
        self._again.pop(client.session_id, None)
        entry = self._running.pop(client.session_id, None)
        self._closing.discard(client.session_id)
        if entry is not None:
            entry.task.cancel()
        self._pump()

    def adopt_partial(self, client: PartialClient) -> asyncio.Task[Transcript | None] | None:
        """Take over the client's running partial as its final decode (see ``final_of``); None if none runs. From
        now until it ends it counts as a final in flight (partials wait for it)."""
        self._waiting.pop(client.session_id, None)
        self._again.pop(client.session_id, None)
        entry = self._running.pop(client.session_id, None)
        self._closing.discard(client.session_id)
        if entry is None:
            return None
        task = entry.task
        self._finals += 1

        def done(_task: asyncio.Task[Transcript | None]) -> None:
            self._finals -= 1
            self._pump()

        task.add_done_callback(done)
        return task

    async def _decode(self, request: DecodeRequest) -> Transcript:
        """One decode, charged to the recognizer's load (``engine.stream.load``) by its priority."""
        ticket = self.load.begin(request.priority.kind)
        window: float | None = None
        try:
            result = await self.transcriber.transcribe(request)
            window = result.window_s if request.priority is Priority.PARTIAL else None
            return result
        finally:
            self.load.end(ticket, window)

    async def final(self, request: DecodeRequest) -> Transcript:
        """Decode a closed segment at final priority. Partials wait while any final is in flight."""
        self._finals += 1
        self._live_at = time.monotonic()
        try:
            return self._report(request, await self._decode(request))
        finally:
            self._finals -= 1
            self._pump()

    async def background(self, request: DecodeRequest) -> Transcript:
        """Decode a file's segment (``Priority.BACKGROUND``) once the live work allows (see the module docstring).
        Callers are served in the order they came."""
        if not self._background_waiting and self._background_may_start(time.monotonic()):
            self._background += 1
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (turn, time.monotonic())
            self._background_waiting.append(entry)
            self._pump()  # arms the floor timer
            try:
                await turn  # _pump hands over the slot (counted) when it resolves this
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():  # the slot was handed over just as we were cancelled
                    self._background -= 1
                    self._pump()
                else:
                    self._background_waiting.remove(entry)
                raise
        try:
            return self._report(request, await self._decode(request))
        finally:
            self._background -= 1
            self._pump()

    @property
    def background_inflight(self) -> int:
        return self._background

    def _background_may_start(self, waiting_since: float) -> bool:
        """May a file segment that began to wait at ``waiting_since`` (monotonic) start now?"""
        if self._finals or self._background >= self.max_background:
            return False
        now = time.monotonic()
        if not self._running and not self._waiting and now - self._live_at >= LIVE_QUIET_S:
            return True  # live speech leaves the recognizer alone
        return now - waiting_since >= self.background_floor_s

    def _report(self, request: DecodeRequest, result: Transcript) -> Transcript:
        self.observer.decoded(request.priority.kind, result.window_s, result.decode_s, result.fallbacks)
        return result

    @staticmethod
    async def final_of(adopted: asyncio.Task[Transcript | None]) -> Transcript | None:
        """Await an adopted partial as a final (``adopt_partial``: it counts as a final in flight until it ends).
        None if that decode failed."""
        return await adopted

    def _pump(self) -> None:
        while self._background_waiting and self._background_may_start(self._background_waiting[0][1]):
            turn, _since = self._background_waiting.popleft()
            if not turn.done():
                self._background += 1
                turn.set_result(None)
        if self._background_waiting and self._floor_timer is None:
            # Held back by live work: look again when live speech may have paused, or when the head of the queue has
            # waited long enough to go regardless.
            # (Running or waiting partials call _pump themselves when they finish.)
            now = time.monotonic()
            at = self._background_waiting[0][1] + self.background_floor_s
            if self._live_at + LIVE_QUIET_S > now:
                at = min(at, self._live_at + LIVE_QUIET_S)
            wait_s = max(0.0, at - now)
            self._floor_timer = asyncio.get_running_loop().call_later(wait_s, self._floor_reached)
        while self._waiting:
            client = min(
                self._waiting.values(), key=lambda c: (not c.closing, not c.first_words, c.last_partial_started_s)
            )
            if not client.closing and (
                self._finals or self._closing or len(self._running) >= self.max_inflight_partials
            ):
                # A closing partial is its sentence's final: it waits for no slot, as a final would not, and like a
                # final it holds the other partials back while it runs (on a CPU they would share its cores).
                break
            del self._waiting[client.session_id]
            request = client.partial_request()
            if request is None:
                continue
            task = asyncio.create_task(self._run_partial(client, request), name=request.request_id)
            self._running[client.session_id] = _Running(request, task)
            if client.closing:
                self._closing.add(client.session_id)
            task.add_done_callback(self._forget(client.session_id))
        for session_id in [s for s in self._idle_waiters if s not in self._waiting and s not in self._running]:
            for fut in self._idle_waiters.pop(session_id):
                if not fut.done():
                    fut.set_result(None)

    def _floor_reached(self) -> None:
        self._floor_timer = None
        self._pump()

    def _forget(self, session_id: str) -> Callable[[asyncio.Task[Transcript | None]], None]:
        def done(task: asyncio.Task[Transcript | None]) -> None:
            entry = self._running.get(session_id)
            if entry is not None and entry.task is task:
                del self._running[session_id]
                self._closing.discard(session_id)
                again = self._again.pop(session_id, None)
                if again is not None:  # it asked meanwhile: its newest audio goes next
                    self._waiting[session_id] = again
            self._pump()

        return done

    async def _run_partial(self, client: PartialClient, request: DecodeRequest) -> Transcript | None:
        try:
            result = await self._decode(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            client.on_partial_failed(request, exc)
            return None
        self._report(request, result)
        self.partials_done += 1
        a = 0.3
        self.partial_decode_ema_s = (
            result.decode_s if self.partials_done == 1 else ((1 - a) * self.partial_decode_ema_s + a * result.decode_s)
        )
        client.on_partial(request, result)
        return result
