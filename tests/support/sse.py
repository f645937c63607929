"""A minimal server-sent-events reader for tests (what a browser's EventSource does, without reconnecting), and
the raw text of a stream (``raw_events``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import aiohttp


class SseReader:
    """Reads ``url`` in the background; ``events`` holds ``(id or None, decoded JSON)`` in arrival order, and
    ``arrived`` when each came (``time.monotonic()``)."""

    def __init__(self, url: str, last_event_id: int | None = None) -> None:
        self.url = url
        self.last_event_id = last_event_id
        self.events: list[tuple[int | None, dict[str, Any]]] = []
        self.arrived: list[float] = []
        self.status = 0
        self.ended = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SseReader:
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read(self) -> None:
        headers = {"Last-Event-ID": str(self.last_event_id)} if self.last_event_id is not None else {}
        try:
            async with aiohttp.ClientSession() as http, http.get(self.url, headers=headers) as r:
                self.status = r.status
                event_id: int | None = None
                event = "message"
                data: list[str] = []
                async for raw in r.content:
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if line.startswith("id:"):
                        event_id = int(line[3:].strip())
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
                    elif not line:
                        if data and event == "message":
                            self.events.append((event_id, json.loads("\n".join(data))))
                            self.arrived.append(time.monotonic())
                            self._changed.set()
                        event_id, event, data = None, "message", []
        except aiohttp.ClientError:
            pass
        finally:
            self.ended.set()
            self._changed.set()

    def sentences(self) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for _, m in self.events:
            if m["type"] == "caption":
                for s in m["sentences"]:
                    out[s["id"]] = dict(s)
            elif m["type"] == "speakers":
                for sid, spk in m["relabel"].items():
                    out[int(sid)]["spk"] = spk
        return out

    def last_id(self) -> int | None:
        ids = [i for i, _ in self.events if i is not None]
        return ids[-1] if ids else None

    async def wait_for(self, predicate: Any, timeout_s: float = 20.0) -> None:
        async def loop() -> None:
            while not predicate(self):
                if self.ended.is_set():
                    raise AssertionError(f"stream ended (status {self.status}); got {self.events}")
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout_s)


async def raw_events(url: str, until: str, last_event_id: int | None = None, timeout_s: float = 10.0) -> str:
    """The raw text of a viewer stream, read until ``until`` appears in it (what ``SseReader`` hides: id-only
    events)."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    text = ""
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as r, asyncio.timeout(timeout_s):
        async for chunk in r.content.iter_any():
            text += chunk.decode("utf-8")
            if until in text:
                return text
    raise AssertionError(f"the stream ended without {until!r}: {text!r}")
