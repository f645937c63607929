"""FunASR's realtime WebSocket protocol, driven by the third-party ``funasr-client`` package (its CLI and its
Python API), as FunASR users run it against FunASR's own server.

Fast tests use the named fake recognizer (real VAD, real endpointing, real WebSocket): the protocol is what is
tested. The heavy test streams real speech through the real engine and checks the text by word error rate.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import wave
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from app.compat.funasr import OnlineText, parse_config, parse_hotwords
from app.rooms.keys import ROOMS
from engine import CaptionEngine
from speechdata.corpus import reference, wav_path
from tests.support.servers import running_server

if TYPE_CHECKING:
    from funasr_client.types import FunASRMessageDecoded, InitMessageMode

CLIP = "whisper_jfk"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def funasr_cli(uri: str, path: Path, mode: str) -> dict[str, Any]:
    """``python -m funasr_client URI FILE --mode MODE --async``: its merged result (the offline sentences).

    ``--async``: the package's synchronous client (0.1.6) deadlocks when it closes, against any server (``close``
    holds its lock and calls ``signal_close``, which takes the same lock again)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "funasr_client",
        uri,
        str(path),
        "--mode",
        mode,
        "--async",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1])


async def funasr_messages(
    uri: str, path: Path, mode: InitMessageMode, real_time: bool = False
) -> list[FunASRMessageDecoded]:
    """Every message of one WAV file through the package's streaming client, as its ``async_file_asr_stream`` runs it
    (60 ms chunks, ``recv`` polled between sends, ``signal_close`` at the end).

    ``real_time``: one chunk per 60 ms, as a microphone sends. The package's own file stream sends as fast as it
    reads, so a 2pass session may lock each sentence before any partial of it settled: whether online text appears
    then depends on the machine's speed, not on the server."""
    from funasr_client import async_funasr_client

    messages: list[FunASRMessageDecoded] = []
    with wave.open(str(path), "rb") as wav:
        async with async_funasr_client(
            uri, mode=mode, wav_name=path.name, audio_fs=wav.getframerate(), blocking=True
        ) as client:
            frames = wav.getframerate() * 60 // 1000
            while chunk := wav.readframes(frames):
                await client.send(chunk)
                while True:  # what has arrived so far, without waiting
                    try:
                        messages.append(await client.recv(0.001))
                    except TimeoutError:
                        break
                if real_time:
                    await asyncio.sleep(0.06)
            await client.signal_close()
            async with asyncio.timeout(60):  # the rest, up to the final message
                while (message := await client.recv()) is not None:
                    messages.append(message)
    return messages


def test_first_message_and_online_text_rules() -> None:
    config = parse_config(
        '{"mode": "online", "wav_name": "a", "is_speaking": true, "chunk_size": [5, 10, 5], '
        '"hotwords": "{\\"Kubernetes\\": 20, \\"Ada\\": 10}", "itn": true}'
    )
    assert config.mode == "online" and config.hotwords == ("Kubernetes", "Ada") and config.online
    assert not config.offline
    assert parse_hotwords("alpha beta") == ("alpha", "beta")
    for bad in ("not json", "[1]", '{"mode": "fast"}', '{"audio_fs": 100}', '{"mode": "2pass", "wav_format": "mp3"}'):
        with pytest.raises(ValueError):
            parse_config(bad)
    # Online text is the engine's stable words, each sent once, then the rest of a sentence when it locks.
    online = OnlineText()
    assert online.partial("hello there", 0) == []  # nothing settled yet
    assert online.partial("hello there my", 2) == ["hello", "there"]
    assert online.partial("hello there my friend", 3) == ["my"]
    assert online.partial("hello there my friend", 3) == []  # sent once
    assert online.locked("hello there my friend, goodbye.") == ["friend,", "goodbye."]
    assert online.partial("next one", 0) == [] and online.partial("next one two", 2) == ["next", "one"]


