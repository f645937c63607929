"""Receiving audio cheaply: Opus decoded straight to 16 kHz mono must give the audio the old path gave (decode at
48 kHz stereo, then resample), whatever the sender encoded; other codecs must still work; real WebRTC sessions
through the server must reach the engine the same way."""

from __future__ import annotations

import asyncio
import fractions
from types import SimpleNamespace
from typing import Any

import aiortc.codecs
import aiortc.rtcpeerconnection
import av
import numpy as np
import pytest
from aiortc import RTCRtpSender
from aiortc.codecs import PCMU_CODEC
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from aiortc.rtcrtpreceiver import RemoteStreamTrack, RTCRtpReceiver
from aiortc.rtp import RtpPacket

from app.config import AudioDecoder, ServerConfig, build_parser, config_from_args
from app.webrtc import patches, rtp_audio
from app.webrtc.ingest import IngestStats, pump_track
from app.webrtc.jitter import AudioJitterBuffer, PacketRun
from app.webrtc.keys import PEERS
from app.webrtc.opus import OpusDecoder, OpusError
from app.webrtc.rtp_audio import AudioReceiver, InlineDecoder
from engine import CHUNK_SAMPLES
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.opus_frames import frames_of, opus_packets
from tests.support.rtc_client import ArrayAudioTrack, CaptionClient
from tests.support.servers import running_server

OPUS = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2, payloadType=96)
CLIP = "ls_1988-24833-0000"


def old_path(packets: list[bytes]) -> np.ndarray:
    """What the server did before: aiortc's decoder (48 kHz stereo), then PyAV's resampler to 16 kHz mono."""
    dec = av.CodecContext.create("libopus", "r")
    dec.format, dec.layout, dec.sample_rate = "s16", "stereo", 48000
    resampler = av.AudioResampler(format="s16", layout="mono", rate=16000)
    out = []
    for i, data in enumerate(packets):
        packet = av.Packet(data)
        packet.pts, packet.time_base = i * 960, fractions.Fraction(1, 48000)
        for frame in dec.decode(packet):
            out += [o.to_ndarray().reshape(-1) for o in resampler.resample(frame)]
    return np.concatenate(out).astype(np.float64)


def snr_db(reference: np.ndarray, other: np.ndarray, lag: int = 0) -> float:
    """Signal-to-difference ratio of ``other`` against ``reference``, ``other`` taken ``lag`` samples later."""
    oth = other[lag:].astype(np.float64)
    n = min(reference.size, oth.size)
    ref, oth = reference[:n], oth[:n]
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum((ref - oth) ** 2), 1e-9)))


def codec_delay(reference: np.ndarray, decoded: np.ndarray) -> int:
    """How many samples later ``decoded`` carries ``reference`` (Opus adds its look-ahead)."""
    return max(range(0, 400), key=lambda lag: snr_db(reference, decoded, lag))


def test_direct_16k_mono_decode_is_the_old_decode_and_resample() -> None:
    speech = audio(CLIP)[: 16000 * 6]
    packets = opus_packets(speech)
    decoder = OpusDecoder()
    direct = np.concatenate([decoder.decode(p) for p in packets])
    old = old_path(packets)
    assert abs(direct.size - old.size) <= 320  # the resampler keeps a few samples back
    assert snr_db(old, direct) > 30  # measured: ~50 dB, the same audio within the codec's precision


def test_stereo_opus_from_a_browser_is_downmixed_as_before() -> None:
    speech = audio(CLIP)[: 16000 * 4]
    other = np.roll(speech, 8000) * 0.5  # a different signal on the right channel
    packets = opus_packets(speech, other)
    decoder = OpusDecoder()
    direct = np.concatenate([decoder.decode(p) for p in packets])
    old = old_path(packets)
    assert snr_db(old, direct) > 25
    mono = (speech + other) / 2 * 32767  # both channels are in the mono mix, at half level each
    assert snr_db(mono, direct, codec_delay(mono, direct)) > 10


def test_a_corrupt_packet_is_a_clear_error_and_the_decoder_goes_on() -> None:
    dec = OpusDecoder()
    good = opus_packets(audio(CLIP)[:16000])
    with pytest.raises(OpusError, match="opus_decode"):
        dec.decode(bytes([0xFF, 0xFF, 0xFF]))  # code 3 with a frame count of 63: invalid
    assert dec.decode(good[0]).size == 320
    assert dec.conceal(320).size == 320
    with pytest.raises(ValueError, match="44100"):
        OpusDecoder(44100)
    dec.close()
    dec.close()
    with pytest.raises(OpusError, match="closed"):
        dec.decode(good[0])


class _Receiver:
    """What ``InlineDecoder`` needs of an aiortc receiver: its track."""

    def __init__(self) -> None:
        self._track = RemoteStreamTrack("audio")


