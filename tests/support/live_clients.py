"""Real third-party clients of the streaming APIs, pointed at a test server: ``deepgram-sdk`` for ``/v1/listen`` and
the ``openai`` package's realtime client for ``/v1/realtime``, each streaming a clip at a chosen pace."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from speechdata.corpus import audio, reference

SAMPLE_RATE = 16000


def speech(
    clips: Sequence[str], gap_s: float = 1.5, lead_s: float = 0.5, tail_s: float = 2.5
) -> tuple[np.ndarray, str]:
    """The clips one after another with ``gap_s`` of silence between them (16 kHz float32), and their joined
    reference text."""
    parts = [np.zeros(int(lead_s * SAMPLE_RATE), np.float32)]
    for clip in clips:
        parts += [audio(clip), np.zeros(int(gap_s * SAMPLE_RATE), np.float32)]
    parts.append(np.zeros(int(tail_s * SAMPLE_RATE), np.float32))
    return np.concatenate(parts), " ".join(reference(c) for c in clips)


def pcm16(samples: np.ndarray, rate: int = SAMPLE_RATE) -> bytes:
    """16-bit little-endian PCM at ``rate`` Hz (linear interpolation from 16 kHz)."""
    if rate != SAMPLE_RATE:
        samples = np.interp(np.arange(0, len(samples), SAMPLE_RATE / rate), np.arange(len(samples)), samples)
    return (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()


async def paced(data: bytes, chunk: int, bytes_per_s: float, speed: float) -> Any:
    """Yield ``data`` in ``chunk``-byte pieces, ``speed`` times as fast as real time (0: as fast as taken)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for i in range(0, len(data), chunk):
        yield data[i : i + chunk]
        if speed:
            due = t0 + (i + chunk) / bytes_per_s / speed
            await asyncio.sleep(max(0.0, due - loop.time()))


@dataclass
class DeepgramRun:
    messages: list[Any] = field(default_factory=list)  # the SDK's parsed messages, in order

    def of(self, kind: str) -> list[Any]:
        return [m for m in self.messages if getattr(m, "type", None) == kind]

    @property
    def finals(self) -> list[Any]:
        return [m for m in self.of("Results") if m.is_final]

    @property
    def text(self) -> str:
        return " ".join(m.channel.alternatives[0].transcript for m in self.finals).strip()


def deepgram_client(url: str, key: str = "any-key") -> Any:
    from deepgram import AsyncDeepgramClient
    from deepgram.environment import DeepgramClientEnvironment

    env = DeepgramClientEnvironment(base=url, production="ws" + url[4:], agent=url, agent_rest=url)
    return AsyncDeepgramClient(api_key=key, environment=env)


async def stream_deepgram(
    url: str,
    data: bytes,
    *,
    speed: float = 1.0,
    bytes_per_s: float = 32000,
    chunk: int = 3200,
    finalize: bool = False,
    after: bytes = b"",
    **params: Any,
) -> DeepgramRun:
    """Stream ``data`` through ``deepgram-sdk``'s live client (``params``: its query parameters), optionally
    ``Finalize`` then stream ``after``, then ``CloseStream``; every message until the server closes."""
    run = DeepgramRun()
    client = deepgram_client(url)
    room = params.pop("room", None)
    if room is not None:  # not a Deepgram parameter: this server's room to publish into
        params["request_options"] = {"additional_query_parameters": {"room": room}}
    async with client.listen.v1.connect(model="nova-3", **params) as conn:

        async def read() -> None:
            async for message in conn:
                run.messages.append(message)

        reader = asyncio.create_task(read())
        async for piece in paced(data, chunk, bytes_per_s, speed):
            await conn.send_media(piece)
        if finalize:
            await conn.send_finalize()
        async for piece in paced(after, chunk, bytes_per_s, speed):
            await conn.send_media(piece)
        await conn.send_close_stream()
        await asyncio.wait_for(reader, 120)
    return run


@dataclass
class RealtimeRun:
    events: list[Any] = field(default_factory=list)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    @property
    def completed(self) -> list[Any]:
        return self.of("conversation.item.input_audio_transcription.completed")

    @property
    def text(self) -> str:
        return " ".join(e.transcript for e in self.completed if e.transcript).strip()


def realtime_client(url: str, key: str = "any-key") -> Any:
    from openai import AsyncOpenAI

    return AsyncOpenAI(api_key=key, base_url=url + "/v1", websocket_base_url="ws" + url[4:] + "/v1")


async def stream_realtime(
    url: str,
    data: bytes,
    *,
    manual: bool = False,
    speed: float = 1.0,
    commit_at: int = 0,
    settle_s: float = 3.0,
    session: dict[str, Any] | None = None,
    query: str = "",
    rate: int = 24000,
    expect: int = 0,
) -> RealtimeRun:
    """A transcription session through the ``openai`` package's realtime client: ``session.update`` (server VAD,
    or ``turn_detection: null`` when ``manual``), ``data`` (PCM at ``rate``) appended in 100 ms events at ``speed``,
    when ``manual`` a commit once ``commit_at`` bytes are sent (0: none) and one at the end; events until
    ``expect`` items have completed (at most ``settle_s`` after the last audio; ``expect=0``: ``settle_s``)."""
    run = RealtimeRun()
    client = realtime_client(url)
    extra = {"intent": "transcription", **dict(p.split("=", 1) for p in query.split("&") if p)}
    async with client.realtime.connect(extra_query=extra, max_retries=0) as conn:
        fmt = {"type": "audio/pcm", "rate": 24000} if rate == 24000 else {"type": "audio/pcmu"}
        await conn.session.update(
            session=session
            or {
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": fmt,
                        "transcription": {"model": "whisper-1", "language": "en"},
                        "turn_detection": None if manual else {"type": "server_vad"},
                    }
                },
            }
        )

        async def read() -> None:
            async for event in conn:
                run.events.append(event)
                if expect and len(run.completed) >= expect:
                    done.set()

        reader = asyncio.create_task(read())
        done = asyncio.Event()
        chunk = rate * (2 if rate == 24000 else 1) // 10
        sent = 0
        async for piece in paced(data, chunk, chunk * 10, speed):
            await conn.input_audio_buffer.append(audio=base64.b64encode(piece).decode())
            if manual and commit_at and sent < commit_at <= sent + len(piece):
                await conn.input_audio_buffer.commit()
            sent += len(piece)
        if manual:
            await conn.input_audio_buffer.commit()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), settle_s)
        await conn.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(reader, 10)
    return run
