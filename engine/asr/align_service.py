"""The word aligner as a service of the engine: one worker thread, never in the way of live captions.

A locked sentence waits for its alignment (it runs beside the speaker embedding, after the final decode), so the
service bounds what that wait can cost a live session: at most ``max_waiting`` sentences queue for the thread, and
none while the caller says its recognizer is busy; beyond that a live sentence is not aligned and keeps the word
times the VAD gives (``engine.stream.words``). A file's sentences (an upload) always queue: nobody watches them
lock. Errors are logged and
cost only the alignment, never the sentence.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from engine.asr.align import AlignedWord, WhisperAligner
from engine.audio.pcm import warmup_tone

log = logging.getLogger(__name__)

MAX_WAITING = 2  # sentences queued for the thread; ~0.1-0.3 s each on one CPU thread (docs/benchmarks.md)


class AlignService:
    """``await start(model_dir)``, then ``align(...)`` per locked sentence; ``await close()`` at exit."""

    def __init__(self, max_waiting: int = MAX_WAITING, dtype: str = "float32", skip_when_behind: bool = True) -> None:
        """``skip_when_behind`` False: every sentence waits for its alignment, however busy (benches of word times
        that stream faster than real time, where the question is where words land, not when they are skipped)."""
        self.max_waiting = max_waiting
        self.skip_when_behind = skip_when_behind
        self.dtype = dtype
        self._aligner: WhisperAligner | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._waiting = 0
        self.calls = 0
        self.skipped = 0  # sentences left to the VAD's word times because the thread was behind
        self.failed = 0
        self.cpu_s = 0.0  # thread CPU time spent aligning

    async def start(self, model_dir: str) -> None:
        """Load the checkpoint (about a second) in the worker thread and align a tone once: the first sentence
        should not pay for the kernels' set-up. Raises what loading raises; a failed warm-up is only logged."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="align")
        loop = asyncio.get_running_loop()
        self._aligner = await loop.run_in_executor(self._pool, WhisperAligner, model_dir, self.dtype)
        t0 = time.monotonic()
        try:
            await loop.run_in_executor(self._pool, self._aligner.align, warmup_tone(2.0), "hello there", "en")
        except Exception as exc:  # (it is only a warm-up: the first sentence pays for it, nothing more)
            log.warning("word aligner warm-up failed: %r", exc)
        log.info("word aligner warm-up: %.2f s", time.monotonic() - t0)

    def align(
        self, audio: np.ndarray, text: str, language: str | None, queue: bool = False, busy: bool = False
    ) -> asyncio.Future[list[AlignedWord] | None]:
        """Where each word of ``text`` lies in ``audio`` (seconds from its start), or None: not started, too many
        waiting or ``busy`` (the caller's recognizer is behind) unless ``queue`` (a file, whose sentences nobody
        waits for), or the alignment failed. Never raises."""
        loop = asyncio.get_running_loop()
        behind = (busy or self._waiting >= self.max_waiting) and not queue and self.skip_when_behind
        if self._aligner is None or self._pool is None or behind or not text.strip():
            if self._aligner is not None and text.strip():
                self.skipped += 1
            done: asyncio.Future[list[AlignedWord] | None] = loop.create_future()
            done.set_result(None)
            return done
        aligner = self._aligner
        self._waiting += 1

        def job() -> list[AlignedWord] | None:
            t0 = time.thread_time()
            try:
                return aligner.align(audio, text, language)
            except Exception as exc:  # a sentence the model cannot take (odd text, tiny audio) keeps VAD times
                log.warning("word alignment failed: %r", exc)
                self.failed += 1
                return None
            finally:
                self.cpu_s += time.thread_time() - t0

        pool = self._pool
        self.calls += 1

        async def run() -> list[AlignedWord] | None:
            try:
                return await loop.run_in_executor(pool, job)
            finally:  # counted down before the caller resumes, so its next call sees the queue as it is
                self._waiting -= 1

        return asyncio.ensure_future(run())

    def stats(self) -> dict[str, Any]:
        return {
            "align_calls": self.calls,
            "align_skipped": self.skipped,
            "align_failed": self.failed,
            "align_cpu_s": round(self.cpu_s, 3),
        }

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.shutdown, True, cancel_futures=True)
        self._aligner = None
