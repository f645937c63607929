"""The streaming APIs (Deepgram's ``/v1/listen``, OpenAI's ``/v1/realtime``, FunASR's ``/funasr``) against careless
clients: one that stops reading, one that hangs up mid-sentence, one that sends a malformed message, one that keeps
a connection open without audio, an upload that stalls, and a stop with such clients connected. Whatever they do,
the words they already sent are locked and stored, their slot is freed, and other clients are served.

The recognizer is the named fake (text "audio of N seconds"): the protocols and the server's limits are tested,
not the model."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np
import pytest

from app.bodies import UPLOAD_STALL_S
from app.compat import client_socket
from app.compat.container_audio import sniff
from app.compat.redaction import RedactError, Redactor, parse_redact
from app.drain import DRAIN
from app.ops import ADMISSION
from app.rooms.keys import ROOMS
from engine import CaptionEngine
from engine.asr.fake import FakeTranscriber
from engine.asr.transcriber import DecodeRequest, Transcript
from engine.config import EngineConfig
from speechdata.corpus import audio
from tests.support.live_clients import pcm16, stream_deepgram
from tests.support.raw_clients import RawWebSocket, stalled_upload, status_of
from tests.support.servers import free_port, running_server

CLIP = "ls_1988-24833-0000"
SPOKEN_S = 2.5  # the client sends this much of the clip: its sentence is still open when it misbehaves
DEEPGRAM = "/v1/listen?encoding=linear16&sample_rate=16000&interim_results=true"


def spoken(rate: int = 16000) -> bytes:
    """The first ``SPOKEN_S`` of a read sentence, after half a second of silence, as PCM at ``rate``."""
    x = np.concatenate([np.zeros(8000, np.float32), audio(CLIP)[: int(SPOKEN_S * 16000)]])
    return pcm16(x, rate)


def appends(data: bytes, step: int = 4800) -> list[str]:
    """OpenAI ``input_audio_buffer.append`` events of ``data`` (24 kHz PCM), 100 ms each."""
    return [
        json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(data[i : i + step]).decode()})
        for i in range(0, len(data), step)
    ]


async def until(condition: Callable[[], bool], why: str, timeout_s: float = 10.0) -> float:
    """Seconds until ``condition`` holds (polled every 20 ms); fails after ``timeout_s``."""
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {why}")
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


async def transcript(url: str, room: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/rooms/{room}/transcript.txt") as r:
        return await r.text()


async def stored(url: str, room: str, timeout_s: float = 10.0) -> str:
    """The room's transcript once it holds a sentence."""
    t0 = time.monotonic()
    while "audio of" not in (text := await transcript(url, room)):
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"nothing stored in room {room}: {text!r}")
        await asyncio.sleep(0.1)
    return text


async def feed_raw(ws: RawWebSocket, kind: str) -> None:
    """The opening and the speech of a stream of protocol ``kind``, written without reading."""
    if kind == "funasr":
        ws.text(
            json.dumps({"mode": "2pass", "wav_name": "t", "wav_format": "pcm", "audio_fs": 16000, "is_speaking": True})
        )
    if kind == "openai":
        for event in appends(spoken(24000)):
            ws.text(event)
    else:
        data = spoken()
        for i in range(0, len(data), 3200):
            ws.binary(data[i : i + 3200])
    await ws.flush()


