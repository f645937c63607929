"""Stream audio through a live session from code: the shared path of the CLI, the tests and the benches."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.audio.pcm import CHUNK_SAMPLES, SAMPLE_RATE
from engine.config import SessionOptions
from engine.observe import SessionStats
from engine.protocol import Caption, Sentence, ServerMessage, Speakers, WordTimes
from engine.stream.engine import CaptionEngine


@dataclass
class StreamResult:
    """Everything one streamed file produced, with wall-clock arrival times of each message."""

    messages: list[ServerMessage] = field(default_factory=list)
    arrivals_s: list[float] = field(default_factory=list)  # seconds since streaming started
    audio_s: float = 0.0
    wall_s: float = 0.0
    fed_at_s: list[float] = field(default_factory=list)  # when chunk i was fed (seconds since start)
    stats: SessionStats = field(default_factory=SessionStats)  # the session's counters

    def captions(self) -> list[Caption]:
        return [m for m in self.messages if isinstance(m, Caption)]

    def sentences(self, live: bool = False) -> list[Sentence]:
        """Locked sentences in order, with any later speaker relabels and word times (the aligner's) applied.
        ``live``: only what came before the final caption, i.e. without the speaker re-clustering at stop (the labels
        a viewer read while the session ran, corrections after a lock included: ``engine.stream.labels``)."""
        out: dict[int, Sentence] = {}
        for m in self.messages:
            if isinstance(m, Caption):
                out.update((s.id, s) for s in m.sentences)
                if live and m.is_final:
                    break
            elif isinstance(m, WordTimes) and m.id in out:
                out[m.id] = dataclasses.replace(out[m.id], words=m.words)
            elif isinstance(m, Speakers):
                for sid, spk in m.relabel.items():
                    if sid in out:
                        out[sid] = dataclasses.replace(out[sid], spk=spk)
        return [out[k] for k in sorted(out)]

    def text(self) -> str:
        return " ".join(s.text for s in self.sentences())

    def summary(self) -> dict[str, Any]:
        """The CLI's last line (JSON)."""
        return {
            "type": "summary",
            "sentences": [s.wire() for s in self.sentences()],
            "text": self.text(),
            "audio_s": round(self.audio_s, 3),
            "wall_s": round(self.wall_s, 3),
        }


async def stream_audio(
    engine: CaptionEngine,
    audio: np.ndarray,
    *,
    realtime: bool,
    options: SessionOptions | None = None,
    on_message: Callable[[ServerMessage], None] | None = None,
    start_delay_s: float = 0.0,
) -> StreamResult:
    """Feed ``audio`` (16 kHz float32) in 60 ms chunks, paced at real time or as fast as possible, then stop.

    Returns every message the session sent. The session is always closed, even on error or cancellation.
    """
    if start_delay_s:
        await asyncio.sleep(start_delay_s)
    session = engine.open_session(options)
    session.configure(options or SessionOptions(language=engine.config.default_language))
    result = StreamResult(audio_s=audio.size / SAMPLE_RATE)
    t0 = time.monotonic()

    async def consume() -> None:
        async for msg in session.messages():
            result.messages.append(msg)
            result.arrivals_s.append(time.monotonic() - t0)
            if on_message is not None:
                on_message(msg)

    reader = asyncio.create_task(consume())
    try:
        for i, start in enumerate(range(0, audio.size, CHUNK_SAMPLES)):
            if realtime:
                delay = t0 + i * CHUNK_SAMPLES / SAMPLE_RATE - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            session.feed(audio[start : start + CHUNK_SAMPLES])
            result.fed_at_s.append(time.monotonic() - t0)
        await session.stop()
        await reader
    finally:
        reader.cancel()
        await session.close()
    result.wall_s = time.monotonic() - t0
    result.stats = session.stats
    return result
