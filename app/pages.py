"""The pages: the microphone page (``/``), and the pages that show a room: the phone viewer (``/view``), the
embeddable widget (``/embed``, and ``/embed.js``, the host page's one-line loader), the meeting-room kiosk
(``/kiosk``), the page from which a person at a meeting joins the room with a name and their own microphone
(``/join``, what the kiosk's QR code opens) and the room's editor (``/rooms/{id}/edit?token=<editor token>``). Each
page's script reads its options from its URL and talks to the JSON, WebRTC and event-stream endpoints; the pages
themselves carry no state (the editor page is the same for every room and anyone may load it: the token in its
address is what the API checks)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from engine import LANGUAGE_CODES, MAX_HOTWORDS

from . import resources
from .keys import CONFIG, ENGINE, TEMPLATES
from .rooms import ROOM_ID_PATTERN, base_url

LANGUAGE_NAMES = {
    "en": "English",
    "de": "Deutsch",
    "fr": "Français",
    "es": "Español",
    "it": "Italiano",
    "nl": "Nederlands",
    "pt": "Português",
    "pl": "Polski",
    "sv": "Svenska",
    "zh": "中文",
    "ja": "日本語",
    "ko": "한국어",
    "ru": "Русский",
    "uk": "Українська",
    "tr": "Türkçe",
}


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/view", page("view.html"))
    app.router.add_get("/kiosk", page("kiosk.html"))
    app.router.add_get("/join", page("join.html"))
    app.router.add_get("/embed", page("embed.html"))
    app.router.add_get("/embed.js", embed_loader)
    app.router.add_get("/rooms/{room:" + ROOM_ID_PATTERN + "}/edit", page("edit.html"))


async def index(request: web.Request) -> web.Response:
    app = request.app
    engine = app[ENGINE]
    config = app[CONFIG]
    languages = [("", "Detect automatically")] + [(c, n) for c, n in LANGUAGE_NAMES.items() if c in LANGUAGE_CODES]
    html = (
        app[TEMPLATES]
        .get_template("index.html")
        .render(
            model=engine.model_name,
            languages=languages,
            default_language=config.language or "",
            static="/static",
            max_hotwords=MAX_HOTWORDS,
        )
    )
    # The microphone page is never framed by another site (clickjacking); only /embed follows --embed-origin.
    return web.Response(
        text=html,
        content_type="text/html",
        headers={"Content-Security-Policy": "frame-ancestors 'self'", "X-Frame-Options": "SAMEORIGIN"},
    )


def page(template: str) -> Any:
    """A page handler: renders ``template``; the page's script reads its options from the URL."""

    async def handler(request: web.Request) -> web.Response:
        config = request.app[CONFIG]
        origins = config.embed_origins
        html = (
            request.app[TEMPLATES]
            .get_template(template)
            .render(static="/static", embed_origins=json.dumps(list(origins)), base_url=base_url(request))
        )
        # Only the embed page may be framed by other sites, and only by the configured ones.
        ancestors = " ".join(["'self'", *origins]) if template == "embed.html" else "'self'"
        if "*" in origins and template == "embed.html":
            ancestors = "*"
        return web.Response(
            text=html,
            content_type="text/html",
            headers={
                "Content-Security-Policy": f"frame-ancestors {ancestors}",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            },
        )

    return handler


async def embed_loader(request: web.Request) -> web.FileResponse:
    """``/embed.js``: the one-line snippet's script (inserts the widget's iframe into the host page)."""
    return web.FileResponse(
        resources.static_dir() / "embed-loader.js",
        headers={"Content-Type": "text/javascript; charset=utf-8", "Cache-Control": "no-cache"},
    )
