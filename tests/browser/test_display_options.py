"""Colour options of the widget and the kiosk in real Chromium: hostile values never make the page fetch a foreign
URL, and ordinary colours still apply. The recognizer is the named fake: no caption is judged here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from engine.stream.engine import CaptionEngine
from tests.support.browser import chromium, write_wav
from tests.support.servers import running_server, serving

pytestmark = pytest.mark.e2e

# What each page shows once its scripts ran and its room feed connected.
READY = {"embed": "body[data-state=waiting]", "kiosk": ".status[data-state=waiting]"}


@pytest.fixture
async def tracker() -> AsyncIterator[tuple[str, list[str]]]:
    """Another origin on loopback that records every request made to it (a stand-in for a tracking pixel host)."""
    hits: list[str] = []

    async def any_request(request: web.Request) -> web.Response:
        hits.append(request.path_qs)
        return web.Response(body=b"", content_type="image/png")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_request)
    async with serving(app, access_log=None) as url:
        yield url, hits


async def test_hostile_colours_load_nothing_and_plain_colours_apply(
    fake_engine: CaptionEngine, tmp_path: Path, tracker: tuple[str, list[str]]
) -> None:
    other, hits = tracker
    silence = write_wav(tmp_path / "silence.wav", np.zeros(16_000, np.float32))
    hostile = [
        f"var(--x, url({other}/pixel.png))",
        f"red;background:url({other}/p2.png)",
        f"rgb(var(--a, url({other}/p3.png)))",
        f"url({other}/p4.png)",
    ]
    async with running_server(fake_engine) as (url, _), aiohttp.ClientSession() as http:
        async with http.post(f"{url}/rooms", json={"title": "Colours"}) as r:
            room = (await r.json())["room"]
        async with chromium(silence) as browser:
            page = await browser.new_page()
            for path in ("embed", "kiosk"):
                for value in hostile:
                    query = aiohttp.helpers.quote(value, safe="")
                    await page.goto(f"{url}/{path}?room={room}&bg={query}&fg={query}")
                    await page.wait_for_selector(READY[path])  # its scripts ran: the options are applied
                    bg = await page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--bg')")
                    assert "url" not in bg and "var" not in bg, (path, value, bg)
                await page.goto(f"{url}/{path}?room={room}&bg=1d5fb8&fg=rgb(255,%20204,%200)")
                await page.wait_for_selector(READY[path])
                style = await page.evaluate(
                    "[document.documentElement.style.getPropertyValue('--bg'),"
                    " document.documentElement.style.getPropertyValue('--fg')]"
                )
                assert style == ["#1d5fb8", "rgb(255, 204, 0)"], (path, style)
            # The recorder does see a request when one is made: the page itself goes there last (a navigation also
            # ends whatever the previous page still had in flight).
            await page.goto(f"{other}/probe")
    assert "/probe" in hits, "the recorder missed a request"
    assert hits[: hits.index("/probe")] == [], f"the page fetched from another origin: {hits}"
