"""Audio that a streaming client sends as bytes, into an engine session: decode, resample to 16 kHz, feed with
backpressure. Shared by the WebSocket protocols (FunASR, Deepgram, OpenAI Realtime).

- Encodings: 16-bit little-endian PCM (``linear16``), G.711 µ-law (``mulaw``) and A-law (``alaw``), mono, at any
  rate from 8 to 48 kHz. PCM may be split anywhere, half a sample included: the odd byte waits for the next message.
- Resampling goes through PyAV's resampler (libswresample), as the WebRTC ingest's does.
- Backpressure: audio goes to the session in slices of at most one second, and after each slice ``feed`` waits
  until the session's VAD backlog and its closed segments waiting for a final decode are under the given bounds
  (``Session.caught_up``). A client that sends faster than real time is therefore read no faster than the engine
  keeps up: once the protocol's read-ahead is full (``read_ahead.ReadAhead``) the socket's buffers fill and TCP
  slows the sender, and the server holds a bounded amount of its audio, however much it sends.
- Real-time pace: a live stream's audio may run at most ``LIVE_AHEAD_S`` ahead of the wall clock since its first
  audio (a client's buffer after a reconnect, a prompt burst); past that ``feed`` waits for the clock. A live
  session's decodes outrank files' and, for its closing decode, other sessions' partials: that priority is for
  speech as fast as it is spoken, and a client that sends an hour in a minute gets it at the pace of speech, not
  the throughput of a file job outside ``--max-file-jobs`` (``ahead_s=math.inf`` lifts it, for a stream decoded
  as a file).
- A WAV header (``RIFF``) at the start of a stream whose encoding was not given is read by ``WavHeader``.
"""

from __future__ import annotations

import asyncio
import math
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import av
import numpy as np

from engine import SAMPLE_RATE, Session, SessionState

ENCODINGS = ("linear16", "mulaw", "alaw")
MIN_RATE_HZ, MAX_RATE_HZ = 8000, 48000
LIVE_BACKLOG = (5.0, 4)  # (VAD seconds, closed segments) a live stream may run ahead before reading pauses
LIVE_AHEAD_S = 10.0  # seconds of audio a live stream may be ahead of real time (see the module's docstring)
_PACE_LOOK_S = 0.25  # a paced feed looks this often whether the pace still applies
_SLICE_SAMPLES = SAMPLE_RATE  # at most one second of 16 kHz audio per feed, then wait for the engine