async def test_inline_decoder_queues_60ms_frames_and_ends_the_track() -> None:
    receiver = _Receiver()
    sink = InlineDecoder(receiver)  # type: ignore[arg-type]
    packets = opus_packets(audio(CLIP)[:16000])  # 1 s: 50 packets of 20 ms
    for i, data in enumerate(packets):
        sink.put((OPUS, JitterFrame(data, i * 960)))
    sink.put((OPUS, JitterFrame(b"\xff\xff\xff", 0)))  # a bad packet is logged and skipped
    assert sink.decode_errors == 1
    waiter = asyncio.get_running_loop().run_in_executor(None, sink.get)  # aiortc's decoder thread blocks here
    await asyncio.sleep(0.05)
    assert not waiter.done()
    sink.put(None)  # the receiver stops: the rest goes out, then the thread's get() returns
    await asyncio.wait_for(waiter, 5)  # get() returned: None, the end of the stream for aiortc's thread
    frames = list(frames_of(receiver._track))
    sizes = [f.samples for f in frames if f is not None]
    assert all(s == CHUNK_SAMPLES for s in sizes[:-1]) and sum(sizes) == 320 * len(packets)
    assert {(f.sample_rate, f.layout.name, f.format.name) for f in frames if f is not None} == {(16000, "mono", "s16")}


async def test_inline_decoder_passes_other_codecs_to_aiortc() -> None:
    receiver = _Receiver()
    sink = InlineDecoder(receiver)  # type: ignore[arg-type]
    tone = (np.sin(np.arange(160) / 8000 * 2 * np.pi * 440) * 0.3 * 32767).astype(np.int16)
    frame = av.AudioFrame.from_ndarray(tone.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = 8000
    encoded, _ = aiortc.codecs.get_encoder(PCMU_CODEC).encode(frame)
    sink.put((PCMU_CODEC, JitterFrame(encoded[0], 0)))
    (out,) = list(frames_of(receiver._track))
    assert out is not None and out.sample_rate == 8000 and out.samples == 160
    stats = IngestStats()
    receiver._track._queue.put_nowait(out)
    receiver._track._queue.put_nowait(None)
    await pump_track(receiver._track, lambda _: None, stats, 2.0, lambda _: None)
    assert stats.audio_s == pytest.approx(0.02, abs=0.005)  # resampled to 16 kHz by the ingest


def test_install_chooses_the_receiver_of_new_peer_connections() -> None:
    try:
        patches.install_audio_receiver(AudioDecoder.AIORTC)
        assert aiortc.rtcpeerconnection.RTCRtpReceiver is RTCRtpReceiver
        patches.install_audio_receiver(AudioDecoder.DIRECT)
        assert aiortc.rtcpeerconnection.RTCRtpReceiver is AudioReceiver
        transport: Any = SimpleNamespace(state="new")  # all aiortc's receiver reads of it when made
        assert isinstance(AudioReceiver("audio", transport)._RTCRtpReceiver__jitter_buffer, AudioJitterBuffer)
        with pytest.raises(ValueError, match="direct, aiortc"):
            patches.install_audio_receiver("ffmpeg")  # type: ignore[arg-type]  # not one of them, on purpose
    finally:
        patches.install_audio_receiver(AudioDecoder.DIRECT)


def test_the_receiver_hands_over_the_packets_waiting_behind_a_gap_as_the_stream_ends() -> None:
    transport: Any = SimpleNamespace(state="new")
    receiver = AudioReceiver("audio", transport)
    opus = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2, payloadType=111)
    vars(receiver)["_RTCRtpReceiver__codecs"][111] = opus  # as receive() fills it from the negotiated codecs
    buffer = receiver.buffer
    assert buffer is not None and receiver.decoder is not None
    for seq in (0, 2, 3):  # 1 never comes; 2 and 3 wait for it
        p = RtpPacket(payload_type=111, sequence_number=seq, timestamp=5000 + 960 * seq)
        p._data = b"x"  # type: ignore[attr-defined]
        buffer.add(p)
    held = receiver._take_held()
    assert held is not None
    codec, run = held
    assert codec is opus and isinstance(run, PacketRun) and len(run.parts) == 2
    assert run.timestamp == 0  # aiortc's timestamp mapper: the first timestamp it sees is 0 on the track
    assert [f.timestamp for f in run.frames()] == [0, 960]
    assert receiver._take_held() is None


class StereoTrack(ArrayAudioTrack):
    """A browser microphone sending stereo: the clip on the left, silence on the right."""

    async def recv(self) -> av.AudioFrame:
        mono = await super().recv()
        left = mono.to_ndarray().reshape(-1)
        both = np.stack([left, np.zeros_like(left)]).T.reshape(1, -1).astype(np.int16)
        out = av.AudioFrame.from_ndarray(both, format="s16", layout="stereo")
        out.sample_rate, out.pts, out.time_base = mono.sample_rate, mono.pts, mono.time_base
        return out


_STREAMS_4_S = pytest.mark.slow  # each case streams 4 s at real time: one stays in the quick tier


