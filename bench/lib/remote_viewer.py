"""A room viewer on another front end, and how soon the words a publisher saw settle reach it.

Several front ends share one PostgreSQL store (``--db postgresql://...``): a publisher captions into a room on front
end A, and a viewer follows the same room on front end B. B hears A's stable words through the store's
announcements (``app.rooms.open_text``: PostgreSQL ``NOTIFY``) and the locked sentences through its durable events,
so what a reader on B waits for is the store's round trip on top of the engine's own delay.

``RemoteViewer`` is the server-sent-events reader on B; ``stable_delays`` pairs every word that settled on the
publisher's data channel with its first arrival on B, settled either way (as a stable word, or inside a locked
sentence when the lock came first). Delays run from when the word's audio (its end, as the engine estimated it)
left the publishing client; all times are this process's ``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.lib.client import BenchClient

_SLOP_MS = 300  # a word's estimated times against its locked sentence's edges


@dataclass
class RemoteViewer:
    """Follows ``{base}/rooms/{room}/events`` and keeps every caption message with its arrival time."""

    url: str
    captions: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, http: aiohttp.ClientSession) -> None:
        """Read until cancelled. (A bench step is short: a dropped stream is a failure, not something to resume.)"""
        async with http.get(self.url, timeout=aiohttp.ClientTimeout(sock_read=120)) as r:
            if r.status != 200:
                raise RuntimeError(f"GET {self.url}: {r.status}")
            self.connected.set()
            data: list[str] = []
            async for raw in r.content:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    message = json.loads("\n".join(data))
                    data = []
                    if message.get("type") == "caption":
                        self.captions.append((time.monotonic(), message))


@dataclass
class StableDelays:
    """Seconds from a settled word's audio to its arrival: on the publisher's own channel and on the other front
    end; ``missing``: words that settled on the publisher's channel and never reached the other front end."""

    local_s: list[float] = field(default_factory=list)
    remote_s: list[float] = field(default_factory=list)
    missing: int = 0

    def add(self, other: StableDelays) -> None:
        self.local_s += other.local_s
        self.remote_s += other.remote_s
        self.missing += other.missing


def _offset_ms(local: list[dict[str, Any]], remote: list[dict[str, Any]]) -> int | None:
    """The room timeline's offset from the session's (``RoomPublisher.offset_ms``): the commonest start-time
    difference between words of the same text in both lists."""
    starts: dict[str, list[int]] = {}
    for w in local:
        starts.setdefault(w["w"], []).append(int(w["start_ms"]))
    diffs = Counter(int(r["start_ms"]) - s for r in remote for s in starts.get(r["w"], ()))
    return diffs.most_common(1)[0][0] if diffs else None


def stable_delays(client: BenchClient, viewer: RemoteViewer | None) -> StableDelays:
    """Pair each word that settled on ``client``'s channel with its first arrival, settled, at ``viewer`` (None:
    the channel's delays only)."""
    out = StableDelays()
    if not client.started_s:
        return out
    local = [(t, w) for t, m in client.messages if m["type"] == "caption" for w in m.get("stable_words") or ()]
    if viewer is None:
        out.local_s = [t - client.sent_at(int(w["end_ms"]) / 1000) for t, w in local]
        return out
    remote_words = [(t, w) for t, m in viewer.captions for w in m.get("stable_words") or ()]
    locks = [(t, s) for t, m in viewer.captions for s in m.get("sentences") or ()]
    offset = _offset_ms([w for _, w in local], [w for _, w in remote_words])
    if offset is None:  # no stable word got there as one: take the offset from the locks instead
        first_local = min(
            (int(s["start"]) for _, m in client.messages if m["type"] == "caption" for s in m.get("sentences") or ()),
            default=None,
        )
        first_remote = min((int(s["start"]) for _, s in locks), default=None)
        offset = first_remote - first_local if first_local is not None and first_remote is not None else 0
    arrived = {(w["w"], int(w["start_ms"]), int(w["end_ms"])): t for t, w in reversed(remote_words)}
    for t, w in local:
        spoken = client.sent_at(int(w["end_ms"]) / 1000)
        out.local_s.append(t - spoken)
        start, end = int(w["start_ms"]) + offset, int(w["end_ms"]) + offset
        times = [arrived[(w["w"], start, end)]] if (w["w"], start, end) in arrived else []
        times += [ts for ts, s in locks if s["start"] - _SLOP_MS <= start and end <= s["end"] + _SLOP_MS]
        if times:
            out.remote_s.append(min(times) - spoken)
        else:
            out.missing += 1
    return out


async def follow(
    http: aiohttp.ClientSession, base_url: str, rooms: list[str], timeout_s: float = 30.0
) -> tuple[list[RemoteViewer], list[asyncio.Task[None]]]:
    """One connected ``RemoteViewer`` per room on the front end at ``base_url``, each reading in its own task."""
    viewers = [RemoteViewer(f"{base_url}/rooms/{room}/events") for room in rooms]
    tasks = [asyncio.create_task(v.run(http)) for v in viewers]
    deadline = time.monotonic() + timeout_s
    while not all(v.connected.is_set() for v in viewers):
        failed = [t for t in tasks if t.done()]
        if failed or time.monotonic() > deadline:
            await stop(tasks)
            for t in failed:
                t.result()  # raises the viewer's error
            raise TimeoutError(f"room viewers on {base_url} did not connect within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)
    return viewers, tasks


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for t in tasks:
        t.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks, return_exceptions=True)
