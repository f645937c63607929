"""Microphone audio from a WebRTC track into an engine session: 16 kHz mono in 60 ms chunks.

Opus arrives already decoded at 16 kHz mono in 60 ms frames (``app.webrtc.rtp_audio``) and goes straight to the chunker;
anything else (aiortc's own receiver: 20 ms s16 frames, usually stereo 48 kHz; G.722, PCMU) goes through PyAV's
resampler first. aiortc's receive queues are unbounded, so when this server falls behind, audio piles up and
captions drift further and further from the speaker. ``Backlog`` watches the audio waiting in the track's receive
queue: when more than ``max_lag_s`` of it has waited for longer than ``max_lag_s``, the ingest skips audio until
less than half of that waits (captions with a gap beat captions a minute late).

Why the server's own queue and not wall time against media time: a sender that stalls and then catches up (a busy
client, a congested network) delivers late audio in a burst, which this server drains in milliseconds. Wall-clock
lag counts that delay as the server's and sheds audio the server could have used: under concurrent load, near the
end of streams, it shed speech while the server kept up. The queue only grows when this server cannot keep up, and
a burst that drains at once never lasts ``max_lag_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from engine import CHUNK_SAMPLES, SAMPLE_RATE

log = logging.getLogger(__name__)


@dataclass
class IngestStats:
    frames: int = 0
    audio_s: float = 0.0
    skipped_s: float = 0.0
    energy: float = 0.0  # sum of squares of received samples (tests check that sound arrived)
    max_waiting_s: float = 0.0  # the most audio ever waiting in the receive queue


def is_engine_pcm(frame: av.AudioFrame) -> bool:
    """True for frames already in the engine's format (16 kHz mono s16): no resampling needed."""
    return frame.sample_rate == SAMPLE_RATE and frame.format.name == "s16" and frame.layout.nb_channels == 1


def queued_frames(track: MediaStreamTrack) -> int:
    """Frames received but not yet taken from ``track``. aiortc's ``RemoteStreamTrack`` keeps them in an
    ``asyncio.Queue`` at ``_queue`` (aiortc 1.x; the ingest tests fail if that changes); other tracks: 0."""
    queue = getattr(track, "_queue", None)
    return queue.qsize() if isinstance(queue, asyncio.Queue) else 0


class Backlog:
    """Decides when to shed: audio waiting in this server's receive queue, above ``limit_s`` for ``limit_s``."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.shedding = False
        self._above_since_s: float | None = None

    def update(self, waiting_s: float, now: float | None = None) -> bool:
        """Feed the audio waiting now (seconds); returns True while the ingest should skip audio."""
        now = time.monotonic() if now is None else now
        if waiting_s > self.limit_s:
            if self._above_since_s is None:
                self._above_since_s = now
            if now - self._above_since_s >= self.limit_s:
                self.shedding = True
        else:
            self._above_since_s = None
            if waiting_s < self.limit_s / 2:
                self.shedding = False
        return self.shedding


class Chunker:
    """Collects 16 kHz int16 samples and emits exact 60 ms chunks."""

    def __init__(self) -> None:
        self._buf = np.zeros(0, dtype=np.int16)

    def push(self, pcm: np.ndarray) -> list[np.ndarray]:
        if not self._buf.size and pcm.size == CHUNK_SAMPLES:
            return [pcm]  # the direct Opus path delivers exact chunks
        self._buf = np.concatenate([self._buf, pcm])
        n = self._buf.size // CHUNK_SAMPLES
        chunks = [self._buf[i * CHUNK_SAMPLES : (i + 1) * CHUNK_SAMPLES] for i in range(n)]
        self._buf = self._buf[n * CHUNK_SAMPLES :]
        return chunks


async def pump_track(
    track: MediaStreamTrack,
    feed: Callable[[np.ndarray], None],
    stats: IngestStats,
    max_lag_s: float,
    on_overload: Callable[[float], None],
    on_shed: Callable[[float], None] | None = None,
) -> None:
    """Read ``track`` until it ends, feeding 60 ms int16 chunks. Returns when the track ends.

    ``on_overload(waiting_s)`` is called once each time shedding starts; ``on_shed(seconds)`` for each frame skipped
    (the server's metrics count them).
    """
    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    chunker = Chunker()
    backlog = Backlog(max_lag_s)
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
        waiting_s = queued_frames(track) * duration
        stats.max_waiting_s = max(stats.max_waiting_s, waiting_s)
        if backlog.update(waiting_s) and not shedding:
            on_overload(waiting_s)
        shedding = backlog.shedding
        if shedding:
            stats.skipped_s += duration
            if on_shed is not None:
                on_shed(duration)
            continue
        if is_engine_pcm(frame):
            pcms = [frame.to_ndarray().reshape(-1)]
        else:
            pcms = [out.to_ndarray().reshape(-1).astype(np.int16, copy=False) for out in resampler.resample(frame)]
        for pcm in pcms:
            stats.audio_s += pcm.size / SAMPLE_RATE
            x = pcm.astype(np.float32)
            stats.energy += float(np.dot(x, x)) / (32768.0**2)
            for chunk in chunker.push(pcm):
                feed(chunk)
