"""Named fake recognizers for tests of scheduling logic, never for accuracy or end-to-end tests.

``FakeTranscriber`` answers after a configurable delay with a text that says which audio it saw, and records the
order in which requests started and finished, so tests can check coalescing, cancellation and priority.
``SharedCoreFake`` behaves like a CPU recognizer under load instead: the requests in flight share one core, so more of
them at once make each one slower (tests of capacity and of what thins out under load).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.asr.transcriber import DecodeRequest, Priority, TranscriberState, Transcript
from engine.audio.pcm import SAMPLE_RATE
from engine.config import WindowPolicy
from engine.errors import EngineNotReady


@dataclass
class FakeTranscriber:
    """Decodes nothing: returns ``"audio of N seconds"`` after ``delay_s`` (finals after ``final_delay_s``), in
    the language asked for (``"audio of N seconds in English"`` for the task ``"translate"``: the two tasks' texts
    differ, as a real model's do).

    Requests beyond ``capacity`` wait, finals first, modelling a priority-scheduled engine with that many slots.
    """

    delay_s: float = 0.2
    final_delay_s: float | None = None
    capacity: int = 8
    name: str = "fake"
    started: list[tuple[str, Priority, int]] = field(default_factory=list)  # (request_id, priority, samples)
    finished: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    log: list[tuple[str, str, Priority, float]] = field(default_factory=list)  # (event, request_id, priority, t)
    _state: TranscriberState = TranscriberState.NEW
    _inflight: dict[str, Priority] = field(default_factory=dict)
    _waiting: list[tuple[int, float, asyncio.Future[None]]] = field(default_factory=list)
    _running: int = 0
    _detail: str = ""

    @property
    def state(self) -> TranscriberState:
        return self._state

    @property
    def warm_costs(self) -> dict[float, float]:
        """Its answer delay, as a cost measured in Whisper's full window (it has no windows)."""
        return {30.0: self.delay_s}

    @property
    def detail(self) -> str:
        return self._detail

    def die(self, detail: str = "fake engine process killed") -> None:
        """Fail as an engine whose process died: FAILED, and every request from now on raises."""
        self._state = TranscriberState.FAILED
        self._detail = detail

    async def start(self) -> None:
        self._state = TranscriberState.READY

    def load(self) -> dict[str, int]:
        values = list(self._inflight.values())
        return {
            "final": values.count(Priority.FINAL),
            "partial": values.count(Priority.PARTIAL),
            "background": values.count(Priority.BACKGROUND),
        }

    def stats(self) -> dict[str, Any]:
        return {"finished": len(self.finished), "cancelled": len(self.cancelled)}

    async def _slot(self, priority: Priority) -> None:
        if self._running < self.capacity:
            self._running += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((int(priority), time.monotonic(), fut))
        self._waiting.sort(key=lambda w: (w[0], w[1]))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release()  # the slot was handed over just as we were cancelled
            else:
                self._waiting = [w for w in self._waiting if w[2] is not fut]
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, fut = self._waiting.pop(0)
            if not fut.done():
                fut.set_result(None)
                return
        self._running -= 1

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        if self._state is TranscriberState.FAILED:
            raise EngineNotReady("failed", self._detail)
        t0 = time.monotonic()
        self._inflight[request.request_id] = request.priority
        self.log.append(("submit", request.request_id, request.priority, t0))
        try:
            await self._slot(request.priority)
            try:
                self.started.append((request.request_id, request.priority, request.audio.size))
                self.log.append(("start", request.request_id, request.priority, time.monotonic()))
                delay = (
                    self.final_delay_s
                    if (request.priority == Priority.FINAL and self.final_delay_s is not None)
                    else self.delay_s
                )
                await asyncio.sleep(delay)
            finally:
                self._release()
        except asyncio.CancelledError:
            self.cancelled.append(request.request_id)
            self.log.append(("cancel", request.request_id, request.priority, time.monotonic()))
            raise
        finally:
            self._inflight.pop(request.request_id, None)
        self.finished.append(request.request_id)
        self.log.append(("finish", request.request_id, request.priority, time.monotonic()))
        seconds = request.audio.size / SAMPLE_RATE
        text = f"audio of {seconds:.2f} seconds" + (" in English" if request.task == "translate" else "")
        return Transcript(text, request.language, -0.1, 5, time.monotonic() - t0)

    async def close(self) -> None:
        self._state = TranscriberState.CLOSED


@dataclass
class SharedCoreFake:
    """A named fake recognizer that behaves like a CPU under load, for tests of scheduling under load (never of
    accuracy): every request in flight shares one core, so each progresses at 1/k of real time while k run. A request
    needs ``work_s(request)`` seconds of that core alone. Answers as ``FakeTranscriber`` does (``"audio of N
    seconds"``) and logs ``(event, request_id, priority, monotonic time)`` the same way."""

    work_s: Callable[[DecodeRequest], float]
    name: str = "fake-shared-core"
    # Encoder windows, as Whisper's (the engine keys partial costs by them); None: none.
    window_policy: WindowPolicy | None = None
    log: list[tuple[str, str, Priority, float]] = field(default_factory=list)
    _state: TranscriberState = TranscriberState.NEW
    spent_s: dict[Priority, float] = field(default_factory=dict)  # core seconds spent on each priority's requests
    sizes: dict[str, int] = field(default_factory=dict)  # request id -> audio samples it held
    _jobs: dict[str, list[Any]] = field(default_factory=dict)  # request id -> [work left (s), future, priority]
    _last: float = 0.0
    _timer: asyncio.TimerHandle | None = None

    @property
    def state(self) -> TranscriberState:
        return self._state

    @property
    def detail(self) -> str:
        return ""

    @property
    def warm_costs(self) -> dict[float, float]:
        """The work of a request that fills each window but its last second (without windows: of 2 s, in Whisper's
        full window)."""
        windows = self.window_policy.buckets_s if self.window_policy is not None else (30.0,)
        seconds = {w: (w - 1.0 if self.window_policy is not None else 2.0) for w in windows}
        return {
            w: self.work_s(DecodeRequest("warm-up", np.zeros(int(s * SAMPLE_RATE), np.float32), Priority.FINAL))
            for w, s in seconds.items()
        }

    async def start(self) -> None:
        self._state = TranscriberState.READY

    def load(self) -> dict[str, int]:
        values = [job[2] for job in self._jobs.values()]
        return {
            "final": values.count(Priority.FINAL),
            "partial": values.count(Priority.PARTIAL),
            "background": values.count(Priority.BACKGROUND),
        }

    def stats(self) -> dict[str, Any]:
        return {"running": len(self._jobs)}

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        if self._state is not TranscriberState.READY:
            raise EngineNotReady(self._state.value, "")
        t0 = time.monotonic()
        self._advance()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._jobs[request.request_id] = [max(0.0, self.work_s(request)), done, request.priority]
        self.sizes[request.request_id] = request.audio.size
        self.log.append(("start", request.request_id, request.priority, t0))
        self._reschedule()
        try:
            await done
        except asyncio.CancelledError:
            self._advance()
            self._jobs.pop(request.request_id, None)
            self._reschedule()
            self.log.append(("cancel", request.request_id, request.priority, time.monotonic()))
            raise
        self.log.append(("finish", request.request_id, request.priority, time.monotonic()))
        seconds = request.audio.size / SAMPLE_RATE
        window = self.window_policy.window_for(seconds) if self.window_policy is not None else 30.0
        return Transcript(
            f"audio of {seconds:.2f} seconds", request.language, -0.1, 5, time.monotonic() - t0, window_s=window
        )

    def _advance(self) -> None:
        """Spend the core's time since the last event evenly on the requests in flight."""
        now = time.monotonic()
        if self._jobs:
            each = (now - self._last) / len(self._jobs)
            for job in self._jobs.values():
                job[0] -= each
                self.spent_s[job[2]] = self.spent_s.get(job[2], 0.0) + each
        self._last = now

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._jobs:
            soonest = min(job[0] for job in self._jobs.values())
            self._timer = asyncio.get_running_loop().call_later(max(0.0, soonest) * len(self._jobs), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._advance()
        for request_id, job in list(self._jobs.items()):
            if job[0] <= 1e-6:
                del self._jobs[request_id]
                if not job[1].done():
                    job[1].set_result(None)
        self._reschedule()

    async def close(self) -> None:
        self._state = TranscriberState.CLOSED
        if self._timer is not None:
            self._timer.cancel()
