"""A fake translation service, named as one, for tests of what is not a translator (rooms, pages, files), and what a
viewer of a room language shows."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from engine import CaptionEngine, TranslationError, TranslationRequest
from tests.support.servers import running_server


class FakeTranslations:
    """A fake translation service (no engine): "es" and "ca" from English, English from Spanish, each text
    upper-cased and tagged with its language. ``fail`` makes the next calls raise; ``calls`` records every request;
    ``delay_s`` slows each call."""

    def __init__(self) -> None:
        self.calls: list[TranslationRequest] = []
        self.fail = 0
        self.delay_s = 0.0
        self.warmed: list[tuple[str, str]] = []

    def targets(self, source: str) -> frozenset[str]:
        return {"en": frozenset({"es", "ca"}), "es": frozenset({"en"})}.get(source, frozenset())

    def names(self) -> list[str]:
        return ["fake"]

    def warm(self, source: str, targets: Sequence[str]) -> None:
        self.warmed.extend((source, t) for t in targets)

    async def translate(self, request: TranslationRequest) -> list[str]:
        self.calls.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            self.fail -= 1
            raise TranslationError("the fake engine was told to fail")
        return [f"[{request.target}] {t.upper()}" for t in request.texts]


def in_language(events: list[tuple[int | None, dict[str, Any]]]) -> dict[int, str]:
    """What a viewer of a language stream shows: sentence id -> text (translations upserted by id)."""
    out: dict[int, str] = {}
    for _, m in events:
        if m["type"] in ("caption", "translation"):
            out.update({s["id"]: s["text"] for s in m["sentences"]})
        elif m["type"] == "correction":
            for sid in m["deleted"]:
                out.pop(sid, None)
    return out


@contextlib.asynccontextmanager
async def translating_server(
    engine: CaptionEngine, token: str, where: Path
) -> AsyncIterator[tuple[str, web.Application, FakeTranslations]]:
    """A server on ``engine`` with auth token ``token``, its store a file in folder ``where``, translating with a
    fresh ``FakeTranslations``: ``(url, app, fake)``."""
    fake = FakeTranslations()
    async with running_server(engine, auth_token=token, db_path=str(where / "r.db"), translator=fake) as (url, app):
        yield url, app, fake
