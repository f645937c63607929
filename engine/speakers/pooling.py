"""One speaker embedding per segment from its windows' embeddings, as both embedding models make them
(``engine.speakers.embedder``, ``engine.speakers.campplus``): each segment is cut into windows, every window of a
batch of segments runs through the network together, and a segment's embedding is the L2-normalised mean of its
windows' unit vectors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def cut_windows(
    segments: list[np.ndarray], cut: Callable[[np.ndarray], list[np.ndarray]]
) -> tuple[list[np.ndarray], list[int]]:
    """The windows of every segment (each segment as float32, cut by ``cut`` into its windows' network inputs), in
    order, and for each window the index of the segment it was cut from (``segment_embeddings``' ``owners``)."""
    windows: list[np.ndarray] = []
    owners: list[int] = []
    for index, samples in enumerate(segments):
        cuts = cut(np.asarray(samples, dtype=np.float32))
        windows.extend(cuts)
        owners.extend([index] * len(cuts))
    return windows, owners


def segment_embeddings(windows: np.ndarray, owners: list[int], segments: int) -> np.ndarray:
    """``windows`` ``[w, dim]`` (each window's L2-normalised embedding), ``owners[i]`` the segment window ``i`` was
    cut from (0 to ``segments - 1``): a float32 ``[segments, dim]``, each row the normalised sum of its segment's
    windows. Raises ``ValueError`` when a segment's sum is all zero (a degenerate input: silent or empty audio)."""
    sums = np.zeros((segments, windows.shape[1]), dtype=np.float64)
    np.add.at(sums, np.asarray(owners), windows)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    if np.any(norms == 0.0):
        raise ValueError("a segment produced a zero embedding (silent or empty audio)")
    units: np.ndarray = (sums / norms).astype(np.float32)
    return units