async def flood(ws: RawWebSocket, timeout_s: float = 30.0) -> float:
    """Messages that each get an answer (tiny: "x"), in bursts, until the server stops taking them (its window to
    this client shut and stayed shut for a second: a server that is only behind reads on and opens it again);
    returns when it shut (``time.monotonic``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        ws.texts("x", 2000)
        if not await ws.flush(0.2):
            shut_at = time.monotonic() - 0.2
            if not await ws.flush(1.0):
                return shut_at
        await asyncio.sleep(0)  # the server is in this process: let it run
    raise AssertionError(f"the server read every message for {timeout_s} s")


PATHS = {"deepgram": DEEPGRAM, "openai": "/v1/realtime?intent=transcription", "funasr": "/funasr"}


@pytest.mark.parametrize("kind", ["deepgram", "openai"])
async def test_a_client_that_stops_reading_is_cut_off_and_its_slot_freed(fake_engine: CaptionEngine, kind: str) -> None:
    async with running_server(fake_engine, max_sessions=1, send_timeout_s=1.0) as (url, app):
        room = (await app[ROOMS].create()).room
        ws = await RawWebSocket.connect(url, PATHS[kind] + f"&room={room.id}")
        await feed_raw(ws, kind)
        # Then messages that each get an answer (an error event), never reading one, until the server's sends
        # are stuck (its window to the client stays shut) and it cuts the client off.
        stuck_at = await flood(ws)
        await until(lambda: app[ADMISSION].in_use == 0, "the client that does not read holds its slot", 30)
        # Cut off 1 s after the server's sends stuck (at most when the client's window shut), then its open sentence
        # and the audio it had sent are finished (the messages read ahead of it are skipped: it is gone).
        assert time.monotonic() - stuck_at < 1.0 + 10.0, "cut off within the send deadline"
        ws.hang_up()
        assert "audio of" in await stored(url, room.id), "its open sentence was locked and stored"
        # The one slot is free: a client that reads is served.
        run = await stream_deepgram(url, pcm16(audio(CLIP)), speed=0, encoding="linear16", sample_rate=16000)
        assert run.text.startswith("audio of"), run.messages


async def test_a_funasr_client_that_answers_no_ping_is_closed(
    fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_socket, "HEARTBEAT_S", 0.5)
    async with running_server(fake_engine, max_sessions=1) as (url, app):
        room = (await app[ROOMS].create()).room
        ws = await RawWebSocket.connect(url, f"/funasr?room={room.id}")
        await feed_raw(ws, "funasr")
        await until(lambda: app[ADMISSION].in_use == 0, "a client that answers no ping holds its slot", 10)
        assert "audio of" in await stored(url, room.id)
        ws.hang_up()


@pytest.mark.parametrize("kind", ["deepgram", "openai", "funasr"])
async def test_a_hang_up_mid_sentence_stores_the_sentence_and_frees_the_slot_at_once(
    fake_engine: CaptionEngine, kind: str
) -> None:
    async with running_server(fake_engine, max_sessions=1) as (url, app):
        room = (await app[ROOMS].create()).room
        sep = "&" if "?" in PATHS[kind] else "?"
        ws = await RawWebSocket.connect(url, PATHS[kind] + f"{sep}room={room.id}")
        await feed_raw(ws, kind)
        await until(lambda: any(s.audio_s > SPOKEN_S for s in fake_engine.sessions.values()), "the audio arrived")
        ws.hang_up()
        freed_s = await until(lambda: app[ADMISSION].in_use == 0, "the slot of a client that hung up")
        assert freed_s < 2.0, freed_s  # (0.1-0.2 s here; the margin is for a loaded machine)
        assert "audio of" in await stored(url, room.id)


async def test_a_malformed_message_mid_sentence_keeps_the_stream_and_its_words(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        # Deepgram: an Error message, the stream goes on, CloseStream locks the sentence.
        room = (await app[ROOMS].create()).room
        async with http.ws_connect("ws" + url[4:] + DEEPGRAM + f"&room={room.id}") as ws:
            await ws.send_bytes(spoken())
            await ws.send_str("[" * 5000)
            got = await read_until(ws, lambda m: m.get("type") == "Error")
            assert got[-1]["variant"] == "SchemaError"
            await ws.send_str(json.dumps({"type": "CloseStream"}))
            got = await read_until(ws, lambda m: m.get("type") == "Metadata")
            finals = [m["channel"]["alternatives"][0]["transcript"] for m in got if m.get("is_final")]
            assert finals and finals[0].startswith("audio of"), got
        assert ws.close_code == 1000
        assert "audio of" in await transcript(url, room.id)

        # OpenAI Realtime: a format that is a list, and JSON nested too deep, are error events; the item completes.
        room = (await app[ROOMS].create()).room
        async with http.ws_connect("ws" + url[4:] + f"/v1/realtime?intent=transcription&room={room.id}") as ws:
            for event in appends(spoken(24000)):
                await ws.send_str(event)
            await ws.send_str(
                json.dumps(
                    {
                        "type": "session.update",
                        "session": {"type": "transcription", "audio": {"input": {"format": {"type": ["audio/pcm"]}}}},
                    }
                )
            )
            await ws.send_str("[" * 5000)
            errors = [
                m["error"]
                for m in await read_until(ws, lambda m: m["type"] == "error", count=2)
                if m["type"] == "error"
            ]
            assert [e["code"] for e in errors] == ["invalid_value", "invalid_json"], errors
            await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
            done = await read_until(ws, lambda m: m["type"].endswith("transcription.completed"))
            assert done[-1]["transcript"].startswith("audio of"), done[-1]
        assert "audio of" in await transcript(url, room.id)

        # FunASR: a text message it cannot read mid-stream is ignored, as FunASR's server does.
        room = (await app[ROOMS].create()).room
        async with http.ws_connect("ws" + url[4:] + f"/funasr?room={room.id}") as ws:
            await ws.send_str(json.dumps({"mode": "2pass", "wav_name": "t", "audio_fs": 16000, "is_speaking": True}))
            await ws.send_bytes(spoken())
            await ws.send_str("[" * 5000)
            await ws.send_str(json.dumps({"is_speaking": False}))
            got = await read_until(ws, lambda m: m.get("is_final") is True)
            assert any(m["mode"] == "2pass-offline" and m["text"].startswith("audio of") for m in got), got
        assert "audio of" in await transcript(url, room.id)


async def read_until(
    ws: aiohttp.ClientWebSocketResponse, done: Callable[[dict[str, Any]], bool], count: int = 1, timeout_s: float = 15.0
) -> list[dict[str, Any]]:
    """JSON messages until ``count`` of them satisfy ``done`` (all of them, in order)."""
    out: list[dict[str, Any]] = []
    seen = 0
    async with asyncio.timeout(timeout_s):
        while seen < count:
            msg = await ws.receive()
            if msg.type is not aiohttp.WSMsgType.TEXT:
                raise AssertionError(f"the stream ended ({msg.type}, {ws.close_code}) after {out}")
            out.append(json.loads(msg.data))
            seen += done(out[-1])
    return out


async def test_streams_without_audio_and_streams_past_their_length_are_closed(fake_engine: CaptionEngine) -> None:
    async with (
        running_server(fake_engine, stream_idle_s=1.0, stream_max_s=2.0) as (url, _app),
        aiohttp.ClientSession() as http,
    ):

        async def deepgram() -> None:
            """KeepAlive every 0.2 s keeps the protocol's own 10 s limit away, not the server's idle limit."""
            async with http.ws_connect("ws" + url[4:] + DEEPGRAM) as ws:
                t0 = time.monotonic()
                while not ws.closed and time.monotonic() - t0 < 5:
                    await ws.send_str(json.dumps({"type": "KeepAlive"}))
                    with contextlib.suppress(TimeoutError):
                        await ws.receive(timeout=0.2)
                assert ws.close_code == 1008 and time.monotonic() - t0 < 5.0  # (the limit is 1 s, looked at every 1 s)

        async def openai() -> None:
            """Audio all along, but the stream reached its length: session_expired, then a close."""
            async with http.ws_connect("ws" + url[4:] + "/v1/realtime?intent=transcription") as ws:
                silence = appends(bytes(4800 * 2))
                got: list[dict[str, Any]] = []
                t0 = time.monotonic()
                while not ws.closed and time.monotonic() - t0 < 6:
                    for event in silence:
                        await ws.send_str(event)
                    with contextlib.suppress(TimeoutError):
                        msg = await ws.receive(timeout=0.2)
                        if msg.type is aiohttp.WSMsgType.TEXT:
                            got.append(json.loads(msg.data))
                codes = [m["error"]["code"] for m in got if m["type"] == "error"]
                assert codes == ["session_expired"] and ws.closed, got

        async def funasr() -> None:
            """Configured, then nothing: a final message with the reason, and a close."""
            async with http.ws_connect("ws" + url[4:] + "/funasr") as ws:
                await ws.send_str(
                    json.dumps({"mode": "2pass", "wav_name": "t", "audio_fs": 16000, "is_speaking": True})
                )
                last = (await read_until(ws, lambda m: m.get("is_final") is True, timeout_s=5))[-1]
                assert "no audio" in last["error"], last
                await ws.receive(timeout=2)
            assert ws.close_code == 1008

        # The three streams at once: each limit is the stream's own, and the test waits them out once, not thrice.
        await asyncio.gather(deepgram(), openai(), funasr())


async def test_stalled_uploads_hold_no_file_slot_and_are_given_up(
    fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.bodies.UPLOAD_STALL_S", 1.0)
    assert UPLOAD_STALL_S >= 10, "the shipped stall limit leaves slow networks time"
    async with running_server(fake_engine, max_file_jobs=1) as (url, _app), aiohttp.ClientSession() as http:
        stalled = [
            await stalled_upload(url, "/v1/listen?encoding=linear16&sample_rate=16000", bytes(1024), 10**6),
            await stalled_upload(
                url,
                "/v1/audio/transcriptions",
                b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n' + bytes(1024),
                10**6,
                content_type="multipart/form-data; boundary=b",
            ),
        ]
        # Both stall; the one file slot is free for an upload that arrives.
        async with http.post(f"{url}/v1/listen?encoding=linear16&sample_rate=16000", data=pcm16(audio(CLIP))) as r:
            assert r.status == 200, await r.text()
        for reader, writer in stalled:
            assert await status_of(reader, 5.0) == 408
            writer.close()


async def test_a_stop_with_stuck_clients_on_every_endpoint_ends_within_the_drain_and_3_s(
    fake_engine: CaptionEngine,
) -> None:
    port = free_port()
    drain_s = 5.0  # (the server's default is 15 s)
    t_stop = 0.0
    # A send deadline longer than the drain: the stop itself must not wait on the clients that do not read.
    async with running_server(fake_engine, send_timeout_s=60.0, drain_timeout_s=drain_s, funasr_port=port) as (
        url,
        app,
    ):

        async def stuck_client(kind: str) -> RawWebSocket:
            ws = await RawWebSocket.connect(url, PATHS[kind])
            await feed_raw(ws, kind)
            await flood(ws)  # its sends to this client are stuck
            return ws

        stuck = list(await asyncio.gather(stuck_client("deepgram"), stuck_client("openai")))  # flooded together
        ws = await RawWebSocket.connect(f"http://127.0.0.1:{port}", "/")
        await feed_raw(ws, "funasr")
        stuck.append(ws)
        await until(lambda: app[ADMISSION].in_use == 3, "three streams open")
        t_stop = time.monotonic()
    assert time.monotonic() - t_stop <= drain_s + 3.0
    report = app[DRAIN]
    assert report.sessions == 3 and report.unfinished == 0, report
    for ws in stuck:
        ws.hang_up()


SAID = "My card is 4111 1111 1111 1111, expiry 09/27, the CVV is 123 and my social is 123-45-6789. I am 42."


def test_redaction_masks_numbers_as_whisper_writes_them_one_word_for_one() -> None:
    words = SAID.split()
    pci = Redactor(parse_redact(["pci"])).text(SAID)
    assert "4111" not in pci and "**** **** **** ****," in pci and "**/**," in pci and "is ***" in pci
    assert "123-45-6789" in pci, "a social security number is not card data"
    both = Redactor(parse_redact(["pci,ssn"])).text(SAID)
    assert "***-**-****." in both and both.endswith("I am 42.")
    every = Redactor(parse_redact(["true"])).text("Call 555 0199 or 20 times in 1987.")
    assert every == "Call *** **** or 20 times in ****."
    assert len(both.split()) == len(words), "one word for one: times and settled counts still line up"
    assert Redactor(parse_redact(["pci"])).text("A 4111-1111-1111-1111 card") == "A ****-****-****-**** card"
    assert parse_redact(["false"]) == frozenset()
    for bad in (["pii"], ["phi"], ["pci,credit_card"]):
        with pytest.raises(RedactError):
            parse_redact(bad)


def test_parameters_that_promise_what_the_server_does_not_do_are_refused() -> None:
    from multidict import MultiDict

    from app.compat.deepgram_params import ParamError, parse_params

    ok = parse_params(
        MultiDict(
            [
                ("redact", "pci"),
                ("redact", "ssn"),
                ("profanity_filter", "false"),
                ("filler_words", "true"),
                ("numerals", "true"),
                ("mip_opt_out", "true"),
                ("no_delay", "true"),
                ("detect_language", "true"),
                ("tag", "x"),
            ]
        ),
        "en",
    )
    assert ok.redact == {"pci", "ssn"} and ok.language is None
    for bad, why in (
        (("profanity_filter", "true"), "profanity"),
        (("redact", "pii"), "pii"),
        (("summarize", "v2"), "summarize"),
        (("dictation", "true"), "dictation"),
        (("search", "card"), "search"),
        (("callback", "http://x"), "callback"),
    ):
        with pytest.raises(ParamError, match=why):
            parse_params(MultiDict([bad]), "en")


class CardReader(FakeTranscriber):
    """The named fake recognizer, hearing a card number and a social security number in every segment."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        heard = await super().transcribe(request)
        return dataclasses.replace(heard, text=SAID)


