"""Audio packets reach the decoder as soon as they can: in order, without the fixed four-packet hold of aiortc's
buffer, and a lost packet delays only the packets right behind it, never the rest of the session."""

from __future__ import annotations

import aiortc.codecs
import av
import numpy as np
import pytest
from aiortc.codecs import PCMU_CODEC
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from aiortc.rtcrtpreceiver import RemoteStreamTrack, TimestampMapper
from aiortc.rtp import RtpPacket

from app.webrtc.jitter import MAX_MISORDER, AudioJitterBuffer, PacketRun
from app.webrtc.rtp_audio import InlineDecoder
from speechdata.corpus import audio
from tests.support.opus_frames import frames_of, opus_packets

OPUS = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2, payloadType=111)
CLIP = "ls_1988-24833-0000"
TICKS = 960  # one 20 ms packet in RTP ticks (48 kHz)


def packet(seq: int, data: bytes = b"x", pt: int = 111, ticks: int = TICKS) -> RtpPacket:
    p = RtpPacket(payload_type=pt, sequence_number=seq % 65536, timestamp=(seq * ticks) % (1 << 32))
    p._data = data  # type: ignore[attr-defined]  # what aiortc's receiver sets after depayloading
    return p


def released(buffer: AudioJitterBuffer | JitterBuffer, seqs: list[int]) -> list[list[int]]:
    """For each packet added (by sequence number), the sequence numbers that came out at that moment."""
    out = []
    for s in seqs:
        _, frame = buffer.add(packet(s, data=str(s).encode()))
        parts = frame.parts if isinstance(frame, PacketRun) else [] if frame is None else [(frame.data, 0)]
        out.append([int(data) for data, _ in parts])
    return out


def test_aiortc_holds_every_audio_packet_four_packets_long() -> None:
    """Why this buffer exists: aiortc's audio buffer releases packet n only once packet n + 4 is in."""
    out = released(JitterBuffer(capacity=16, prefetch=4), list(range(8)))
    assert out == [[], [], [], [], [0], [1], [2], [3]]


def test_each_packet_in_order_goes_out_the_moment_it_arrives() -> None:
    buffer = AudioJitterBuffer()
    assert released(buffer, list(range(6))) == [[0], [1], [2], [3], [4], [5]]
    assert buffer.waited == 0


def test_a_reordered_packet_is_waited_for_and_the_order_restored() -> None:
    buffer = AudioJitterBuffer()
    assert released(buffer, [0, 2, 1, 3]) == [[0], [], [1, 2], [3]]
    assert buffer.waited == 1 and buffer.skipped == buffer.late == 0


def test_a_lost_packet_delays_only_the_packets_behind_it() -> None:
    buffer = AudioJitterBuffer(max_held=2)
    out = released(buffer, [0, 1, 3, 4, 5, 6, 7])
    assert out == [[0], [1], [], [], [3, 4, 5], [6], [7]]
    assert buffer.skipped == 1 and buffer.waited == 2
    # aiortc's buffer, same packets: those before the gap are never released, and from then on each packet waits
    # until fourteen more are in, for good.
    seqs = [0, 1, *range(3, 40)]
    old = released(JitterBuffer(capacity=16, prefetch=4), seqs)
    assert [s for out_s in old for s in out_s] == list(range(3, 26))
    assert all(out_s == [seq - 14] for seq, out_s in zip(seqs, old, strict=True) if seq >= 17)


def test_late_and_duplicate_packets_are_dropped() -> None:
    buffer = AudioJitterBuffer()
    assert released(buffer, [0, 1, 3, 4, 5, 2, 5, 6]) == [[0], [1], [], [], [3, 4, 5], [], [], [6]]
    assert buffer.late == 2


def test_sequence_numbers_wrap_and_a_restart_starts_over() -> None:
    buffer = AudioJitterBuffer()
    assert released(buffer, [65534, 65535, 65536, 65537]) == [[65534], [65535], [65536], [65537]]
    jump = 1 + MAX_MISORDER + 50
    assert released(buffer, [jump, jump + 1]) == [[jump], [jump + 1]]
    assert buffer.restarts == 1
    assert released(buffer, [jump - 3 * MAX_MISORDER]) == [[jump - 3 * MAX_MISORDER]]  # far back: a new sender
    assert buffer.restarts == 2


def test_a_codec_switch_in_the_held_packets_is_not_given_to_the_wrong_decoder() -> None:
    buffer = AudioJitterBuffer()
    buffer.add(packet(0))
    assert buffer.add(packet(2))[1] is None
    assert buffer.add(packet(3, pt=0))[1] is None  # another payload type waits behind the gap too
    _, run = buffer.add(packet(1))
    assert isinstance(run, PacketRun) and len(run.parts) == 2  # 1 and 2; 3 is PCMU, not Opus
    _, run = buffer.add(packet(4))
    assert isinstance(run, PacketRun) and len(run.parts) == 1 and buffer.late == 1


