"""Deepgram's live API at /v1/listen, driven by Deepgram's own Python SDK (``deepgram-sdk``) and, for refusals and
close codes, by a plain WebSocket client.

Quick tests use the named fake recognizer (real VAD, real endpointing, real WebSocket): the protocol is what is
tested. The heavy tests stream real speech at real time through the real engine and judge the text by WER.
"""

from __future__ import annotations

import asyncio
import io
import math
import time
import wave
from typing import Any

import aiohttp
import numpy as np
import pytest
from multidict import MultiDict

from app.compat import deepgram, live_audio
from app.compat.deepgram_params import ParamError, parse_params
from app.compat.live_audio import LIVE_BACKLOG, WavHeader, decode
from app.drain import DRAIN
from app.rooms.keys import ROOMS
from engine import CaptionEngine
from speechdata.corpus import audio, reference
from speechdata.wer import wer
from tests.support.g711 import mulaw
from tests.support.live_clients import pcm16, speech, stream_deepgram
from tests.support.servers import running_server

CLIP = "whisper_jfk"


def wav_bytes(samples: np.ndarray, rate: int = 16000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16(samples, rate))
    return out.getvalue()


def test_parameters_codecs_and_wav_headers() -> None:
    p = parse_params(
        MultiDict(
            [
                ("encoding", "linear16"),
                ("sample_rate", "48000"),
                ("language", "en-US"),
                ("keyterm", "Kubernetes"),
                ("keywords", "Quilter:3"),
                ("interim_results", "true"),
                ("endpointing", "false"),
                ("utterance_end_ms", "1000"),
                ("diarize", "true"),
                ("filler_words", "true"),
            ]
        ),
        "en",
    )
    assert (p.encoding, p.sample_rate, p.language, p.hotwords) == ("linear16", 48000, "en", ("Kubernetes", "Quilter"))
    assert p.interim_results and p.diarize and p.endpointing_ms is None and p.utterance_end_ms == 1000
    assert parse_params(MultiDict([("language", "multi")]), "en").language is None
    for bad in (
        [("encoding", "flac"), ("sample_rate", "16000")],
        [("encoding", "linear16")],
        [("encoding", "mulaw"), ("sample_rate", "4000")],
        [("channels", "2")],
        [("language", "xx")],
        [("utterance_end_ms", "500")],
        [("interim_results", "maybe")],
    ):
        with pytest.raises(ParamError):
            parse_params(MultiDict(bad), "en")
    # G.711 through our tables round-trips speech closely (µ-law keeps ~38 dB SNR).
    x = audio(CLIP)[:16000]
    back = decode(mulaw(x), "mulaw").astype(np.float32) / 32767
    assert np.corrcoef(x, back)[0, 1] > 0.999
    head = wav_bytes(x[:100], 22050)
    assert WavHeader.parse(head[:20]) is None  # more bytes needed
    assert WavHeader.parse(head) == WavHeader("linear16", 22050, 1, 44)
    with pytest.raises(ValueError):
        WavHeader.parse(b"OggS" + bytes(40))


async def test_deepgram_sdk_streams_through_the_engine(fake_engine: CaptionEngine) -> None:
    data = pcm16(audio(CLIP)[: 3 * 16000])  # "And so, my fellow Americans", then a second of the pause after it
    async with running_server(fake_engine) as (url, app):
        room = (await app[ROOMS].create()).room
        run = await stream_deepgram(
            url,
            data,
            speed=4,
            finalize=True,
            after=bytes(2 * 16000 * 2),
            encoding="linear16",
            sample_rate=16000,
            interim_results="true",
            vad_events="true",
            utterance_end_ms="1000",
            punctuate="true",
            diarize="true",
        )
        kinds = [m.type for m in run.messages]
        assert kinds[-1] == "Metadata" and abs(run.messages[-1].duration - (len(data) / 32000 + 2)) < 0.1
        assert "SpeechStarted" in kinds and "UtteranceEnd" in kinds
        first_final = next(i for i, m in enumerate(run.messages) if m.type == "Results" and m.is_final)
        assert any(m.type == "Results" and not m.is_final for m in run.messages[:first_final]), "interims first"
        assert run.text.startswith("audio of"), run.text
        final = run.finals[-1]
        assert final.from_finalize, "the sentence Finalize flushed says so"
        duration = len(data) / 32000
        for m in run.finals:
            words = m.channel.alternatives[0].words
            assert words and all(0 <= w.start <= w.end <= duration + 0.1 for w in words)
            assert all(w.speaker is not None for w in words) and 0 < m.channel.alternatives[0].confidence <= 1
        assert kinds.index("UtteranceEnd") > first_final

        # The same stream published into a room: the room's transcript has it.
        await stream_deepgram(url, data, speed=0, encoding="linear16", sample_rate=16000, room=room.id)
        async with aiohttp.ClientSession() as http, http.get(f"{url}/rooms/{room.id}/transcript.txt") as r:
            assert "audio of" in await r.text()


