"""A named fake recognizer for tests of scheduling logic, never for accuracy or end-to-end tests.

``FakeTranscriber`` answers after a configurable delay with a text that says which audio it saw, and records the
order in which requests started and finished, so tests can check coalescing, cancellation and priority.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from engine.asr.transcriber import DecodeRequest, Priority, TranscriberState, Transcript
from engine.audio.pcm import SAMPLE_RATE
from engine.errors import EngineNotReady


@dataclass
class FakeTranscriber:
    """Decodes nothing: returns ``"<n samples>"`` after ``delay_s`` (finals after ``final_delay_s``).

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
        return {"final": values.count(Priority.FINAL), "partial": values.count(Priority.PARTIAL),
                "background": values.count(Priority.BACKGROUND)}

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
                delay = self.final_delay_s if (request.priority == Priority.FINAL and
                                               self.final_delay_s is not None) else self.delay_s
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
        return Transcript(f"audio of {seconds:.2f} seconds", request.language, -0.1, 5, time.monotonic() - t0)

    async def close(self) -> None:
        self._state = TranscriberState.CLOSED
