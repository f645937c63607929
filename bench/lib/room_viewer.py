"""A kiosk's view of one room: its server-sent events read as a browser's ``EventSource`` does (``bench.soak``,
``bench.viewers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp


class Viewer:
    """A server-sent-events reader of one room (what a kiosk's EventSource does, reconnecting with
    ``Last-Event-ID``): ``sentences`` maps room sentence id -> text as this viewer saw it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sentences: dict[int, str] = {}
        self.last_id: int | None = None
        self.reconnects = 0

    async def run(self, http: aiohttp.ClientSession) -> None:
        while True:
            headers = {"Last-Event-ID": str(self.last_id)} if self.last_id is not None else {}
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with http.get(self.url, headers=headers, timeout=aiohttp.ClientTimeout(sock_read=60)) as r:
                    event_id, data = None, []
                    async for raw in r.content:
                        line = raw.decode("utf-8").rstrip("\r\n")
                        if line.startswith("id:"):
                            event_id = int(line[3:].strip())
                        elif line.startswith("data:"):
                            data.append(line[5:].strip())
                        elif not line:
                            if data:
                                self._on(json.loads("\n".join(data)), event_id)
                            event_id, data = None, []
            self.reconnects += 1
            await asyncio.sleep(1.0)

    def _on(self, message: dict[str, Any], event_id: int | None) -> None:
        if message.get("type") == "caption":
            for s in message.get("sentences") or []:
                self.sentences[int(s["id"])] = s["text"]
        if event_id is not None:
            self.last_id = event_id
