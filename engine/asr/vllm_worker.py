"""What the engine asks of vLLM's worker beyond decoding, mixed into it as ``worker_extension_cls``.

vLLM adds this class to its worker's bases in the process that runs the model (on a CPU, the engine core itself) and
runs its methods there through ``AsyncLLM.collective_rpc``, between engine steps. Nothing here imports torch at module
level: vLLM imports the class by name in each of its processes.
"""

from __future__ import annotations


class CpuThreads:
    """Lets the server change the model's compute threads while it runs (``VllmTranscriber.set_cpu_threads``)."""

    def set_cpu_threads(self, threads: int) -> int:
        """Run the model's operators on ``threads`` threads from the next engine step on; returns the count now in
        effect. torch's OpenMP pool keeps its threads: the ones not used sleep.

        vLLM's CPU worker replaces ``torch.set_num_threads`` with a no-op as it starts (its warning says a count
        changed after its thread binding would undo it). This project leaves that binding off
        (``VLLM_CPU_OMP_THREADS_BIND`` unset: the worker runs inside the engine core, where vLLM binds nothing), so
        the count is set through ``torch._C.set_num_threads``, the function ``torch.set_num_threads`` is."""
        import torch

        torch._C.set_num_threads(max(1, int(threads)))
        return int(torch.get_num_threads())
