"""Silero VAD over many sessions at once: one pre-allocated state batch, one ONNX call per window step.

Silero's ONNX graph takes ``input [B, 64 + 512]`` (64 samples of the previous window as context, then a 512-sample
window at 16 kHz) and ``state [2, B, 128]``. Every session owns one row of a pre-allocated state and context
batch (the idea of a pre-allocated streaming-state cache): a tick gathers the rows of the sessions that have
audio, runs them in one call, and scatters the new state back. Batched and one-by-one outputs are identical.

``BatchedVad.run`` is synchronous and CPU-bound: call it from one worker thread, never on the event loop.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import numpy as np

from engine.audio.pcm import SAMPLE_RATE
from engine.errors import EngineError, ModelError

WINDOW = 512  # samples per Silero window at 16 kHz (32 ms)
CONTEXT = 64  # samples of the previous window the model sees
WINDOW_MS = WINDOW * 1000 / SAMPLE_RATE


def silero_model_path() -> Path:
    """Locate ``silero_vad.onnx`` in the installed ``silero-vad`` package without importing it (that pulls torch)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or spec.origin is None:
        raise ModelError("the silero-vad package is not installed (pip install silero-vad==6.2.3)")
    path = Path(spec.origin).parent / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise ModelError(f"silero-vad is installed but {path} is missing")
    return path


class VadStream:
    """Re-frames one session's incoming audio (any chunk size) into whole 512-sample windows."""

    def __init__(self) -> None:
        self._rest = np.zeros(0, dtype=np.float32)

    def push(self, audio: np.ndarray) -> np.ndarray:
        """Add audio; return the complete windows it finishes as ``[k, 512]`` (k may be 0)."""
        data = np.concatenate([self._rest, audio]) if self._rest.size else audio
        k = data.size // WINDOW
        self._rest = data[k * WINDOW :].copy()
        return data[: k * WINDOW].reshape(k, WINDOW)


class BatchedVad:
    """Speech probability per 512-sample window for up to ``max_sessions`` streams, batched across streams."""

    def __init__(self, max_sessions: int = 256, model_path: Path | None = None) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        # One thread: the batch is small and the server needs the other core (measured: batching beats threads).
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(model_path or silero_model_path()), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        self.max_sessions = max_sessions
        self._state = np.zeros((2, max_sessions, 128), dtype=np.float32)
        self._context = np.zeros((max_sessions, CONTEXT), dtype=np.float32)
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._lock = threading.Lock()
        self._free = list(range(max_sessions - 1, -1, -1))
        self._to_reset: list[int] = []

    def acquire(self) -> int:
        """Reserve a row for a new stream (its state starts at zero). Raises ``EngineError`` when all are taken."""
        with self._lock:
            if not self._free:
                raise EngineError(f"all {self.max_sessions} VAD rows are in use")
            return self._free.pop()

    def release(self, slot: int) -> None:
        """Give a row back. It is zeroed by the next ``run`` before reuse, so a run in progress cannot leak into it."""
        with self._lock:
            self._to_reset.append(slot)

    def _recycle(self) -> None:
        with self._lock:
            for slot in self._to_reset:
                self._state[:, slot] = 0.0
                self._context[slot] = 0.0
                self._free.append(slot)
            self._to_reset.clear()

    def run(self, work: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Advance each row in ``work`` (slot -> windows ``[k, 512]``) and return slot -> probabilities ``[k]``.

        Rows step together: call ``s`` runs every row that has at least ``s + 1`` windows, in one ONNX call.
        """
        self._recycle()
        slots = [s for s, w in work.items() if len(w)]
        out = {s: np.zeros(len(w), dtype=np.float32) for s, w in work.items()}
        steps = max((len(work[s]) for s in slots), default=0)
        for step in range(steps):
            rows = [s for s in slots if len(work[s]) > step]
            idx = np.array(rows)
            windows = np.stack([work[s][step] for s in rows]).astype(np.float32, copy=False)
            x = np.concatenate([self._context[idx], windows], axis=1)
            prob, state = self._session.run(None, {"input": x, "state": self._state[:, idx], "sr": self._sr})
            self._state[:, idx] = state
            self._context[idx] = windows[:, -CONTEXT:]
            for i, s in enumerate(rows):
                out[s][step] = prob[i, 0]
        return out
