"""Microphone audio from a WebRTC track into an engine session: decode, resample to 16 kHz mono, 60 ms chunks.

aiortc hands over 20 ms frames (s16, usually stereo 48 kHz); PyAV's resampler turns them into 16 kHz mono. Its
receive queues are unbounded, so when the machine falls behind, audio piles up and captions drift further and
further from the speaker. ``LagMeter`` compares media time with wall time and, past ``max_lag_s``, the ingest skips
audio until it is back within half of it (captions with a gap beat captions a minute late).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from engine.audio import CHUNK_SAMPLES, SAMPLE_RATE

log = logging.getLogger(__name__)


@dataclass
class IngestStats:
    frames: int = 0
    audio_s: float = 0.0
    skipped_s: float = 0.0
    energy: float = 0.0  # sum of squares of received samples (tests check that sound arrived)


class LagMeter:
    """How far behind real time the consumption of a stream is, in seconds (0 when keeping up)."""

    def __init__(self) -> None:
        self._origin: float | None = None  # wall time minus media time, at its smallest (the on-time baseline)

    def update(self, media_s: float, now: float | None = None) -> float:
        offset = (time.monotonic() if now is None else now) - media_s
        if self._origin is None or offset < self._origin:
            self._origin = offset
        return offset - self._origin


class Chunker:
    """Collects 16 kHz int16 samples and emits exact 60 ms chunks."""

    def __init__(self) -> None:
        self._buf = np.zeros(0, dtype=np.int16)

    def push(self, pcm: np.ndarray) -> list[np.ndarray]:
        self._buf = np.concatenate([self._buf, pcm])
        n = self._buf.size // CHUNK_SAMPLES
        chunks = [self._buf[i * CHUNK_SAMPLES:(i + 1) * CHUNK_SAMPLES] for i in range(n)]
        self._buf = self._buf[n * CHUNK_SAMPLES:]
        return chunks


async def pump_track(track: MediaStreamTrack, feed: Callable[[np.ndarray], None], stats: IngestStats,
                     max_lag_s: float, on_overload: Callable[[float], None]) -> None:
    """Read ``track`` until it ends, feeding 60 ms int16 chunks. Returns when the track ends.

    ``on_overload(lag_s)`` is called once each time shedding starts.
    """
    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    chunker = Chunker()
    lag = LagMeter()
    media_s = 0.0
    shedding = False
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if not isinstance(frame, av.AudioFrame):
            continue
        stats.frames += 1
        duration = frame.samples / frame.sample_rate
        # RTP timestamps keep counting across a sender's pauses; a plain sample count would read a pause as lag.
        media_s = float(frame.pts * frame.time_base) if frame.pts is not None and frame.time_base else (
            media_s + duration)
        behind = lag.update(media_s)
        if behind > max_lag_s and not shedding:
            shedding = True
            on_overload(behind)
        elif shedding and behind < max_lag_s / 2:
            shedding = False
        if shedding:
            stats.skipped_s += duration
            continue
        for out in resampler.resample(frame):  # type: ignore[arg-type]
            pcm = out.to_ndarray().reshape(-1).astype(np.int16, copy=False)
            stats.audio_s += pcm.size / SAMPLE_RATE
            stats.energy += float(np.square(pcm.astype(np.float64)).sum()) / (32768.0 ** 2)
            for chunk in chunker.push(pcm):
                feed(chunk)
