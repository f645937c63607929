"""The receive side of WebRTC audio, made cheap: Opus decoded on arrival at 16 kHz mono, in 60 ms frames.

aiortc's ``RTCRtpReceiver`` hands every reassembled packet to a decoder thread of its own (one thread per session)
through a ``queue.Queue``; the thread decodes at 48 kHz stereo (FFmpeg) and posts each 20 ms ``AudioFrame`` back
to the event loop with ``run_coroutine_threadsafe`` (a task and a wake-up of the loop per frame); the ingest then
resamples every frame to 16 kHz mono. At 16 live sessions, replacing that took 40 % off the front end's CPU.

``AudioReceiver`` keeps everything of aiortc's receiver (SRTP, RTCP, RTX, statistics) and replaces its audio jitter
buffer and the step after it, on the event loop, without a thread hop:

- aiortc's audio jitter buffer holds every packet until four more have arrived (240 ms at 60 ms a packet) and, after
  a lost packet, for the rest of the session until fourteen more have; ``app.webrtc.jitter.AudioJitterBuffer``
  passes each packet on as soon as the packets before it are in, and gives up a lost one after two more.
- Opus goes through our own libopus decoder (``app.webrtc.opus``) at 16 kHz mono: about a third of the CPU of decoding
  at 48 kHz stereo and resampling, the same audio within the codec's precision. Stereo senders are downmixed by
  libopus.
- Lost packets (a gap in the RTP timestamps) are filled, so the session's audio keeps its length: the last one of a
  gap from the in-band FEC copy the next packet carries (the answer allows FEC: ``with_inband_fec``), the others
  concealed by libopus. What is lost is told to a ``LossObserver`` (``AudioReceiver.watch``: the server's
  metrics). When the stream ends, packets still waiting behind a gap are decoded before the track ends.
- Decoded audio is gathered into 60 ms frames (the engine's chunk: the ingest waits for whole chunks anyway, so
  this adds no delay) and put on the track's queue with ``put_nowait``: a third of the frames and no per-frame task.
- Any other codec (G.722, PCMU, PCMA) goes through aiortc's own decoder as before, and the ingest resamples it.

The queue stays the track's ``asyncio.Queue`` of ``av.AudioFrame`` objects, so ``track.recv()`` and the ingest's
backlog watch (``app.webrtc.ingest.queued_frames``) behave as before. If libopus cannot be loaded, the receiver falls
back to aiortc's path (with a warning).

``with_ptime`` asks senders for longer packets (``a=ptime`` in the answer, RFC 4566 / JSEP 5.9, which browsers
apply to their Opus encoder): at 60 ms a packet, a third of the packets arrive, and with them a third of the
per-packet work (SRTP, RTP parsing, jitter buffer, RTCP statistics), for at most 40 ms more delay (the ingest cuts
60 ms chunks anyway). Senders that ignore it (aiortc's own) keep sending 20 ms; both are received alike.

``app.webrtc.patches.install_audio_receiver("direct")`` makes every ``RTCPeerConnection`` created afterwards use
``AudioReceiver`` (process-wide: aiortc looks its receiver class up by name); ``"aiortc"`` restores aiortc's
receiver.
"""

from __future__ import annotations

import asyncio
import fractions
import logging
import threading
from collections.abc import Callable
from typing import Any

import av
import numpy as np
from aiortc.codecs import get_decoder
from aiortc.codecs.base import Decoder
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcdtlstransport import RTCDtlsTransport
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from aiortc.rtcrtpreceiver import RTCRtpReceiver, TimestampMapper

from engine import CHUNK_SAMPLES, SAMPLE_RATE

from .jitter import AudioJitterBuffer, LossObserver, PacketRun
from .opus import OpusDecoder, OpusError

log = logging.getLogger(__name__)

_RTP_OPUS_CLOCK_HZ = 48000  # RFC 7587: Opus RTP timestamps always count at 48 kHz
_RTP_TICKS_PER_SAMPLE = _RTP_OPUS_CLOCK_HZ // SAMPLE_RATE
_OPUS_STEP_SAMPLES = SAMPLE_RATE // 400  # Opus frames come in multiples of 2.5 ms
MAX_CONCEAL_S = 0.5  # a longer gap is the sender pausing, not packets lost: it is not filled
_TIME_BASE = fractions.Fraction(1, SAMPLE_RATE)