async def test_redact_keeps_card_and_social_numbers_out_of_results_and_the_room() -> None:
    reader = CaptionEngine(EngineConfig(speakers=False), transcriber=CardReader(delay_s=0.05))
    await reader.start()
    try:
        async with running_server(reader) as (url, app), aiohttp.ClientSession() as http:
            room = (await app[ROOMS].create()).room
            async with http.ws_connect("ws" + url[4:] + DEEPGRAM + f"&redact=pci,ssn&room={room.id}") as ws:
                await ws.send_bytes(spoken())
                await ws.send_str(json.dumps({"type": "CloseStream"}))
                got = await read_until(ws, lambda m: m.get("type") == "Metadata")
            finals = [m for m in got if m.get("is_final")]
            assert finals and "**** **** **** ****" in finals[0]["channel"]["alternatives"][0]["transcript"]
            stored_text = await transcript(url, room.id)
            # Without the metadata: its random request ids may hold those digits.
            said = json.dumps(
                [{k: v for k, v in m.items() if k != "metadata"} for m in got if m.get("type") != "Metadata"]
            )
            for secret in ("4111", "6789", " 123 ", "09/27"):
                assert secret not in said and secret not in stored_text, secret
            assert "***-**-****" in stored_text
            async with http.post(f"{url}/v1/listen?encoding=linear16&sample_rate=16000&redact=pci", data=spoken()) as r:
                body = await r.text()
                results = json.dumps(json.loads(body)["results"])  # (the metadata's random request id may hold 4111)
                assert r.status == 200 and "4111" not in results and "****" in results, body
    finally:
        await reader.close()


