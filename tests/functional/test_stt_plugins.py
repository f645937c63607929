"""LiveKit Agents' speech-to-text plugins pointed at this server with ``base_url``: its Deepgram plugin
(``/v1/listen``) and its OpenAI plugin with ``use_realtime=True`` (``/v1/realtime``), as a voice agent runs them
(``stt.stream()``, 20 ms frames at real time, ``end_input``), on real speech through the real engine."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from engine import CaptionEngine
from speechdata.wer import wer
from tests.support.live_clients import pcm16, speech
from tests.support.servers import running_server

CLIPS = ["ls_2412-153948-0001", "ljspeech_LJ002-0035"]


async def _finals(stt: Any, samples: np.ndarray, rate: int) -> list[Any]:
    """Every final transcript of one ``stt.stream()`` fed ``samples`` (16 kHz) at ``rate`` Hz in real time."""
    from livekit import rtc
    from livekit.agents import stt as agents_stt

    stream = stt.stream()
    data = pcm16(samples, rate)
    frame = rate // 50 * 2  # 20 ms

    async def feed() -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for i in range(0, len(data) - frame + 1, frame):
            stream.push_frame(
                rtc.AudioFrame(
                    data=data[i : i + frame], sample_rate=rate, num_channels=1, samples_per_channel=frame // 2
                )
            )
            await asyncio.sleep(max(0.0, t0 + (i + frame) / (2 * rate) - loop.time()))
        stream.end_input()

    finals: list[Any] = []

    async def read() -> None:
        async for event in stream:
            if event.type is agents_stt.SpeechEventType.FINAL_TRANSCRIPT:
                finals.append(event)

    reader = asyncio.create_task(read())
    await feed()
    for _ in range(200):  # the last sentence locks after the end of the audio
        if len(finals) >= len(CLIPS) or reader.done():
            break
        await asyncio.sleep(0.1)
    await stream.aclose()
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    return finals


@pytest.mark.heavy
async def test_livekit_deepgram_and_openai_plugins(engine: CaptionEngine) -> None:
    from livekit.agents.utils import http_context
    from livekit.plugins import deepgram, openai

    samples, ref = speech(CLIPS, tail_s=3.0)
    async with running_server(engine) as (url, _app), http_context.open():
        dg = deepgram.STT(api_key="any-key", base_url=f"{url}/v1/listen", model="nova-3", language="en")
        finals = await asyncio.wait_for(_finals(dg, samples, 16000), 120)
        text = " ".join(e.alternatives[0].text for e in finals)
        assert wer(ref, text) <= 0.10, text
        assert all(e.alternatives[0].start_time < e.alternatives[0].end_time for e in finals)
        await dg.aclose()

        oa = openai.STT(
            api_key="any-key", base_url=f"{url}/v1", model="gpt-4o-transcribe", language="en", use_realtime=True
        )
        finals = await asyncio.wait_for(_finals(oa, samples, 24000), 120)
        text = " ".join(e.alternatives[0].text for e in finals)
        assert len(finals) >= len(CLIPS) and wer(ref, text) <= 0.10, text
        await oa.aclose()