class _Receiver:
    def __init__(self) -> None:
        self._track = RemoteStreamTrack("audio")


class Losses:
    """A ``LossObserver`` that adds up what it is told."""

    def __init__(self) -> None:
        self.lost = self.late = 0
        self.concealed_s = 0.0

    def audio_packets_lost(self, packets: int) -> None:
        self.lost += packets

    def audio_packets_late(self, packets: int) -> None:
        self.late += packets

    def audio_concealed(self, seconds: float) -> None:
        self.concealed_s += seconds


def receive(
    packets: list[RtpPacket],
    observer: Losses | None = None,
    fec: bool = True,
) -> tuple[np.ndarray, InlineDecoder, AudioJitterBuffer]:
    """``packets`` through the buffer and the decoder as aiortc's receiver passes them (its timestamp mapper
    included), then the end of the stream (the packets still waiting go to the decoder, as ``AudioReceiver`` hands
    them over): the 16 kHz audio that comes out, the decoder and the buffer. ``fec``: the decoder's."""
    receiver = _Receiver()
    buffer = AudioJitterBuffer()
    mapper = TimestampMapper()

    def held() -> tuple[RTCRtpCodecParameters, JitterFrame] | None:
        run = buffer.flush()
        if run is None:
            return None
        run.timestamp = mapper.map(run.timestamp)
        return OPUS, run

    sink = InlineDecoder(receiver, held=held, fec=fec)  # type: ignore[arg-type]
    buffer.observer = sink.observer = observer
    for p in packets:
        _, run = buffer.add(p)
        if run is not None:
            run.timestamp = mapper.map(run.timestamp)
            sink.put((OPUS, run))
    sink.put(None)
    pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in frames_of(receiver._track) if f is not None])
    return pcm, sink, buffer


@pytest.mark.parametrize("lost", [[], [10], [10, 11, 12], [30, 31], list(range(20, 28))])
@pytest.mark.parametrize("first_timestamp", [0, (1 << 32) - 20 * TICKS])  # the RTP timestamp wraps at packet 20
def test_lost_audio_is_concealed_so_the_session_keeps_its_length(lost: list[int], first_timestamp: int) -> None:
    data = opus_packets(audio(CLIP)[:16000])  # 50 packets of 20 ms
    packets = [packet(seq, payload) for seq, payload in enumerate(data) if seq not in lost]
    for p in packets:
        p.timestamp = (p.timestamp + first_timestamp) % (1 << 32)
    pcm, sink, buffer = receive(packets)
    assert pcm.size == 320 * len(data)
    assert sink.concealed_samples == 320 * len(lost)
    assert buffer.skipped == len(lost)


def test_a_long_pause_of_the_sender_is_not_filled() -> None:
    data = opus_packets(audio(CLIP)[:16000])
    packets = [packet(seq, payload) for seq, payload in enumerate(data)]
    for p in packets[25:]:
        p.timestamp += 48000  # the sender stopped for 1 s (its clock ran on), then went on
    pcm, sink, _ = receive(packets)
    assert sink.concealed_samples == 0 and pcm.size == 320 * len(data)


def test_an_empty_packet_stands_for_its_own_time_only() -> None:
    data = opus_packets(audio(CLIP)[:16000])
    data[5] = b""  # aiortc hands an empty RTP payload on as empty data
    pcm, sink, _ = receive([packet(seq, payload) for seq, payload in enumerate(data)])
    assert pcm.size == 320 * len(data) and sink.concealed_samples == 320


def test_audio_of_another_codec_between_opus_packets_is_not_concealed_again() -> None:
    data = opus_packets(audio(CLIP)[:3200])  # 10 packets of 20 ms
    receiver = _Receiver()
    sink = InlineDecoder(receiver)  # type: ignore[arg-type]
    for seq, payload in enumerate(data[:5]):
        sink.put((OPUS, JitterFrame(payload, seq * TICKS)))
    silence = av.AudioFrame.from_ndarray(np.zeros((1, 160), np.int16), format="s16", layout="mono")
    silence.sample_rate = 8000
    for k in range(5):  # the sender switched to PCMU for 100 ms
        encoded, _ = aiortc.codecs.get_encoder(PCMU_CODEC).encode(silence)
        sink.put((PCMU_CODEC, JitterFrame(encoded[0], k * 160)))
    for seq, payload in enumerate(data[5:], start=10):  # and back to Opus, its clock 100 ms on
        sink.put((OPUS, JitterFrame(payload, seq * TICKS)))
    assert sink.concealed_samples == 0


