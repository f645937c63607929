"""The remote recognizer's balancing and fail-over (engine.asr.remote, engine.asr.instances), against fakes of
``vllm serve`` on loopback ports (tests/support/fake_vllm.py: real HTTP, no model). The real ``vllm serve`` is in
tests/functional/test_remote_asr.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from app.config import ServerConfig, build_parser, config_from_args
from app.server import engine_config
from engine.asr.instances import InstancePool, InstanceState, normalise_url
from engine.asr.remote import RemoteTranscriber
from engine.asr.remote_wire import padded_samples, wav_bytes
from engine.asr.transcriber import DecodeRequest, Priority, TranscriberState
from engine.config import EngineConfig, RemoteAsrConfig, TranscriberConfig
from engine.errors import EngineError, EngineNotReady
from engine.stream.engine import CaptionEngine, EngineState
from tests.support.fake_vllm import MODEL_ID, FakeVllm, fake_vllm, free_port

QUICK = RemoteAsrConfig(
    connect_timeout_s=1.0,
    request_timeout_s=5.0,
    health_interval_s=0.2,
    health_timeout_s=1.0,
    down_grace_s=1.0,
    start_timeout_s=10.0,
    warm_up=False,
)


def transcriber(*urls: str, **remote: object) -> RemoteTranscriber:
    return RemoteTranscriber(TranscriberConfig(asr_urls=urls, remote=replace(QUICK, **remote)))  # type: ignore[arg-type]


def speech(seconds: float, request_id: str = "r", **kw: object) -> DecodeRequest:
    audio = (0.1 * np.sin(np.arange(int(seconds * 16000)) * 0.05)).astype(np.float32)
    return DecodeRequest(request_id, audio, kw.pop("priority", Priority.FINAL), **kw)  # type: ignore[arg-type]


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def test_urls_are_checked() -> None:
    assert normalise_url(" http://10.0.0.5:8000/ ") == "http://10.0.0.5:8000"
    for bad in ("10.0.0.5:8000", "ftp://host", "http://", "http://host:99999", "http://h/?q=1"):
        with pytest.raises(ValueError, match="recognizer URL"):
            normalise_url(bad)
    with pytest.raises(ValueError, match="repeat"):
        InstancePool(["http://a:1", "http://a:1/"])
    with pytest.raises(ValueError, match="no recognizer URL"):
        InstancePool([])


def test_pick_least_loaded() -> None:
    pool = InstancePool(["http://a:1", "http://b:1", "http://c:1"])
    a, b, c = pool.instances
    assert pool.pick() is None  # nothing is known to be up yet
    for i in (a, b, c):
        pool.mark_up(i)
    a.inflight, b.inflight, c.inflight = 2, 1, 1
    b.decodes = 5
    assert pool.pick() is c  # fewest in flight; the tie goes to the one that answered fewer
    pool.mark_down(c, "refused")
    assert pool.pick() is b and c.went_down.is_set()
    assert "http://c:1 down (refused)" in pool.describe()
    pool.mark_down(a, "x")
    pool.mark_down(b, "y")
    assert pool.pick() is None and pool.all_down_s() >= 0


async def test_decodes_spread_over_instances_by_load() -> None:
    async with fake_vllm(FakeVllm(delay_s=0.5)) as one, fake_vllm(FakeVllm(delay_s=0.5)) as two:
        t = transcriber(one.url, two.url)
        await t.start()
        try:
            assert t.name == MODEL_ID and t.state is TranscriberState.READY
            results = await asyncio.gather(*(t.transcribe(speech(2.0, f"r{k}")) for k in range(4)))
            assert [r.text for r in results] == ["audio of 3.0 seconds"] * 4  # 2 s padded to its 4 s window - 1 s
            assert len(one.decodes) == 2 and len(two.decodes) == 2
            assert one.peak_inflight == 2 and two.peak_inflight == 2
            # One instance busy with a long decode: the next requests go to the other.
            one.delay_s = 5.0  # far longer than the three decodes below (1.5 s), even on a loaded machine
            slow = asyncio.create_task(t.transcribe(speech(1.0, "slow")))
            await wait_for(lambda: one.inflight == 1)
            two_before = len(two.decodes)
            for k in range(3):  # one after another: each finds one request in flight on `one`, none on `two`
                await t.transcribe(speech(1.0, f"q{k}"))
            assert len(two.decodes) - two_before == 3 and one.inflight == 1
            await slow
        finally:
            await t.close()


async def test_request_fields_and_window_padding() -> None:
    async with fake_vllm() as fake:
        t = transcriber(fake.url)
        await t.start()
        try:
            result = await t.transcribe(speech(5.0, context="Kat  and the kittens", language="en", temperature=0.2))
            sent = fake.decodes[-1]
            assert sent.form["model"] == MODEL_ID and sent.form["language"] == "en"
            assert sent.form["prompt"] == "Kat and the kittens" and sent.form["temperature"] == "0.2"
            assert sent.form["stream"] == "true" and int(sent.form["max_completion_tokens"]) == 50
            # 5 s + 1 s margin fits the 8 s window: the audio goes padded to 7 s, where the server's windowed
            # Whisper (same margin) picks 8 s.
            assert sent.audio_s == pytest.approx(7.0) and result.window_s == 8.0
            assert result.tokens == 5 and result.avg_logprob == 0.0 and result.language == "en"
            auto = await t.transcribe(speech(1.0, language=None))
            assert "language" not in fake.decodes[-1].form and auto.language is None
            timed = await t.transcribe(speech(3.0, timestamps=True))
            assert fake.decodes[-1].form["response_format"] == "verbose_json"
            assert timed.avg_logprob == pytest.approx(-0.25) and timed.tokens == 4
            assert [(s.start_s, s.end_s) for s in timed.spans] == [(0.0, 2.0)]
        finally:
            await t.close()


def test_wav_and_padding() -> None:
    data = wav_bytes(np.array([0.5, -2.0], dtype=np.float32), pad_to_samples=4)
    assert data[:4] == b"RIFF" and len(data) == 44 + 8
    assert np.frombuffer(data[44:], "<i2").tolist() == [16384, -32767, 0, 0]
    assert padded_samples(4.0) == 48_000 and padded_samples(30.0) == 464_000


async def test_loop_is_decoded_again_in_a_larger_window() -> None:
    async with fake_vllm(FakeVllm(loop_below_s=10.0)) as fake:
        t = transcriber(fake.url)
        await t.start()
        try:
            result = await t.transcribe(speech(2.0))
            # 4 s window (3 s sent) looped, 8 s (7 s sent) looped, 15 s (14 s sent) did not.
            assert [round(r.audio_s) for r in fake.decodes] == [3, 7, 14]
            assert result.window_s == 15.0 and result.fallbacks == 2 and result.text == "audio of 14.0 seconds"
            assert fake.decodes[0].disconnected  # the looping stream was cut, not read to the end
        finally:
            await t.close()


async def test_cancelling_the_caller_aborts_the_http_request() -> None:
    async with fake_vllm(FakeVllm(delay_s=10.0)) as fake:
        t = transcriber(fake.url)
        await t.start()
        try:
            task = asyncio.create_task(t.transcribe(speech(1.0)))
            await wait_for(lambda: fake.inflight == 1)
            assert t.load()["final"] == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await wait_for(lambda: fake.decodes[-1].disconnected, timeout_s=3.0)
            assert fake.inflight == 0 and t.load()["final"] == 0
        finally:
            await t.close()


async def test_dead_url_is_left_out() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with fake_vllm() as fake:
        t = transcriber(dead, fake.url)
        await t.start()
        try:
            results = await asyncio.gather(*(t.transcribe(speech(1.0, f"r{k}")) for k in range(3)))
            assert all(r.text for r in results) and len(fake.decodes) == 3
            state = {i["url"]: i for i in t.stats()["instances"]}
            assert state[dead]["state"] == "down" and "ConnectError" in str(state[dead]["error"])
        finally:
            await t.close()


async def test_instance_killed_mid_request_is_resent() -> None:
    async with fake_vllm(FakeVllm(delay_s=0.3)) as survivor:
        victim_cm = fake_vllm(FakeVllm(delay_s=30.0))
        victim = await victim_cm.__aenter__()
        t = transcriber(victim.url, survivor.url)
        await t.start()
        try:
            await wait_for(lambda: len(t.pool.up) == 2)
            tasks = [asyncio.create_task(t.transcribe(speech(1.0, f"r{k}"))) for k in range(2)]
            await wait_for(lambda: victim.inflight == 1 and survivor.inflight == 1)
            await victim_cm.__aexit__(None, None, None)  # the instance dies with a request in flight
            results = await asyncio.wait_for(asyncio.gather(*tasks), 10.0)
            assert [r.text for r in results] == ["audio of 3.0 seconds"] * 2
            assert t.resent == 1 and len(survivor.decodes) == 2 and victim.decodes[0].disconnected
            assert t.pool.instances[0].state is InstanceState.DOWN
        finally:
            await t.close()


async def test_failing_instance_is_taken_out_and_comes_back() -> None:
    async with fake_vllm(FakeVllm(status=500)) as sick, fake_vllm() as well:
        t = transcriber(sick.url, well.url)
        await t.start()
        try:
            await wait_for(lambda: len(t.pool.up) == 2)
            result = await t.transcribe(speech(1.0))
            assert result.text and len(sick.decodes) == 1 and len(well.decodes) == 1  # 500, then sent again
            assert t.pool.instances[0].failures == 1 and t.resent == 1
            sick.status = 200  # its /health answered all along: the next probe takes it back
            await wait_for(lambda: t.pool.instances[0].state is InstanceState.UP)
            await asyncio.gather(*(t.transcribe(speech(1.0, f"r{k}")) for k in range(2)))
            assert len(sick.decodes) == 2
        finally:
            await t.close()


async def test_unhealthy_instance_wakes_its_requests() -> None:
    """A hung instance (its connection open, its /health failing) loses its requests to the others."""
    async with fake_vllm(FakeVllm(delay_s=30.0)) as hung, fake_vllm() as well:
        t = transcriber(hung.url, well.url)
        await t.start()
        try:
            await wait_for(lambda: len(t.pool.up) == 2)
            task = asyncio.create_task(t.transcribe(speech(1.0)))
            await wait_for(lambda: hung.inflight == 1)
            hung.healthy = False
            result = await asyncio.wait_for(task, 5.0)
            assert result.text and hung.decodes[-1].disconnected and "503" in t.pool.instances[0].error
        finally:
            await t.close()


async def test_a_decode_that_fails_everywhere_gives_up() -> None:
    """Instances whose /health passes while every decode fails (a broken model) do not keep a request forever."""
    async with fake_vllm(FakeVllm(status=500)) as one, fake_vllm(FakeVllm(status=503)) as two:
        t = transcriber(one.url, two.url)
        await t.start()
        try:
            await wait_for(lambda: len(t.pool.up) == 2)
            with pytest.raises(EngineNotReady, match=r"failed on every recognizer instance: .*503 engine trouble"):
                await asyncio.wait_for(t.transcribe(speech(1.0)), 10.0)
            assert len(one.decodes) == 2 and len(two.decodes) == 2 and t.resent == 3
        finally:
            await t.close()


async def test_bad_request_is_not_retried() -> None:
    async with fake_vllm(FakeVllm(status=400)) as fake:
        t = transcriber(fake.url)
        await t.start()
        try:
            with pytest.raises(EngineError, match="refused the request: 400"):
                await t.transcribe(speech(1.0))
            assert t.pool.instances[0].state is InstanceState.UP
        finally:
            await t.close()


async def test_none_left_fails_clearly_then_recovers() -> None:
    port = free_port()
    cm = fake_vllm(FakeVllm(), port=port)
    fake = await cm.__aenter__()
    t = transcriber(fake.url, down_grace_s=0.5)
    await t.start()
    try:
        await cm.__aexit__(None, None, None)
        with pytest.raises(EngineNotReady, match=r"no speech recognizer instance is reachable: http://127\.0\.0\.1"):
            await asyncio.wait_for(t.transcribe(speech(1.0)), 5.0)
        await wait_for(lambda: t.state is TranscriberState.FAILED)
        assert "ConnectError" in t.detail or "Connect" in t.detail
        with pytest.raises(EngineNotReady, match="failed"):
            await t.transcribe(speech(1.0))
        async with fake_vllm(FakeVllm(), port=port):  # the instance comes back on its address
            await wait_for(lambda: t.state is TranscriberState.READY)
            assert (await t.transcribe(speech(1.0))).text
    finally:
        await t.close()
        await t.close()  # safe twice


async def test_start_gives_up_with_the_reasons() -> None:
    t = transcriber(f"http://127.0.0.1:{free_port()}", start_timeout_s=0.5)
    with pytest.raises(EngineNotReady, match=r"no speech recognizer instance came up within 0\.5 s: .*ConnectError"):
        await t.start()
    assert t.state is TranscriberState.FAILED
    await t.close()


async def test_start_waits_for_a_late_instance_and_warms_it() -> None:
    port = free_port()
    t = transcriber(f"http://127.0.0.1:{port}", warm_up=True)
    starting = asyncio.create_task(t.start())
    await asyncio.sleep(0.5)
    assert t.state is TranscriberState.LOADING and "waiting for a speech recognizer instance" in t.detail
    async with fake_vllm(FakeVllm(), port=port) as fake:
        await asyncio.wait_for(starting, 5.0)
        try:
            # One decode per window (4, 8, 15, 30 s) before the first request.
            assert [round(r.audio_s) for r in fake.received] == [3, 7, 14, 29] and not fake.decodes
        finally:
            await t.close()


def test_server_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    parse = build_parser().parse_args
    config = config_from_args(parse(["--asr-url", "http://gpu1:8000/", "--asr-url", "http://gpu2:8000"]))
    assert config.asr_urls == ("http://gpu1:8000", "http://gpu2:8000")
    assert engine_config(config).transcriber.asr_urls == config.asr_urls
    assert config_from_args(parse([])).asr_urls == ()
    monkeypatch.setenv("LIVE_CAPTIONS_ASR_URLS", "http://a:1, http://b:2")
    assert config_from_args(parse([])).asr_urls == ("http://a:1", "http://b:2")
    monkeypatch.setenv("LIVE_CAPTIONS_ASR_URLS", "a:1")
    with pytest.raises(SystemExit, match="LIVE_CAPTIONS_ASR_URLS: recognizer URL 'a:1' must look like http"):
        config_from_args(parse([]))
    with pytest.raises(SystemExit):
        parse(["--asr-url", "gpu1"])
    assert ServerConfig().asr_urls == ()


async def test_engine_decodes_remotely_when_given_urls() -> None:
    async with fake_vllm() as one, fake_vllm() as two:
        config = EngineConfig(transcriber=TranscriberConfig(asr_urls=(one.url, two.url), remote=QUICK), speakers=False)
        eng = CaptionEngine(config)
        assert isinstance(eng.transcriber, RemoteTranscriber)
        await eng.start()
        try:
            assert eng.state is EngineState.READY and eng.model_name == MODEL_ID
            assert eng.scheduler.max_inflight_partials == 4  # two per instance
            assert [i["state"] for i in eng.stats()["recognizer"]["instances"]] == ["up", "up"]
        finally:
            await eng.close()
