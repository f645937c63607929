"""Containerised audio streamed as it is recorded: WebM/Opus (a browser's ``MediaRecorder``), Ogg/Opus, MP3, FLAC,
told apart by their first bytes (``sniff``) and decoded as they arrive, for clients that send what their recorder
gave them instead of raw samples (Deepgram detects such streams by itself).

``ContainerFeed`` decodes with PyAV (the FFmpeg libraries the server already carries) in a thread of its own: the
stream's bytes go in through a blocking reader that waits for the next message, decoded audio comes out resampled
to 16 kHz mono and goes into the session through a ``PcmFeed`` (so the engine's backpressure and the pace of speech
hold as for raw audio). The decoder needs the container's header before it yields anything (a WebM header and its
first cluster: the first 250 ms chunk of a ``MediaRecorder``). ``close`` ends the input and feeds what the decoder
still holds; a stream the decoder cannot read sets ``error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import av
import numpy as np

from engine import SAMPLE_RATE, Session

from .live_audio import PcmFeed

log = logging.getLogger(__name__)

_MAX_WAITING_S = 5.0  # decoded audio waiting for the session, at most, before ``feed`` waits for it
_CLOSE_TIMEOUT_S = 10.0  # how long ``close`` waits for the decoder's last audio


def sniff(head: bytes) -> str | None:
    """The container ``head`` (a stream's first bytes, 4 or more) starts, or None: ``webm`` (Matroska/EBML),
    ``ogg``, ``flac``, ``mp3`` (an ID3 tag or an MPEG audio frame) or ``wav`` (RIFF/WAVE)."""
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm"
    if head.startswith(b"OggS"):
        return "ogg"
    if head.startswith(b"fLaC"):
        return "flac"
    if head.startswith(b"ID3") or (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    if head.startswith(b"RIFF") and head[8:12] in (b"WAVE", b""):
        return "wav"
    return None


class _Source:
    """The stream's bytes as a blocking, unseekable file for FFmpeg: ``read`` waits for the next message."""

    def __init__(self) -> None:
        self._chunks: queue.Queue[bytes | None] = queue.Queue()
        self._rest = b""
        self._ended = False
        self.abandoned = False  # the decoder stopped reading: what comes now is dropped

    def put(self, data: bytes | None) -> None:
        if not self.abandoned:
            self._chunks.put(data)

    def abandon(self) -> None:
        self.abandoned = True
        with contextlib.suppress(queue.Empty):
            while True:
                self._chunks.get_nowait()

    def read(self, size: int = -1) -> bytes:
        while not self._rest and not self._ended:
            chunk = self._chunks.get()
            if chunk is None:
                self._ended = True
            else:
                self._rest = chunk
        n = len(self._rest) if size < 0 else size
        out, self._rest = self._rest[:n], self._rest[n:]
        return out


class ContainerFeed:
    """One stream's container bytes into its ``session`` (see the module's docstring). ``received_s``: seconds of
    audio decoded so far; ``error``: why the decoder gave up (None while it reads)."""

    def __init__(self, session: Session, kind: str, unpaced: Callable[[], bool] | None = None) -> None:
        """``unpaced``: as ``PcmFeed``'s (the stream is ending: its audio goes in as fast as the engine takes it)."""
        self.session = session
        self.kind = kind
        self.error: str | None = None
        self._pcm = PcmFeed(session, "linear16", SAMPLE_RATE, unpaced=unpaced)
        self._source = _Source()
        self._loop = asyncio.get_running_loop()
        self._decoded: asyncio.Queue[np.ndarray | None] = asyncio.Queue()
        self._waiting = 0  # decoded samples not yet fed
        self._fed = asyncio.Event()
        self._closed = False  # (read by the decoder thread too: set before its input ends)
        self._thread = threading.Thread(target=self._decode, name=f"{session.session_id}-{kind}-decode", daemon=True)
        self._thread.start()
        self._pump = asyncio.create_task(self._run_pump(), name=f"{session.session_id}-{kind}-feed")

    @property
    def received_s(self) -> float:
        return self._pcm.received_s

    async def feed(self, data: bytes) -> bool:
        """Pass the stream's next bytes on; waits while more than ``_MAX_WAITING_S`` of decoded audio waits for the
        session. False once the decoder gave up (``error`` says why)."""
        if self.error is not None:
            return False
        self._source.put(data)
        while self._waiting > _MAX_WAITING_S * SAMPLE_RATE and self.error is None and not self._pump.done():
            self._fed.clear()
            await self._fed.wait()
        return self.error is None

    async def close(self) -> None:
        """End the input and feed what the decoder still holds (at most ``_CLOSE_TIMEOUT_S``)."""
        if self._closed:
            return
        self._closed = True
        self._source.put(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._pump), _CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.warning(
                "%s: the %s decoder's last audio took over %.0f s", self.session.session_id, self.kind, _CLOSE_TIMEOUT_S
            )
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)

    def _decode(self) -> None:
        """The decoder thread: container in, 16 kHz mono int16 out to the pump, then None."""
        try:
            options: dict[str, Any] = {"probesize": "4096", "analyzeduration": "0"}
            with av.open(self._source, mode="r", options=options) as container:
                if not container.streams.audio:
                    raise ValueError("no audio stream")
                resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
                for frame in container.decode(audio=0):
                    for out in resampler.resample(frame):
                        self._out(out.to_ndarray().reshape(-1).astype(np.int16, copy=False))
                for out in resampler.resample(None):
                    self._out(out.to_ndarray().reshape(-1).astype(np.int16, copy=False))
        except Exception as exc:  # FFmpeg's errors, and anything a broken stream brings
            why: str | None = f"the {self.kind} stream cannot be decoded: {exc}"
        else:
            # The input ends only when ``close`` says so: a decoder that finished before then met what it cannot
            # read (the audio decoded so far is still fed and locked).
            why = None if self._closed else f"the {self.kind} stream ended before the client ended it"
        finally:
            self._source.abandon()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            if why is not None:
                self._loop.call_soon_threadsafe(self._fail, why)
            self._loop.call_soon_threadsafe(self._decoded.put_nowait, None)

    def _out(self, pcm: np.ndarray) -> None:
        if pcm.size:
            self._loop.call_soon_threadsafe(self._arrived, pcm)

    def _arrived(self, pcm: np.ndarray) -> None:
        self._waiting += pcm.size
        self._decoded.put_nowait(pcm)

    def _fail(self, why: str) -> None:
        if self.error is None:
            log.info("%s: %s", self.session.session_id, why)
            self.error = why
        self._fed.set()

    async def _run_pump(self) -> None:
        try:
            while (pcm := await self._decoded.get()) is not None:
                await self._pcm.feed(pcm.tobytes())
                self._waiting -= pcm.size
                self._fed.set()
        finally:
            self._fed.set()
