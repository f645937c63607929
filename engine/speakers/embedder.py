"""Speaker embeddings of closed speech segments.

The encoder is Resemblyzer's GE2E speaker encoder (a 3-layer LSTM over 40-band mel frames, 256-dimensional
output), whose 17 MB weights ship inside the ``resemblyzer`` wheel, so nothing is fetched at run time.

Resemblyzer embeds one utterance at a time; here every segment is cut into the encoder's 1.6 s partial
windows, the windows of *all* segments go through the LSTM in one batch, and each segment's embedding is the
L2-normalised mean of its windows' embeddings (the same definition as ``VoiceEncoder.embed_utterance``).
"""

from __future__ import annotations

import functools
import threading
import warnings

import numpy as np

from engine.audio.pcm import warmup_tone
from engine.speakers.pooling import cut_windows, segment_embeddings

SAMPLE_RATE_HZ = 16000
EMBEDDING_DIM = 256

# The encoder's fixed framing (resemblyzer.hparams): 25 ms windows every 10 ms, 160 frames per partial window.
_HOP_SAMPLES = 160
_FFT_SAMPLES = 400
_MEL_BANDS = 40
_PARTIAL_FRAMES = 160
# Partial windows start every 1/1.3 s, and a trailing window must be at least 75 % real audio (resemblyzer's
# defaults, which its weights were evaluated with).
_PARTIAL_STEP_FRAMES = round(SAMPLE_RATE_HZ / 1.3 / _HOP_SAMPLES)
_MIN_LAST_COVERAGE = 0.75
# Quiet segments are raised to this loudness before the mel transform (resemblyzer's preprocessing target).
_TARGET_DBFS = -30.0
_INT16_MAX = 32767.0
# The LSTM runs on batches of these sizes only (zero windows pad a batch up; a larger batch goes in chunks of the
# largest). Why: torch's CPU LSTM (oneDNN) compiles and keeps a kernel per batch shape, and live batches come in
# every size: the server's memory grew with every new size it met. Five shapes cost their kernels once; padding
# costs less than twice the LSTM time of a batch, and less than that on average.
_BATCH_SIZES = (1, 2, 4, 8, 16)


class SpeakerEmbedder:
    """Loads the encoder once (CPU, torch threads = 1). Thread-safe to call from one worker thread at a time.

    Construction sets torch's intra-op thread count of this process to 1: the server keeps one core for
    itself and the recognizer's engine runs in its own processes, and a 1.6 s window batch gains little from
    more threads. Construction takes a few seconds (weights, then one warm-up batch).
    """

    dim = EMBEDDING_DIM  # length of one embedding vector

    def __init__(self) -> None:
        import torch

        with warnings.catch_warnings():
            # resemblyzer 0.1.4 imports a scipy.ndimage path that scipy deprecates; nothing we can act on.
            warnings.simplefilter("ignore", DeprecationWarning)
            from resemblyzer import VoiceEncoder

        torch.set_num_threads(1)
        self._torch = torch
        self._encoder = VoiceEncoder(device="cpu", verbose=False)
        self._encoder.eval()
        # One batch at a time: the LSTM module is not re-entrant across threads.
        self._lock = threading.Lock()
        # The first batch sets up the encoder's kernels: pay that now, at start-up, rather than on the first closed
        # segment of the first session.
        self.embed([warmup_tone()])

    def embed(self, segments: list[np.ndarray]) -> np.ndarray:
        """Embed each segment; float32 mono 16 kHz samples in [-1, 1].

        Returns a float32 array of shape ``[len(segments), 256]``, each row L2-normalised. All segments'
        windows run through the encoder in one batch. A segment shorter than one window (1.6 s) is
        zero-padded into one window; such embeddings are less reliable, which is why the tracker only
        trusts embeddings of segments with enough speech. An all-zero segment raises ``ValueError``.
        """
        if not segments:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        mels, owners = cut_windows(segments, lambda samples: _partial_mels(_normalise_volume(samples)))
        batch = np.stack(mels)
        with self._lock, self._torch.inference_mode():
            partial = np.concatenate(
                [self._encoder(self._torch.from_numpy(chunk)).numpy()[:n] for chunk, n in _fixed_shape_chunks(batch)]
            )
        # The encoder ends in a ReLU: only a degenerate input yields an all-zero vector (``ValueError``).
        return segment_embeddings(partial, owners, len(segments))


