"""Reading JSON request bodies: whole, bounded, and with a clear error for anything that is not a JSON object.

A body may arrive in several TCP segments (a browser's 4-6 KB SDP offer across the internet always does), so it
is read to its end, chunk by chunk, never with one ``content.read(n)`` (that returns whatever bytes have arrived
so far). Each route sets its own ``limit``, enforced while reading: a body is refused as soon as it passes the
limit, whatever its declared length, and the limit may exceed the application's ``client_max_size`` (which bounds
``request.read()`` elsewhere).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiohttp import web

_PARSE_ON_LOOP_BYTES = 64 * 1024
UPLOAD_STALL_S = 30.0  # an upload that sends nothing for this long is given up (408): it holds no slot for ever

T = TypeVar("T")


class BodyError(Exception):
    """The body cannot be used: ``status`` 400 (not a JSON object), 408 (it stalled) or 413 (too large),
    ``message`` says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_json_object(request: web.Request, limit: int, *, empty_ok: bool = False) -> dict[str, Any]:
    """The request body parsed as a JSON object of at most ``limit`` bytes.

    ``empty_ok``: an empty (or all-whitespace) body is ``{}`` rather than an error. Raises ``BodyError``.
    """
    if request.content_length is not None and request.content_length > limit:
        raise BodyError(413, f"body over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise BodyError(413, f"body over {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if empty_ok and not raw.strip():
        return {}
    try:
        # A small body parses in microseconds; a large one (a day's transcript: megabytes) would hold the loop.
        value = json.loads(raw) if len(raw) <= _PARSE_ON_LOOP_BYTES else await asyncio.to_thread(json.loads, raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BodyError(400, "body is not valid JSON") from exc
    except RecursionError as exc:  # thousands of nested brackets: json's C parser recurses
        raise BodyError(400, "body is not valid JSON: nested too deeply") from exc
    if not isinstance(value, dict):
        raise BodyError(400, "body must be a JSON object")
    return value


async def unless_stalled(reading: Awaitable[T], stall_s: float | None = None) -> T:
    """``reading`` (one read of a request body); raises ``BodyError`` 408 when nothing arrives within ``stall_s``
    (default ``UPLOAD_STALL_S``)."""
    stall_s = UPLOAD_STALL_S if stall_s is None else stall_s
    try:
        return await asyncio.wait_for(reading, stall_s)
    except TimeoutError:
        raise BodyError(408, f"the upload stalled: nothing arrived for {stall_s:.0f} s") from None