async def test_beta_clients_get_the_beta_event_names(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, _app), aiohttp.ClientSession() as http:
        async with http.ws_connect(
            "ws" + url[4:] + "/v1/realtime?intent=transcription", headers={"OpenAI-Beta": "realtime=v1"}
        ) as ws:
            created = json.loads((await ws.receive(timeout=5)).data)
            assert created["type"] == "transcription_session.created"
            assert created["session"]["input_audio_format"] == "pcm16"
            for event in appends(spoken(24000)):
                await ws.send_str(event)
            await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
            got = await read_until(ws, lambda m: m["type"].endswith("transcription.completed"))
            kinds = [m["type"] for m in got]
            assert "conversation.item.created" in kinds and "conversation.item.added" not in kinds, kinds
        async with http.ws_connect("ws" + url[4:] + "/v1/realtime?intent=transcription") as ws:
            assert json.loads((await ws.receive(timeout=5)).data)["type"] == "session.created"


def recorded(container: str, codec: str = "libopus") -> bytes:
    """A read sentence as a recorder writes it: ``container`` (``webm``, ``ogg``, ``mp3``, ``flac``) by FFmpeg."""
    import subprocess

    x = np.concatenate([np.zeros(8000, np.float32), audio(CLIP), np.zeros(16000, np.float32)])
    return subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-f",
            "s16le",
            "-ar",
            "16000",
            "-ac",
            "1",
            "-i",
            "-",
            "-c:a",
            codec,
            "-ar",
            "48000" if codec == "libopus" else "16000",
            "-f",
            container,
            "-",
        ],
        input=pcm16(x),
        capture_output=True,
        check=True,
    ).stdout


