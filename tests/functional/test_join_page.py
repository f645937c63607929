"""The join page (``/join?room=<id>``) and the links that lead phones to it, without a browser: the page's form and
headers, the room's ``join`` link, and the QR code that opens it (``/rooms/{id}/qr.svg?page=join``), with a private
room's viewer token and never the server's token. The browser side is tests/browser/test_join.py."""

from __future__ import annotations

import re
from typing import Any

import aiohttp

from engine import CaptionEngine
from tests.support.servers import running_server

TOKEN = "s3cret-publisher-token"


async def create_room(url: str, token: str | None = None, **body: object) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json=body, headers=headers) as r:
        assert r.status == 201
        return dict(await r.json())


def tag(html: str, element_id: str) -> str:
    """The opening tag of the element with ``id="element_id"`` (the templates write one tag per element)."""
    m = re.search(rf'<[a-z]+\b[^>]*\bid="{element_id}"[^>]*>', html)
    assert m, f"no element #{element_id}"
    return m.group(0)


async def test_the_join_page_has_its_form_and_the_pages_headers(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, _), aiohttp.ClientSession() as http:
        async with http.get(f"{url}/join?room=x") as r:
            assert r.status == 200 and r.content_type == "text/html"
            html = await r.text()
            assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
            assert r.headers["Cache-Control"] == "no-store" and r.headers["Referrer-Policy"] == "no-referrer"
        assert '<script type="module" src="/static/join.js">' in html
        assert 'href="/static/join.css"' in html and 'href="/static/captions.css"' in html
        name = tag(html, "name")
        for attribute in ('type="text"', "required", 'maxlength="64"', 'autocomplete="name"'):
            assert attribute in name, name
        assert re.search(r'<label[^>]*\bfor="name"[^>]*>Your name</label>', html)
        assert 'type="submit"' in tag(html, "join") and ">Join</button>" in html
        assert "hidden" in tag(html, "joined") and 'aria-pressed="false"' in tag(html, "mute")
        assert ">Leave</button>" in html
        # The captions as on /view: the same stage (a polite log) and the transcript's download links.
        assert 'role="log" aria-live="polite"' in tag(html, "transcript")
        assert html.count("data-format=") == 4
        for page in ("static/join.js", "static/join.css"):
            async with http.get(f"{url}/{page}") as r:
                assert r.status == 200


async def test_the_rooms_links_and_qr_code_lead_phones_to_the_join_page(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine) as (url, _), aiohttp.ClientSession() as http:
        room = await create_room(url)
        room_id = room["room"]
        assert room["links"]["join"] == f"{url}/join?room={room_id}"
        async with http.get(f"{url}/rooms/{room_id}/qr.svg?page=join") as r:
            assert r.status == 200 and r.content_type == "image/svg+xml"
            assert r.headers["X-Join-Url"] == f"{url}/join?room={room_id}"
            assert "<path" in await r.text()
        async with http.get(f"{url}/rooms/{room_id}/qr.svg") as r:  # the read-only viewer, as before
            assert r.headers["X-Viewer-Url"] == f"{url}/view?room={room_id}" and "X-Join-Url" not in r.headers
        async with http.get(f"{url}/rooms/{room_id}/qr.svg?page=edit") as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "bad_message"


async def test_a_private_rooms_join_code_carries_its_viewer_token_never_the_servers(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, auth_token=TOKEN) as (url, _), aiohttp.ClientSession() as http:
        room = await create_room(url, token=TOKEN, private=True)
        room_id, viewer_token = room["room"], room["viewer_token"]
        assert room["links"]["join"] == f"{url}/join?room={room_id}&token={viewer_token}"
        for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"Bearer {viewer_token}"}):
            async with http.get(f"{url}/rooms/{room_id}/qr.svg?page=join", headers=headers) as r:
                assert r.status == 200
                assert r.headers["X-Join-Url"] == f"{url}/join?room={room_id}&token={viewer_token}"
                assert TOKEN not in r.headers["X-Join-Url"]
        async with http.get(f"{url}/rooms/{room_id}/qr.svg?page=join") as r:
            assert r.status == 403
