"""A live stream's WebSocket to its client, kept honest: the pieces of the connection every streaming protocol here
(FunASR, Deepgram, OpenAI Realtime) needs the same way, so that no protocol module writes them again.

- ``ClientSocket.accept``: the upgrade, with aiohttp's heartbeat (a ping every ``HEARTBEAT_S``; a client whose
  side does not answer within half of it is closed) and a short wait for the client's close frame
  (``CLOSE_WAIT_S``), so that a client that went quiet cannot hold a slot or a stop.
- ``send``: one message at a time, with a deadline (``ServerConfig.send_timeout_s``). A client that does not take
  its messages within it (it stopped reading; its TCP window stays shut) is cut off: the connection is aborted,
  which ends its reading as a hang-up does, so its stream finishes its open sentence, stores it and frees its slot.
  A client that went away is the same to a send: it returns False and later sends do nothing. Nothing a send meets
  escapes it (``ConnectionResetError``, aiohttp's ``ClientConnectionResetError`` or a bare ``ConnectionError``
  "Connection lost", a closing socket's ``RuntimeError``): the relay that sends the session's messages goes on, so
  the room still gets every sentence.
- ``close``: with the protocol's code and reason, bounded like a send.
- ``hurry``: the server is stopping: every client gets ``HURRY_S`` to take a message (the one under way included)
  and half of it for the close frame, so that no client holds the stop.
- ``parse_object``: a client's JSON text as an object, or ``BadMessage`` for anything else, deep nesting
  (``RecursionError``) included.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

HEARTBEAT_S = 20.0  # aiohttp pings this often; no pong within half of it closes the connection
HURRY_S = 2.0  # a stopping server waits this long at most for a client to take a message (``hurry``)
CLOSE_WAIT_S = 2.0  # how long a close waits for the client's close frame
MAX_CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's payload is at most 125 bytes, 2 of them the code


class BadMessage(ValueError):
    """A client's text message that is not a JSON object."""


def parse_object(raw: str | bytes) -> dict[str, Any]:
    """``raw`` as a JSON object. Raises ``BadMessage`` (with a reason a client can read) for invalid JSON, JSON
    nested too deeply to parse, or JSON that is not an object."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise BadMessage("the message is nested too deeply") from None
    except ValueError as exc:
        raise BadMessage(f"the message is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadMessage("the message must be a JSON object")
    return data


def close_reason(text: str) -> bytes:
    """``text`` as a close frame's reason: UTF-8, cut at a character boundary within the frame's limit."""
    data = text.encode()
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return data
    return data[:MAX_CLOSE_REASON_BYTES].decode(errors="ignore").encode()


class ClientSocket:
    """One client's WebSocket, accepted by ``accept`` (see the module's docstring). ``gone`` says why nothing more
    reaches the client (None while it does): ``"hung up"`` or ``"stuck"`` (it did not read within the deadline)."""

    def __init__(self, request: web.Request, ws: web.WebSocketResponse, send_timeout_s: float) -> None:
        self.request = request
        self.ws = ws
        self.send_timeout_s = send_timeout_s
        self.gone: str | None = None
        self._lock = asyncio.Lock()
        self._sending_since_s: float | None = None  # loop time the send under way began (None: none)
        self._hurried = False

    @staticmethod
    def response(protocols: Iterable[str] = (), max_msg_size: int = 1024 * 1024) -> web.WebSocketResponse:
        """The WebSocket response every stream uses (``can_prepare`` it to tell a WebSocket request)."""
        return web.WebSocketResponse(
            protocols=tuple(protocols), max_msg_size=max_msg_size, heartbeat=HEARTBEAT_S, timeout=CLOSE_WAIT_S
        )

    @classmethod
    async def accept(cls, request: web.Request, ws: web.WebSocketResponse, send_timeout_s: float) -> ClientSocket:
        """Upgrade ``request`` onto ``ws`` (from ``response``)."""
        await ws.prepare(request)
        return cls(request, ws, send_timeout_s)

    @property
    def open(self) -> bool:
        """The client may still get messages."""
        return self.gone is None and not self.ws.closed

    async def send(self, text: str) -> bool:
        """Send one text message; False when the client did not get it (it is gone, or was cut off by this send:
        see the module's docstring)."""
        return await self._send(self.ws.send_str(text))

    async def send_json(self, message: dict[str, Any]) -> bool:
        return await self.send(json.dumps(message, ensure_ascii=False))

    async def _send(self, sending: Any) -> bool:
        async with self._lock:
            if not self.open:
                sending.close()  # the coroutine was never awaited
                return False
            self._sending_since_s = asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(sending, self.send_timeout_s)
                return True
            except TimeoutError:
                self.cut_off(f"it took no message for {self.send_timeout_s:.0f} s")
            except (ConnectionError, RuntimeError) as exc:  # it went away, however the socket says so
                self.gone = "hung up"
                log.debug("a send found the client gone: %r", exc)
            finally:
                self._sending_since_s = None
            return False

    def hurry(self) -> None:
        """The server is stopping: from now on a client gets ``HURRY_S`` to take a message, the one under way
        included (past that it is cut off), so that a stuck client cannot hold the stop."""
        self._hurried = True
        self.send_timeout_s = min(self.send_timeout_s, HURRY_S)
        since = self._sending_since_s
        if since is not None:
            loop = asyncio.get_running_loop()
            loop.call_later(max(0.0, since + HURRY_S - loop.time()), self._cut_if_stuck, since)

    def _cut_if_stuck(self, since: float) -> None:
        if self._sending_since_s == since:
            self.cut_off(f"it took no message for {HURRY_S:.0f} s while the server stops")

    def cut_off(self, why: str) -> None:
        """Abort the connection now (no close handshake: the client is not reading); its reading ends as a
        hang-up's does."""
        if self.gone is None:
            log.info("%s %s: client cut off: %s", self.request.method, self.request.path, why)
        self.gone = "stuck"
        transport = self.request.transport
        if transport is not None:
            transport.abort()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close with ``code`` and ``reason`` (cut to fit a close frame), waiting for the client's close frame at most
        ``CLOSE_WAIT_S``; a client that does not take the close frame within the send deadline is cut off."""
        if self.ws.closed:
            return
        if self.gone is not None:
            self.cut_off(self.gone)
            return
        # (A stopping server waits less for the close frame too: ``hurry``.)
        limit = HURRY_S / 2 if self._hurried else self.send_timeout_s + CLOSE_WAIT_S
        try:
            await asyncio.wait_for(self.ws.close(code=code, message=close_reason(reason)), limit)
        except TimeoutError:
            self.cut_off("it took no close frame")
        except (ConnectionError, RuntimeError):
            self.gone = "hung up"