@pytest.mark.parametrize(
    ("container", "codec"), [("webm", "libopus"), ("ogg", "libopus"), ("mp3", "libmp3lame"), ("flac", "flac")]
)
async def test_recorded_containers_stream_without_an_encoding(
    fake_engine: CaptionEngine, container: str, codec: str
) -> None:
    data = recorded(container, codec)
    assert sniff(data[:16]) == container
    async with running_server(fake_engine) as (url, _app):
        run = await stream_deepgram(url, data, speed=0, chunk=4000, interim_results="true", punctuate="true")
    assert run.text.startswith("audio of"), run.messages
    heard = sum(float(m.channel.alternatives[0].transcript.split()[2]) for m in run.finals)
    assert abs(heard - len(audio(CLIP)) / 16000) < 1.0, (heard, "all of the speech, none doubled")
    assert abs(run.messages[-1].duration - (len(audio(CLIP)) / 16000 + 1.5)) < 0.2


async def test_bytes_that_are_no_audio_close_the_stream_as_deepgram_does(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, _app), aiohttp.ClientSession() as http:
        for junk in (b"\x1a\x45\xdf\xa3" + bytes(range(256)) * 40, b"hello, this is not audio at all"):
            async with http.ws_connect("ws" + url[4:] + "/v1/listen") as ws:
                await ws.send_bytes(junk)
                await ws.send_str(json.dumps({"type": "CloseStream"}))
                async with asyncio.timeout(15):
                    async for _msg in ws:
                        pass
            assert ws.close_code == 1008, ws.close_code


