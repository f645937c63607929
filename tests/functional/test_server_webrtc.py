"""The server in-process with the real engine, driven by a Python WebRTC client over loopback."""

from __future__ import annotations

import asyncio

import pytest

from app.webrtc.keys import PEERS
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad, reference
from speechdata.wer import word_errors
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server

pytestmark = pytest.mark.heavy


async def test_streamed_wav_becomes_live_captions(engine: CaptionEngine) -> None:
    clip = "ls_2412-153948-0001"
    samples = pad(audio(clip), 0.5, 2.8)
    async with running_server(engine) as (url, app):
        client = CaptionClient(url, samples)
        await client.connect()
        await client.until_played()
        await client.stop()
        await client.close()
        for _ in range(50):
            if not app[PEERS]:
                break
            await asyncio.sleep(0.1)
        assert not app[PEERS], "the session outlived its peer connection"
    types = [m["type"] for m in client.messages]
    assert types[0] == "ready" and types[-1] == "stopped"
    errors, n = word_errors(reference(clip), client.text())
    assert errors / n < 0.15, client.text()
    first_lock = next(i for i, m in enumerate(client.messages) if m["type"] == "caption" and m["sentences"])
    assert any(m["type"] == "caption" and m["partial"] for m in client.messages[:first_lock])
    # Sentence times are session milliseconds around the speech: after the lead-in, before the trailing pause.
    sentences = client.sentences()
    assert 300 <= sentences[0]["start"] <= 1500 and sentences[-1]["end"] <= samples.size / 16 - 2000
    assert not engine.sessions
