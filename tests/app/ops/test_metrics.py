"""``GET /metrics``: Prometheus' text format as its own parser reads it, values that follow a real WebRTC session
and a room viewer, and who may read them (``--metrics``). The recognizer is the named fake: what is tested is that
the server counts what happens, not what the model hears."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp
import openai
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from app.config import ServerConfig, build_parser, config_from_args
from app.rooms.keys import STORE
from bench.lib.client import PacketLoss
from engine import EngineObserver
from engine.asr.fake import FakeTranscriber
from engine.asr.transcriber import DecodeRequest, Priority, Transcript
from engine.config import EngineConfig
from engine.observe import Observers
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad, wav_path
from tests.support.disk import disk_full
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server
from tests.support.sse import SseReader

TOKEN = "metrics-test-token"
CLIP = "ls_1988-24833-0000"  # 3.3 s of read speech: one sentence
SPEECH_S = 2.0  # the live tests stream the clip's first 2 s (1.6 s of speech: partials, then the sentence)
UPLOAD = "whisper_jfk"  # 11 s

EXPECTED_TYPES = {
    "live_captions_sessions_active": "gauge",
    "live_captions_room_viewers": "gauge",
    "live_captions_rooms_in_memory": "gauge",
    "live_captions_room_events_unsaved": "gauge",
    "live_captions_room_viewers_dropped": "counter",
    "live_captions_room_corrections": "counter",
    "live_captions_room_events_held": "gauge",
    "live_captions_room_outputs": "gauge",
    "live_captions_output_captions_sent": "counter",
    "live_captions_output_send_errors": "counter",
    "live_captions_recognizer_requests": "gauge",
    "live_captions_engine_state": "gauge",
    "live_captions_store_errors": "counter",
    "live_captions_audio_received_seconds": "counter",
    "live_captions_audio_shed_seconds": "counter",
    "live_captions_audio_packets_lost": "counter",
    "live_captions_audio_packets_late": "counter",
    "live_captions_audio_concealed_seconds": "counter",
    "live_captions_decode_seconds": "histogram",
    "live_captions_decode_fallbacks": "counter",
    "live_captions_first_partial_latency_seconds": "histogram",
    "live_captions_lock_latency_seconds": "histogram",
}


class Scrape:
    """One parsed ``/metrics`` answer: sample values by sample name and labels."""

    def __init__(self, text: str) -> None:
        self.types: dict[str, str] = {}
        self.samples: list[Sample] = []
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            self.samples.extend(family.samples)

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
        return sum(
            s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def labels(self, name: str, label: str) -> set[str]:
        return {s.labels[label] for s in self.samples if s.name == name and label in s.labels}


async def get_metrics(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of ``GET /metrics``."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics", headers=headers or {}) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def scrape(url: str, headers: dict[str, str] | None = None) -> Scrape:
    status, _, body = await get_metrics(url, headers)
    assert status == 200, body
    return Scrape(body)


async def scrape_until(url: str, done: Callable[[Scrape], bool], timeout_s: float = 20.0) -> Scrape:
    deadline = time.monotonic() + timeout_s
    while True:
        s = await scrape(url)
        if done(s):
            return s
        assert time.monotonic() < deadline, "the metrics never showed the expected values"
        await asyncio.sleep(0.1)


async def test_metrics_are_prometheus_text_with_the_documented_names_and_types(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, _app):
        status, content_type, body = await get_metrics(url)
        assert status == 200 and content_type.startswith("text/plain"), (status, content_type)
        s = Scrape(body)
        for name, kind in EXPECTED_TYPES.items():
            assert s.types.get(name) == kind, f"{name}: {s.types.get(name)} (expected {kind})"
        assert all(name.startswith("live_captions_") for name in s.types), sorted(s.types)
        # The gauges read from live objects are there from the start, at zero, with every label value.
        assert s.value("live_captions_sessions_active", kind="live") == 0
        assert s.labels("live_captions_recognizer_requests", "priority") == {"final", "partial", "background"}
        assert s.value("live_captions_engine_state", state="ready") == 1
        assert s.value("live_captions_engine_state") == 1, "exactly one state is current"
        assert s.value("live_captions_audio_received_seconds_total") == 0
    # Each app has its own registry: nothing lands in the process-wide default one (tests run many apps).
    assert not [m.name for m in prometheus_client.REGISTRY.collect() if m.name.startswith("live_captions")]


@dataclass
class CutPartials(FakeTranscriber):
    """The fake recognizer, its partials cut short: none stands in for its sentence's final."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        return replace(result, truncated=True) if request.priority is Priority.PARTIAL else result


