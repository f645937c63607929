"""The CPU engine core's compute threads: ``--cpu-threads N`` reaches the spawned engine core; 0 leaves torch's own."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from engine.asr.vllm_backend import cpu_engine_threads, engine_core_threads


def _torch_threads(queue: multiprocessing.Queue[int]) -> None:
    import torch

    queue.put(torch.get_num_threads())


def _spawned_torch_threads() -> int:
    """torch's compute threads in a child spawned now, as vLLM spawns its engine core."""
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[int] = ctx.Queue()
    child = ctx.Process(target=_torch_threads, args=(queue,))
    child.start()
    try:
        return queue.get(timeout=120)
    finally:
        child.join(timeout=30)


def test_zero_leaves_torch_its_own_count_and_a_number_is_kept() -> None:
    assert cpu_engine_threads(0) is None
    assert cpu_engine_threads(1) == 1
    assert cpu_engine_threads(3) == 3


@pytest.mark.slow  # three spawned children import torch: ~10 s
def test_a_child_spawned_inside_computes_on_that_many_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    own = _spawned_torch_threads()
    want = 1 if own > 1 else 2
    with engine_core_threads(want):
        assert _spawned_torch_threads() == want
    assert "OMP_NUM_THREADS" not in os.environ, "the server process keeps its own environment"
    with engine_core_threads(None):
        assert _spawned_torch_threads() == own


def test_an_operators_omp_num_threads_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    with engine_core_threads(1):
        assert os.environ["OMP_NUM_THREADS"] == "4"
    assert os.environ["OMP_NUM_THREADS"] == "4"
