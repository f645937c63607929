"""The CPU engine core's compute threads: every core but one by default, the rest left to the server process."""

from __future__ import annotations

import os

import psutil
import pytest

from engine.asr.vllm_backend import cpu_engine_threads, engine_core_threads
from engine.stream.engine import CaptionEngine
from engine.stream.runner import stream_audio
from speechdata.corpus import audio, pad


def test_every_core_but_one_unless_asked() -> None:
    assert cpu_engine_threads(0, cores=2) == 1
    assert cpu_engine_threads(0, cores=16) == 15
    assert cpu_engine_threads(0, cores=1) == 1
    assert cpu_engine_threads(3, cores=2) == 3


def test_the_child_gets_the_threads_and_the_server_keeps_its_own_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with engine_core_threads(1):
        assert os.environ["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in os.environ
    with engine_core_threads(None):
        assert "OMP_NUM_THREADS" not in os.environ


def test_an_operators_omp_num_threads_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    with engine_core_threads(1):
        assert os.environ["OMP_NUM_THREADS"] == "4"
    assert os.environ["OMP_NUM_THREADS"] == "4"


def _thread_cpu(process: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in process.threads()}


@pytest.mark.heavy
async def test_the_engine_core_decodes_on_its_share_of_the_cores(engine: CaptionEngine) -> None:
    """While a sentence streams, the engine core's busy threads are at most its share: on 2 cores, one thread
    decodes and the other core stays with the server (torch would otherwise compute on every core)."""
    cores = [p for p in psutil.Process().children(recursive=True) if p.name().startswith("VLLM::EngineCor")]
    if getattr(engine.transcriber, "device", None) != "cpu" or not cores or "OMP_NUM_THREADS" in os.environ:
        pytest.skip("not vLLM on a CPU in this process (a GPU, or a remote recognizer), or OMP_NUM_THREADS set")
    core = cores[0]
    before = _thread_cpu(core)
    result = await stream_audio(engine, pad(audio("ls_1988-24833-0001"), 0.5, 1.5), realtime=True)
    assert any(m for m in result.messages)
    spent = {tid: cpu - before.get(tid, 0.0) for tid, cpu in _thread_cpu(core).items()}
    busiest = max(spent.values())
    busy = sorted((round(cpu, 2) for cpu in spent.values() if cpu > 0.25 * busiest), reverse=True)
    assert busiest > 1.0, spent  # it did decode
    assert len(busy) <= cpu_engine_threads(0), f"CPU seconds of the engine core's busy threads: {busy}"