@pytest.fixture
async def finals_engine() -> AsyncIterator[CaptionEngine]:
    """The named fake recognizer, with every sentence's final decoded on its own: by default a partial that covers
    all of a sentence's speech serves as its final (and is counted as a partial decode), which would leave the final
    kind of the decode histogram empty here. Its partials come back cut short (``Transcript.truncated``), and a cut
    decode never stands in for a final."""
    eng = CaptionEngine(EngineConfig(speakers=False), transcriber=CutPartials(delay_s=0.1))
    await eng.start()
    yield eng
    await eng.close()


async def test_metrics_follow_a_live_session_and_a_room_viewer(finals_engine: CaptionEngine) -> None:
    samples = pad(audio(CLIP)[: int(SPEECH_S * 16_000)], 0.3, 1.0)  # the stop locks the open sentence
    async with running_server(finals_engine) as (url, _app):
        before = await scrape(url)
        assert before.value("live_captions_sessions_active", kind="live") == 0
        assert before.value("live_captions_room_viewers") == 0
        assert before.value("live_captions_decode_seconds_count") == 0

        client = CaptionClient(url, samples)
        await client.connect()
        during = await scrape(url)
        assert during.value("live_captions_sessions_active", kind="live") == 1
        async with SseReader(f"{url}/rooms/{client.room}/events") as viewer:
            await viewer.wait_for(lambda r: any(m["type"] == "room" for _, m in r.events))
            watched = await scrape(url)
            assert watched.value("live_captions_room_viewers") == 1
            assert watched.value("live_captions_rooms_in_memory") >= 1
            scrape_s = []
            while not client.track.played.is_set():  # scrapes answer at once while audio streams in
                t0 = time.monotonic()
                await scrape(url)
                scrape_s.append(time.monotonic() - t0)
                await asyncio.sleep(0.25)
            await client.stop()
            await client.close()
        # (The server notices a viewer that hung up at its next write, up to a heartbeat later: not waited for.)
        after = await scrape_until(url, lambda s: s.value("live_captions_sessions_active", kind="live") == 0)

    assert client.sentences(), "the session locked no sentence"
    assert max(scrape_s) < 1.0, f"a scrape took {max(scrape_s):.2f} s"
    # Audio: what the client sent, less what arrived after the stop (the server no longer feeds the session then).
    received = after.value("live_captions_audio_received_seconds_total", kind="live")
    clip_s = samples.size / 16_000
    assert clip_s - 0.5 <= received <= client.track.played_s + 0.1, (received, clip_s, client.track.played_s)
    assert after.value("live_captions_audio_received_seconds_total", kind="file") == 0
    assert after.value("live_captions_audio_shed_seconds_total") == 0  # loopback, an idle server: nothing shed
    assert after.value("live_captions_audio_packets_lost_total") == 0  # nor lost
    assert after.value("live_captions_audio_concealed_seconds_total") == 0
    # Decodes of both live kinds, in the fake's window (it always reports Whisper's 30 s).
    assert after.value("live_captions_decode_seconds_count", kind="partial") >= 1
    assert after.value("live_captions_decode_seconds_count", kind="final") >= len(client.sentences())
    assert after.labels("live_captions_decode_seconds_count", "window_s") == {"30"}
    decodes = after.value("live_captions_decode_seconds_count")
    assert 0.1 * decodes <= after.value("live_captions_decode_seconds_sum") < 5 * decodes  # the fake takes 0.1 s
    # Each sentence's first text and its lock, timed in the server.
    locks = after.value("live_captions_lock_latency_seconds_count")
    assert locks == len(client.sentences())
    assert 0 < after.value("live_captions_lock_latency_seconds_sum") / locks < 10
    firsts = after.value("live_captions_first_partial_latency_seconds_count")
    assert firsts == len(client.sentences())
    assert 0 < after.value("live_captions_first_partial_latency_seconds_sum") / firsts < 5
    # The first text came before the lock (a partial while speaking), as the client saw.
    assert (
        after.value("live_captions_first_partial_latency_seconds_sum") / firsts
        < after.value("live_captions_lock_latency_seconds_sum") / locks
    )


