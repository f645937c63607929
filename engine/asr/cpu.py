"""The recognizer on a CPU: which device, which dtype, and how many compute threads its engine core runs on.

On a 2-core machine the engine core and the server process share the cores: measured (docs/benchmarks.md, "CPU
threads"), one engine thread instead of two costs ~30 % less CPU per session and makes three to five sessions faster,
while two lock one speaker's long sentences sooner. So the engine core starts on every core and the server changes the
count as sessions come and go (``shared_cpu_threads``; ``engine.asr.vllm_worker``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def detect_device(requested: str) -> str:
    """``"auto"`` -> ``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_dtype(cpuinfo: str | None = None) -> str:
    """bfloat16 where the CPU computes it natively (AVX-512 BF16 or AMX), else float32.

    Measured: float16 is ~6x slower than bfloat16 on an AVX-512 BF16 CPU, but on an AVX2-only CPU bfloat16 is
    emulated and float32 decoded Whisper base 3.4x faster (3.1 s vs 10.6 s for a 7.9 s clip).
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    flags = set(cpuinfo.split())
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def cpu_engine_threads(requested: int) -> int | None:
    """The CPU engine core's compute threads: ``requested`` if positive, else None (torch's own: one per core).

    Measured on 2 cores (docs/benchmarks.md, "CPU threads"): one thread instead of two costs ~30 % less CPU per
    session and makes three to five sessions 0.2-1.3 s faster, but one speaker's long sentences lock 0.1-0.5 s later.
    So by default (None) the engine starts with one per core and the server changes the count as sessions come and go
    (``set_cpu_threads``, ``shared_cpu_threads``): all cores for one speaker, half of them for several.
    """
    return requested if requested > 0 else None


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def shared_cpu_threads(cores: int) -> int:
    """The CPU engine core's threads while several sessions speak: half the cores, leaving the rest to the server
    process (VAD, speaker embeddings, word alignment, WebRTC), which several sessions keep busy too."""
    return max(1, cores // 2)


@contextmanager
def engine_core_threads(threads: int | None) -> Iterator[None]:
    """Spawn the engine core inside this block to give it ``threads`` OpenMP threads (None: torch's own count).

    The engine core is a spawned child that runs the worker in its own process (``VLLM_ENABLE_V1_MULTIPROCESSING``
    0), where vLLM binds no threads (its ``VLLM_CPU_OMP_THREADS_BIND`` applies only to the workers of its
    multiprocess executor) and torch starts one per core. The child reads ``OMP_NUM_THREADS`` as it starts; the
    server process's own value is put back afterwards. An ``OMP_NUM_THREADS`` set by whoever runs the server wins.
    """
    if threads is None or "OMP_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        yield
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)