async def test_encodings_wav_streams_and_odd_frames(fake_engine: CaptionEngine) -> None:
    x = audio("ls_1988-24833-0000")
    async with running_server(fake_engine) as (url, _app):
        # µ-law at 8 kHz, as telephony sends it.
        run = await stream_deepgram(
            url,
            mulaw(np.interp(np.arange(0, len(x), 2), np.arange(len(x)), x)),
            speed=0,
            bytes_per_s=8000,
            chunk=800,
            encoding="mulaw",
            sample_rate=8000,
        )
        assert run.text.startswith("audio of"), run.messages
        # No encoding: a WAV stream (here at 44.1 kHz), its header split and every message an odd length.
        run = await stream_deepgram(url, wav_bytes(x, 44100), speed=0, chunk=1001, punctuate="true")
        assert run.text.startswith("audio of"), run.messages
        seconds = float(run.text.split()[2])
        assert abs(seconds - len(x) / 16000) < 0.6, "all of the audio arrived, none doubled"


async def test_a_stream_faster_than_real_time_is_taken_at_the_pace_of_speech(
    fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live priority is for speech as fast as it is spoken: 4 s of audio sent at once, with 1 s allowed ahead of the
    clock, take about 3 s to be read; all of it comes through."""
    monkeypatch.setattr(live_audio, "LIVE_AHEAD_S", 1.0)
    x = speech(["ls_1988-24833-0000", "ls_3752-4944-0000"])[0][: 4 * 16000]
    assert len(x) == 4 * 16000
    t0 = time.monotonic()
    run = await _stream_fast(fake_engine, pcm16(x))
    assert 4.0 - 1.0 - 0.5 <= time.monotonic() - t0 < 10, time.monotonic() - t0
    assert run.text.startswith("audio of"), run.messages


async def _stream_fast(engine: CaptionEngine, data: bytes) -> Any:
    async with running_server(engine) as (url, _app):
        return await stream_deepgram(url, data, speed=0, encoding="linear16", sample_rate=16000)


async def test_prerecorded_files(fake_engine: CaptionEngine) -> None:
    """``POST /v1/listen``: LiveKit's Deepgram plugin's ``recognize`` (a WAV body), and raw PCM with an encoding."""
    from livekit import rtc
    from livekit.plugins import deepgram as lk_deepgram

    x = audio("ls_1988-24833-0000")
    async with running_server(fake_engine, max_upload_mb=1) as (url, _app), aiohttp.ClientSession() as http:
        stt = lk_deepgram.STT(api_key="any", base_url=f"{url}/v1/listen", http_session=http)
        frame = rtc.AudioFrame(data=pcm16(x), sample_rate=16000, num_channels=1, samples_per_channel=len(x))
        event = await stt.recognize(buffer=[frame])
        assert event.alternatives[0].text.startswith("audio of"), event
        async with http.post(
            f"{url}/v1/listen?encoding=linear16&sample_rate=16000&diarize=true&utterances=true&punctuate=true",
            data=pcm16(x),
        ) as r:
            body = await r.json()
            assert r.status == 200 and abs(body["metadata"]["duration"] - len(x) / 16000) < 0.1
            alt = body["results"]["channels"][0]["alternatives"][0]
            assert alt["transcript"].startswith("audio of") and all(w["speaker"] == 0 for w in alt["words"])
            assert body["results"]["utterances"][0]["transcript"] == alt["transcript"]
        async with http.post(f"{url}/v1/listen", json={"url": "https://example.org/a.wav"}) as r:
            assert r.status == 400 and "URL" in (await r.json())["err_msg"]
        async with http.post(f"{url}/v1/listen", data=io.BytesIO(bytes(2 * 1024 * 1024))) as r:
            assert r.status == 413 and r.headers["dg-error"]


async def test_audio_faster_than_real_time_waits_for_the_engine(
    fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends a minute of speech at once is read only as fast as the engine keeps up: the audio waiting
    for the VAD and the sentences waiting for their final stay bounded (``live_audio.LIVE_BACKLOG``). (The pace of
    speech, which holds such a client back first, is lifted here: the engine's own backpressure is tested.)"""
    monkeypatch.setattr(live_audio, "LIVE_AHEAD_S", math.inf)
    data = pcm16(audio("libri_3spk_turns"))
    peaks = [0.0, 0.0]

    async def watch() -> None:
        while True:
            for s in list(fake_engine.sessions.values()):
                peaks[0] = max(peaks[0], s.vad_backlog_s)
                peaks[1] = max(peaks[1], s.finals_pending)
            await asyncio.sleep(0.01)

    async with running_server(fake_engine) as (url, _app):
        watcher = asyncio.create_task(watch())
        run = await stream_deepgram(url, data, speed=0, chunk=256 * 1024, encoding="linear16", sample_rate=16000)
        watcher.cancel()
    last_word = run.finals[-1].channel.alternatives[0].words[-1].end
    assert last_word > len(data) / 32000 - 3, "all of the speech came through"
    assert peaks[0] <= 6.5 and peaks[1] <= 5, peaks


@pytest.mark.slow
async def test_pings_are_answered_while_the_engine_catches_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client far ahead of a slow recognizer keeps its connection: its pings are answered while its audio waits
    (clients such as deepgram-sdk's drop a connection whose pings go unanswered for 20 s)."""
    monkeypatch.setattr(live_audio, "LIVE_AHEAD_S", math.inf)  # far ahead: past the pace of speech too
    from engine.asr.fake import FakeTranscriber
    from engine.config import EngineConfig

    slow = CaptionEngine(EngineConfig(speakers=False), transcriber=FakeTranscriber(delay_s=6.0))
    await slow.start()
    try:
        async with running_server(slow, drain_timeout_s=1.0) as (url, _app), aiohttp.ClientSession() as http:
            ws = await http.ws_connect(
                "ws" + url[4:] + "/v1/listen?encoding=linear16&sample_rate=16000", autoping=False
            )
            clips = [
                "ls_1988-24833-0000",
                "ls_3752-4944-0000",
                "ls_6930-75918-0000",
                "ls_7902-96591-0000",
                "ls_3752-4944-0002",
                "cmuarctic_a0024",
                "ls_1988-24833-0002",
                "ls_3752-4944-0001",
            ]
            data = pcm16(speech(clips, gap_s=2.5)[0])  # eight sentences, each closed by a long pause
            for i in range(0, len(data), 256 * 1024):
                await ws.send_bytes(data[i : i + 256 * 1024])
            for _ in range(100):  # the server's reader of the audio now waits for the recognizer
                if any(s.finals_pending > LIVE_BACKLOG[1] for s in slow.sessions.values()):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the engine never fell behind")
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await ws.ping(b"still there?")
            while (await ws.receive(timeout=5)).type is not aiohttp.WSMsgType.PONG:
                pass
            assert loop.time() - t0 < 1.0
            await ws.close()
    finally:
        await slow.close()


async def test_refusals_and_close_codes(fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    async with (
        running_server(fake_engine, auth_token="sekret", max_sessions=2) as (url, _app),
        aiohttp.ClientSession() as http,
    ):
        ws_url = "ws" + url[4:] + "/v1/listen"
        for query, status in (
            ("encoding=flac&sample_rate=16000", 400),
            ("encoding=linear16", 400),
            ("channels=2&encoding=linear16&sample_rate=16000", 400),
            ("room=nosuchroom", 404),
        ):
            with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                await http.ws_connect(f"{ws_url}?{query}", headers={"Authorization": "Token sekret"})
            assert err.value.status == status and err.value.headers is not None
            assert err.value.headers.get("dg-error"), query
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(ws_url, headers={"Authorization": "Token wrong"})
        assert err.value.status == 401
        # The key as the browser SDK sends it: the subprotocols "token, <key>".
        async with http.ws_connect(
            f"{ws_url}?encoding=linear16&sample_rate=16000", protocols=("token", "sekret")
        ) as ws:
            assert ws.protocol == "token"
            await ws.send_str('{"type": "Dance"}')
            msg = await ws.receive_json(timeout=5)
            assert msg["type"] == "Error" and msg["variant"] == "SchemaError"
            # An oversized message: 1009.
            await ws.send_bytes(bytes(deepgram.MAX_MESSAGE_BYTES + 2))
            while (m := await ws.receive(timeout=10)).type is aiohttp.WSMsgType.TEXT:
                pass
            assert ws.close_code == 1009
        auth = {"Authorization": "Token sekret"}
        # Not audio (no encoding given and no WAV header): 1008 DATA-0000.
        async with http.ws_connect(ws_url, headers=auth) as ws:
            await ws.send_bytes(b"this is certainly not a WAV file" * 4)
            while (m := await ws.receive(timeout=10)).type is aiohttp.WSMsgType.TEXT:
                pass
            assert ws.close_code == 1008 and str(m.extra).startswith("DATA-0000")
        # No audio or KeepAlive within the timeout: 1011 NET-0001, after the open sentence is locked.
        monkeypatch.setattr(deepgram, "TIMEOUT_S", 1.0)
        async with http.ws_connect(f"{ws_url}?encoding=linear16&sample_rate=16000", headers=auth) as ws:
            await ws.send_bytes(pcm16(audio(CLIP)[: 16000 * 3]))
            await ws.send_str('{"type": "KeepAlive"}')
            texts = []
            while (m := await ws.receive(timeout=15)).type is aiohttp.WSMsgType.TEXT:
                texts.append(m.json())
            assert ws.close_code == 1011 and str(m.extra).startswith("NET-0001")
            assert [t for t in texts if t["type"] == "Results" and t["is_final"]], "the open sentence was sent"
            assert texts[-1]["type"] == "Metadata"


async def test_admission_holds_under_a_flood_of_connects(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, max_sessions=4) as (url, _app), aiohttp.ClientSession() as http:
        ws = "ws" + url[4:]

        async def connect(i: int) -> aiohttp.ClientWebSocketResponse | int:
            path = "/v1/listen?encoding=linear16&sample_rate=16000" if i % 2 else "/v1/realtime?intent=transcription"
            try:
                return await http.ws_connect(ws + path)
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

        results = await asyncio.gather(*(connect(i) for i in range(200)))
        held = [r for r in results if not isinstance(r, int)]
        assert len(held) == 4 and sorted(set(r for r in results if isinstance(r, int))) == [429]
        async with http.get(f"{url}/metrics") as r:
            assert 'live_captions_sessions_active{kind="live"} 4.0' in await r.text()
        for conn in held:
            await conn.close()
        for _ in range(50):
            if not fake_engine.sessions:
                break
            await asyncio.sleep(0.1)
        assert not fake_engine.sessions
        conn = await http.ws_connect(ws + "/v1/listen?encoding=linear16&sample_rate=16000")  # the slots came back
        await conn.close()


async def test_a_stopping_server_finishes_the_open_sentence(fake_engine: CaptionEngine) -> None:
    texts: list[dict[str, object]] = []
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        ws = await http.ws_connect("ws" + url[4:] + "/v1/listen?encoding=linear16&sample_rate=16000")
        await ws.send_bytes(pcm16(audio(CLIP)[: 16000 * 4]))  # mid-sentence, no pause after it
        await asyncio.sleep(1.0)

        async def read() -> None:
            while (m := await ws.receive()).type is aiohttp.WSMsgType.TEXT:
                texts.append(m.json())

        reader = asyncio.create_task(read())
        stopping = asyncio.create_task(app.shutdown())  # what SIGTERM runs first: the drain
        await asyncio.wait_for(reader, 20)
        await stopping
        assert ws.close_code == 1001
        assert any(t["type"] == "Results" and t["is_final"] for t in texts)
        assert app[DRAIN].sentences >= 1


@pytest.mark.heavy
async def test_deepgram_sdk_real_speech_at_real_time(engine: CaptionEngine) -> None:
    clips = ["librivox_sns01_0880", "cmuarctic_a0024", "ls_6930-75918-0000", "librivox_sns01_0930"]
    samples, ref = speech(clips)
    async with running_server(engine) as (url, _app):
        run = await stream_deepgram(
            url,
            pcm16(samples),
            speed=1.0,
            encoding="linear16",
            sample_rate=16000,
            interim_results="true",
            punctuate="true",
            language="en",
        )
    finals = run.finals
    assert wer(ref, run.text) <= 0.08, run.text
    first_final = run.messages.index(finals[0])
    assert any(m.type == "Results" and not m.is_final for m in run.messages[:first_final])
    duration = len(samples) / 16000
    for m in finals:
        words = m.channel.alternatives[0].words
        assert words and all(0 <= w.start <= w.end <= duration for w in words), m
        assert words[0].start >= m.start - 0.01 and words[-1].end <= m.start + m.duration + 0.01


@pytest.mark.heavy
async def test_deepgram_diarize_two_readers(engine: CaptionEngine) -> None:
    clip = "libri_2spk_overlap_dialogue"
    async with running_server(engine) as (url, _app):
        run = await stream_deepgram(
            url,
            pcm16(audio(clip)) + bytes(3 * 32000),
            speed=3.0,
            encoding="linear16",
            sample_rate=16000,
            diarize="true",
            punctuate="true",
        )
    speakers = {w.speaker for m in run.finals for w in m.channel.alternatives[0].words}
    assert len(speakers) == 2, speakers
    assert wer(reference(clip), run.text) <= 0.25  # the readers overlap at most turns: a sanity bound only
