"""The tests' HTTP calls to a running server: one request, its status and its body read as JSON."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


async def call(
    method: str, url: str, token: str | None, body: Any = None, data: bytes | None = None
) -> tuple[int, dict[str, Any]]:
    """``method url`` with ``token`` as its bearer (none: no Authorization header) and ``body`` as JSON, or the raw
    ``data`` when given. Returns the status and the JSON answer, or ``{"text": ...}`` for any other answer."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    kwargs: dict[str, Any] = {"data": data} if data is not None else {"json": body}
    async with aiohttp.ClientSession() as http, http.request(method, url, headers=headers, **kwargs) as r:
        text = await r.text()
        return r.status, (json.loads(text) if text and r.content_type == "application/json" else {"text": text})


async def new_room(url: str, token: str, **body: Any) -> dict[str, Any]:
    """Create a room on the server at ``url`` (``body``: its fields); returns the answer (id, editor token, links)."""
    status, made = await call("POST", f"{url}/rooms", token, body)
    assert status == 201, made
    return made
