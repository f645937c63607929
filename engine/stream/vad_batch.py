"""The VAD tick: one batched VAD model shared by every live session, run off the event loop.

Each session gets a ``VadLane`` (``VadBatcher.open``): it pushes audio into the lane, the lane re-frames it into
512-sample windows and wakes the tick; the tick gathers the windows of every lane that has some, runs them through
the model in one batch in a worker thread, and hands each lane's probabilities to its consumer on the loop. The
batcher owns the model's rows: it reserves one in ``open`` and frees it in ``close`` (the lane's opener closes it).

Live sessions push 60 ms each at their own phase, so a tick that ran on every push would run the model once per
push with one or two windows: the model's fixed cost per call (~0.15 ms, against ~0.06 ms per extra row) then
dominates. A tick therefore starts at most every ``min_interval_s``: pushes within that time share one call. A lane
with a backlog (a file, a session catching up) does not wait: its batch is full anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from engine.audio.vad import WINDOW, VadStream

log = logging.getLogger(__name__)

WINDOWS_PER_TICK = 32  # per lane (~1 s of audio): bounds one tick when a session has a backlog
BACKLOG_WINDOWS = 4  # a lane with more than this waiting (~130 ms) is behind: its tick starts at once


class VadModel(Protocol):
    """A VAD over many streams (``engine.audio.vad.BatchedVad``): one row of state per stream."""

    def acquire(self) -> int:
        """Reserve a row; raises ``EngineError`` when none is free."""
        ...

    def release(self, slot: int) -> None: ...

    def run(self, work: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Rows -> windows ``[k, 512]`` in, rows -> speech probabilities ``[k]`` out. Blocking (worker thread)."""
        ...


class VadFeed(Protocol):
    """What a session needs of its VAD: push audio in, get probabilities back, wait for the backlog to clear."""

    def bind(self, consumer: Callable[[np.ndarray], None]) -> None:
        """Where probabilities go: one call per batch with the speech probabilities ``[k]`` of the next k windows."""
        ...

    def push(self, audio: np.ndarray) -> None:
        """Float32 16 kHz audio of any length. Never blocks."""
        ...

    async def drained(self) -> None:
        """Return once everything pushed so far has been delivered."""
        ...


class VadLane:
    """One session's place in the VAD batch. ``push`` audio; probabilities arrive at the consumer set by
    ``bind``, in order, on the event loop. ``drained`` waits until everything pushed has been through the VAD."""

    def __init__(self, batcher: VadBatcher, slot: int) -> None:
        self._batcher = batcher
        self.slot = slot
        self.open = True
        self._framer = VadStream()
        self._windows: deque[np.ndarray] = deque()  # [k, 512] blocks waiting for the tick
        self.queued = 0  # windows in ``_windows``
        self._consumer: Callable[[np.ndarray], None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def bind(self, consumer: Callable[[np.ndarray], None]) -> None:
        """Where this lane's probabilities go (one call per tick with the windows' probabilities ``[k]``)."""
        self._consumer = consumer

    def push(self, audio: np.ndarray) -> None:
        """Add float32 16 kHz audio of any length; whole windows go to the next tick. Never blocks."""
        windows = self._framer.push(audio)
        if len(windows) and self.open:
            self._windows.append(windows)
            self.queued += len(windows)
            self._idle.clear()
            self._batcher.wake()

    @property
    def pending(self) -> bool:
        """True while windows wait for the tick."""
        return bool(self._windows)

    async def drained(self) -> None:
        """Return once every window pushed so far has been through the VAD and delivered (or the lane closed)."""
        self._batcher.wake()
        await self._idle.wait()

    def take(self, limit: int) -> np.ndarray:
        """Up to ``limit`` windows ``[n, 512]`` for the tick (called by the batcher)."""
        taken: list[np.ndarray] = []
        count = 0
        while self._windows and count < limit:
            block = self._windows.popleft()
            room = limit - count
            if len(block) > room:
                self._windows.appendleft(block[room:])
                block = block[:room]
            taken.append(block)
            count += len(block)
        self.queued -= count
        return np.concatenate(taken) if taken else np.zeros((0, WINDOW), dtype=np.float32)

    def deliver(self, probs: np.ndarray) -> None:
        """Hand one tick's probabilities to the consumer (called by the batcher, on the loop)."""
        if self.open and self._consumer is not None:
            self._consumer(probs)
        if not self._windows:
            self._idle.set()

    def settle(self) -> None:
        """Nothing is queued: wake whoever waits in ``drained``."""
        if not self._windows:
            self._idle.set()

    def close(self) -> None:
        """Free the lane's row (idempotent); later pushes are dropped."""
        if self.open:
            self.open = False
            self._windows.clear()
            self.queued = 0
            self._idle.set()
            self._batcher.release(self)


class VadBatcher:
    """Runs ``model`` for every open lane, one batch per tick, in its own worker thread. ``start`` the tick
    inside a running loop; ``close`` stops it."""

    def __init__(self, model: VadModel, min_interval_s: float = 0.0) -> None:
        """``min_interval_s``: the least time from one tick's start to the next one's, while no lane has a backlog
        (0: a tick starts as soon as audio arrives)."""
        self.model = model
        self.min_interval_s = min_interval_s
        self._lanes: dict[int, VadLane] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="vad")
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.busy_s = 0.0  # wall time of the model calls (for benches)
        self.calls = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="vad-tick")

    def open(self) -> VadLane:
        """A lane on a fresh model row. Raises ``EngineError`` when every row is taken."""
        lane = VadLane(self, self.model.acquire())
        self._lanes[lane.slot] = lane
        return lane

    def release(self, lane: VadLane) -> None:
        if self._lanes.get(lane.slot) is lane:
            del self._lanes[lane.slot]
            self.model.release(lane.slot)

    def wake(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        last_start = -float("inf")
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                wait = last_start + self.min_interval_s - loop.time()
                if wait > 0 and not any(lane.queued > BACKLOG_WINDOWS for lane in self._lanes.values()):
                    await asyncio.sleep(wait)  # let the other live sessions' pushes join this batch
                batch = {slot: lane for slot, lane in self._lanes.items() if lane.pending}
                if not batch:
                    for lane in list(self._lanes.values()):
                        lane.settle()
                    break
                work = {slot: lane.take(WINDOWS_PER_TICK) for slot, lane in batch.items()}
                last_start = loop.time()
                t0 = time.perf_counter()
                try:
                    probs = await loop.run_in_executor(self._pool, self.model.run, work)
                except RuntimeError as exc:  # pool shut down while closing
                    log.warning("VAD tick stopped: %s", exc)
                    return
                self.busy_s += time.perf_counter() - t0
                self.calls += 1
                for slot, lane in batch.items():
                    try:
                        lane.deliver(probs[slot])
                    except Exception:
                        log.exception("VAD result handling failed (row %d)", slot)
