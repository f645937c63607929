"""Who may do what. Three capabilities, each optional:

- the server's **auth token** (``--auth-token``): create rooms and caption a microphone (``POST /rooms``,
  ``POST /offer``), the actions that cost model work;
- a room's **id** (96 random bits): view an open room (``/rooms/{id}/events``, transcripts, embed, kiosk, viewer);
- a private room's **viewer token** (issued once at creation): needed as well to view that room.

Tokens travel as ``Authorization: Bearer <token>``, or as ``?token=`` where a header cannot be set (EventSource,
iframes, kiosk URLs). Comparisons are constant-time (``rooms.token_matches``).
"""

from __future__ import annotations

from aiohttp import web


def presented_token(request: web.Request) -> str | None:
    """The bearer token from the ``Authorization`` header, else the ``token`` query parameter, else None."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query.get("token") or None
