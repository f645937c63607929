"""Opus packets straight to 16 kHz mono PCM with libopus.

aiortc decodes Opus through FFmpeg at 48 kHz stereo, and the ingest then had to resample every 20 ms frame to the
engine's 16 kHz mono. libopus decodes at any of its rates (8/12/16/24/48 kHz) and to mono whatever the sender
encoded (a stereo stream is downmixed inside the decoder), so asking it for 16 kHz mono skips the stereo synthesis,
the high band and the resampler altogether.

libopus is called through ``ctypes`` (no compiler needed): the system's ``libopus.so.0`` (Debian ``libopus0``, which
ffmpeg and Chromium pull in), or else the copy bundled inside PyAV's wheel (a dependency already, so this never
fails where PyAV works). ``ctypes`` releases the GIL during each call.

A lost packet can come back from the next one: with in-band FEC (RFC 7587 ``useinbandfec=1``), a sender adds a
low-bitrate copy of each packet's speech to the packet after it (its LBRR frames), and ``recover`` decodes that copy
instead of guessing (``conceal``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from pathlib import Path

import av
import numpy as np

OPUS_RATES_HZ = (8000, 12000, 16000, 24000, 48000)
MAX_FRAME_S = 0.12  # the longest Opus packet: 120 ms


class OpusError(RuntimeError):
    """libopus is missing, or refused a packet (the message is libopus's own)."""


@functools.cache
def load_libopus() -> ctypes.CDLL:
    """The libopus shared library, with the signatures used here. Raises ``OpusError`` if none can be loaded."""
    # The system's first: Debian's libopus decoded faster than the one in PyAV's wheel, to the same audio
    # (tests/app/webrtc/test_rtp_audio.py compares against FFmpeg's decode with PyAV's).
    found = ctypes.util.find_library("opus")
    candidates = [found] if found else []
    candidates.append("libopus.so.0")
    libs = Path(av.__file__).resolve().parent.parent / "av.libs"  # where PyAV's wheel keeps its libraries
    candidates += [str(p) for p in sorted(libs.glob("libopus*.so*"))]
    errors = []
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            errors.append(str(exc))
            continue
        lib.opus_decoder_create.restype = ctypes.c_void_p
        lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        lib.opus_decode.restype = ctypes.c_int
        lib.opus_decode.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int32,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
        ]
        lib.opus_packet_get_nb_samples.restype = ctypes.c_int
        lib.opus_packet_get_nb_samples.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32]
        lib.opus_decoder_destroy.restype = None
        lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
        lib.opus_strerror.restype = ctypes.c_char_p
        lib.opus_strerror.argtypes = [ctypes.c_int]
        return lib
    raise OpusError(
        "libopus could not be loaded (reinstall PyAV, or apt-get install libopus0): "
        + "; ".join(errors or ["not found"])
    )


def opus_available() -> bool:
    try:
        load_libopus()
    except OpusError:
        return False
    return True


class OpusDecoder:
    """One Opus stream's decoder, giving int16 PCM at ``rate_hz`` with ``channels`` channels (default: the engine's
    16 kHz mono). Not thread-safe: one decoder per stream, used from one thread at a time."""

    def __init__(self, rate_hz: int = 16000, channels: int = 1) -> None:
        if rate_hz not in OPUS_RATES_HZ:
            raise ValueError(f"Opus decodes at {', '.join(map(str, OPUS_RATES_HZ))} Hz, not {rate_hz}")
        if channels not in (1, 2):
            raise ValueError(f"Opus decodes to 1 or 2 channels, not {channels}")
        self._lib = load_libopus()
        self.rate_hz = rate_hz
        self.channels = channels
        self._max_samples = int(rate_hz * MAX_FRAME_S)
        self._buf = np.zeros(self._max_samples * channels, dtype=np.int16)
        self._ptr = self._buf.ctypes.data
        err = ctypes.c_int(0)
        self._dec: int | None = self._lib.opus_decoder_create(rate_hz, channels, ctypes.byref(err))
        if err.value != 0 or not self._dec:
            raise OpusError(f"opus_decoder_create: {self._strerror(err.value)}")

    def _strerror(self, code: int) -> str:
        return (self._lib.opus_strerror(code) or b"error").decode()

    def decode(self, packet: bytes) -> np.ndarray:
        """One Opus packet (2.5-120 ms) -> int16 samples, interleaved if stereo (a new array each call).
        Raises ``OpusError`` for a packet libopus refuses (corrupt or truncated)."""
        return self._run(packet, len(packet))

    def conceal(self, samples: int) -> np.ndarray:
        """Packet-loss concealment: ``samples`` (per channel, up to 120 ms) of audio standing in for lost packets."""
        return self._run(None, 0, min(samples, self._max_samples))

    def samples_in(self, packet: bytes) -> int:
        """The audio ``packet`` holds, in samples per channel at this decoder's rate. Raises ``OpusError`` for a
        packet libopus cannot parse."""
        n = self._lib.opus_packet_get_nb_samples(packet, len(packet), self.rate_hz)
        if n < 0:
            raise OpusError(f"opus_packet_get_nb_samples: {self._strerror(n)}")
        return int(n)

    def recover(self, next_packet: bytes) -> np.ndarray:
        """The lost packet right before ``next_packet``, from the in-band FEC copy ``next_packet`` carries: as much
        audio as ``next_packet`` holds (``samples_in``). The copy is of one Opus frame (the first frame's copy of the
        frame before it): all of a one-frame packet (SILK's 60 ms frames), the last 20 ms of a packet of three 20 ms
        frames; libopus conceals the rest, and all of it where there is no copy (the sender sent no FEC, or coded
        that stretch as music). ``next_packet`` is then decoded as usual with ``decode``."""
        return self._run(next_packet, len(next_packet), min(self.samples_in(next_packet), self._max_samples), fec=1)

    def _run(self, data: bytes | None, size: int, frame: int | None = None, fec: int = 0) -> np.ndarray:
        if self._dec is None:
            raise OpusError("the decoder is closed")
        n = self._lib.opus_decode(self._dec, data, size, self._ptr, frame or self._max_samples, fec)
        if n < 0:
            raise OpusError(f"opus_decode: {self._strerror(n)}")
        return self._buf[: n * self.channels].copy()

    def close(self) -> None:
        """Free the native decoder. Idempotent."""
        if getattr(self, "_dec", None) is not None:
            self._lib.opus_decoder_destroy(self._dec)
            self._dec = None

    def __del__(self) -> None:
        self.close()