async def test_a_manual_commit_holds_exactly_the_audio_before_it(fake_engine: CaptionEngine) -> None:
    """turn_detection null: speech appended right after a commit (no wait) belongs to the next item, not the
    committed one (each item's transcript is the fake's "audio of N seconds": N is the audio it covers)."""
    first, second = audio(CLIP)[: int(3.0 * 16000)], audio("ls_3752-4944-0000")[: int(2.0 * 16000)]
    async with running_server(fake_engine) as (url, _app), aiohttp.ClientSession() as http:
        async with http.ws_connect("ws" + url[4:] + "/v1/realtime?intent=transcription") as ws:
            await ws.send_str(
                json.dumps(
                    {
                        "type": "session.update",
                        "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}},
                    }
                )
            )
            for part in (first, second):
                for event in appends(pcm16(part, 24000)):
                    await ws.send_str(event)
                await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
            got = await read_until(ws, lambda m: m["type"].endswith("transcription.completed"), count=2)
    done = [m["transcript"] for m in got if m["type"].endswith("transcription.completed")]
    seconds = [sum(float(w) for w in t.split() if w.replace(".", "").isdigit()) for t in done]
    assert abs(seconds[0] - 3.0) < 0.3 and abs(seconds[1] - 2.0) < 0.3, done


