"""The live caption streams that are not WebRTC peers (FunASR, Deepgram and OpenAI Realtime WebSocket streams,
OpenAI file jobs), while they run: what a server that stops asks to finish (``app.drain``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from engine import Session


@dataclass
class _Stream:
    session: Session
    stop: Callable[[], None]
    done: asyncio.Event


class LiveStreams:
    """The caption streams that are not WebRTC peers, while they run. A stream registers with ``running`` and
    gives a ``stop`` that asks it to finish (non-blocking, idempotent): stop reading audio, let its session lock
    the open sentence and send its last message, then leave ``running``."""

    def __init__(self) -> None:
        self._live: dict[str, _Stream] = {}

    def __len__(self) -> int:
        return len(self._live)

    @contextlib.contextmanager
    def running(self, session: Session, stop: Callable[[], None]) -> Iterator[None]:
        stream = _Stream(session, stop, asyncio.Event())
        self._live[session.session_id] = stream
        try:
            yield
        finally:
            stream.done.set()
            self._live.pop(session.session_id, None)

    def streams(self) -> list[_Stream]:
        return list(self._live.values())
