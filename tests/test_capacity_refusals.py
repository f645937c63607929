"""A full server refuses a new live session the same way on every way in: ``503`` busy with ``Retry-After`` (the
Deepgram and OpenAI endpoints answer the operator's own cap with their protocols' ``429``, also with
``Retry-After``), says so in ``/ready`` and ``/metrics``, and keeps serving room viewers. The recognizer is the named
fake: nothing here needs a model."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import pytest
from aiohttp import web

from app.config import ServerConfig, build_parser
from app.ops import ADMISSION, Slot
from app.rooms.keys import ROOMS
from engine import CapacityEstimate, CaptionEngine
from tests.servers import free_port, running_server

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


async def every_way_in(http: aiohttp.ClientSession, url: str, app: web.Application,
                       funasr_port: int) -> dict[str, tuple[int, str | None]]:
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
    for name, path in (("deepgram", "/v1/listen?encoding=linear16&sample_rate=16000"),
                       ("openai", "/v1/realtime?intent=transcription"), ("funasr", "/funasr"),
                       ("funasr-port", f"ws://127.0.0.1:{funasr_port}/")):
        refused = await refused_handshake(http, path if path.startswith("ws") else ws_url + path)
        out[name] = refused.status, retry_after(refused)
    return out


async def test_a_full_server_refuses_on_every_way_in_with_retry_after(fake_engine: CaptionEngine) -> None:
    port = free_port()
    async with running_server(fake_engine, funasr_port=port, max_sessions=None) as (url, app), \
            aiohttp.ClientSession() as http:
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
        for name, path in (("deepgram", "/v1/listen?encoding=linear16&sample_rate=16000"),
                           ("openai", "/v1/realtime?intent=transcription")):
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