@pytest.mark.parametrize(
    ("decoder", "codec"),
    [
        ("direct", "opus"),
        pytest.param("direct", "stereo opus", marks=_STREAMS_4_S),
        pytest.param("direct", "pcmu", marks=_STREAMS_4_S),
        pytest.param("aiortc", "opus", marks=_STREAMS_4_S),
    ],
)
async def test_a_live_session_reaches_the_engine(fake_engine: CaptionEngine, decoder: str, codec: str) -> None:
    clip = pad(audio(CLIP)[: 2 * 16000], 0.5, 1.5)  # 1.6 s of speech: a sentence
    async with running_server(fake_engine, audio_decoder=decoder) as (url, app):
        client = CaptionClient(url, clip)
        if codec == "stereo opus":
            client.track = StereoTrack(clip)
        if codec == "pcmu":
            transceiver = client.pc.addTransceiver("audio", direction="sendonly")
            caps = RTCRtpSender.getCapabilities("audio")
            transceiver.setCodecPreferences([c for c in caps.codecs if c.mimeType == "audio/PCMU"])
            transceiver.sender.replaceTrack(client.track)
            client.pc.addTrack = lambda track: transceiver.sender  # type: ignore[method-assign]
        await client.connect()
        (peer,) = app[PEERS].values()
        await client.until_played()
        await asyncio.sleep(0.5)
        received_s = peer.ingest.audio_s
        energy = peer.ingest.energy
        (receiver,) = [r for r in peer.pc.getReceivers() if r.track is not None and r.track.kind == "audio"]
        sink = receiver._RTCRtpReceiver__decoder_queue  # aiortc's private name: this fails if aiortc renames it
        opus_packets_decoded = sink.packets if isinstance(sink, InlineDecoder) else None
        await client.stop()
        await client.close()
    if decoder == "direct":  # the audio really went through our decoder (Opus) or aiortc's behind it (PCMU)
        assert opus_packets_decoded == (0 if codec == "pcmu" else pytest.approx(received_s * 50, rel=0.2))
    else:
        assert opus_packets_decoded is None
    assert received_s == pytest.approx(clip.size / 16000, abs=0.6)
    # Energy against the clip's: aiortc's Opus sender upmixes mono to stereo at -3 dB a channel (the old path gave
    # the same); the stereo track's right channel is silent (half the amplitude in the mix); PCMU is mono.
    gain = {"opus": 0.5, "stereo opus": 0.25, "pcmu": 1.0}[codec]
    expected = float(np.sum(np.square(clip))) * gain
    assert energy == pytest.approx(expected, rel=0.35)
    sentences = client.sentences()
    assert sentences and 200 <= sentences[0]["start"] <= 1500, sentences


SDP = (
    "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
    "m=audio 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:96 opus/48000/2\r\n"
    "m=video 9 UDP/TLS/RTP/SAVPF 97\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:97 VP8/90000\r\n"
    "m=audio 9 UDP/TLS/RTP/SAVPF 96\r\na=ptime:20\r\n"
)


def test_the_answer_lets_senders_add_inband_fec_to_opus() -> None:
    opus = "a=rtpmap:96 opus/48000/2\r\n"
    sdp = SDP.replace(f"{opus}m=video", f"{opus}a=fmtp:96 minptime=10\r\nm=video")
    sdp += "a=rtpmap:96 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\n"
    out = rtp_audio.with_inband_fec(sdp)
    sections = out.split("m=")
    assert "a=fmtp:96 minptime=10;useinbandfec=1\r\n" in sections[1]  # an fmtp line is extended
    assert "fec" not in sections[2]  # video
    assert "a=rtpmap:96 opus/48000/2\r\na=fmtp:96 useinbandfec=1\r\na=rtpmap:0" in sections[3]  # or added
    assert out.count("useinbandfec") == 2, "PCMU gets none"
    assert rtp_audio.with_inband_fec(out) == out


def test_the_answer_asks_senders_for_longer_audio_packets() -> None:
    sections = rtp_audio.with_ptime(SDP, 60).split("m=")
    assert sections[1].endswith("a=rtpmap:96 opus/48000/2\r\na=ptime:60\r\n")
    assert "ptime" not in sections[2]  # video
    assert sections[3].count("ptime") == 1 and "a=ptime:20" in sections[3]  # an explicit ptime is kept
    assert rtp_audio.with_ptime(SDP, 0) == SDP


def test_front_end_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="ptime"):
        ServerConfig(ptime_ms=30)
    with pytest.raises(ValueError, match="audio decoder"):
        ServerConfig(audio_decoder="ffmpeg")  # type: ignore[arg-type]  # not one of them, on purpose
    args = build_parser().parse_args(["--audio-decoder", "aiortc", "--ptime-ms", "20"])
    config = config_from_args(args)
    assert (config.audio_decoder, config.ptime_ms) == ("aiortc", 20)