def _ulaw_table() -> np.ndarray:
    """ITU-T G.711 µ-law: the 16-bit sample of each of the 256 codes."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent = (u >> 4) & 0x07
    magnitude = (((u & 0x0F) << 3) + 0x84) << exponent
    sample = magnitude - 0x84
    return np.where(u & 0x80, -sample, sample).astype(np.int16)


def _alaw_table() -> np.ndarray:
    """ITU-T G.711 A-law: the 16-bit sample of each of the 256 codes."""
    a = np.arange(256, dtype=np.int32) ^ 0x55
    exponent = (a >> 4) & 0x07
    mantissa = a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


_G711 = {"mulaw": _ulaw_table(), "alaw": _alaw_table()}


def decode(data: bytes, encoding: str) -> np.ndarray:
    """``data`` (whole samples) as int16 samples. ``encoding`` is one of ``ENCODINGS``."""
    if encoding == "linear16":
        return np.frombuffer(data, dtype="<i2").astype(np.int16, copy=False)
    return _G711[encoding][np.frombuffer(data, dtype=np.uint8)]


class Resampler:
    """int16 mono at ``rate`` Hz -> int16 mono at 16 kHz (PyAV's resampler; a pass-through at 16 kHz)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._av = None if rate == SAMPLE_RATE else av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)

    def __call__(self, pcm: np.ndarray) -> np.ndarray:
        if self._av is None or not pcm.size:
            return pcm
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate
        out = [f.to_ndarray().reshape(-1) for f in self._av.resample(frame)]
        return np.concatenate(out).astype(np.int16, copy=False) if out else np.zeros(0, np.int16)


class PcmFeed:
    """One stream's client audio into its ``session``: bytes in ``encoding`` at ``rate`` Hz, mono.

    ``feed`` decodes, resamples and feeds, then waits for the engine (see the module's docstring); it returns at
    once when the session is no longer live. ``received_s`` counts the client's audio, ``fed_samples`` what reached
    the session (16 kHz samples: the session's timeline)."""

    def __init__(
        self,
        session: Session,
        encoding: str = "linear16",
        rate: int = SAMPLE_RATE,
        backlog: tuple[float, int] = LIVE_BACKLOG,
        ahead_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        unpaced: Callable[[], bool] | None = None,
    ) -> None:
        self.session = session
        self.backlog = backlog
        self.ahead_s = LIVE_AHEAD_S if ahead_s is None else ahead_s  # (read when the stream starts: tests set it)
        self.fed_samples = 0
        self.received_s = 0.0
        self._odd = b""
        self._clock = clock
        self._unpaced = unpaced or (lambda: False)  # the pace no longer applies (the stream is ending)
        self._started_s: float | None = None  # the clock at the first audio
        self.set_format(encoding, rate)

    def set_format(self, encoding: str, rate: int) -> None:
        """Audio from now on is in ``encoding`` at ``rate`` Hz (an odd byte left over is dropped)."""
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}")
        self.encoding, self._odd = encoding, b""
        self._resample = Resampler(rate)

    @property
    def fed_ms(self) -> int:
        return self.fed_samples * 1000 // SAMPLE_RATE

    async def feed(self, data: bytes) -> bool:
        """Decode, resample and feed ``data`` (see the class's docstring); True (the same call as
        ``ContainerFeed.feed``, which can refuse a recording)."""
        if self.encoding == "linear16":
            data = self._odd + data
            whole = len(data) // 2 * 2
            data, self._odd = data[:whole], data[whole:]
            self.received_s += whole / 2 / self._resample.rate
        else:
            self.received_s += len(data) / self._resample.rate
        pcm = self._resample(decode(data, self.encoding))
        if self._started_s is None and pcm.size:
            self._started_s = self._clock()
        for i in range(0, pcm.size, _SLICE_SAMPLES):
            if self.session.state is not SessionState.LIVE:
                return True
            block = pcm[i : i + _SLICE_SAMPLES]
            self.session.feed(block)
            self.fed_samples += block.size
            await self.session.caught_up(*self.backlog)
            await self._keep_pace()
        return True

    async def _keep_pace(self) -> None:
        """Wait while the audio fed is more than ``ahead_s`` ahead of the clock since the first audio, unless the
        pace no longer applies (``unpaced``: the server stops, the stream reached a limit, its client is gone: what
        it sent is then fed as fast as the engine takes it). Looks again every ``_PACE_LOOK_S``."""
        if self._started_s is None or self.ahead_s == math.inf:
            return
        while not self._unpaced():
            early = self.fed_samples / SAMPLE_RATE - self.ahead_s - (self._clock() - self._started_s)
            if early <= 0:
                return
            await asyncio.sleep(min(early, _PACE_LOOK_S))


@dataclass(frozen=True)
class WavHeader:
    """The format of a WAV stream: 16-bit PCM (format 1) or G.711 (6 A-law, 7 µ-law), its rate and channels, and
    where its samples start."""

    encoding: str
    rate: int
    channels: int
    data_offset: int

    @staticmethod
    def parse(head: bytes) -> WavHeader | None:
        """The header at the start of ``head``, or None when more bytes are needed to find the data chunk.
        Raises ``ValueError`` for bytes that are not a WAV file this server reads."""
        if len(head) < 12:
            if not b"RIFF".startswith(head[:4]):
                raise ValueError("not a WAV file")
            return None
        if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            raise ValueError("not a WAV file")
        pos, fmt = 12, None
        while pos + 8 <= len(head):
            cid, size = head[pos : pos + 4], struct.unpack("<I", head[pos + 4 : pos + 8])[0]
            if cid == b"data":
                if fmt is None:
                    raise ValueError("WAV data before its format chunk")
                return WavHeader(*fmt, data_offset=pos + 8)
            if cid == b"fmt ":
                if pos + 8 + 16 > len(head):
                    return None
                tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", head[pos + 8 : pos + 24])
                kinds = {(1, 16): "linear16", (6, 8): "alaw", (7, 8): "mulaw"}
                if (tag, bits) not in kinds:
                    raise ValueError(
                        f"WAV format {tag} with {bits}-bit samples is not supported (16-bit PCM, A-law or µ-law)"
                    )
                fmt = (kinds[(tag, bits)], rate, channels)
            pos += 8 + size + (size & 1)
        if pos > 64 * 1024:
            raise ValueError("no WAV data chunk in the first 64 KiB")
        return None