def first_sentence(folder: Path) -> Path:
    """The clip's first sentence ("And so, my fellow Americans", then a second of its pause) as a WAV file in
    ``folder``: a 3 s file, so that the stream at real time costs 3 s, not the clip's 11."""
    path = folder / f"{CLIP}_first_sentence.wav"
    with wave.open(str(wav_path(CLIP)), "rb") as src, wave.open(str(path), "wb") as dst:
        dst.setparams(src.getparams())
        dst.writeframes(src.readframes(3 * src.getframerate()))
    return path


async def test_funasr_client_in_every_mode(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    port = free_port()
    wav = first_sentence(tmp_path)
    async with running_server(fake_engine, funasr_port=port) as (url, _app):
        uri = f"ws://127.0.0.1:{port}/"  # where FunASR's own server listens: the client connects unchanged
        offline = await funasr_cli(uri, wav, "offline")
        assert offline["mode"] == "2pass-offline" and offline["text"].startswith("audio of")
        assert offline["wav_name"] == wav.name
        stamps = offline["timestamp"]
        assert len(stamps) == len(offline["text"].split()) and all(a <= b for a, b in stamps)

        two = await funasr_messages(f"ws{url[4:]}/funasr", wav, "2pass", real_time=True)
        modes = [m["mode"] for m in two]
        assert "2pass-online" in modes and "2pass-offline" in modes and two[-1]["is_final"], modes
        assert sum(m["is_final"] for m in two) == 1

        online = await funasr_messages(uri, wav, "online")
        assert {m["mode"] for m in online} == {"2pass-online"} and online[-1]["is_final"]
        text = "".join(m["text"] for m in online)
        assert text == offline["text"], "the online words add up to the sentence once it locks"


async def test_funasr_offline_file_formats_rooms_and_bad_input(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    ogg = tmp_path / "speech.ogg"
    proc = await asyncio.create_subprocess_exec(
        "ffmpeg", "-loglevel", "error", "-i", str(wav_path(CLIP)), "-c:a", "libopus", str(ogg)
    )
    assert await proc.wait() == 0
    async with running_server(fake_engine) as (url, app):
        uri = f"ws{url[4:]}/funasr"
        # A compressed file in offline mode (FunASR's file service takes mp3, mp4 ... as bytes).
        merged = await funasr_cli(uri, ogg, "offline")
        assert merged["text"].startswith("audio of")

        # Published into a room: its viewers and transcript get the sentences.
        room = (await app[ROOMS].create()).room
        await funasr_cli(f"{uri}?room={room.id}", wav_path(CLIP), "2pass")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/rooms/{room.id}/transcript.txt") as r:
                assert "audio of" in await r.text()

            async with http.ws_connect(uri) as ws:
                await ws.send_str("{not json")
                reply = json.loads((await ws.receive()).data)
                assert reply["is_final"] and "not JSON" in reply["error"]
                assert (await ws.receive()).type is aiohttp.WSMsgType.CLOSE
            # An unknown room is refused before the upgrade, as a full server is (tests/engine/stream/test_capacity.py).
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{uri}?room=nosuchroom")
            assert refused.value.status == 404
            # A client that vanishes mid-sentence: the session still finishes and frees its place.
            async with http.ws_connect(uri) as ws:
                await ws.send_str('{"mode": "2pass", "wav_name": "gone"}')
                await ws.send_bytes(wav_path(CLIP).read_bytes()[44 : 44 + 16000 * 2 * 4])
            for _ in range(100):
                if fake_engine.sessions == {}:
                    break
                await asyncio.sleep(0.1)
            assert fake_engine.sessions == {}
            async with http.get(f"{url}/funasr") as r:
                assert r.status == 400  # not a WebSocket


@pytest.mark.heavy
async def test_real_speech_through_funasr_client(engine: CaptionEngine) -> None:
    from speechdata.wer import wer

    async with running_server(engine) as (url, _app):
        uri = f"ws{url[4:]}/funasr"
        for mode in ("offline", "2pass"):
            merged = await funasr_cli(uri, wav_path(CLIP), mode)
            assert wer(reference(CLIP), merged["text"]) <= 0.1, (mode, merged)
        online = await funasr_messages(uri, wav_path(CLIP), "online")
        assert wer(reference(CLIP), "".join(m["text"] for m in online)) <= 0.15
