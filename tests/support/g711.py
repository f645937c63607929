"""G.711 audio as a telephone line sends it, for the streaming APIs that take it."""

from __future__ import annotations

import numpy as np

from app.compat.live_audio import decode


def mulaw(samples: np.ndarray) -> bytes:
    """G.711 µ-law codes of ``samples`` (the nearest code of the decoder's table)."""
    table = decode(bytes(range(256)), "mulaw").astype(np.int32)
    order = np.argsort(table)
    target = (np.clip(samples, -1, 1) * 32767).astype(np.int32)
    pos = np.clip(np.searchsorted(table[order], target), 1, 255)
    nearer = np.where(np.abs(table[order][pos - 1] - target) < np.abs(table[order][pos] - target), pos - 1, pos)
    return bytes(order[nearer].astype(np.uint8).tobytes())
