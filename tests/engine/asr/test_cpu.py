"""The CPU engine core's compute threads: ``--cpu-threads N`` reaches the spawned engine core; 0 starts it on one per
core and lets the engine follow the load (every core for one speaker, half for several)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from engine.asr import cpu
from engine.asr.cpu import cpu_engine_threads, engine_core_threads
from engine.asr.fake import FakeTranscriber
from engine.asr.transcriber import DecodeRequest, Priority
from engine.audio.pcm import SAMPLE_RATE
from engine.config import EngineConfig, TranscriberConfig
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, manifest
from speechdata.wer import normalise, wer


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


class _ThreadedFake(FakeTranscriber):
    """The named fake, as a CPU recognizer whose threads can be set (``VllmTranscriber.set_cpu_threads``)."""

    def __init__(self) -> None:
        super().__init__(delay_s=0.01)
        self.cpu_threads = 4  # (it starts on every core: the tests say there are 4)
        self.asked: list[int] = []

    async def set_cpu_threads(self, threads: int) -> int:
        self.asked.append(threads)
        self.cpu_threads = threads
        return threads


async def test_the_recognizer_gets_every_core_for_one_speaker_and_half_for_several(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu, "available_cores", lambda: 4)
    fake = _ThreadedFake()
    engine = CaptionEngine(EngineConfig(speakers=False), transcriber=fake)
    await engine.start()
    try:
        engine._sampler_task.cancel()  # type: ignore[union-attr]  # the test calls what it would, by hand
        assert (engine.threads_alone, engine.threads_shared) == (4, 2)
        assert engine.capacity.front_cores == 2  # the cores the recognizer leaves the server under load
        busy = [0.9]
        monkeypatch.setattr(engine.recognizer_load, "busy", lambda kind=None: busy[0])
        await engine._adapt_threads(speaking=1)
        assert fake.asked == []  # one speaker, however busy: every core, as it started
        busy[0] = 0.4
        await engine._adapt_threads(speaking=3)
        assert fake.asked == []  # several, but the recognizer has time to spare: still every core
        busy[0] = 0.7
        await engine._adapt_threads(speaking=3)
        assert fake.asked == []  # several keep it busy: half, once they have for a while (a turn is not a load)
        engine._loaded_since -= 5.0
        await engine._adapt_threads(speaking=3)
        assert fake.asked == [2]
        busy[0] = 0.2
        await engine._adapt_threads(speaking=1)
        assert fake.asked == [2]  # a turn in a conversation, a lull: not back yet
        engine._light_since -= 9.0
        busy[0] = 0.7
        await engine._adapt_threads(speaking=3)  # busy again for a moment: the light spell is broken
        busy[0] = 0.2
        await engine._adapt_threads(speaking=3)
        engine._light_since -= 2.0
        await engine._adapt_threads(speaking=3)
        assert fake.asked == [2]  # light for 2 s since the break (11 s since it first was)
        engine._light_since -= 8.0
        await engine._adapt_threads(speaking=3)
        assert fake.asked == [2, 4]  # light for 10 s without a break: every core again
    finally:
        await engine.close()


async def test_a_fixed_thread_count_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "available_cores", lambda: 4)
    for config, env in ((TranscriberConfig(cpu_threads=1), None), (TranscriberConfig(), "3")):
        if env is None:
            monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", env)
        fake = _ThreadedFake()
        engine = CaptionEngine(EngineConfig(speakers=False, transcriber=config), transcriber=fake)
        await engine.start()
        try:
            monkeypatch.setattr(engine.recognizer_load, "busy", lambda kind=None: 0.9)
            await engine._adapt_threads(speaking=3)
            assert engine.threads_alone == 0 and fake.asked == []
        finally:
            await engine.close()


@pytest.mark.heavy
async def test_the_real_engine_core_takes_a_new_thread_count(engine: CaptionEngine) -> None:
    """vLLM's CPU worker disables ``torch.set_num_threads``; the worker extension sets the count all the same."""
    transcriber = engine.transcriber
    if getattr(transcriber, "device", "") != "cpu":
        pytest.skip("a GPU recognizer has no CPU threads to set")
    before = transcriber.cpu_threads  # type: ignore[attr-defined]
    try:
        assert await transcriber.set_cpu_threads(1) == 1  # type: ignore[attr-defined]
        assert await transcriber.set_cpu_threads(2) == 2  # type: ignore[attr-defined]
        assert transcriber.cpu_decoder_threads == min(2, transcriber.config.cpu_decoder_threads or 2)  # type: ignore[attr-defined]
    finally:
        await transcriber.set_cpu_threads(before)  # type: ignore[attr-defined]


@pytest.mark.heavy
async def test_text_steps_on_fewer_threads_decode_every_request_as_all_threads_do(engine: CaptionEngine) -> None:
    """Text-only steps on one thread, encoding steps on two (the shipped split), switched between requests: each
    decode of a clip's first 3 s says what it says on two threads throughout, and words of that clip, never those of
    another request (as when the count changed inside a step: engine.asr.vllm_worker)."""
    transcriber = engine.transcriber
    if getattr(transcriber, "device", "") != "cpu":
        pytest.skip("a GPU recognizer has no CPU threads to set")
    reads = [e for e in manifest().values() if e["lang"] == "en" and e["kind"] == "read" and e["text"]][:6]
    before = transcriber.cpu_threads  # type: ignore[attr-defined]
    try:
        for i, entry in enumerate(reads):
            clip = audio(entry["id"])
            texts = []
            for decoder_threads in (0, 1):
                await transcriber.set_cpu_threads(2, decoder_threads)  # type: ignore[attr-defined]
                request = DecodeRequest(f"split-{i}-{decoder_threads}", clip[: 3 * SAMPLE_RATE], Priority.FINAL)
                texts.append((await transcriber.transcribe(request)).text)
            # (The same text but for rounding: a sum over other threads may round otherwise and tip a comma.)
            assert wer(texts[0], texts[1]) <= 0.25, (entry["id"], texts)
            said, reference = normalise(texts[1]), set(normalise(entry["text"]))
            assert said and sum(w in reference for w in said) >= 0.75 * len(said), (entry["id"], texts)
    finally:
        await transcriber.set_cpu_threads(before)  # type: ignore[attr-defined]
