"""Who may do what. Three capabilities, each optional:

- the server's **auth token** (``--auth-token``): create rooms, caption a microphone and render transcript
  files (``POST /rooms``, ``POST /offer``, ``POST /exports/...``), the actions that cost work;
- a room's **id** (96 random bits): view an open room (``/rooms/{id}/events``, transcripts, embed, kiosk, viewer);
- a private room's **viewer token** (issued once at creation): needed as well to view that room.

Tokens travel as ``Authorization: Bearer <token>``, or as ``?token=`` where a header cannot be set (EventSource,
iframes, kiosk URLs). Comparisons are constant-time (``rooms.token_matches``).
"""

from __future__ import annotations

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
