"""A stand-in for YouTube Live's caption ingestion endpoint on loopback (``StandInIngestion``, served by
``stand_in()``), written from Google's published description of the format: nothing leaves the machine."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web

from app.outputs.youtube import timestamp
from tests.support.servers import serving

TIME_LINE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}( region:\S+)?$")


@dataclass
class Post:
    """One post the stand-in took: its ``seq``, its ``entries`` (caption time in ms since the epoch, lines), and when
    it arrived (``time.monotonic()``)."""

    seq: int
    entries: list[tuple[int, list[str]]]
    arrived: float

    @property
    def text(self) -> str:
        return " ".join(line for _, lines in self.entries for line in lines)


@dataclass
class StandInIngestion:
    """A **stand-in** for YouTube Live's caption ingestion endpoint, written from Google's published description of
    the format ("Closed Captions over HTTP for YouTube Live Streams", YouTube Help 6077032), not from YouTube's
    code: it serves ``/closedcaption`` on loopback and takes only what that description allows:

    - method POST, ``Content-Type: text/plain`` (UTF-8 if a charset is named), a ``cid`` naming the stream and a
      ``seq`` in the query;
    - ``seq`` counts posts of new caption data per stream: 1 first, then one more per new post; a post repeating
      the last ``seq`` taken is a retry (answered 200, not taken twice); anything else is refused (400);
    - a body of line pairs, each ending in a newline: ``YYYY-MM-DDTHH:MM:SS.mmm`` (UTC; optionally followed by
      `` region:…``), then the caption text (UTF-8, ``<br>`` between its lines).

    Refusals are recorded in ``refused`` with the reason, taken posts in ``posts``, retries of a taken post in
    ``repeats``. ``fail(n)`` answers the next ``n`` well-formed posts 503 (with ``retry_after``, if set)."""

    posts: list[Post] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    repeats: int = 0
    attempts: int = 0  # every well-formed post, failed ones included
    failing: int = 0
    retry_after: str | None = None
    open: asyncio.Event = field(default_factory=asyncio.Event)  # cleared: posts wait (a slow destination)
    _last: dict[str, int] = field(default_factory=dict)
    url: str = ""

    def fail(self, n: int, retry_after: str | None = None) -> None:
        self.failing, self.retry_after = n, retry_after

    def ingestion_url(self, cid: str = "stream-key-1") -> str:
        return f"{self.url}/closedcaption?cid={cid}"

    async def handle(self, request: web.Request) -> web.Response:
        if request.method != "POST":
            return self._refuse(405, f"method {request.method}")
        if request.content_type != "text/plain" or (request.charset or "utf-8").lower() != "utf-8":
            return self._refuse(415, f"content type {request.headers.get('Content-Type')!r}")
        cid, seq = request.query.get("cid"), request.query.get("seq", "")
        if not cid or not seq.isdigit() or list(request.query).count("seq") != 1:
            return self._refuse(400, f"query {request.query_string!r}")
        try:
            entries = post_entries((await request.read()).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return self._refuse(400, f"body: {exc}")
        await self.open.wait()
        self.attempts += 1
        if self.failing:
            self.failing -= 1
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return web.Response(status=503, text="try again", headers=headers)
        last = self._last.get(cid, 0)
        if int(seq) == last and last:
            self.repeats += 1
            return web.Response(text=_now_line())
        if int(seq) != last + 1:
            return self._refuse(400, f"seq {seq} after {last}")
        self._last[cid] = int(seq)
        self.posts.append(Post(int(seq), entries, time.monotonic()))
        return web.Response(text=_now_line())

    def _refuse(self, status: int, why: str) -> web.Response:
        self.refused.append(why)
        return web.Response(status=status, text=why)


def post_entries(body: str) -> list[tuple[int, list[str]]]:
    """The (time, lines) pairs of a caption post's body; raises ValueError for anything else."""
    if not body.endswith("\n"):
        raise ValueError("no final newline")
    lines = body[:-1].split("\n")
    if not lines or len(lines) % 2:
        raise ValueError("not pairs of a time line and a text line")
    out = []
    for when, text in zip(lines[::2], lines[1::2], strict=True):
        if not TIME_LINE.match(when):
            raise ValueError(f"time line {when!r}")
        if not text.strip():
            raise ValueError("empty caption text")
        moment = datetime.strptime(when.split(" ")[0], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
        out.append((round(moment.timestamp() * 1000), text.split("<br>")))
    return out


def _now_line() -> str:
    return timestamp(int(time.time() * 1000)) + "\n"


@contextlib.asynccontextmanager
async def stand_in() -> AsyncIterator[StandInIngestion]:
    """A ``StandInIngestion`` served on loopback, taking posts (``open`` set); yields it with its ``url`` set."""
    ingestion = StandInIngestion()
    ingestion.open.set()
    app = web.Application()
    app.router.add_route("*", "/closedcaption", ingestion.handle)
    async with serving(app) as ingestion.url:
        yield ingestion
