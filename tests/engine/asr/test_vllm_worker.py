"""The CPU engine core's two thread counts (``engine.asr.vllm_worker``): a step that encodes audio runs on all of
``cpu_threads``, a step that only generates text on ``cpu_decoder_threads``, chosen before the step starts. Without
the real engine: a worker stand-in whose model runner records the thread count each step ran on (torch's own, in
this process)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from engine.asr.vllm_worker import CpuThreads


@dataclass
class _Step:
    """Stands in for vLLM's ``SchedulerOutput``: only the requests whose audio this step encodes."""

    scheduled_encoder_inputs: dict[str, list[int]] = field(default_factory=dict)


class _Runner:
    """Stands in for vLLM's model runner: each step's thread count, as the model would run on it."""

    def __init__(self) -> None:
        self.ran_on: list[int] = []

    def execute_model(self, scheduler_output: _Step, intermediate_tensors: Any = None) -> str:
        self.ran_on.append(torch.get_num_threads())
        return "output"


class _Worker(CpuThreads):
    """Stands in for vLLM's worker, which ``CpuThreads`` is mixed into: only its ``model_runner``."""

    def __init__(self) -> None:
        self.model_runner = _Runner()


@pytest.fixture(autouse=True)
def _torch_threads_put_back() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch._C.set_num_threads(before)


def _steps(worker: _Worker, *encodes: bool) -> list[int]:
    runner = worker.model_runner
    runner.ran_on.clear()
    for encode in encodes:
        assert runner.execute_model(_Step({"r": [0]} if encode else {})) == "output"
    return list(runner.ran_on)


def test_a_step_that_encodes_runs_on_every_thread_and_a_text_step_on_the_decoders() -> None:
    worker = _Worker()
    assert worker.set_cpu_threads(2, 1) == (2, 1)
    assert torch.get_num_threads() == 1  # the next step, unless it encodes
    assert _steps(worker, True, False, False, True, False) == [2, 1, 1, 2, 1]
    assert worker.set_cpu_threads(1, 1) == (1, 1)  # several speaking: half the cores for all of it
    assert _steps(worker, True, False) == [1, 1]


def test_zero_decoder_threads_means_as_many_as_the_encoder_and_never_more_than_the_engine() -> None:
    worker = _Worker()
    assert worker.set_cpu_threads(2, 0) == (2, 2)
    assert _steps(worker, True, False) == [2, 2]
    assert worker.set_cpu_threads(1, 4) == (1, 1)
    assert _steps(worker, True, False) == [1, 1]


def test_setting_again_wraps_the_runner_once() -> None:
    worker = _Worker()
    worker.set_cpu_threads(2, 1)
    first = worker.model_runner.execute_model
    worker.set_cpu_threads(2, 0)
    assert worker.model_runner.execute_model is first
    assert _steps(worker, False) == [2]
