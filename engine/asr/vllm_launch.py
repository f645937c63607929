"""Spawning vLLM's engine core for Whisper with this project's settings (``VllmTranscriber.start``).

Slow (importing vLLM, converting the weights, spawning the engine core: a minute or more on CPU), so it runs in a
worker thread. What is set here and why: vLLM's own logging kept off stdout, a small KV cache and one process on CPU,
any Whisper run as the windowed variant (``engine.asr.vllm_plugin``), the CPU engine core's compute threads.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from engine.asr.cpu import available_cores, cpu_dtype, cpu_engine_threads, engine_core_threads
from engine.asr.vllm_plugin import whisper_overrides
from engine.config import TranscriberConfig
from engine.models.resolve import ModelSpec

_WORKER_EXTENSION = "engine.asr.vllm_worker.CpuThreads"


@dataclass(frozen=True)
class Launched:
    """A spawned engine core: the ``AsyncLLM``, its compute threads (CPU; 0 on a GPU) and the weights' dtype on the
    device ("bfloat16" on most CPUs)."""

    llm: Any
    cpu_threads: int
    dtype: str


def launch(config: TranscriberConfig, spec: ModelSpec, device: str) -> Launched:
    """Import vLLM and spawn its engine core for ``spec`` on ``device`` ("cpu" or a GPU). Blocks: call it in a worker
    thread. Raises whatever vLLM raises (the caller reports it as the recognizer failing)."""
    # vLLM logs to stdout by default, where `python -m engine` prints its JSON lines; its INFO/WARNING output
    # (hundreds of lines per start, e.g. one per float16 tensor cast to bfloat16) buries ours.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    if device == "cpu":
        # Whisper's sequences are short: 1 GiB of KV cache is plenty (the unit of VLLM_CPU_KVCACHE_SPACE is GiB).
        # One process for engine core and worker saves the memory of a second copy of the model.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    importlib.import_module("vllm")
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    kwargs: dict[str, Any] = dict(
        model=spec.path,
        hf_overrides=whisper_overrides,  # any Whisper runs as the windowed variant (engine/asr/vllm_plugin.py)
        # Live audio never repeats: caching processed features would only cost memory and hashing.
        mm_processor_cache_gb=0,
        max_model_len=448,
        max_num_seqs=config.max_num_seqs,
        limit_mm_per_prompt={"audio": 1},
        scheduling_policy="priority",
        disable_log_stats=True,
    )
    dtype = config.dtype
    if device == "cpu":
        kwargs.update(
            dtype=cpu_dtype() if dtype == "auto" else dtype, enforce_eager=True, worker_extension_cls=_WORKER_EXTENSION
        )  # set_cpu_threads
    else:
        kwargs.update(dtype=dtype, gpu_memory_utilization=config.gpu_memory_utilization)
    threads = cpu_engine_threads(config.cpu_threads) if device == "cpu" else None
    with engine_core_threads(threads):
        llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))  # spawns the engine core
    cpu_threads = 0
    if device == "cpu":
        cpu_threads = threads or int(os.environ.get("OMP_NUM_THREADS", 0) or available_cores())
    return Launched(llm, cpu_threads, str(getattr(llm.model_config, "dtype", kwargs["dtype"])).removeprefix("torch."))
