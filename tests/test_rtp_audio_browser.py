"""The microphone page in real Chromium through the cheap receive path: Chromium follows the answer's ``a=ptime``
(60 ms Opus packets, a third of the packets to receive) or sends its default 20 ms when not asked, and either way
the audio reaches the engine whole, at 16 kHz mono, through the jitter buffer that holds no packet back. The
recognizer is the named fake: no caption text is judged."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from app.webrtc.jitter import AudioJitterBuffer
from app.webrtc.keys import PEERS
from app.webrtc.rtp_audio import InlineDecoder
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.browser import chromium, write_wav
from tests.servers import running_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~9 s each: the page streams its clip at real time


@pytest.mark.parametrize("ptime_ms", [60, 0])
async def test_the_page_sends_the_packets_the_server_asks_for(fake_engine: CaptionEngine, tmp_path: Path,
                                                              ptime_ms: int) -> None:
    clip = pad(audio("ls_1988-24833-0000"), 1.0, 2.0)
    mic = write_wav(tmp_path / "mic.wav", clip)
    async with running_server(fake_engine, ptime_ms=ptime_ms) as (url, app), chromium(mic) as browser:
        page = await browser.new_page()
        await page.goto(url)
        await page.wait_for_function("window.liveCaptions && window.liveCaptions.state === 'idle'")
        await page.click("#toggle")
        await page.wait_for_selector("[data-sentence-id]", timeout=30_000)  # captions appear
        (peer,) = app[PEERS].values()
        (receiver,) = [r for r in peer.pc.getReceivers() if r.track is not None and r.track.kind == "audio"]
        sink = receiver._RTCRtpReceiver__decoder_queue
        assert isinstance(sink, InlineDecoder)
        jitter = receiver._RTCRtpReceiver__jitter_buffer
        assert isinstance(jitter, AudioJitterBuffer)  # no packet waits for later ones on the way in
        await asyncio.sleep(1.0)
        packet_ms = sink.samples / sink.packets / 16
        received_s, energy = peer.ingest.audio_s, peer.ingest.energy
        await page.click("#toggle")
        await page.wait_for_function("window.liveCaptions.state === 'idle'")
    assert packet_ms == pytest.approx(ptime_ms or 20, abs=1), packet_ms
    # On loopback nothing is lost or reordered: every packet went to the decoder the moment it arrived.
    assert jitter.waited == jitter.skipped == sink.concealed_samples == 0
    assert received_s > 2.0 and energy > 0.05 * float(np.sum(np.square(clip)))
