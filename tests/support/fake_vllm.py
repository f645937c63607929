"""A stand-in for ``vllm serve`` in quick tests of the remote recognizer: an aiohttp app on a loopback port that
answers ``/health``, ``/v1/models`` and ``/v1/audio/transcriptions`` the way vLLM 0.32 does (server-sent events
when ``stream=true``, ``verbose_json`` with segments), and can be made slow, failing, unhealthy or gone.

Named as a fake: it transcribes nothing. Its text says how long the received audio was (``"audio of 3.0
seconds"``); with ``loop_below_s`` set it repeats a sentence for audio shorter than that, as Whisper loops in a
window that is too short.
"""

from __future__ import annotations

import asyncio
import io
import json
import wave
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import BodyPartReader, web

from tests.support.servers import serving

MODEL_ID = "fake-whisper"


@dataclass
class Received:
    """One transcription request as the fake saw it."""

    form: dict[str, str]
    audio_s: float  # duration of the WAV received (padding included)
    disconnected: bool = False  # the client went away before the answer was complete


@dataclass
class FakeVllm:
    delay_s: float = 0.05  # before the first token
    token_gap_s: float = 0.01  # between streamed words
    healthy: bool = True  # GET /health answers 200, else 503
    status: int = 200  # status of transcription answers (500: failing instance)
    loop_below_s: float = 0.0  # audio shorter than this (padding included) gets a looping transcript
    received: list[Received] = field(default_factory=list)
    inflight: int = 0
    peak_inflight: int = 0
    url: str = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        return app

    @property
    def decodes(self) -> list[Received]:
        """Requests other than warm-up decodes (whose audio is a 1 s tone padded to a window)."""
        return [r for r in self.received if r.form.get("max_completion_tokens") != "8"]

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.healthy else 503)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        form: dict[str, str] = {}
        audio = b""
        async for part in await request.multipart():
            assert isinstance(part, BodyPartReader), "a flat form: no nested multipart"
            if part.name == "file":
                audio = await part.read()
            elif part.name:
                form[part.name] = await part.text()
        with wave.open(io.BytesIO(audio)) as w:
            if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (16000, 1, 2):
                return web.json_response({"error": {"message": "expected 16 kHz mono s16"}}, status=400)
            audio_s = w.getnframes() / 16000
        seen = Received(form, audio_s)
        self.received.append(seen)
        if self.status != 200:
            return web.json_response({"error": {"message": "engine trouble", "code": self.status}}, status=self.status)
        text = f"audio of {audio_s:.1f} seconds"
        if audio_s < self.loop_below_s:
            text = " ".join(["the same words again and again"] * 6)
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        try:
            await asyncio.sleep(self.delay_s)
            if form.get("response_format") == "verbose_json":
                return web.json_response(
                    {
                        "text": text,
                        "language": form.get("language", "en"),
                        "duration": audio_s,
                        "segments": [
                            {
                                "id": 0,
                                "seek": 0,
                                "start": 0.0,
                                "end": min(audio_s, 2.0),
                                "text": text,
                                "tokens": [1, 2, 3, 4],
                                "avg_logprob": -0.25,
                                "compression_ratio": 1.0,
                                "temperature": 0.0,
                            }
                        ],
                    }
                )
            reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await reply.prepare(request)
            words = text.split(" ")
            for i, word in enumerate(words):
                await asyncio.sleep(self.token_gap_s)
                last = i == len(words) - 1
                choice: dict[str, object] = {"delta": {"content": (" " if i else "") + word}}
                if last:
                    choice["finish_reason"] = "stop"
                await reply.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
            usage = {"prompt_tokens": 5, "completion_tokens": len(words) + 1, "total_tokens": len(words) + 6}
            await reply.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            await reply.write(b"data: [DONE]\n\n")
            return reply
        except (asyncio.CancelledError, ConnectionResetError):
            seen.disconnected = True
            raise
        finally:
            self.inflight -= 1


@asynccontextmanager
async def fake_vllm(fake: FakeVllm | None = None, port: int = 0) -> AsyncIterator[FakeVllm]:
    """Serve ``fake`` on 127.0.0.1 (``port`` 0: a free one); ``fake.url`` is its base URL. Leaving the block stops
    it: open connections are cut, as when the process dies."""
    fake = fake or FakeVllm()
    async with serving(fake.app(), port, handler_cancellation=True, shutdown_timeout=0.1) as fake.url:
        yield fake


def free_port() -> int:
    """A loopback port nobody listens on (bound and released: connections to it are refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
