"""Bad input gets a clear error and the server stays up. The recognizer is a named fake here: what is tested is
the transport's handling of bad requests and vanishing clients, not the model."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest

from app.rooms.keys import ROOMS
from app.webrtc.keys import PEERS
from engine.asr.fake import FakeTranscriber
from engine.config import EngineConfig
from engine.protocol import MAX_CLIENT_MESSAGE_BYTES
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server

# The first 2 s of a read sentence (1.6 s of speech): enough for partials and a sentence from the named fake, at
# real time, where the whole clip's 3.3 s would only make the test wait.
SPEECH_2_S = audio("ls_1988-24833-0000")[: 2 * 16000]


async def post(url: str, data: bytes, content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/offer", data=data, headers={"Content-Type": content_type}) as r,
    ):
        return r.status, await r.json()


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (b'{"sdp": "v=0", "type": "offer"}', "text/plain", 415, "bad_message"),
        (b"{not json", "application/json", 400, "bad_message"),
        (b'["sdp"]', "application/json", 400, "bad_message"),
        (b'{"sdp": "v=0", "type": "answer"}', "application/json", 400, "bad_message"),
        (b'{"sdp": "this is not SDP", "type": "offer"}', "application/json", 400, "bad_sdp"),
        (
            json.dumps({"sdp": "v=0\r\n" + "a=x\r\n" * 20000, "type": "offer"}).encode(),
            "application/json",
            413,
            "too_large",
        ),
    ],
)
async def test_bad_offers_get_clear_errors(
    fake_engine: CaptionEngine, body: bytes, content_type: str, status: int, code: str
) -> None:
    async with running_server(fake_engine) as (url, app):
        got_status, got = await post(url, body, content_type)
        assert got_status == status and got["error"]["code"] == code and got["error"]["message"]
        assert not app[PEERS] and not fake_engine.sessions
        assert not app[ROOMS]._rooms, "a rejected offer left a room behind"
        async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as r:
            assert r.status == 200  # still up


async def test_offer_while_the_model_loads_is_503_loading() -> None:
    loading = CaptionEngine(EngineConfig(speakers=False), transcriber=FakeTranscriber())
    async with running_server(loading) as (url, _):
        status, body = await post(url, b'{"sdp": "v=0", "type": "offer"}')
        assert status == 503 and body["error"]["code"] == "loading"
        async with aiohttp.ClientSession() as http, http.get(f"{url}/ready") as r:
            assert r.status == 503 and (await r.json())["ready"] is False
    await loading.close()


async def test_session_cap_says_busy_and_others_are_unaffected(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, max_sessions=1) as (url, _):
        first = CaptionClient(url, pad(SPEECH_2_S, 0.3, 1.0))
        await first.connect()
        second = CaptionClient(url, audio("ls_1988-24833-0000"))
        with pytest.raises(RuntimeError, match=r"503.*busy"):
            await second.connect()
        await second.close()
        await first.until_played()
        await first.stop()
        await first.close()
        assert first.sentences(), "the admitted session was disturbed by the rejected one"


async def test_bad_channel_messages_get_errors_and_the_session_goes_on(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, _):
        client = CaptionClient(url, pad(SPEECH_2_S, 0.3, 1.0))
        await client.connect()
        client.send("{oops")
        client.send(json.dumps({"type": "dance"}))
        client.send(json.dumps({"type": "start", "language": "klingon"}))
        client.send(json.dumps({"type": "start", "language": "en"}))  # a second start
        client.send("x" * (MAX_CLIENT_MESSAGE_BYTES + 10))
        await client.until_played()
        await client.stop()
        await client.close()
    codes = [m["code"] for m in client.messages if m["type"] == "error"]
    assert codes == ["bad_message", "bad_message", "bad_message", "bad_state", "too_large"]
    assert client.sentences(), "captions stopped after bad messages"


async def test_a_client_that_vanishes_mid_sentence_leaves_nothing_behind(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, app):
        client = CaptionClient(url, audio("ls_2412-153948-0000"))
        await client.connect()
        deadline = time.monotonic() + 15
        while not any(m["type"] == "caption" and m["partial"] for m in client.messages):
            assert time.monotonic() < deadline, "no partial: the sentence never opened"
            await asyncio.sleep(0.05)
        assert not client.sentences(), "mid-sentence: nothing locked yet"
        await client.close()  # gone: no stop, no goodbye
        deadline = time.monotonic() + 15
        while (app[PEERS] or fake_engine.sessions) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        assert not app[PEERS] and not fake_engine.sessions
        leftovers = [t for t in asyncio.all_tasks() if t.get_name().startswith(client.session)]
        assert not leftovers
        # The unfinished sentence was still decoded (finalised, not dropped).
        assert any(rid.endswith("-f0") for rid in fake_engine.transcriber.finished)  # type: ignore[attr-defined]


async def test_health_answers_in_milliseconds_while_sessions_stream(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, _):
        clients = [CaptionClient(url, audio(c)) for c in ("ls_2412-153948-0000", "ls_1995-1837-0001")]
        for c in clients:
            await c.connect()
        times = []
        async with aiohttp.ClientSession() as http:
            for _ in range(20):
                t = time.perf_counter()
                async with http.get(f"{url}/health") as r:
                    assert r.status == 200
                times.append(time.perf_counter() - t)
                await asyncio.sleep(0.1)
        for c in clients:
            await c.close()
    assert sorted(times)[len(times) // 2] < 0.05


async def _raw_post(url: str, path: str, body: bytes, pieces: int, pause_s: float) -> tuple[int, dict[str, Any]]:
    """POST ``body`` over a raw socket in ``pieces`` writes ``pause_s`` apart, as a slow network delivers it."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    )
    step = -(-len(body) // pieces)
    for i in range(0, len(body), step):
        writer.write(body[i : i + step])
        await writer.drain()
        await asyncio.sleep(pause_s)
    response = await reader.read()
    writer.close()
    head, _, payload = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"chunked" in head.lower():  # aiohttp may chunk the JSON reply
        size, _, rest = payload.partition(b"\r\n")
        payload = rest[: int(size, 16)]
    return status, json.loads(payload)


async def test_bodies_that_arrive_in_pieces_are_read_whole(fake_engine: CaptionEngine) -> None:
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    pc.addTransceiver("audio", direction="sendonly")
    pc.createDataChannel("captions")
    await pc.setLocalDescription(await pc.createOffer())
    offer = json.dumps({"sdp": pc.localDescription.sdp, "type": "offer"}).encode()
    await pc.close()
    async with running_server(fake_engine) as (url, app):
        status, answer = await _raw_post(url, "/offer", offer, pieces=3, pause_s=0.2)
        assert status == 200 and answer["type"] == "answer" and answer["sdp"].startswith("v=0"), answer
        room = json.dumps({"title": "Planning " + "x" * 580}).encode()
        status, created = await _raw_post(url, "/rooms", room, pieces=2, pause_s=0.2)
        assert status == 201 and created["room"], created
        for peer in list(app[PEERS].values()):
            await peer.close()


@pytest.mark.parametrize(("path", "depth"), [("/offer", 20_000), ("/rooms", 2_000)])
async def test_deeply_nested_json_is_a_clear_400(fake_engine: CaptionEngine, path: str, depth: int) -> None:
    async with running_server(fake_engine) as (url, _):
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{url}{path}", data=b"[" * depth + b"]" * depth, headers={"Content-Type": "application/json"}
            ) as r,
        ):
            assert r.status == 400 and (await r.json())["error"]["code"] == "bad_message"
