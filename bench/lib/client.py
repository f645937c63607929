"""A browserless load client: aiortc forwarding an Ogg Opus file's packets (no re-encoding) like a live microphone.

``MediaPlayer(path, decode=False)`` paces the packets at real time; ``TimedTrack`` records when each packet left,
so that any moment of the source audio maps to the wall-clock time it was spoken (``sent_at``): a microphone's
packet leaves once its last sample is captured, so the end of each packet's audio is taken as spoken when the packet
left. Every data-channel message is kept with its arrival time (``time.monotonic()``). ``PacketLoss`` drops RTP
packets on their way out, as a lossy network would.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaPlayer
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack


class Refused(Exception):
    """The server refused the session as full (``503``/``429`` ``busy``): ``status`` and its ``Retry-After`` (s)."""

    def __init__(self, status: int, retry_after_s: float | None, message: str) -> None:
        super().__init__(f"offer refused: {status} {message}")
        self.status = status
        self.retry_after_s = retry_after_s


class PacketLoss:
    """A lossy network between a peer connection and its peer: ``drop(n)`` says whether the n-th RTP packet the
    connection sends (counted from 0, by RTP sequence number from the first) is lost. RTCP and the data channel
    pass. ``install`` after ``setLocalDescription`` (the transport exists from then on) and before media flows;
    ``lost`` counts the packets dropped."""

    def __init__(self, drop: Callable[[int], bool]) -> None:
        self.drop = drop
        self.lost = 0

    @classmethod
    def at_random(cls, rate: float, seed: int) -> PacketLoss:
        """Each packet lost with probability ``rate``, independently (the same packets for the same ``seed``)."""
        rng = random.Random(seed)
        return cls(lambda _n: rng.random() < rate)

    def install(self, pc: RTCPeerConnection) -> None:
        transport: Any = pc.getSenders()[0].transport
        send = transport._send_rtp  # aiortc's (private): plain RTP or RTCP in, SRTP-protected and sent
        first: int | None = None

        async def lossy(data: bytes) -> None:
            nonlocal first
            if not 192 <= data[1] <= 223:  # RTP, not RTCP (RFC 5761's payload type ranges)
                seq = int.from_bytes(data[2:4], "big")
                first = seq if first is None else first
                if self.drop((seq - first) % 65536):
                    self.lost += 1
                    return
            await send(data)

        transport._send_rtp = lossy


class TimedTrack(MediaStreamTrack):
    """Forwards another track's encoded packets and logs (media seconds of the end of its audio, monotonic send
    time) for each."""

    kind = "audio"

    def __init__(self, inner: MediaStreamTrack, gate: asyncio.Event | None = None) -> None:
        """``gate``: the first packet waits for it (microphones of one room that start capturing at one moment)."""
        super().__init__()
        self.inner = inner
        self.gate = gate
        self.media_s: list[float] = []
        self.wall_s: list[float] = []
        self.ended = asyncio.Event()

    async def recv(self) -> Any:
        if self.gate is not None and not self.media_s:
            await self.gate.wait()  # (the file's player starts pacing at its first read: after this)
        try:
            packet = await self.inner.recv()
        except MediaStreamError:
            self.ended.set()
            raise
        if packet.pts is not None and packet.time_base is not None:
            # The end of the packet's audio: a microphone sends a packet once all of it is captured. (Taking its
            # start, as until 2026-11-27, counted every latency one packet short.)
            end = packet.pts + (packet.duration or 0)
            self.media_s.append(max(0.0, float(end * packet.time_base)))
            self.wall_s.append(time.monotonic())
        return packet

    def stop(self) -> None:
        self.inner.stop()
        super().stop()


class BenchClient:
    """One caption session over WebRTC on loopback: ``connect``, then ``play`` (streams, stops, collects)."""

    def __init__(
        self,
        base_url: str,
        ogg: Path,
        offer_fields: dict[str, Any] | None = None,
        loss: PacketLoss | None = None,
        gate: asyncio.Event | None = None,
        start: dict[str, Any] | None = None,
    ) -> None:
        """``offer_fields``: extra ``POST /offer`` fields, e.g. ``{"room": id}``. ``loss``: the network loses these
        audio packets. ``gate``: the audio starts when it is set (``TimedTrack``). ``start``: the ``start``
        message's fields (English, no hotwords unless given)."""
        self.start = {"language": "en", "hotwords": [], **(start or {})}
        self.base_url = base_url
        self.loss = loss
        self.ogg = ogg
        self.offer_fields = dict(offer_fields or {})
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel = self.pc.createDataChannel("captions")
        self.player = MediaPlayer(str(ogg), decode=False)
        if self.player.audio is None:
            raise ValueError(f"{ogg} has no audio stream")
        self.track = TimedTrack(self.player.audio, gate)
        self.messages: list[tuple[float, dict[str, Any]]] = []  # (monotonic arrival, message)
        self.session = ""
        self.error = ""
        self.refused: Refused | None = None  # the server turned the session away (full): it never streamed
        self._opened = asyncio.Event()
        self._stopped = asyncio.Event()
        self.channel.on("open", self._opened.set)
        self.channel.on("message", self._on_message)

    def _on_message(self, raw: str) -> None:
        msg = json.loads(raw)
        self.messages.append((time.monotonic(), msg))
        if msg["type"] == "stopped":
            self._stopped.set()

    async def connect(self, http: aiohttp.ClientSession, timeout_s: float = 30.0) -> None:
        """Offer (non-trickle), answer, wait for the data channel, send ``start``. Raises ``Refused`` when the server
        is full, ``RuntimeError`` for any other refusal."""
        self.pc.addTrack(self.track)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        if self.loss is not None:
            self.loss.install(self.pc)
        async with http.post(
            f"{self.base_url}/offer", json={"sdp": self.pc.localDescription.sdp, "type": "offer", **self.offer_fields}
        ) as resp:
            body = await resp.json()
            if resp.status in (429, 503) and (body.get("error") or {}).get("code") == "busy":
                retry = resp.headers.get("Retry-After")
                raise Refused(resp.status, float(retry) if retry else None, str(body["error"].get("message")))
            if resp.status != 200:
                raise RuntimeError(f"offer refused: {resp.status} {body}")
        self.session = body["session"]
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type=body["type"]))
        await asyncio.wait_for(self._opened.wait(), timeout_s)
        self.channel.send(json.dumps({"type": "start", **self.start}))

    async def play(self, duration_s: float, stop_timeout_s: float = 120.0) -> None:
        """Wait for the file to finish playing, send ``stop``, wait for ``stopped`` (or the timeout), close.

        Gives up if the file has not ended ``duration_s`` + 30 s after the start (a connection that died stops
        pulling packets, so the end would never come)."""
        try:
            try:
                await asyncio.wait_for(self.track.ended.wait(), duration_s + 30.0)
            except TimeoutError:
                self.error = f"the stream did not finish (connection {self.pc.connectionState})"
                return
            await asyncio.sleep(0.3)
            self.channel.send(json.dumps({"type": "stop"}))
            await asyncio.wait_for(self._stopped.wait(), stop_timeout_s)
        except TimeoutError:
            self.error = f"no 'stopped' within {stop_timeout_s:.0f} s of the stop"
        finally:
            await self.close()

    async def close(self) -> None:
        self.track.stop()
        await self.pc.close()

    @property
    def started_s(self) -> float | None:
        """Monotonic time the first packet left, or None if none did."""
        return self.track.wall_s[0] if self.track.wall_s else None

    @property
    def media_ended_s(self) -> float | None:
        return self.track.wall_s[-1] if self.track.wall_s else None

    def sent_at(self, media_s: float) -> float:
        """Monotonic time at which the source audio at ``media_s`` seconds was spoken, as a microphone sending these
        packets would have captured it (interpolated)."""
        return float(np.interp(media_s, self.track.media_s, self.track.wall_s))