Task = tuple[RTCRtpCodecParameters, JitterFrame]  # what aiortc's receiver puts on its decoder queue


class InlineDecoder:
    """Stands in for aiortc's decoder queue: ``put((codec, encoded_frame))`` decodes at once (on the loop) and
    queues the audio on the track; ``put(None)`` ends the track. aiortc's decoder thread still starts, blocks in
    ``get`` without using CPU, and ends the track through aiortc's own path when ``put(None)`` releases it.

    ``held``: called once as the track ends, for the packets still waiting in the jitter buffer (decoded first).
    ``fec``: a lost Opus packet's audio is recovered from the in-band FEC copy in the packet after it where the
    sender sent one (else, and for packets lost before that one, libopus conceals). The copy covers one Opus frame:
    a whole 60 ms packet when it is one SILK frame, as Chromium sends speech at 60 ms a packet, but only the last
    20 ms of a packet of three 20 ms frames."""

    def __init__(
        self,
        receiver: RTCRtpReceiver,
        frame_samples: int = CHUNK_SAMPLES,
        held: Callable[[], Task | None] | None = None,
        fec: bool = True,
    ) -> None:
        self._receiver = receiver
        self._held = held
        self._fec = fec
        self._frame_samples = frame_samples
        self._opus: OpusDecoder | None = None
        self._other: Decoder | None = None
        self._other_name: str | None = None
        self._pending: list[np.ndarray] = []
        self._pending_samples = 0
        self._pts = 0
        self._closed = threading.Event()
        self.decode_errors = 0
        self.packets = 0  # Opus packets decoded, and the samples they gave (16 kHz): their mean duration
        self.samples = 0
        # audio that stood in for a gap in the sender's RTP timestamps, up to MAX_CONCEAL_S (16 kHz samples): lost
        # packets, or a sender's discontinuous transmission (DTX, which this server does not ask for)...
        self.concealed_samples = 0
        # ...of which went through the next packet's FEC copy: ``OpusDecoder.recover`` (libopus recovers what the copy
        # covers, all of a one-frame packet, the last frame of a packet of several, and conceals the rest, or all
        # where the packet carries no copy)
        self.fec_samples = 0
        self.observer: LossObserver | None = None  # told of each concealment
        self._next_timestamp: int | None = None  # RTP timestamp right after the last decoded Opus packet

    # ---- the queue.Queue interface aiortc uses ------------------------------------------------------------
    def put(self, task: Task | None) -> None:
        if task is None:
            try:
                held = self._held() if self._held is not None else None
                if held is not None:
                    self._decode_all(*held)
            finally:
                self._close()  # whatever happened, aiortc's decoder thread must end (else the track never does)
            return
        self._decode_all(*task)

    @property
    def concealed_s(self) -> float:
        """Seconds of audio concealed so far."""
        return self.concealed_samples / SAMPLE_RATE

    def get(self) -> None:
        """Called by aiortc's decoder thread: returns ``None`` (end of stream) once ``put(None)`` was called."""
        self._closed.wait()

    # ---- decoding -----------------------------------------------------------------------------------------
    def _decode_all(self, codec: RTCRtpCodecParameters, encoded: JitterFrame) -> None:
        # The low-delay buffer releases packets together (app.webrtc.jitter).
        for frame in encoded.frames() if isinstance(encoded, PacketRun) else [encoded]:
            try:
                self._decode(codec, frame)
            except (OpusError, av.FFmpegError, ValueError) as exc:
                # As aiortc: keep the decoder (resetting it would garble the next frames too) and go on. This runs
                # in aiortc's receive path: an error escaping here would end the whole connection's packet loop.
                self.decode_errors += 1
                if self.decode_errors <= 3 or self.decode_errors % 100 == 0:
                    log.warning("audio decode failed (%s, %d so far): %s", codec.name, self.decode_errors, exc)

    def _decode(self, codec: RTCRtpCodecParameters, encoded: JitterFrame) -> None:
        if codec.name.lower() == "opus":
            if self._opus is None:
                self._opus = OpusDecoder(SAMPLE_RATE, 1)
            if not encoded.data:
                # An empty payload carries no audio (libopus would conceal its longest frame for it): the next
                # packet's timestamp says how much is missing.
                return
            self._fill_gap_before(encoded.timestamp, encoded.data)
            pcm = self._opus.decode(encoded.data)
            self.packets += 1
            self.samples += pcm.size
            self._next_timestamp = encoded.timestamp + pcm.size * _RTP_TICKS_PER_SAMPLE
            self._add(pcm)
            return
        self._next_timestamp = None  # this codec's audio covers its own time: nothing to conceal across it
        if codec.name != self._other_name:
            self._other, self._other_name = get_decoder(codec), codec.name
        assert self._other is not None
        for frame in self._other.decode(encoded):
            self._queue().put_nowait(frame)

    def _fill_gap_before(self, timestamp: int, data: bytes) -> None:
        """Audio for the packets lost before ``data``, the packet at RTP ``timestamp`` (48 kHz ticks), so that the
        session's audio keeps the sender's length (up to ``MAX_CONCEAL_S``; a longer silence of the sender is not
        filled): the last lost packet from ``data``'s in-band FEC copy (``OpusDecoder.recover``; with ``fec``, when
        the gap is at least as long as ``data``), the rest concealed."""
        assert self._opus is not None
        if self._next_timestamp is None:
            return
        missing = (timestamp - self._next_timestamp) // _RTP_TICKS_PER_SAMPLE
        if not 0 < missing <= MAX_CONCEAL_S * SAMPLE_RATE:
            return
        missing -= missing % _OPUS_STEP_SAMPLES
        recoverable = self._opus.samples_in(data) if self._fec else 0
        if recoverable > missing:
            recoverable = 0  # the sender changed its packet length: the copy would not fit the gap
        filled = 0
        guess = missing - recoverable
        while guess > 0:
            pcm = self._opus.conceal(guess)  # at most one Opus frame (120 ms) a call
            if not pcm.size:
                break
            filled += pcm.size
            guess -= pcm.size
            self._add(pcm)
        if recoverable:
            pcm = self._opus.recover(data)
            self.fec_samples += pcm.size
            filled += pcm.size
            self._add(pcm)
        self.concealed_samples += filled
        if filled and self.observer is not None:
            self.observer.audio_concealed(filled / SAMPLE_RATE)

    def _add(self, pcm: np.ndarray) -> None:
        if pcm.size:
            self._pending.append(pcm)
            self._pending_samples += pcm.size
            if self._pending_samples >= self._frame_samples:
                self._emit()

    def _emit(self) -> None:
        pcm = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
        self._pending.clear()
        self._pending_samples = 0
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        frame.pts = self._pts
        frame.time_base = _TIME_BASE
        self._pts += pcm.size
        self._queue().put_nowait(frame)

    def _queue(self) -> asyncio.Queue[Any]:
        track = self._receiver._track
        assert track is not None, "the receiver got media before its track was set"
        queue: asyncio.Queue[Any] = track._queue
        return queue

    def _close(self) -> None:
        if self._pending_samples and self._receiver._track is not None:
            self._emit()  # the last few packets: the ingest keeps whole chunks only, as before
        if self._opus is not None:
            self._opus.close()
        self._closed.set()


