"""Audio packets to the decoder in order, each as soon as every packet before it is in: no fixed receive delay.

aiortc's receiver puts audio through ``JitterBuffer(capacity=16, prefetch=4)``, which hands a packet to the decoder
only once four more packets have arrived behind it. Every word then reaches the engine four packets late: 80 ms
with 20 ms packets, 240 ms with the 60 ms packets this server asks browsers for (``a=ptime``), on the path to the
first words and to every lock. Worse, a packet that never comes stops it until the buffer is full: the packets it
held before the gap are thrown away, and from then on every packet waits until fourteen more are in (0.84 s at
60 ms a packet) for the rest of the session.

``AudioJitterBuffer`` releases a packet the moment it is the next in sequence, together with any packets that were
held behind it (a ``PacketRun``). A packet that comes after a gap waits for the missing one only until
``max_held`` packets wait behind the gap (a packet reordered on the way arrives within a packet or two); then the
gap is given up and the waiting packets go out at once, so a lost packet delays only the packets right after it,
never the rest of the session. The decoder (``app.webrtc.rtp_audio.InlineDecoder``) conceals what was given up,
so the session's audio keeps its length. A packet older than the one last released (a duplicate, or one reordered
past the gap's end) is dropped: its audio has been played around already.

Audio only: one RTP packet is one audio frame for Opus, G.722 and G.711, so no packet waits for others to complete
it. Video keeps aiortc's buffer. The buffer runs on arriving packets, not on a clock: packets waiting behind a gap
when the sender stops for good (at most ``max_held``, 120 ms at 60 ms a packet) go out when the stream ends
(``flush``, called by the decoder as the receiver stops), not sooner.

What a stream loses is counted (``skipped``, ``late``) and told, as it happens, to a ``LossObserver`` (the server's
metrics) when one is set; at a restart of the sender's numbering nothing can be known lost, and nothing is counted.
"""

from __future__ import annotations

from typing import Protocol

from aiortc.jitterbuffer import JitterFrame
from aiortc.rtp import RtpPacket

_SEQ_MOD = 1 << 16
_TS_MOD = 1 << 32
# A sequence jump at least this far either way is the sender starting over (a new source, a restart), not
# reordering: numbering restarts from that packet (as aiortc's buffer does with its MAX_MISORDER).
MAX_MISORDER = 100


class LossObserver(Protocol):
    """Hears what a stream's receiver loses, as it happens (``app.ops.metrics.ServerMetrics`` is one)."""

    def audio_packets_lost(self, packets: int) -> None:
        """``packets`` never arrived: the buffer gave them up."""

    def audio_packets_late(self, packets: int) -> None:
        """``packets`` arrived after their audio had been played around (or twice), and were dropped."""

    def audio_concealed(self, seconds: float) -> None:
        """``seconds`` of audio the decoder filled in for packets that never came (from the next packet's in-band FEC
        copy, or concealed)."""


class PacketRun(JitterFrame):
    """Packets released together, in sequence order, all of ``payload_type``: ``parts`` holds (payload, RTP
    timestamp) of each. ``data`` and ``timestamp`` are the first packet's, as in aiortc's ``JitterFrame`` (the
    receiver maps ``timestamp`` onto its own timeline before the decoder sees it); ``frames`` gives every packet
    on that timeline."""

    def __init__(self, parts: list[tuple[bytes, int]], payload_type: int) -> None:
        super().__init__(data=parts[0][0], timestamp=parts[0][1])
        self.parts = parts
        self.payload_type = payload_type

    def frames(self) -> list[JitterFrame]:
        """One frame per packet, each timestamp on the timeline ``timestamp`` is on now (after the receiver's
        mapping)."""
        first = self.parts[0][1]
        return [JitterFrame(data, self.timestamp + (ts - first) % _TS_MOD) for data, ts in self.parts]


