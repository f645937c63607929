"""Who may do what. Three capabilities, each optional:

- the server's **auth token** (``--auth-token``): create rooms, caption a microphone and render transcript
  files (``POST /rooms``, ``POST /offer``, ``POST /exports/...``), the actions that cost work;
- a room's **id** (96 random bits): view an open room (``/rooms/{id}/events``, transcripts, embed, kiosk, viewer);
- a private room's **viewer token** (issued once at creation): needed as well to view that room.

Tokens travel as ``Authorization: Bearer <token>``, or as ``?token=`` where a header cannot be set (EventSource,
iframes, kiosk URLs). Comparisons are constant-time (``token_matches``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from aiohttp import web


def presented_token(request: web.Request) -> str | None:
    """The bearer token from the ``Authorization`` header, else the ``token`` query parameter, else None."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query.get("token") or None


def presented_token_or_field(request: web.Request, body: dict[str, Any]) -> str | None:
    """``presented_token``, else the body's ``"token"`` string (a page's ``fetch`` of a JSON API puts it there)."""
    field = body.get("token")
    return presented_token(request) or (field if isinstance(field, str) else None)


def new_token(nbytes: int = 16) -> str:
    """A fresh random token (room ids, viewer tokens): ``nbytes`` random bytes, URL-safe."""
    return secrets.token_urlsafe(nbytes)


def token_digest(token: str) -> str:
    """What the store keeps of a viewer token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison of a presented token with an expected one (``None`` expected = nothing to check)."""
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
