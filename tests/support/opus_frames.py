"""Opus audio as a WebRTC sender makes it (``opus_packets``) and what a receiving aiortc track queued
(``frames_of``): the two ends of the receive path, for tests of the decoder and the jitter buffer."""

from __future__ import annotations

import fractions
from collections.abc import Iterator

import av
import numpy as np
from aiortc.rtcrtpreceiver import RemoteStreamTrack


def opus_packets(
    left: np.ndarray,
    right: np.ndarray | None = None,
    packet_ms: int = 20,
    bit_rate: int = 64000,
    options: dict[str, str] | None = None,
) -> list[bytes]:
    """Encode 16 kHz float audio as a WebRTC sender would: 48 kHz Opus, ``packet_ms`` packets; stereo if ``right``;
    ``options``: libopus encoder options (FFmpeg's names)."""
    layout = "mono" if right is None else "stereo"
    chans = [left] if right is None else [left, right]
    n = min(c.size for c in chans)
    pcm = (np.clip(np.stack([c[:n] for c in chans]), -1, 1) * 32767).astype(np.int16)
    enc = av.CodecContext.create("libopus", "w")
    enc.sample_rate, enc.layout, enc.format, enc.bit_rate = 48000, layout, "s16", bit_rate
    enc.options = {"frame_duration": str(packet_ms), **(options or {})}
    resampler = av.AudioResampler(format="s16", layout=layout, rate=48000, frame_size=48 * packet_ms)
    packets = []
    for start in range(0, n, 320):  # 20 ms at a time, as a microphone delivers
        src = av.AudioFrame.from_ndarray(
            pcm[:, start : start + 320].T.reshape(1, -1).copy(), format="s16", layout=layout
        )
        src.sample_rate, src.pts, src.time_base = 16000, start, fractions.Fraction(1, 16000)
        packets += [bytes(p) for f in resampler.resample(src) for p in enc.encode(f)]
    return packets + [bytes(p) for p in enc.encode(None)]


def frames_of(track: RemoteStreamTrack) -> Iterator[av.AudioFrame | None]:
    """The frames (or the end, ``None``) queued on a receiving ``track``, taken off its queue without waiting."""
    while not track._queue.empty():
        yield track._queue.get_nowait()