def _fixed_shape_chunks(batch: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """``batch`` ``[n, ...]`` as chunks whose first dimension is one of ``_BATCH_SIZES`` (zero-padded), each with
    the number of its rows that are real."""
    largest = _BATCH_SIZES[-1]
    chunks = []
    for start in range(0, len(batch), largest):
        part = batch[start : start + largest]
        size = next(s for s in _BATCH_SIZES if s >= len(part))
        if size > len(part):
            part = np.concatenate([part, np.zeros((size - len(part), *part.shape[1:]), part.dtype)])
        chunks.append((part, min(largest, len(batch) - start)))
    return chunks


def _normalise_volume(samples: np.ndarray) -> np.ndarray:
    """Raise a quiet segment to -30 dBFS RMS (never lower a loud one), as the encoder was trained on."""
    if samples.size == 0:
        raise ValueError("cannot embed an empty segment")
    rms = float(np.sqrt(np.mean(np.square(samples * _INT16_MAX, dtype=np.float64))))
    if rms == 0.0:
        raise ValueError("cannot embed a silent segment")
    change_db = _TARGET_DBFS - 20.0 * np.log10(rms / _INT16_MAX)
    if change_db <= 0.0:
        return samples
    louder: np.ndarray = (samples * (10.0 ** (change_db / 20.0))).astype(np.float32)
    return louder


def _partial_mels(samples: np.ndarray) -> list[np.ndarray]:
    """Cut a segment's mel spectrogram into the encoder's 160-frame windows (each ``[160, 40]`` float32)."""
    n_frames = int(np.ceil((samples.size + 1) / _HOP_SAMPLES))
    starts = list(range(0, max(1, n_frames - _PARTIAL_FRAMES + _PARTIAL_STEP_FRAMES + 1), _PARTIAL_STEP_FRAMES))
    if len(starts) > 1:
        coverage = (samples.size - starts[-1] * _HOP_SAMPLES) / (_PARTIAL_FRAMES * _HOP_SAMPLES)
        if coverage < _MIN_LAST_COVERAGE:
            starts.pop()
    needed = (starts[-1] + _PARTIAL_FRAMES) * _HOP_SAMPLES
    padded = np.pad(samples, (0, max(0, needed - samples.size)))
    mel = _mel_spectrogram(padded)
    return [mel[start : start + _PARTIAL_FRAMES] for start in starts]


def _mel_spectrogram(samples: np.ndarray) -> np.ndarray:
    """Power mel spectrogram, ``[frames, 40]`` float32, one frame per 10 ms hop (centred, zero-padded): exactly what
    resemblyzer computes with ``librosa.feature.melspectrogram(sr=16000, n_fft=400, hop_length=160, n_mels=40)``
    (Hann window, Slaney mel scale and area normalisation; equal to it within 2e-7 of the peak on the shared clips).
    In numpy because librosa's spectral code imports numba, which the serving install leaves out."""
    padded = np.pad(samples, _FFT_SAMPLES // 2)
    frames = np.lib.stride_tricks.sliding_window_view(padded, _FFT_SAMPLES)[::_HOP_SAMPLES]
    power = np.abs(np.fft.rfft(frames * _HANN, axis=-1)) ** 2
    mel: np.ndarray = (power @ _mel_filters().T).astype(np.float32)
    return mel


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default): linear below 1 kHz, logarithmic above."""
    above = 15.0 + np.log(np.maximum(hz, 1000.0) / 1000.0) / _LOG_STEP
    return np.where(hz >= 1000.0, above, hz / (200.0 / 3.0))


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return np.where(mel >= 15.0, 1000.0 * np.exp(_LOG_STEP * (mel - 15.0)), mel * (200.0 / 3.0))


@functools.cache
def _mel_filters() -> np.ndarray:
    """Triangular filters, ``[40, 201]``, evenly spaced on the mel scale from 0 Hz to 8 kHz, each of unit area."""
    fft_hz = np.fft.rfftfreq(_FFT_SAMPLES, 1.0 / SAMPLE_RATE_HZ)
    edges_hz = _mel_to_hz(np.linspace(0.0, float(_hz_to_mel(np.array(SAMPLE_RATE_HZ / 2))), _MEL_BANDS + 2))
    ramps = edges_hz[:, None] - fft_hz[None, :]
    widths = np.diff(edges_hz)[:, None]
    weights = np.maximum(0.0, np.minimum(-ramps[:-2] / widths[:-1], ramps[2:] / widths[1:]))
    filters: np.ndarray = (weights * (2.0 / (edges_hz[2:] - edges_hz[:-2]))[:, None]).astype(np.float32)
    return filters


_LOG_STEP = np.log(6.4) / 27.0
_HANN = (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(_FFT_SAMPLES) / _FFT_SAMPLES)).astype(np.float32)  # periodic