@pytest.mark.parametrize("lost", [[47], [46, 48], [47, 48]])
def test_packets_waiting_behind_a_gap_when_the_stream_ends_are_not_lost(lost: list[int]) -> None:
    data = opus_packets(audio(CLIP)[:16000])  # 50 packets of 20 ms; the last ones wait behind the gap at the end
    pcm, sink, buffer = receive([packet(seq, payload) for seq, payload in enumerate(data) if seq not in lost])
    assert pcm.size == 320 * len(data), "the stream keeps its length: the waiting packets, the gaps concealed"
    assert sink.concealed_samples == 320 * len(lost) and buffer.skipped == len(lost)
    assert buffer.flush() is None, "nothing is left waiting"


def test_flush_gives_up_every_gap_and_keeps_one_codec() -> None:
    buffer = AudioJitterBuffer(max_held=5)
    for seq, pt in [(0, 111), (2, 111), (4, 111), (5, 0), (7, 111)]:
        buffer.add(packet(seq, data=str(seq).encode(), pt=pt))
    run = buffer.flush()
    assert isinstance(run, PacketRun) and run.payload_type == 111
    assert [int(data) for data, _ in run.parts] == [2, 4, 7]  # 5 is PCMU: dropped, not given to the Opus decoder
    assert [f.timestamp - run.timestamp for f in run.frames()] == [0, 2 * TICKS, 5 * TICKS]
    assert buffer.skipped == 3 and buffer.late == 1  # 1, 3 and 6 never came
    assert buffer.flush() is None
    assert released(buffer, [8, 9]) == [[8], [9]], "the stream goes on from the last packet flushed"


def test_every_loss_is_told_to_the_observer_as_it_is_counted() -> None:
    data = opus_packets(audio(CLIP)[:16000])
    lost = {10, 30, 31, 45}
    packets = [packet(seq, payload) for seq, payload in enumerate(data) if seq not in lost]
    packets.insert(20, packet(15, data[15]))  # a duplicate, long after its audio went out
    losses = Losses()
    _, sink, buffer = receive(packets, losses)
    assert (losses.lost, losses.late) == (buffer.skipped, buffer.late) == (4, 1)
    assert losses.concealed_s == pytest.approx(sink.concealed_s) == pytest.approx(0.08)


def fec_opus_packets(x: np.ndarray, packet_ms: int) -> list[bytes]:
    """16 kHz float audio as Chromium encodes speech once its receiver reports loss (and the answer allows FEC): Opus
    at 32 kb/s, each packet carrying an in-band FEC copy of the one before. 20 ms packets: fullband, one frame each;
    60 ms packets: wideband SILK, one 60 ms frame each, as Chromium sends them when asked for 60 ms."""
    options = {"application": "voip", "fec": "1", "packet_loss": "10"}
    if packet_ms == 60:
        options["cutoff"] = "8000"  # wideband: SILK
    return opus_packets(x, packet_ms=packet_ms, bit_rate=32000, options=options)


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum((ref - got) ** 2), 1e-9)))


@pytest.mark.parametrize(
    ("packet_ms", "lost"),
    [
        (20, list(range(10, 140, 7))),
        (20, [20, 21, 60, 61, 62, 100]),
        (60, list(range(5, 45, 5))),
        (60, [10, 11, 30, 31, 32]),
    ],
)
def test_a_lost_packet_comes_back_from_the_fec_copy_in_the_next_one(packet_ms: int, lost: list[int]) -> None:
    data = fec_opus_packets(audio(CLIP)[:48000], packet_ms)  # 3 s
    if packet_ms == 60:
        assert {p[0] >> 3 for p in data} == {11}, "one SILK wideband frame of 60 ms a packet"
    n, ticks = 16 * packet_ms, 48 * packet_ms  # a packet's samples at 16 kHz, its RTP ticks
    whole, _, _ = receive([packet(seq, payload, ticks=ticks) for seq, payload in enumerate(data)])
    kept = [packet(seq, payload, ticks=ticks) for seq, payload in enumerate(data) if seq not in lost]
    recovered, sink, _ = receive(kept)
    concealed, plc_only, _ = receive(kept, fec=False)
    assert recovered.size == concealed.size == whole.size
    # The FEC copy is of the packet just before: of two or more lost in a row, the last comes back.
    last_of_runs = [seq for seq in lost if seq + 1 not in lost]
    assert sink.fec_samples == n * len(last_of_runs) and plc_only.fec_samples == 0
    assert sink.concealed_samples == plc_only.concealed_samples == n * len(lost)
    # The audio of those packets against what they held: the FEC copy is close to it, a guess is not (SNR measured
    # with 20 ms packets: 12 against 3 dB with every seventh packet lost, 8 against 4 dB where they end runs of lost
    # packets; with 60 ms packets: 8 against -1 dB, and 6 against 0 dB).
    spans = np.concatenate([np.arange(seq * n, (seq + 1) * n) for seq in last_of_runs])
    fec_db, plc_db = snr_db(whole[spans], recovered[spans]), snr_db(whole[spans], concealed[spans])
    assert fec_db > 5 and fec_db > plc_db + 3, (fec_db, plc_db)
