"""OpenAI's Realtime API for transcription at /v1/realtime, driven by the ``openai`` package's own realtime client
(and, for LiveKit Agents, by its OpenAI STT plugin with ``use_realtime=True``).

Quick tests use the named fake recognizer (real VAD, real endpointing, real WebSocket); the heavy ones stream real
speech through the real engine and judge the text by WER.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import numpy as np
import pytest

from app.compat import openai_realtime, realtime_stream
from app.compat.realtime_config import ConfigError, RealtimeConfig, apply_update
from app.rooms.keys import ROOMS
from engine import CaptionEngine
from speechdata.corpus import audio
from speechdata.wer import wer
from tests.support.g711 import mulaw
from tests.support.live_clients import pcm16, speech, stream_realtime
from tests.support.servers import running_server

CLIP = "whisper_jfk"


def test_session_update_rules() -> None:
    ga = {
        "type": "transcription",
        "audio": {
            "input": {
                "format": {"type": "audio/pcmu"},
                "turn_detection": None,
                "transcription": {"model": "gpt-4o-transcribe", "language": "de", "prompt": "Kubernetes"},
            }
        },
    }
    config = apply_update(RealtimeConfig(), ga, beta=False)
    assert (config.encoding, config.rate, config.language, config.prompt, config.server_vad) == (
        "mulaw",
        8000,
        "de",
        "Kubernetes",
        False,
    )
    assert config.session("s")["audio"]["input"]["transcription"]["model"] == "gpt-4o-transcribe"
    # Fields left out keep their values; the beta event's names work too.
    beta = apply_update(config, {"input_audio_format": "pcm16", "turn_detection": {"type": "server_vad"}}, beta=True)
    assert (beta.encoding, beta.rate, beta.language, beta.server_vad) == ("linear16", 24000, "de", True)
    assert beta.beta_session("s")["input_audio_format"] == "pcm16"
    for bad, param in (
        ({"type": "realtime"}, "session.type"),
        ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}, "session.audio.input.format.rate"),
        ({"audio": {"input": {"transcription": {"language": "xx"}}}}, "session.audio.input.transcription.language"),
    ):
        with pytest.raises(ConfigError) as err:
            apply_update(RealtimeConfig(), bad, beta=False)
        assert err.value.param == param


async def test_openai_client_server_vad_and_manual_commits(fake_engine: CaptionEngine) -> None:
    x = audio(CLIP)[: 3 * 16000]  # "And so, my fellow Americans", then a second of the pause after it
    data = pcm16(np.concatenate([x, np.zeros(16000 * 3, np.float32)]), 24000)
    async with running_server(fake_engine) as (url, app):
        room = (await app[ROOMS].create()).room
        run = await stream_realtime(url, data, speed=6, settle_s=5, expect=1, query=f"room={room.id}")
        kinds = [e.type for e in run.events]
        assert kinds[0] == "session.created" and "session.updated" in kinds
        started, stopped = run.of("input_audio_buffer.speech_started"), run.of("input_audio_buffer.speech_stopped")
        assert len(started) == len(stopped) == len(run.of("input_audio_buffer.committed")) == len(run.completed) == 1
        item = started[0].item_id
        assert stopped[0].item_id == run.completed[0].item_id == item
        assert started[0].audio_start_ms < stopped[0].audio_end_ms <= len(x) * 1000 // 16000 + 100
        deltas = "".join(e.delta for e in run.of("conversation.item.input_audio_transcription.delta"))
        assert deltas == run.completed[0].transcript and run.text.startswith("audio of"), "the deltas add up"
        assert kinds.index("conversation.item.input_audio_transcription.completed") > kinds.index(
            "input_audio_buffer.committed"
        )
        async with aiohttp.ClientSession() as http, http.get(f"{url}/rooms/{room.id}/transcript.txt") as r:
            assert "audio of" in await r.text()

        # turn_detection null: the client's commits make the items, one completed each; the open sentence locks
        # at the commit (no pause after the audio).
        short = audio("ls_1988-24833-0000")
        run = await stream_realtime(url, pcm16(short, 24000), manual=True, speed=0, settle_s=5, expect=1)
        assert len(run.completed) == 1 and run.completed[0].transcript.startswith("audio of"), run.events
        assert run.of("input_audio_buffer.committed")[0].item_id == run.completed[0].item_id
        assert not run.of("input_audio_buffer.speech_started"), "no VAD events without server VAD"

        # G.711 µ-law at 8 kHz.
        eight = np.interp(np.arange(0, len(short), 2), np.arange(len(short)), short)
        run = await stream_realtime(
            url, mulaw(np.concatenate([eight, np.zeros(24000, np.float32)])), speed=0, rate=8000, settle_s=5, expect=1
        )
        assert run.text.startswith("audio of"), run.events


async def test_errors_and_refusals(fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # A smaller message limit than OpenAI's 15 MiB, so that an oversized message fits the socket buffers and the
    # client reads the server's close frame instead of a reset.
    monkeypatch.setattr(openai_realtime, "MAX_MESSAGE_BYTES", 1024 * 1024)
    async with running_server(fake_engine, auth_token="sekret") as (url, _app), aiohttp.ClientSession() as http:
        ws_url = "ws" + url[4:] + "/v1/realtime?intent=transcription"
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(ws_url)
        assert err.value.status == 401
        # A browser's way to send the key: the subprotocol "openai-insecure-api-key.<key>".
        async with http.ws_connect(ws_url, protocols=("realtime", "openai-insecure-api-key.sekret")) as ws:
            assert (await ws.receive_json(timeout=5))["type"] == "session.created"

            async def ask(event: dict[str, Any]) -> dict[str, Any]:
                await ws.send_str(json.dumps(event))
                return dict(await ws.receive_json(timeout=5))

            reply = await ask({"type": "input_audio_buffer.commit", "event_id": "e1"})
            assert reply["type"] == "error"
            assert reply["error"] == {
                "type": "invalid_request_error",
                "code": "input_audio_buffer_commit_empty",
                "message": reply["error"]["message"],
                "param": "audio",
                "event_id": "e1",
            }
            reply = await ask(
                {
                    "type": "session.update",
                    "session": {
                        "type": "transcription",
                        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}},
                    },
                }
            )
            assert reply["error"]["param"] == "session.audio.input.format.rate"
            reply = await ask({"type": "input_audio_buffer.append", "audio": "not base64!"})
            assert reply["error"]["code"] == "invalid_value"
            reply = await ask({"type": "response.create"})
            assert reply["error"]["code"] == "unsupported_event"
            await ws.send_str(
                json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()})
            )  # odd length
            reply = await ask({"type": "input_audio_buffer.clear"})
            assert reply["type"] == "input_audio_buffer.cleared"
            await ws.send_bytes(bytes(openai_realtime.MAX_MESSAGE_BYTES + 2))  # oversized: 1009
            await ws.receive(timeout=10)
            assert ws.close_code == 1009
        # A connection that says nothing for the idle timeout: an error event, then a normal close.
        monkeypatch.setattr(realtime_stream, "IDLE_TIMEOUT_S", 0.5)
        async with http.ws_connect(ws_url, headers={"Authorization": "Bearer sekret"}) as ws:
            assert (await ws.receive_json(timeout=5))["type"] == "session.created"
            reply = await ws.receive_json(timeout=5)
            assert reply["type"] == "error" and reply["error"]["code"] == "idle_timeout"
            assert (await ws.receive(timeout=5)).type is aiohttp.WSMsgType.CLOSE and ws.close_code == 1000


@pytest.mark.heavy
async def test_openai_realtime_real_speech(engine: CaptionEngine) -> None:
    clips = ["ls_7902-96591-0000", "librivox_sns01_0890", "ls_3752-4944-0002"]
    samples, ref = speech(clips)
    data = pcm16(samples, 24000)
    async with running_server(engine) as (url, _app):
        run = await stream_realtime(url, data, speed=1.0, settle_s=8.0, expect=len(clips))
        assert len(run.completed) == len(clips), [e.transcript for e in run.completed]
        assert wer(ref, run.text) <= 0.10, run.text
        # Manual commits: the client commits after each clip; one completed per commit, in order.
        first, rest = speech(clips[:1], tail_s=0.3)[0], speech(clips[1:], lead_s=0.0)[0]
        run = await stream_realtime(
            url,
            pcm16(first, 24000) + pcm16(rest, 24000),
            manual=True,
            speed=2.0,
            commit_at=len(pcm16(first, 24000)),
            settle_s=8.0,
            expect=2,
        )
        assert len(run.completed) == 2 and wer(ref, run.text) <= 0.10, [e.transcript for e in run.completed]