class AudioReceiver(RTCRtpReceiver):
    """aiortc's receiver with, for audio, ``AudioJitterBuffer`` in place of aiortc's jitter buffer (no fixed delay)
    and ``InlineDecoder`` after it (lost Opus packets recovered from the next packet's in-band FEC copy); video is
    untouched."""

    def __init__(self, kind: str, transport: RTCDtlsTransport) -> None:
        super().__init__(kind, transport)
        if kind == "audio":
            # aiortc's private jitter buffer and decoder queue (name-mangled); tests/app/webrtc/test_rtp_audio.py fails
            # if aiortc renames them.
            self._RTCRtpReceiver__jitter_buffer = AudioJitterBuffer()
            self._RTCRtpReceiver__decoder_queue = InlineDecoder(self, held=self._take_held)

    @property
    def decoder(self) -> InlineDecoder | None:
        """The audio decoder (its counters), or None for video."""
        queue = self._RTCRtpReceiver__decoder_queue
        return queue if isinstance(queue, InlineDecoder) else None

    @property
    def buffer(self) -> AudioJitterBuffer | None:
        """The low-delay audio jitter buffer (its counters), or None (video)."""
        buffer = self._RTCRtpReceiver__jitter_buffer
        return buffer if isinstance(buffer, AudioJitterBuffer) else None

    def watch(self, observer: LossObserver) -> None:
        """Tell ``observer`` of every audio packet lost or late and every concealment from now on."""
        if self.buffer is not None:
            self.buffer.observer = observer
        if self.decoder is not None:
            self.decoder.observer = observer

    def _take_held(self) -> Task | None:
        """The stream ended: the packets still waiting behind a gap in the buffer, mapped onto the receiver's
        timeline as aiortc maps every packet it passes on (``_handle_rtp_packet``), with their codec."""
        run = self.buffer.flush() if self.buffer is not None else None
        if run is None:
            return None
        # aiortc's private codec table and timestamp mapper (name-mangled, set in its __init__;
        # tests/app/webrtc/test_rtp_audio.py fails if aiortc renames them)
        codecs: dict[int, RTCRtpCodecParameters] = vars(self)["_RTCRtpReceiver__codecs"]
        mapper: TimestampMapper = vars(self)["_RTCRtpReceiver__timestamp_mapper"]
        codec = codecs.get(run.payload_type)
        if codec is None:
            return None
        run.timestamp = mapper.map(run.timestamp)
        return codec, run