async def test_packets_a_network_loses_are_counted_and_their_audio_concealed(
    fake_engine: CaptionEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.webrtc.peer")
    samples = pad(audio(CLIP)[: int(SPEECH_S * 16_000)], 0.3, 1.0)  # 3.3 s: 165 packets of 20 ms
    lose = {20, 40, 41, 80, 110, 111, 112, 140}
    async with running_server(fake_engine) as (url, _app):
        client = CaptionClient(url, samples)
        client.loss = PacketLoss(lambda n: n in lose)
        await client.connect()
        await client.until_played()
        during = await scrape_until(url, lambda s: s.value("live_captions_audio_packets_lost_total") == len(lose))
        await client.stop()
        await client.close()
        after = await scrape_until(url, lambda s: s.value("live_captions_sessions_active", kind="live") == 0)
    assert client.loss.lost == len(lose)
    assert during.value("live_captions_audio_concealed_seconds_total") == pytest.approx(0.02 * len(lose))
    assert after.value("live_captions_audio_packets_lost_total") == len(lose)
    assert after.value("live_captions_audio_packets_late_total") == 0
    # The session's audio kept its length: the lost packets' audio was concealed, not left out.
    received = after.value("live_captions_audio_received_seconds_total", kind="live")
    assert samples.size / 16_000 - 0.5 <= received <= client.track.played_s + 0.1, received
    assert client.sentences(), "the session locked no sentence"
    # ...and the session's closing log line says what was lost.
    assert any("8 packets lost, 0 late, 0.16 s concealed" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records if "closed" in r.getMessage()
    ]


async def test_an_upload_counts_as_file_audio_and_background_decodes(fake_engine: CaptionEngine) -> None:
    async with (
        running_server(fake_engine) as (url, _app),
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120) as api,
    ):
        with wav_path(UPLOAD).open("rb") as f:
            await api.audio.transcriptions.create(model="whisper-1", file=f)
        s = await scrape_until(url, lambda s: s.value("live_captions_sessions_active", kind="file") == 0)
    assert s.value("live_captions_audio_received_seconds_total", kind="file") == pytest.approx(11.0, abs=0.1)
    assert s.value("live_captions_audio_received_seconds_total", kind="live") == 0
    assert s.value("live_captions_decode_seconds_count", kind="background") >= 1
    assert s.value("live_captions_decode_seconds_count", kind="final") == 0
    # A file arrives faster than it was said: its sentences have no latency to report.
    assert s.value("live_captions_lock_latency_seconds_count") == 0
    assert s.value("live_captions_first_partial_latency_seconds_count") == 0


def test_an_observer_that_fails_never_stops_the_others() -> None:
    class Broken(EngineObserver):
        def decoded(self, kind: str, window_s: float, decode_s: float, fallbacks: int) -> None:
            raise RuntimeError("broken counter")

    class Counting(EngineObserver):
        calls = 0

        def decoded(self, kind: str, window_s: float, decode_s: float, fallbacks: int) -> None:
            self.calls += 1

    observers, counting = Observers(), Counting()
    observers.add(Broken())
    observers.add(counting)
    observers.decoded("final", 8.0, 0.3, 0)
    observers.decoded("final", 8.0, 0.3, 0)
    assert counting.calls == 2
    observers.remove(counting)
    observers.decoded("final", 8.0, 0.3, 0)
    assert counting.calls == 2


async def test_store_errors_are_counted(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    async with running_server(fake_engine, db_path=str(tmp_path / "c.db")) as (url, app):
        assert (await scrape(url)).value("live_captions_store_errors_total") == 0
        disk_full(app[STORE], True)
        async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json={}) as r:
            assert r.status == 503
        assert (await scrape(url)).value("live_captions_store_errors_total") == 1
        disk_full(app[STORE], False)
        async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json={}) as r:
            assert r.status == 201
        assert (await scrape(url)).value("live_captions_store_errors_total") == 1


async def test_with_a_server_token_metrics_need_it_unless_open(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, _):
        status, _, body = await get_metrics(url)
        assert status == 401 and "token" in body
        status, _, _ = await get_metrics(url, {"Authorization": "Bearer wrong"})
        assert status == 401
        status, _, body = await get_metrics(url, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and "live_captions_sessions_active" in body
    async with running_server(fake_engine, auth_token=TOKEN, metrics="open") as (url, _):
        assert (await get_metrics(url))[0] == 200
    async with running_server(fake_engine) as (url, _):  # no server token: "token" access is open
        assert (await get_metrics(url))[0] == 200


async def test_metrics_off_is_404(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, metrics="off") as (url, _):
        assert (await get_metrics(url))[0] == 404
        assert (await get_metrics(url, {"Authorization": f"Bearer {TOKEN}"}))[0] == 404


def test_metrics_flag_and_environment(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert config_from_args(build_parser().parse_args([])).metrics == "token"
    assert config_from_args(build_parser().parse_args(["--metrics", "off"])).metrics == "off"
    monkeypatch.setenv("LIVE_CAPTIONS_METRICS", "open")
    assert config_from_args(build_parser().parse_args([])).metrics == "open"
    monkeypatch.setenv("LIVE_CAPTIONS_METRICS", "public")
    with pytest.raises(SystemExit):
        build_parser().parse_args([])
    assert "public" in capsys.readouterr().err
    with pytest.raises(ValueError, match="metrics access"):
        ServerConfig(metrics="public")  # type: ignore[arg-type]  # not one of them, on purpose
