"""A room as its editors and viewers use it over HTTP (``bench.corrections``): viewers following its event stream,
an editor's saves, a publisher streaming read speech into it over WebRTC. Times are this process's
``time.monotonic()``, in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.lib.clips import session_clip
from bench.lib.harness import Run, run_clients


# ---- a viewer --------------------------------------------------------------------------------------------------------
@dataclass
class RoomReader:
    """Follows one room event stream (``url``) and keeps every data event as ``(arrival, id, message)``: ``id`` is
    the SSE id (the room seq of a durable event), None for the rest. ``name`` says who it is in the report."""

    url: str
    name: str
    events: list[tuple[float, int | None, dict[str, Any]]] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set at each event (cleared by who waits)
    error: str = ""

    async def run(self, http: aiohttp.ClientSession) -> None:
        """Read until cancelled. A dropped stream is a failure here (``error``), not something to resume: a bench
        step is minutes long and the server's heartbeat keeps the stream open."""
        try:
            async with http.get(self.url, timeout=aiohttp.ClientTimeout(sock_read=120)) as r:
                if r.status != 200:
                    self.error = f"GET {self.url}: {r.status} {await r.text()}"
                    return
                self.connected.set()
                event_id: int | None = None
                kind, data = "", []
                async for raw in r.content:
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if line.startswith("id:"):
                        event_id = int(line[3:].strip())
                    elif line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
                    elif not line:
                        if data and kind in ("", "message"):
                            self.events.append((time.monotonic(), event_id, json.loads("\n".join(data))))
                            self.arrived.set()
                        event_id, kind, data = None, "", []
            self.error = "the stream ended"
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.error = f"the stream failed: {exc!r}"

    def sentence_versions(self) -> dict[int, list[tuple[float, str, str]]]:
        """Every text received for each sentence id: ``(arrival, text, "caption" | "correction")``, in order."""
        out: dict[int, list[tuple[float, str, str]]] = {}
        for t, _, m in self.events:
            if m.get("type") in ("caption", "correction"):
                for s in m.get("sentences") or ():
                    out.setdefault(int(s["id"]), []).append((t, str(s["text"]), str(m["type"])))
        return out

    def current(self) -> dict[int, str]:
        """The room as this viewer shows it now: captions and corrections applied in order (deletions too)."""
        now: dict[int, str] = {}
        for _, _, m in self.events:
            if m.get("type") in ("caption", "correction"):
                now.update({int(s["id"]): str(s["text"]) for s in m.get("sentences") or ()})
                for sid in m.get("deleted") or ():
                    now.pop(int(sid), None)
        return now

    def by_seq(self, kind: str) -> dict[int, tuple[float, dict[str, Any]]]:
        """Durable events of type ``kind`` by seq: ``(arrival, message)`` (the first, if one came twice)."""
        out: dict[int, tuple[float, dict[str, Any]]] = {}
        for t, seq, m in self.events:
            if seq is not None and m.get("type") == kind and seq not in out:
                out[seq] = (t, m)
        return out


