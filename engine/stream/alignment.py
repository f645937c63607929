"""Word times from the aligner for one session's sentences.

Where the engine has an aligner (``engine.asr.align_service``: Whisper's cross-attention, to within a syllable), a
live sentence locks without it and its better word times follow as a ``words`` message (``after_lock``): the
aligner runs after the lock, never before it (it cost locks 0.1-1.5 s when it ran before). A file's sentence waits
for its words instead (``align``, queued). Without an aligner, or when it is behind, words keep the times the VAD
gives them (``closed_words``, ``engine.stream.words``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from engine.asr.align import AlignedWord
from engine.asr.align_service import AlignService
from engine.asr.timestamps import TimedSpan
from engine.audio.pcm import samples_to_ms
from engine.audio.vad import WINDOW_MS
from engine.protocol import Word, WordTimes
from engine.stream.endpoint import SegmentClosed
from engine.stream.mailbox import Mailbox
from engine.stream.scheduler import DecodeScheduler
from engine.stream.words import place_words


def nothing() -> asyncio.Future[Any]:
    """A future that already holds None: what a missing service (speakers, aligner) answers."""
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    return fut


def closed_words(
    closed: SegmentClosed,
    text: str,
    vad_offset: float,
    spans: tuple[TimedSpan, ...] = (),
    aligned: list[AlignedWord] | None = None,
) -> list[Word]:
    """The words of ``text``, a closed segment's sentence, on the session's timeline (ms): from the aligner's
    ``aligned`` words if any, else laid along the segment's speech by the VAD (``vad_offset``: its speech threshold)
    and Whisper's timed ``spans``."""
    return place_words(
        text,
        samples_to_ms(closed.speech_start_sample),
        samples_to_ms(closed.speech_end_sample),
        closed.probs,
        vad_offset,
        WINDOW_MS,
        spans,
        samples_to_ms(closed.start_sample),
        aligned or (),
    )


class Alignment:
    """One session's use of the shared aligner. ``close`` (the session closed) drops word times still to come."""

    def __init__(
        self, aligner: AlignService | None, scheduler: DecodeScheduler, mailbox: Mailbox, vad_offset: float
    ) -> None:
        """``aligner``: None where the engine has none; ``mailbox``: where ``words`` messages go; ``vad_offset``:
        the VAD's speech threshold (``closed_words``)."""
        self._aligner = aligner
        self._scheduler = scheduler
        self._mailbox = mailbox
        self._vad_offset = vad_offset
        self._aligning: set[asyncio.Future[None]] = set()  # locked sentences whose word times are on the way
        self._closed = False

    def align(
        self, audio: np.ndarray, text: str, language: str | None, queue: bool
    ) -> asyncio.Future[list[AlignedWord] | None]:
        """The aligned words of ``text`` in ``audio`` (16 kHz), or None (no aligner, or it skipped the work).
        ``queue``: wait for the aligner (a file's sentence) rather than skip it when it is behind."""
        if self._aligner is None:
            return nothing()
        # A live sentence waits for its words, so they are only aligned while the recognizer has no other
        # sentence's final queued and no partial waiting: on a saturated CPU the aligner's pass would come out of
        # the decodes' time and lock later (bench.sessions with a full 2-core server: docs/benchmarks.md).
        load = self._scheduler.transcriber.load()
        busy = load.get("final", 0) > 0 or self._scheduler.waiting > 0
        return self._aligner.align(audio, text, language, queue=queue, busy=busy)

    def after_lock(
        self,
        sid: int,
        closed: SegmentClosed,
        audio: np.ndarray | None,
        text: str,
        spans: tuple[TimedSpan, ...],
        language: str | None,
    ) -> None:
        """Align live sentence ``sid``, locked from segment ``closed`` (``audio``: its audio), and post its better
        word times (``WordTimes``) when they come."""
        if self._aligner is None or not text or audio is None:
            return
        aligned = self.align(audio, text, language, queue=False)
        marker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._aligning.add(marker)

        def finished(fut: asyncio.Future[list[AlignedWord] | None]) -> None:
            try:
                if not fut.cancelled() and fut.exception() is None and fut.result() and not self._closed:
                    words = closed_words(closed, text, self._vad_offset, spans, fut.result())
                    self._mailbox.post(WordTimes(sid, tuple(words)))
            finally:
                self._aligning.discard(marker)
                if not marker.done():
                    marker.set_result(None)

        aligned.add_done_callback(finished)

    async def drained(self) -> None:
        """Return once the word times of every sentence locked so far have come (the aligner skips what it cannot
        do soon)."""
        if self._aligning:
            await asyncio.wait(set(self._aligning))

    def close(self) -> None:
        self._closed = True
