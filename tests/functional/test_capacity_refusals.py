"""A full server refuses a new live session the same way on every way in: ``503`` busy with ``Retry-After`` (the
Deepgram and OpenAI endpoints answer the operator's own cap with their protocols' ``429``, also with
``Retry-After``), says so in ``/ready`` and ``/metrics``, and keeps serving room viewers. An engine that is loading,
or failed, or will not open the session after all, is one refusal too, whichever way in asked (``app.ops.admission``):
``loading`` with ``Retry-After``, a failed engine without. The recognizer is the named fake: nothing here needs a
model."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from app.compat import openai_realtime
from app.config import ServerConfig, build_parser
from app.ops import ADMISSION, Refusal, RefusalReason, Slot
from app.rooms.keys import ROOMS
from engine import CapacityEstimate, CaptionEngine, EngineError, EngineNotReady
from engine.asr.fake import FakeTranscriber
from engine.config import EngineConfig
from tests.support.servers import free_port, running_server

SDP = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"


def full(late: bool = False) -> Callable[[], CapacityEstimate]:
    """A capacity estimate of one session (taken by the test), or of finals already running late."""
    return lambda: CapacityEstimate(1, "measured", 0.5, 0.1, 0.97, 2.4 if late else 0.3, late)


def retry_after(refused: aiohttp.WSServerHandshakeError) -> str | None:
    return refused.headers.get("Retry-After") if refused.headers is not None else None


async def refused_handshake(http: aiohttp.ClientSession, url: str) -> aiohttp.WSServerHandshakeError:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(url)
    return refused.value


async def every_way_in(
    http: aiohttp.ClientSession, url: str, app: web.Application, funasr_port: int
) -> dict[str, tuple[int, str | None]]:
    """(status, Retry-After) of a new session on each way in."""
    room = (await app[ROOMS].create()).room
    out: dict[str, tuple[int, str | None]] = {}
    async with http.post(f"{url}/offer", json={"sdp": SDP, "type": "offer"}) as r:
        body = await r.json()
        assert body["error"]["code"] == "busy" and body["error"]["retry_after_s"] > 0, body
        out["offer"] = r.status, r.headers.get("Retry-After")
    async with http.post(f"{url}/whip/{room.id}", data=SDP, headers={"Content-Type": "application/sdp"}) as r:
        assert (await r.json())["error"]["code"] == "busy"
        out["whip"] = r.status, r.headers.get("Retry-After")
    ws_url = url.replace("http", "ws")
    for name, path in (
        ("deepgram", "/v1/listen?encoding=linear16&sample_rate=16000"),
        ("openai", "/v1/realtime?intent=transcription"),
        ("funasr", "/funasr"),
        ("funasr-port", f"ws://127.0.0.1:{funasr_port}/"),
    ):
        refused = await refused_handshake(http, path if path.startswith("ws") else ws_url + path)
        out[name] = refused.status, retry_after(refused)
    return out


async def test_a_full_server_refuses_on_every_way_in_with_retry_after(fake_engine: CaptionEngine) -> None:
    port = free_port()
    async with (
        running_server(fake_engine, funasr_port=port, max_sessions=None) as (url, app),
        aiohttp.ClientSession() as http,
    ):
        admission = app[ADMISSION]
        assert admission.auto  # --max-sessions auto
        admission.capacity = full()
        taken = admission.admit()  # the one session it holds
        answers = await every_way_in(http, url, app, port)
        assert {name: status for name, (status, _) in answers.items()} == dict.fromkeys(answers, 503), answers
        assert all(retry and int(retry) > 0 for _, retry in answers.values()), answers
        async with http.get(f"{url}/ready") as r:
            ready = await r.json()
        assert r.status == 200 and ready["ready"] and not ready["admitting"]  # a full server is still ready
        assert ready["capacity"]["sessions"] == 1 and ready["capacity"]["headroom"] == 0
        assert ready["max_sessions"] == "auto"
        async with http.get(f"{url}/metrics") as r:
            metrics = await r.text()
        assert 'live_captions_sessions_refused_total{reason="full"} 6.0' in metrics
        assert "live_captions_capacity_headroom_sessions 0.0" in metrics
        # Room viewers cost no model work: they are never refused for this.
        room = (await app[ROOMS].create()).room
        async with http.get(f"{url}/rooms/{room.id}/events") as r:
            assert r.status == 200 and r.content_type == "text/event-stream"

        # With its one place free again, finals that run late still refuse a new session.
        assert isinstance(taken, Slot)
        taken.release()
        admission.capacity = full(late=True)
        async with http.post(f"{url}/offer", json={"sdp": SDP, "type": "offer"}) as r:
            body = await r.json()
            assert r.status == 503 and "late" in body["error"]["message"] and body["error"]["reason"] == "full"


async def test_the_operators_cap_is_the_streaming_apis_own_429(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, max_sessions=0) as (url, _app), aiohttp.ClientSession() as http:
        answers = {}
        ws_url = url.replace("http", "ws")
        for name, path in (
            ("deepgram", "/v1/listen?encoding=linear16&sample_rate=16000"),
            ("openai", "/v1/realtime?intent=transcription"),
        ):
            refused = await refused_handshake(http, ws_url + path)
            answers[name] = refused.status, retry_after(refused)
        assert answers == {"deepgram": (429, "10"), "openai": (429, "10")}, answers
        async with http.post(f"{url}/offer", json={"sdp": SDP, "type": "offer"}) as r:
            assert r.status == 503 and (await r.json())["error"]["reason"] == "limit"
        async with http.get(f"{url}/ready") as r:
            ready = await r.json()
        assert ready["max_sessions"] == 0 and not ready["admitting"]


def test_max_sessions_is_the_servers_own_estimate_unless_an_operator_sets_a_number() -> None:
    parser = build_parser()
    assert parser.parse_args([]).max_sessions is None  # auto
    assert parser.parse_args(["--max-sessions", "AUTO"]).max_sessions is None
    assert parser.parse_args(["--max-sessions", "3"]).max_sessions == 3
    assert ServerConfig().max_sessions is None
    for bad in ("-1", "many"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--max-sessions", bad])


# ---- an engine that is not ready: one refusal, every way in ---------------------------------------------------------
UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}  # a WebSocket handshake, read as plain HTTP


@dataclass(frozen=True)
class Answer:
    status: int
    retry_after: str | None
    body: dict[str, Any]


async def refusals(http: aiohttp.ClientSession, url: str, room_id: str, funasr_port: int) -> dict[str, Answer]:
    """What each way in answers a new live session, body and all (a WebSocket way in: its refused handshake)."""
    out: dict[str, Answer] = {}
    requests = {
        "offer": http.post(f"{url}/offer", json={"sdp": SDP, "type": "offer"}),
        "whip": http.post(f"{url}/whip/{room_id}", data=SDP, headers={"Content-Type": "application/sdp"}),
        "deepgram": http.get(f"{url}/v1/listen?encoding=linear16&sample_rate=16000", headers=UPGRADE),
        "openai": http.get(f"{url}/v1/realtime?intent=transcription", headers=UPGRADE),
        "funasr": http.get(f"{url}/funasr", headers=UPGRADE),
        "funasr-port": http.get(f"http://127.0.0.1:{funasr_port}/", headers=UPGRADE),
    }
    for name, request in requests.items():
        async with request as r:
            out[name] = Answer(r.status, r.headers.get("Retry-After"), await r.json())
    return out


OURS = ("offer", "whip", "funasr", "funasr-port")  # this server's own JSON errors (the others speak their services')


class NoModelHere(FakeTranscriber):
    """A recognizer whose model fails to load: the server stays up, saying why."""

    async def start(self) -> None:
        raise RuntimeError("no model at /models/missing")


async def refusals_of(engine: CaptionEngine) -> tuple[dict[str, Answer], str]:
    """Every way in's answer from a server on ``engine`` (``refusals``), and its ``/metrics`` after them; the
    engine is closed after."""
    port = free_port()
    try:
        async with running_server(engine, funasr_port=port) as (url, app), aiohttp.ClientSession() as http:
            room = (await app[ROOMS].create()).room
            answers = await refusals(http, url, room.id, port)
            metrics = await (await http.get(f"{url}/metrics")).text()
    finally:
        await engine.close()
    return answers, metrics


async def test_a_loading_model_is_the_same_refusal_with_retry_after_on_every_way_in() -> None:
    loading = CaptionEngine(EngineConfig(speakers=False), transcriber=FakeTranscriber())  # never started
    answers, metrics = await refusals_of(loading)
    assert {n: (a.status, a.retry_after) for n, a in answers.items()} == dict.fromkeys(answers, (503, "10")), answers
    for name in OURS:
        assert answers[name].body["error"] | {"message": ""} == {
            "code": "loading",
            "reason": "loading",
            "retry_after_s": 10,
            "message": "",
        }, (name, answers[name])
    assert answers["deepgram"].body["err_code"] == "SERVICE_UNAVAILABLE"
    assert answers["openai"].body["error"]["code"] == "model_not_ready"
    assert 'live_captions_sessions_refused_total{reason="loading"} 6.0' in metrics


async def test_a_failed_engine_is_the_same_refusal_without_retry_after_on_every_way_in() -> None:
    failed = CaptionEngine(EngineConfig(speakers=False), transcriber=NoModelHere())
    with pytest.raises(EngineNotReady):
        await failed.start()
    answers, metrics = await refusals_of(failed)
    # Waiting does not bring a failed engine back (the operator, or a restart, must): no Retry-After anywhere.
    assert {n: (a.status, a.retry_after) for n, a in answers.items()} == dict.fromkeys(answers, (503, None)), answers
    for name in OURS:
        error = answers[name].body["error"]
        assert (error["code"], error["reason"], error["retry_after_s"]) == ("engine", "engine_failed", None), name
        assert "no model at /models/missing" in error["message"] and "try again" not in error["message"], error
    assert answers["deepgram"].body["err_code"] == "SERVICE_UNAVAILABLE"
    assert answers["openai"].body["error"]["code"] == "engine_failed"
    assert 'live_captions_sessions_refused_total{reason="engine_failed"} 6.0' in metrics


@pytest.mark.parametrize(
    ("raised", "code", "reason", "retry_after", "close_code"),
    [
        (EngineNotReady("failed", "the recognizer died just now"), "engine", "engine_failed", None, 1011),
        (EngineError("every VAD row is taken"), "busy", "full", "10", 1013),
    ],
)
async def test_a_session_the_engine_will_not_open_is_admissions_refusal(
    fake_engine: CaptionEngine,
    monkeypatch: pytest.MonkeyPatch,
    raised: EngineError,
    code: str,
    reason: str,
    retry_after: str | None,
    close_code: int,
) -> None:
    """Admitted, and then the engine will not open the session after all: the same refusal as admission's, in
    each protocol's form (after a WebSocket's upgrade: a close, 1013 to try again later, 1011 for a failure)."""

    def refuse(*_: object, **__: object) -> None:
        raise raised

    monkeypatch.setattr(fake_engine, "open_session", refuse)
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        for path, kwargs in (
            ("/offer", {"json": {"sdp": SDP, "type": "offer"}}),
            (f"/whip/{room.id}", {"data": SDP, "headers": {"Content-Type": "application/sdp"}}),
        ):
            async with http.post(url + path, **kwargs) as r:  # type: ignore[arg-type]
                error = (await r.json())["error"]
                assert (r.status, r.headers.get("Retry-After"), error["code"], error["reason"]) == (
                    503,
                    retry_after,
                    code,
                    reason,
                ), (path, error)
        ws_url = url.replace("http", "ws")
        closes = {}
        for name, path, first in (
            ("deepgram", "/v1/listen?encoding=linear16&sample_rate=16000", None),
            ("openai", "/v1/realtime?intent=transcription", None),
            ("funasr", "/funasr", '{"mode": "2pass", "wav_name": "w", "is_speaking": true}'),
        ):
            async with http.ws_connect(ws_url + path) as ws:
                if first is not None:
                    await ws.send_str(first)  # (FunASR opens its session once the client has configured it)
                while (await ws.receive(timeout=10)).type is aiohttp.WSMsgType.TEXT:
                    pass
                closes[name] = ws.close_code
        assert closes == dict.fromkeys(closes, close_code), closes
        assert app[ADMISSION].in_use == 0, "every slot came back"


@pytest.mark.parametrize("reason", list(RefusalReason))
def test_every_refusal_says_whether_and_when_to_try_again(reason: RefusalReason) -> None:
    refusal = Refusal(reason, "why", None if reason is RefusalReason.ENGINE_FAILED else 7)
    response = refusal.response({"X-Extra": "kept"})
    body = json.loads(response.text or "")
    assert response.status == 503 and response.headers["X-Extra"] == "kept"
    assert body == {
        "error": {
            "code": refusal.code.value,
            "message": "why",
            "reason": reason.value,
            "retry_after_s": refusal.retry_after_s,
        }
    }
    assert body["error"]["code"] == {"loading": "loading", "engine_failed": "engine"}.get(reason.value, "busy")
    if reason.temporary:
        assert response.headers["Retry-After"] == "7" and refusal.close_code == 1013
    else:
        assert "Retry-After" not in response.headers and refusal.close_code == 1011
    assert reason in openai_realtime._REFUSALS  # every reason has its OpenAI form (Deepgram's: 503 unless named)
