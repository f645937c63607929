"""Audio conventions shared by every engine piece, and file loading for the CLI, tests and benches.

All engine audio is mono float32 in [-1, 1] at 16 kHz. Positions are sample indices from the start of a session;
times on the wire are milliseconds of session audio.
"""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np

from engine.errors import BadAudio

SAMPLE_RATE = 16_000
CHUNK_MS = 60
CHUNK_SAMPLES = SAMPLE_RATE * CHUNK_MS // 1000  # 960: the unit the transport feeds


def samples_to_ms(samples: int) -> int:
    """Session sample index -> milliseconds (rounded down)."""
    return samples * 1000 // SAMPLE_RATE


def as_float32(pcm: np.ndarray) -> np.ndarray:
    """Accept int16 PCM or float audio, mono, and return contiguous float32 in [-1, 1].

    Raises ``BadAudio`` for anything that is not one-dimensional numeric audio.
    """
    if pcm.ndim != 1:
        raise BadAudio(f"expected mono 1-D audio, got shape {pcm.shape}")
    if pcm.dtype == np.int16:
        return (pcm.astype(np.float32) / 32768.0).astype(np.float32, copy=False)
    if np.issubdtype(pcm.dtype, np.floating):
        return np.ascontiguousarray(pcm, dtype=np.float32)
    raise BadAudio(f"unsupported sample type {pcm.dtype}; use int16 or float32")


def resample(audio: np.ndarray, rate_hz: int) -> np.ndarray:
    """Resample mono float audio to 16 kHz with a polyphase filter (exact for integer rate ratios)."""
    if rate_hz == SAMPLE_RATE:
        return audio.astype(np.float32, copy=False)
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(rate_hz, SAMPLE_RATE)
    resampled: np.ndarray = resample_poly(audio, SAMPLE_RATE // g, rate_hz // g).astype(np.float32)
    return resampled


def load_wav(path: str | Path) -> np.ndarray:
    """Read a PCM WAV file (8/16/32-bit integer, any rate, mono or stereo) as 16 kHz mono float32.

    Raises ``BadAudio`` for formats this reader does not handle (e.g. 24-bit or compressed WAV).
    """
    with wave.open(str(path), "rb") as w:
        width, channels, rate = w.getsampwidth(), w.getnchannels(), w.getframerate()
        raw = w.readframes(w.getnframes())
    if width == 2:
        data = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 4:
        data = np.frombuffer(raw, dtype="<i4").astype(np.float32) / 2147483648.0
    elif width == 1:
        data = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    else:
        raise BadAudio(f"{path}: {8 * width}-bit WAV is not supported; convert to 16-bit PCM")
    if channels > 1:
        data = data.reshape(-1, channels).mean(axis=1)
    return resample(data, rate)


def rms_dbfs(audio: np.ndarray) -> float:
    """Root-mean-square level in dB relative to full scale (-120 for digital silence)."""
    if audio.size == 0:
        return -120.0
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))
    return 20.0 * math.log10(max(rms, 1e-6))


class AudioBuffer:
    """Session audio kept from a moving origin on: append at the end, slice by absolute sample index, trim the front.

    Memory stays bounded by what the caller keeps (open segment + pre-roll), not by the session length. Storage
    grows by doubling so that appending a 60 ms chunk is amortised O(chunk), not O(segment).
    """

    def __init__(self) -> None:
        self._buf = np.zeros(SAMPLE_RATE, dtype=np.float32)
        self._len = 0
        self.origin = 0  # absolute index of self._buf[0]

    @property
    def end(self) -> int:
        """Absolute index one past the newest sample."""
        return self.origin + self._len

    def append(self, audio: np.ndarray) -> None:
        need = self._len + audio.size
        if need > self._buf.size:
            grown = np.zeros(max(need, 2 * self._buf.size), dtype=np.float32)
            grown[: self._len] = self._buf[: self._len]
            self._buf = grown
        self._buf[self._len : need] = audio
        self._len = need

    def slice(self, start: int, stop: int) -> np.ndarray:
        """Copy of samples [start, stop) clipped to what is kept."""
        a = min(max(start - self.origin, 0), self._len)
        b = min(max(stop - self.origin, a), self._len)
        return self._buf[a:b].copy()

    def silence(self, start: int, stop: int) -> None:
        """Zero samples ``start``..``stop`` (absolute), as far as they are still held."""
        a = min(max(start - self.origin, 0), self._len)
        b = min(max(stop - self.origin, a), self._len)
        self._buf[a:b] = 0.0

    def release(self) -> None:
        """Drop the storage (the session is over); ``end`` stays where it was."""
        self.origin += self._len
        self._buf = np.zeros(0, dtype=np.float32)
        self._len = 0

    def trim_before(self, index: int) -> None:
        """Forget samples before absolute ``index``."""
        cut = min(max(index - self.origin, 0), self._len)
        if cut:
            self._buf[: self._len - cut] = self._buf[cut : self._len]
            self._len -= cut
            self.origin += cut


def warmup_tone(seconds: float = 1.0) -> np.ndarray:
    """A voiced-like test signal (a 220 Hz tone, amplitude-modulated at 3 Hz), float32 at ``SAMPLE_RATE``: what
    models are run on once at start-up so that the first real request does not pay for kernel set-up."""
    t = np.arange(round(seconds * SAMPLE_RATE), dtype=np.float32) / SAMPLE_RATE
    tone: np.ndarray = (0.1 * np.sin(2 * np.pi * 220.0 * t) * (1 + np.sin(2 * np.pi * 3.0 * t))).astype(np.float32)
    return tone
