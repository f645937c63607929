"""The C heap of this process as glibc sees it (Linux, glibc >= 2.33), to tell a leak from fragmentation.

Python's own allocator and most native libraries (PyAV, onnxruntime, torch, SQLite) allocate through glibc
``malloc``. ``mallinfo2`` splits what glibc holds into bytes in use and bytes free but kept in its arenas;
``malloc_trim(0)`` hands free pages back to the system. RSS that trimming gives back was fragmentation.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import psutil


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def glibc_heap() -> dict[str, float]:
    """MB: ``rss``; ``in_use`` (allocated chunks + mmapped blocks); ``free_kept`` (free in the arenas); ``arenas``
    (sbrk + mmapped arena bytes). Only ``rss`` where glibc's ``mallinfo2`` is missing."""
    out = {"rss": psutil.Process().memory_info().rss / 1e6}
    libc = _libc()
    if not hasattr(libc, "mallinfo2"):
        return out
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    out.update(in_use=(info.uordblks + info.hblkhd) / 1e6, free_kept=info.fordblks / 1e6, arenas=info.arena / 1e6)
    return {k: round(v, 1) for k, v in out.items()}


def trim() -> None:
    """Give the arenas' free pages back to the system (glibc ``malloc_trim(0)``); a no-op elsewhere."""
    libc = _libc()
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
