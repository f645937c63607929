"""A live stream's client messages, read ahead of an engine that may be slower than the client, so that every
streaming protocol here (FunASR, Deepgram, OpenAI Realtime) reads its WebSocket the same way:

- ``client_messages``: the client's WebSocket messages until it closes, the server stops, or it stays silent
  longer than the protocol's timeout (``ClientSilent``);
- ``ReadAhead``: the same, read by a task of its own ahead of a consumer that waits for the engine, so that pings
  are answered and the connection stays alive while the engine catches up, with the bytes waiting bounded.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

from aiohttp import WSMessage, WSMsgType, web


class ClientSilent(Exception):
    """The client sent nothing for the protocol's timeout."""


async def client_messages(
    ws: web.WebSocketResponse, *stops: asyncio.Event, timeout_s: float | None = None
) -> AsyncIterator[WSMessage]:
    """``ws``'s messages until it closes or one of ``stops`` is set (a waiting receive is cancelled then: aiohttp's
    ``receive`` leaves unread messages queued when cancelled). Raises ``ClientSilent`` when nothing arrives for
    ``timeout_s`` seconds (None: no limit); the time the caller spends between messages does not count."""
    stopped = [asyncio.ensure_future(stop.wait()) for stop in stops]
    try:
        while not any(stop.is_set() for stop in stops):
            receive = asyncio.ensure_future(ws.receive())
            try:
                await asyncio.wait({receive, *stopped}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:  # (a ReadAhead closed): the socket is the caller's again
                receive.cancel()
                await asyncio.gather(receive, return_exceptions=True)
                raise
            if not receive.done():
                receive.cancel()
                await asyncio.gather(receive, return_exceptions=True)
                if any(stop.is_set() for stop in stops):
                    return
                raise ClientSilent(f"nothing received for {timeout_s:.0f} s")
            msg = receive.result()
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                return
            yield msg
    finally:
        for waiter in stopped:
            waiter.cancel()


READ_AHEAD_BYTES = 4 * 1024 * 1024  # client messages read ahead of the engine, at most (then reading pauses)


class ReadAhead:
    """``client_messages`` read by a task of its own ahead of the consumer, in order, up to ``max_bytes`` waiting (each
    message counts its payload and ``MESSAGE_OVERHEAD_BYTES``, so a flood of tiny messages is bounded as well; one
    message is always let in, whatever its size).

    Why: a consumer that feeds audio waits for the engine whenever the client sends faster than it is transcribed
    (``live_audio.PcmFeed``). If that wait also stopped the socket's reading, the client's pings would go
    unanswered (aiohttp answers them inside ``receive``) and clients that watch them (``websockets``, under
    ``deepgram-sdk`` and ``funasr-client``: 20 s) would drop a connection that is only slow. Read ahead, they are
    answered until ``max_bytes`` wait; past that reading pauses and TCP slows the sender, so memory stays bounded.
    Iteration ends when the client closes or one of ``stops`` is set (messages still waiting are then dropped: a
    stopping server finishes with the audio the engine has); it raises ``ClientSilent`` after ``timeout_s`` without
    a message (time spent paused does not count)."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        *stops: asyncio.Event,
        timeout_s: float | None = None,
        max_bytes: int = READ_AHEAD_BYTES,
    ) -> None:
        self._ws, self._stops, self._timeout_s, self._max_bytes = ws, stops, timeout_s, max_bytes
        self._queue: collections.deque[WSMessage | ClientSilent | None] = collections.deque()
        self._bytes = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ReadAhead:
        self._task = asyncio.create_task(self._read(), name="websocket-read-ahead")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _put(self, item: WSMessage | ClientSilent | None) -> None:
        self._queue.append(item)
        self._bytes += _size(item)
        self._changed.set()

    async def _read(self) -> None:
        try:
            async for msg in client_messages(self._ws, *self._stops, timeout_s=self._timeout_s):
                self._put(msg)
                while self._bytes > self._max_bytes and len(self._queue) > 1:
                    self._changed.clear()
                    await self._changed.wait()
        except ClientSilent as exc:
            self._put(exc)
        finally:
            self._put(None)

    async def __aiter__(self) -> AsyncIterator[WSMessage]:
        while not any(stop.is_set() for stop in self._stops):
            if not self._queue:
                self._changed.clear()
                await _first(self._changed, *self._stops)
                continue
            item = self._queue.popleft()
            self._bytes -= _size(item)
            self._changed.set()
            if item is None:
                return
            if isinstance(item, ClientSilent):
                raise item
            yield item


MESSAGE_OVERHEAD_BYTES = 256  # what one waiting message costs besides its payload (a flood of 1-byte messages)


def _size(item: WSMessage | ClientSilent | None) -> int:
    """What ``item`` counts against the read-ahead: its payload and its overhead."""
    payload = len(item.data) if isinstance(item, WSMessage) and isinstance(item.data, bytes | str) else 0
    return payload + MESSAGE_OVERHEAD_BYTES


async def _first(*events: asyncio.Event) -> None:
    """Return once one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