class SureReader(FakeTranscriber):
    """The named fake recognizer, saying how sure it is of each word: 0.9, 0.8, 0.7, 0.6 for "audio of N seconds"."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        heard = await super().transcribe(request)
        return dataclasses.replace(heard, word_probs=(0.9, 0.8, 0.7, 0.6))


async def test_word_confidences_and_logprobs_are_the_decoders_per_word() -> None:
    import math

    sure = CaptionEngine(EngineConfig(speakers=False), transcriber=SureReader(delay_s=0.05))
    await sure.start()
    try:
        async with running_server(sure) as (url, _app), aiohttp.ClientSession() as http:
            run = await stream_deepgram(url, spoken(), speed=0, encoding="linear16", sample_rate=16000)
            words = run.finals[0].channel.alternatives[0].words
            assert [w.confidence for w in words] == [0.9, 0.8, 0.7, 0.6], words
            async with http.post(f"{url}/v1/listen?encoding=linear16&sample_rate=16000", data=spoken()) as r:
                body = await r.json()
            assert [w["confidence"] for w in body["results"]["channels"][0]["alternatives"][0]["words"]] == [
                0.9,
                0.8,
                0.7,
                0.6,
            ]
            async with http.ws_connect("ws" + url[4:] + "/v1/realtime?intent=transcription") as ws:
                await ws.send_str(
                    json.dumps(
                        {
                            "type": "session.update",
                            "session": {
                                "type": "transcription",
                                "include": ["item.input_audio_transcription.logprobs"],
                            },
                        }
                    )
                )
                for event in appends(spoken(24000)):
                    await ws.send_str(event)
                await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
                done = (await read_until(ws, lambda m: m["type"].endswith("transcription.completed")))[-1]
            assert [e["token"] for e in done["logprobs"]] == done["transcript"].split()
            assert [round(math.exp(e["logprob"]), 2) for e in done["logprobs"]] == [0.9, 0.8, 0.7, 0.6]
    finally:
        await sure.close()


async def test_a_session_tells_its_listeners_when_speech_starts_and_stops(fake_engine: CaptionEngine) -> None:
    """The events Deepgram's SpeechStarted/UtteranceEnd and OpenAI's speech_started/stopped are made of come from the
    session itself (``Session.watch_speech``): every segment's start then stop, in order, and the VAD's progress."""
    from engine import Heard, SessionOptions, SpeechStarted, SpeechStopped
    from tests.support.live_clients import speech

    session = fake_engine.open_session(SessionOptions())
    session.configure(SessionOptions())
    events: list[Any] = []
    stop = session.watch_speech(events.append)
    x, _ = speech(["ls_1988-24833-0000", "ls_3752-4944-0000"], gap_s=2.0)
    try:
        for i in range(0, len(x), 16000):
            session.feed(x[i : i + 16000])
            await session.caught_up(5.0, 4)
        await session.stop()
    finally:
        stop()
        await session.close()
    said = [e for e in events if not isinstance(e, Heard)]
    assert [type(e) for e in said] == [SpeechStarted, SpeechStopped] * 2, said
    for opened, closed in zip(said[::2], said[1::2], strict=True):
        assert opened.index == closed.index and opened.start_ms <= opened.speech_ms < closed.speech_end_ms
    heard = [e.position_ms for e in events if isinstance(e, Heard)]
    assert heard == sorted(heard) and heard[-1] >= len(x) * 1000 // 16000 - 100


def test_a_number_still_being_said_is_masked_before_it_is_long_enough_to_be_a_card() -> None:
    pci = Redactor(parse_redact(["pci"]))
    assert pci.text("my card is 4111 1111 1111", unlocked=True) == "my card is **** **** ****"
    assert pci.text("my card is 4111 1111 1111.") == "my card is 4111 1111 1111.", "locked: 12 digits are no card"
    assert pci.text("I was 42 then", unlocked=True) == "I was 42 then"


async def test_a_handler_that_fails_mid_sentence_still_locks_and_stores_it(
    fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of the server's own while it serves a stream (here: any text message) locks and stores the open
    sentence, then closes with 1011."""
    from app.compat import deepgram

    async def broken(self: Any, raw: str) -> bool:
        raise RuntimeError("a bug")

    monkeypatch.setattr(deepgram.DeepgramStream, "control", broken)
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        async with http.ws_connect("ws" + url[4:] + DEEPGRAM + f"&room={room.id}") as ws:
            await ws.send_bytes(spoken())
            await until(lambda: any(s.audio_s > SPOKEN_S for s in fake_engine.sessions.values()), "the audio arrived")
            await ws.send_str(json.dumps({"type": "KeepAlive"}))
            async with asyncio.timeout(15):
                async for _msg in ws:
                    pass
        assert ws.close_code == 1011
        assert "audio of" in await stored(url, room.id)
        await until(lambda: app[ADMISSION].in_use == 0, "the slot of a failed stream")


async def test_a_stop_does_not_wait_for_the_pace_of_speech(
    fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sent half a minute in one message is fed at the pace of speech; a stop feeds the rest as fast
    as the engine takes it and ends within the drain, its sentences locked."""
    from app.compat import live_audio
    from tests.support.live_clients import speech

    monkeypatch.setattr(live_audio, "LIVE_AHEAD_S", 1.0)
    x, _ = speech(["ls_1988-24833-0000", "ls_3752-4944-0000", "ls_6930-75918-0000", "ls_7902-96591-0000"], gap_s=3.0)
    drain_s = 5.0
    async with running_server(fake_engine, drain_timeout_s=drain_s) as (url, app):
        ws = await RawWebSocket.connect(url, DEEPGRAM)
        ws.binary(pcm16(x))
        await ws.flush(5)
        await until(lambda: any(s.audio_s > 2.0 for s in fake_engine.sessions.values()), "the audio arrived")
        assert all(s.audio_s < len(x) / 16000 / 2 for s in fake_engine.sessions.values()), "paced"
        t_stop = time.monotonic()
    assert time.monotonic() - t_stop <= drain_s + 3.0
    assert app[DRAIN].unfinished == 0 and app[DRAIN].sentences >= 1, app[DRAIN]
    ws.hang_up()
