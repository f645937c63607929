"""Careless clients, written at the byte level so that they can do what no library lets them: a WebSocket client
that never reads what the server sends (nor answers its pings), that hangs up without a close frame, and an HTTP
upload that stops half way."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import struct
from urllib.parse import urlsplit

import numpy as np

RCVBUF = 8 * 1024  # the raw client's TCP receive buffer (bytes; the kernel doubles it)


class RawWebSocket:
    """A WebSocket client over a plain TCP connection: after the handshake it only writes (masked frames, as RFC 6455
    asks of clients), never reads."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, url: str, path: str) -> RawWebSocket:
        """Open ``path`` on the server at ``url`` (http://host:port); raises ``ConnectionError`` unless it answers
        101. Its receive buffer is small (``RCVBUF``), as a slow phone's is: a server's answers fill it soon."""
        where = urlsplit(url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (where.hostname, where.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            writer.close()
            raise ConnectionError(head.split(b"\r\n", 1)[0].decode())
        return cls(reader, writer)

    @staticmethod
    def frame(opcode: int, payload: bytes) -> bytes:
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        return head + mask + _mask(payload, mask)

    def text(self, message: str) -> None:
        """Queue a text message (nothing awaits: a server that stops reading does not stall the test)."""
        self.writer.write(self.frame(0x1, message.encode()))

    def texts(self, message: str, count: int) -> None:
        """Queue ``message`` ``count`` times, framed once: a flood costs the test next to nothing, so that what it
        measures is the server (the frames share one mask, which a server neither knows nor minds)."""
        self.writer.write(self.frame(0x1, message.encode()) * count)

    def binary(self, data: bytes) -> None:
        self.writer.write(self.frame(0x2, data))

    async def flush(self, timeout_s: float = 2.0) -> bool:
        """Wait until what was queued is written, at most ``timeout_s``; False when the server's window stayed shut."""
        try:
            await asyncio.wait_for(self.writer.drain(), timeout_s)
            return True
        except TimeoutError:
            return False
        except ConnectionError:
            return False

    def hang_up(self) -> None:
        """Drop the connection at once: no close frame (a crashed client, a lost network)."""
        self.writer.transport.abort()


def _mask(payload: bytes, mask: bytes) -> bytes:
    keys = np.frombuffer((mask * (len(payload) // 4 + 1))[: len(payload)], np.uint8)
    return (np.frombuffer(payload, np.uint8) ^ keys).tobytes()


async def stalled_upload(
    url: str, path: str, body_start: bytes, length: int, content_type: str = "application/octet-stream"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A POST that declares ``length`` bytes, sends ``body_start`` and then nothing more; the open connection (read
    its answer from the reader)."""
    where = urlsplit(url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(
        (
            f"POST {path} HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode()
        + body_start
    )
    await writer.drain()
    return reader, writer


async def status_of(reader: asyncio.StreamReader, timeout_s: float) -> int:
    """The status code of the HTTP answer on ``reader`` (raises ``TimeoutError`` if none comes in time)."""
    line = await asyncio.wait_for(reader.readline(), timeout_s)
    with contextlib.suppress(IndexError, ValueError):
        return int(line.split()[1])
    raise AssertionError(f"not an HTTP answer: {line!r}")
