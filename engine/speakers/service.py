"""The speaker service sessions share: one embedding model, batched across sessions, off the event loop.

Sessions ask for a segment's embedding (``embed``: a future, so that it runs while the segment's final decode
runs) and for the embeddings of short windows of the open segment (``embed_window``, for ``TurnDetector``), get
their own online ``SpeakerTracker`` and ``TurnDetector`` (``new_tracker``, ``new_turn_detector``), and re-cluster
at stop (``recluster``).
Embedding and re-clustering run in one worker thread; requests that arrive while it is busy go in the next batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from engine.speakers.tracker import SpeakerConfig, SpeakerTracker
from engine.speakers.turns import TurnConfig, TurnDetector


class Embedder(Protocol):
    """A speaker-embedding model (``engine.speakers.embedder.SpeakerEmbedder``). Blocking; one thread at a time."""

    def embed(self, segments: list[np.ndarray]) -> np.ndarray:
        """16 kHz float32 segments in, L2-normalised embeddings ``[n, dim]`` out."""
        ...


def _load_default() -> Embedder:
    from engine.speakers.embedder import SpeakerEmbedder

    return SpeakerEmbedder()


class SpeakerService:
    """``await start()`` inside the loop (loads the model in the worker thread, seconds), ``await close()`` at exit.

    ``load`` builds the embedding model (default: Resemblyzer's encoder, which the ``SpeakerConfig``/``TurnConfig``
    defaults are tuned for; ``engine.speakers.models.speaker_service`` builds one for any model with its own
    thresholds); tests may pass a fake."""

    def __init__(
        self,
        config: SpeakerConfig | None = None,
        load: Callable[[], Embedder] = _load_default,
        turns: TurnConfig | None = None,
    ) -> None:
        self.config = config or SpeakerConfig()
        self.turns = turns or TurnConfig()
        self._load = load
        self._embedder: Embedder | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="speaker")
        self._queue: list[tuple[np.ndarray, asyncio.Future[np.ndarray | None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.cpu_s = 0.0  # CPU seconds the worker thread spent embedding (its own thread time, not wall time)
        self.embedded = 0  # segments and windows embedded

    def stats(self) -> dict[str, float]:
        """``speaker_cpu_s``: CPU seconds spent embedding so far; ``speaker_embedded``: segments and windows."""
        return {"speaker_cpu_s": round(self.cpu_s, 3), "speaker_embedded": self.embedded}

    async def start(self) -> None:
        """Load the model. Raises whatever loading raises."""
        self._embedder = await asyncio.get_running_loop().run_in_executor(self._pool, self._load)
        self._task = asyncio.create_task(self._loop(), name="speaker-embed")

    def new_tracker(self) -> SpeakerTracker:
        """A session's own online speaker assignment."""
        return SpeakerTracker(self.config)

    def new_turn_detector(self, speech_threshold: float) -> TurnDetector | None:
        """A session's own voice-change detector (None when turn detection is off)."""
        return TurnDetector(self.turns, speech_threshold) if self.turns.enabled else None

    def embed_window(self, audio: np.ndarray) -> asyncio.Future[np.ndarray | None]:
        """Embedding of one short window of an open segment (``TurnDetector``), batched like ``embed``; None when the
        model is not loaded."""
        return self.embed(audio, float("inf"))

    def embed(self, audio: np.ndarray, speech_s: float) -> asyncio.Future[np.ndarray | None]:
        """Embedding of one segment (16 kHz float32, ``speech_s`` seconds of it speech), batched with whatever else
        is waiting. Resolves to None when the segment is too short to embed reliably or the model is not loaded."""
        fut: asyncio.Future[np.ndarray | None] = asyncio.get_running_loop().create_future()
        if self._embedder is None or speech_s < self.config.min_embed_speech_s:
            fut.set_result(None)
            return fut
        self._queue.append((audio, fut))
        self._wake.set()
        return fut

    async def recluster(self, tracker: SpeakerTracker) -> dict[int, int]:
        """Global re-clustering of one session's speakers (sentence id -> new label), in the worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, tracker.recluster)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for _, fut in self._queue:
            fut.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = [(a, f) for a, f in self._queue if not f.done()]
            self._queue.clear()
            if not batch or self._embedder is None:
                continue
            try:
                vectors = await loop.run_in_executor(self._pool, self._timed_embed, [a for a, _ in batch])
            except Exception as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.embedded += len(batch)
            for (_, fut), vec in zip(batch, vectors, strict=True):
                if not fut.done():
                    fut.set_result(vec)

    def _timed_embed(self, audio: list[np.ndarray]) -> np.ndarray:
        """``Embedder.embed`` in the worker thread, its CPU time counted (thread time: other threads' work and waits
        for a core are not)."""
        assert self._embedder is not None
        start = time.thread_time()
        try:
            return self._embedder.embed(audio)
        finally:
            self.cpu_s += time.thread_time() - start
