"""Audio files into the engine's format: any container and codec PyAV (FFmpeg) decodes, out as 16 kHz mono int16.

Decoding is blocking work (seconds for an hour of MP3): callers run ``AudioFileReader.read`` in a worker thread,
one block at a time, so that a long file never sits decoded in memory and never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import av
import numpy as np

from engine import SAMPLE_RATE

BLOCK_S = 10.0  # audio handed out per read (the caller feeds it to a session between reads)


async def discard_file(path: str | None) -> None:
    """Delete an upload's temporary file (None, or gone already: nothing to do), in a worker thread: a file system
    call on the event loop holds every live session's audio while the disk answers."""
    if path is not None:
        with contextlib.suppress(OSError):
            await asyncio.to_thread(os.unlink, path)


class AudioFileError(ValueError):
    """The file cannot be used: not a media file FFmpeg reads, no audio stream, or a broken stream."""


class AudioFileReader:
    """Open ``path`` and read its first audio stream in blocks of ``BLOCK_S`` seconds (the last may be shorter).

    Raises ``AudioFileError`` from the constructor (not a media file, no audio) and from ``read`` (a stream that
    breaks part way). Use as a context manager, or call ``close``."""

    def __init__(self, path: str | Path) -> None:
        try:
            self._container = av.open(str(path), mode="r")
        except (av.FFmpegError, UnicodeDecodeError, ValueError) as exc:
            raise AudioFileError(f"not an audio or video file FFmpeg can read ({exc})") from None
        if not self._container.streams.audio:
            self._container.close()
            raise AudioFileError("the file has no audio stream")
        self._stream = self._container.streams.audio[0]
        self._frames = self._container.decode(self._stream)
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        self._done = False
        self.samples = 0  # 16 kHz samples handed out so far

    @property
    def duration_s(self) -> float:
        """Seconds of audio handed out so far (the whole file once ``read`` returned None)."""
        return self.samples / SAMPLE_RATE

    def read(self) -> np.ndarray | None:
        """The next block of int16 samples, or None at the end. Blocking."""
        if self._done:
            return None
        want = int(BLOCK_S * SAMPLE_RATE)
        parts: list[np.ndarray] = []
        have = 0
        try:
            while have < want:
                frame = next(self._frames, None)
                frames = self._resampler.resample(frame)  # None flushes the resampler at the end
                for out in frames:
                    pcm = out.to_ndarray().reshape(-1).astype(np.int16, copy=False)
                    parts.append(pcm)
                    have += pcm.size
                if frame is None:
                    self._done = True
                    break
        except (av.FFmpegError, ValueError) as exc:
            raise AudioFileError(f"the audio stream is broken ({exc})") from None
        if not parts:
            return None
        block: np.ndarray = np.concatenate(parts)
        self.samples += block.size
        return block

    def close(self) -> None:
        self._container.close()

    def __enter__(self) -> AudioFileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
