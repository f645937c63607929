"""The microphone page in real Chromium through the cheap receive path: Chromium follows the answer's ``a=ptime``
(60 ms Opus packets, a third of the packets to receive) or sends its default 20 ms when not asked, and either way
the audio reaches the engine whole, at 16 kHz mono, through the jitter buffer that holds no packet back. When
packets are lost, Chromium adds in-band FEC (the answer allows it) and the server recovers lost packets from it.
The recognizer is the named fake: no caption text is judged."""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from app.webrtc.jitter import AudioJitterBuffer
from app.webrtc.keys import PEERS
from app.webrtc.rtp_audio import AudioReceiver, InlineDecoder
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.browser import chromium, write_wav
from tests.support.servers import running_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~9 s each: the page streams its clip at real time


@pytest.mark.parametrize("ptime_ms", [60, 0])
async def test_the_page_sends_the_packets_the_server_asks_for(
    fake_engine: CaptionEngine, tmp_path: Path, ptime_ms: int
) -> None:
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


def has_fec() -> Callable[[bytes], bool]:
    """Whether an Opus packet carries an in-band FEC copy of the one before (``opus_packet_has_lbrr``, libopus 1.5
    and later: the copy inside PyAV's wheel; Debian's libopus 1.3 lacks it)."""
    found = sorted((Path(av.__file__).parent.parent / "av.libs").glob("libopus*.so*"))
    assert found, "PyAV's wheel has no libopus to read the packets with"
    lib = ctypes.CDLL(str(found[0]))
    lib.opus_packet_has_lbrr.restype = ctypes.c_int
    lib.opus_packet_has_lbrr.argtypes = [ctypes.c_char_p, ctypes.c_int32]
    return lambda packet: bool(lib.opus_packet_has_lbrr(packet, len(packet)) == 1)


async def test_chromium_adds_fec_once_packets_are_lost_and_the_server_recovers_them(
    fake_engine: CaptionEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = pad(np.concatenate([audio("ls_1988-24833-0000"), audio("ls_3752-4944-0001")]), 1.0, 1.0)
    mic = write_wav(tmp_path / "mic.wav", clip)
    payloads: list[bytes] = []  # every audio packet Chromium sent, in order
    lost_at: list[int] = []  # which of them the network lost
    played = asyncio.Event()  # the whole clip has been sent (60 ms a packet)
    receive = AudioReceiver._handle_rtp_packet

    async def lossy(self: AudioReceiver, packet: Any, arrival_time_ms: int) -> None:
        if self.decoder is not None and packet.payload:  # audio
            payloads.append(bytes(packet.payload))
            if len(payloads) * 0.06 >= clip.size / 16000:
                played.set()
            # The network loses every tenth packet while the clip plays.
            if not played.is_set() and len(payloads) > 20 and len(payloads) % 10 == 0:
                lost_at.append(len(payloads) - 1)
                return
        await receive(self, packet, arrival_time_ms)

    monkeypatch.setattr(AudioReceiver, "_handle_rtp_packet", lossy)
    async with running_server(fake_engine) as (url, app), chromium(mic) as browser:
        page = await browser.new_page()
        await page.goto(url)
        await page.wait_for_function("window.liveCaptions && window.liveCaptions.state === 'idle'")
        await page.click("#toggle")
        await page.wait_for_selector("[data-sentence-id]", timeout=30_000)
        (peer,) = app[PEERS].values()
        (receiver,) = [r for r in peer.pc.getReceivers() if r.track is not None and r.track.kind == "audio"]
        sink = receiver.decoder
        assert isinstance(receiver, AudioReceiver) and sink is not None
        await asyncio.wait_for(played.wait(), 60)
        await page.click("#toggle")
        await page.wait_for_function("window.liveCaptions.state === 'idle'")
    # (Read after the stop: every gap has been filled by then, the packets after the last one having arrived.)
    carries_fec = has_fec()
    with_fec = [carries_fec(p) for p in payloads]
    # Chromium sends FEC once the server's receiver reports the loss (within a few seconds), and not before.
    assert not any(with_fec[:10]), "FEC before any loss was reported"
    assert sum(with_fec) >= len(with_fec) // 3, f"{sum(with_fec)} of {len(with_fec)} packets carried FEC"
    # Of the packets lost once it did, those in speech come back from the copy in the packet after them (Chromium
    # sends speech at 60 ms a packet as one SILK frame: the copy is of all of the packet before).
    first = with_fec.index(True)
    after = [with_fec[i + 1] for i in lost_at if i > first]
    assert sum(after) >= max(3, len(after) // 3), f"{sum(after)} of {len(after)} lost packets had a copy after them"
    # Each lost packet's 60 ms is filled, and every gap (one packet each) went through the copy in the next packet.
    assert sink.concealed_s == pytest.approx(0.06 * len(lost_at), abs=0.001)
    assert sink.fec_samples == sink.concealed_samples