def _media_sections(sdp: str) -> list[list[str]]:
    """``sdp``'s lines, split where each media section (``m=``) begins: the session part first."""
    sections: list[list[str]] = [[]]
    for line in sdp.splitlines():
        if line.startswith("m="):
            sections.append([])
        sections[-1].append(line)
    return sections


def _join(sections: list[list[str]]) -> str:
    return "\r\n".join(line for section in sections for line in section) + "\r\n"


def _payload_type(line: str) -> str:
    """The payload type an ``a=rtpmap:`` or ``a=fmtp:`` line is about."""
    return line.split()[0].partition(":")[2]


def with_ptime(sdp: str, ptime_ms: int) -> str:
    """``sdp`` with ``a=ptime:<ptime_ms>`` in every audio media section that has none (0: unchanged)."""
    if not ptime_ms:
        return sdp
    sections = _media_sections(sdp)
    for section in sections[1:]:
        if section[0].startswith("m=audio") and not any(line.startswith("a=ptime:") for line in section):
            section.append(f"a=ptime:{ptime_ms}")
    return _join(sections)


def with_inband_fec(sdp: str) -> str:
    """``sdp`` (an answer) with ``useinbandfec=1`` on every Opus payload type (RFC 7587 section 7): the receiver
    decodes in-band FEC, so the sender may add it. Chromium then adds a low-bitrate copy of each packet's speech to
    the next packet once this server's receiver reports loss (measured: none without it, whatever the loss), and
    ``InlineDecoder`` recovers a lost packet from it. An existing fmtp line is extended; other codecs are untouched."""
    sections = _media_sections(sdp)
    for i, section in enumerate(sections):  # payload types are per media section
        opus = {
            _payload_type(line)
            for line in section
            if line.startswith("a=rtpmap:") and line.split()[1].lower().startswith("opus/")
        }
        without_fmtp = opus - {_payload_type(line) for line in section if line.startswith("a=fmtp:")}
        out: list[str] = []
        for line in section:
            if line.startswith("a=fmtp:") and _payload_type(line) in opus and "useinbandfec" not in line:
                line += ";useinbandfec=1" if " " in line else " useinbandfec=1"
            out.append(line)
            if line.startswith("a=rtpmap:") and _payload_type(line) in without_fmtp:
                out.append(f"a=fmtp:{_payload_type(line)} useinbandfec=1")
        sections[i] = out
    return _join(sections)