class AudioJitterBuffer:
    """Drop-in for aiortc's audio ``JitterBuffer`` (its ``add`` contract): packets in, runs of packets out.

    ``add`` returns ``(False, run)``: ``run`` is a ``PacketRun`` of the packets that can go to the decoder now (in
    sequence order), or None. Counters: ``waited`` (packets that did not go out the moment they arrived), ``late``
    (dropped: older than what went out, a duplicate, or of another payload type than the packet that would release
    it), ``skipped`` (packets given up as lost), ``restarts`` (sequence jumps beyond ``MAX_MISORDER``).
    """

    def __init__(self, max_held: int = 2) -> None:
        if max_held < 0:
            raise ValueError(f"max_held must be >= 0, got {max_held}")
        self.max_held = max_held
        self._next: int | None = None  # sequence number of the packet the decoder needs next
        self._held: dict[int, RtpPacket] = {}  # packets waiting behind a gap, by sequence number
        self.waited = 0
        self.late = 0
        self.skipped = 0
        self.restarts = 0
        self.observer: LossObserver | None = None  # told of each loss as it is counted

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        seq = packet.sequence_number
        if self._next is None:
            self._next = seq
        ahead = (seq - self._next) % _SEQ_MOD
        if ahead >= _SEQ_MOD // 2:  # behind the next expected
            if _SEQ_MOD - ahead < MAX_MISORDER:
                self._late()
                return False, None
            return False, self._restart(packet)
        if ahead >= MAX_MISORDER:
            return False, self._restart(packet)
        if seq in self._held:
            self._late()  # a duplicate of a packet already waiting
            return False, None
        self._held[seq] = packet
        expected = self._next
        if expected not in self._held and len(self._held) > self.max_held:
            # Give the gap up: the oldest waiting packet is next.
            self._give_up_gap()
        run = self._release(packet.payload_type)
        if self._held.get(seq) is packet:
            self.waited += 1  # it waits now; it goes out with a later packet (or at a restart)
        return False, run

    def flush(self) -> PacketRun | None:
        """The stream ended: every packet still waiting behind a gap, the gaps given up, as one run of the payload
        type of the oldest (packets of another type are dropped as late). None when nothing waits."""
        if not self._held:
            return None
        self._give_up_gap()
        assert self._next is not None
        payload_type = self._held[self._next].payload_type
        parts: list[tuple[bytes, int]] = []
        while self._held:  # each turn releases or drops at least the oldest waiting packet
            self._give_up_gap()
            if (run := self._release(payload_type)) is not None:
                parts.extend(run.parts)
        return PacketRun(parts, payload_type) if parts else None

    def _give_up_gap(self) -> None:
        """Stop waiting for the missing packets: the oldest waiting packet is next."""
        expected = self._next
        assert expected is not None
        first = min(self._held, key=lambda s: (s - expected) % _SEQ_MOD)
        lost = (first - expected) % _SEQ_MOD
        self._next = first
        if lost:
            self.skipped += lost
            if self.observer is not None:
                self.observer.audio_packets_lost(lost)

    def _late(self) -> None:
        self.late += 1
        if self.observer is not None:
            self.observer.audio_packets_late(1)

    def _release(self, payload_type: int) -> PacketRun | None:
        """The packets from the next expected on, while consecutive and of ``payload_type`` (the decoder is told the
        codec of the packet just added; a packet of another type at the head is a codec switch: it is dropped)."""
        parts: list[tuple[bytes, int]] = []
        assert self._next is not None
        while (packet := self._held.get(self._next)) is not None:
            if packet.payload_type != payload_type:
                if parts:
                    break
                self._late()  # the receiver hands over the codec of the packet just added: not this one's
            else:
                parts.append((_payload(packet), packet.timestamp))
            del self._held[self._next]
            self._next = (self._next + 1) % _SEQ_MOD
        return PacketRun(parts, payload_type) if parts else None

    def _restart(self, packet: RtpPacket) -> PacketRun | None:
        """The sender's numbering jumped: what waited goes out (its gaps given up), then numbering starts over."""
        self.restarts += 1
        expected = self._next if self._next is not None else packet.sequence_number
        waiting = sorted(self._held.values(), key=lambda p: (p.sequence_number - expected) % _SEQ_MOD)
        self._held.clear()
        parts = [(_payload(p), p.timestamp) for p in [*waiting, packet] if p.payload_type == packet.payload_type]
        self._next = (packet.sequence_number + 1) % _SEQ_MOD
        return PacketRun(parts, packet.payload_type) if parts else None


def _payload(packet: RtpPacket) -> bytes:
    """The depayloaded frame aiortc's receiver put on the packet (``_data``), else its raw payload."""
    data = getattr(packet, "_data", None)
    return data if isinstance(data, bytes) else packet.payload