async def follow(
    http: aiohttp.ClientSession, readers: list[RoomReader], timeout_s: float = 30.0
) -> list[asyncio.Task[None]]:
    """Start each reader in a task of its own; return once all are connected (raise if one failed)."""
    tasks = [asyncio.create_task(r.run(http)) for r in readers]
    deadline = time.monotonic() + timeout_s
    while not all(r.connected.is_set() for r in readers):
        failed = [r.error for r in readers if r.error]
        if failed or time.monotonic() > deadline:
            await stop(tasks)
            raise RuntimeError(failed[0] if failed else f"viewers did not connect within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)
    return tasks


async def stop(tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks, return_exceptions=True)


# ---- an editor -------------------------------------------------------------------------------------------------------
@dataclass
class Save:
    """One ``PUT`` of a sentence's text: when it left and was answered (monotonic s), its status, its answer's
    body and ``seq`` (None unless 200)."""

    sid: int
    text: str
    sent_s: float
    answered_s: float = float("nan")
    status: int = 0
    seq: int | None = None
    body: Any = None

    def wire(self) -> dict[str, Any]:
        return {
            "sid": self.sid,
            "text": self.text,
            "status": self.status,
            "seq": self.seq,
            "put_s": round(self.answered_s - self.sent_s, 4),
            "response": self.body if self.status != 200 else None,
        }


async def create_room(http: aiohttp.ClientSession, base_url: str, fields: dict[str, Any]) -> tuple[str, str]:
    """``POST /rooms``: (room id, editor token)."""
    async with http.post(f"{base_url}/rooms", json=fields) as r:
        body = await r.json()
        if r.status != 201:
            raise RuntimeError(f"POST /rooms {fields}: {r.status} {body}")
    return str(body["room"]), str(body["editor_token"])


async def put_text(http: aiohttp.ClientSession, base_url: str, room: str, token: str, sid: int, text: str) -> Save:
    """``PUT /rooms/{room}/sentences/{sid}`` ``{"text"}`` with the editor token; the clock starts just before it."""
    save = Save(sid, text, time.monotonic())
    try:
        async with http.put(
            f"{base_url}/rooms/{room}/sentences/{sid}",
            json={"text": text, "editor": "bench"},
            headers={"Authorization": f"Bearer {token}"},
        ) as r:
            save.status = r.status
            raw = await r.text()
    except aiohttp.ClientError as exc:
        save.answered_s, save.body = time.monotonic(), f"no answer: {exc!r}"
        return save
    save.answered_s = time.monotonic()
    try:
        save.body = json.loads(raw)
    except ValueError:
        save.body = raw
    if save.status == 200 and isinstance(save.body, dict):
        save.seq = int(save.body["seq"])
    return save


def fixed(original: str) -> str:
    """An editor's fix of the fake's "audio of N seconds": a word changed and " [fixed]" appended (lower case, no
    digit in the changed words, so the room learns no term from it)."""
    changed = re.sub(r"\baudio\b", "speech", original, count=1)
    return f"{changed} [fixed]"


def roman(n: int) -> str:
    """``n`` (>= 1) in lower-case Roman numerals: a round's mark in a text, with no digit in it."""
    out = ""
    for value, letters in (
        (1000, "m"),
        (900, "cm"),
        (500, "d"),
        (400, "cd"),
        (100, "c"),
        (90, "xc"),
        (50, "l"),
        (40, "xl"),
        (10, "x"),
        (9, "ix"),
        (5, "v"),
        (4, "iv"),
        (1, "i"),
    ):
        while n >= value:
            out, n = out + letters, n - value
    return out


def locked(reader: RoomReader) -> dict[int, tuple[float, str]]:
    """Sentences the reader received in captions: id -> (first arrival, text as first received)."""
    out: dict[int, tuple[float, str]] = {}
    for t, _, m in reader.events:
        if m.get("type") == "caption":
            for s in m.get("sentences") or ():
                out.setdefault(int(s["id"]), (t, str(s["text"])))
    return out


def publish(base_url: str, room: str, seconds: float, index: int, pause_s: float) -> asyncio.Task[Run]:
    """One WebRTC publisher streaming clip ``index`` (``seconds`` of read speech) into ``room``, in a task."""
    clip = session_clip(index, seconds, pause_s, 60)
    return asyncio.create_task(run_clients(base_url, [clip.ogg], offer_fields=[{"room": room}]))


def publisher_report(run: Run) -> dict[str, Any]:
    client = run.clients[0]
    return {
        "session": client.session,
        "error": client.error,
        "refused": str(client.refused or ""),
        "streamed_s": round((client.media_ended_s or 0) - (client.started_s or 0), 1),
    }


def publisher_problems(run: Run) -> list[str]:
    client = run.clients[0]
    return [f"publisher {client.session}: {client.error or client.refused}"] if client.error or client.refused else []
