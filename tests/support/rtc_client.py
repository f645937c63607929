"""A browserless WebRTC caption client (aiortc): streams audio like a live microphone and collects the messages.

Used by the functional tests; it follows the same protocol as the page's JavaScript client.
"""

from __future__ import annotations

import asyncio
import fractions
import json
import time
from typing import Any

import aiohttp
import av
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamTrack

from bench.lib.client import PacketLoss

RATE = 16_000
FRAME = 320  # 20 ms


class ArrayAudioTrack(MediaStreamTrack):
    """Plays float32 16 kHz audio in real time, then digital silence (a microphone that stays open)."""

    kind = "audio"

    def __init__(self, samples: np.ndarray, held: bool = False) -> None:
        """``held``: send silence, not the clip, until ``release()`` (a microphone muted at first)."""
        super().__init__()
        self._pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
        self._pos = 0  # samples of the clip sent
        self._sent = 0  # samples sent in all, silence while held included: the pacing clock and the pts
        self._start: float | None = None
        self._held = held
        self.played_s = 0.0  # of the clip
        self.played = asyncio.Event()  # set once the whole clip has been sent (silence follows)

    def release(self) -> None:
        """Start the clip now, at real time from here: a sender that fell behind while held does not burst."""
        self._held = False
        self._start = time.monotonic() - self._sent / RATE

    async def recv(self) -> av.AudioFrame:
        if self._start is None:
            self._start = time.monotonic()
        due = self._start + self._sent / RATE
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        chunk = np.zeros(0, np.int16) if self._held else self._pcm[self._pos : self._pos + FRAME]
        if chunk.size < FRAME:
            chunk = np.concatenate([chunk, np.zeros(FRAME - chunk.size, np.int16)])
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._sent
        frame.time_base = fractions.Fraction(1, RATE)
        self._sent += FRAME
        if self._held:
            return frame
        self._pos += FRAME
        self.played_s = self._pos / RATE
        if self._pos >= self._pcm.size:
            self.played.set()
        return frame


class CaptionClient:
    """Connect, stream, stop, collect. ``messages`` holds every server message in order with arrival times."""

    def __init__(self, base_url: str, samples: np.ndarray, held: bool = False) -> None:
        """``held``: the microphone sends silence until ``track.release()``."""
        self.base_url = base_url
        self.track = ArrayAudioTrack(samples, held)
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel = self.pc.createDataChannel("captions")
        self.messages: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.stopped = asyncio.Event()
        self.opened = asyncio.Event()
        self.loss: PacketLoss | None = None  # a lossy network on the way to the server
        self.t0 = 0.0
        self.session = ""
        self.room = ""
        self.channel.on("open", self.opened.set)
        self.channel.on("message", self._on_message)

    def _on_message(self, raw: str) -> None:
        msg = json.loads(raw)
        self.messages.append(msg)
        self.arrivals.append(time.monotonic() - self.t0)
        if msg["type"] == "stopped":
            self.stopped.set()

    async def until_played(self, timeout_s: float = 120.0) -> None:
        """Return once the microphone has sent the whole clip (it is paced at real time)."""
        await asyncio.wait_for(self.track.played.wait(), timeout_s)

    async def connect(self, start: dict[str, Any] | None = None, offer: dict[str, Any] | None = None) -> None:
        """``offer``: extra fields for the ``POST /offer`` body, e.g. ``{"room": ..., "token": ...}``."""
        self.pc.addTrack(self.track)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        if self.loss is not None:
            self.loss.install(self.pc)
        body = {"sdp": self.pc.localDescription.sdp, "type": "offer", **(offer or {})}
        async with aiohttp.ClientSession() as http, http.post(f"{self.base_url}/offer", json=body) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise RuntimeError(f"offer rejected: {resp.status} {body}")
        self.session = body["session"]
        self.room = body.get("room", "")
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type=body["type"]))
        await asyncio.wait_for(self.opened.wait(), 20)
        self.t0 = time.monotonic()
        self.channel.send(json.dumps(start or {"type": "start", "language": "en", "hotwords": []}))

    def send(self, raw: str) -> None:
        self.channel.send(raw)

    async def stop(self, timeout_s: float = 60.0) -> None:
        self.channel.send(json.dumps({"type": "stop"}))
        await asyncio.wait_for(self.stopped.wait(), timeout_s)

    async def close(self) -> None:
        await self.pc.close()

    def sentences(self) -> list[dict[str, Any]]:
        out = {s["id"]: dict(s) for m in self.messages if m["type"] == "caption" for s in m["sentences"]}
        for m in self.messages:
            if m["type"] == "speakers":
                for sid, spk in m["relabel"].items():
                    out[int(sid)]["spk"] = spk
        return [out[k] for k in sorted(out)]

    def text(self) -> str:
        return " ".join(s["text"] for s in self.sentences())
