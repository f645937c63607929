"""One output's configuration as the API takes it, the store keeps it and ``GET`` shows it, and how far it got.

Stored (``TranscriptStore.set_outputs``, one JSON object per output): ``id``, ``kind``, ``url``, ``created_ms``,
``lang`` (a room language the output sends, absent for the spoken one), ``password`` (OBS; a secret: stored, never
shown), ``sent`` (``Progress``) and ``resume`` (what its target keeps across restarts: YouTube's ``seq``). Shown: the
same without ``password`` (``"password": true`` says one is set), ``sent`` and ``resume``, and with the URL's query
values and user name replaced by ``REDACTED`` (a YouTube ingestion URL's ``cid`` is the stream's caption key).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from yarl import URL


class OutputKind(StrEnum):
    """The kinds of output, by the name the API and the store give them (``{"kind": "youtube", ...}``)."""

    YOUTUBE = "youtube"  # YouTube Live's caption ingestion (HTTP POST)
    OBS = "obs"  # OBS Studio's stream captions over obs-websocket v5


MAX_URL_CHARS = 2048
MAX_PASSWORD_CHARS = 512
SCHEMES = {OutputKind.YOUTUBE: ("http", "https"), OutputKind.OBS: ("ws", "wss")}
FIELDS = {OutputKind.YOUTUBE: {"kind", "url", "lang"}, OutputKind.OBS: {"kind", "url", "password", "lang"}}
REDACTED = "REDACTED"


class SpecError(ValueError):
    """A configuration the API refuses (400 ``bad_message``); the message says what is wrong."""


@dataclass(frozen=True)
class Progress:
    """How far an output got: every room event up to seq ``done`` is sent, and of event ``done + 1`` the sentences
    ``ids``. A new output starts at the audience's newest seq with nothing of the next event."""

    done: int
    ids: frozenset[int] = frozenset()

    def covers(self, seq: int, sentence_id: int) -> bool:
        """Whether sentence ``sentence_id`` of event ``seq`` is sent."""
        return seq <= self.done or (seq == self.done + 1 and sentence_id in self.ids)

    def after(self, seq: int, sentence_id: int, last: bool) -> Progress:
        """The progress once sentence ``sentence_id`` of event ``seq`` is sent (``last``: the event's last one)."""
        if last:
            return Progress(seq)
        kept = self.ids if self.done == seq - 1 else frozenset()
        return Progress(seq - 1, kept | {sentence_id})

    def wire(self) -> list[Any]:
        return [self.done, sorted(self.ids)]

    @classmethod
    def from_wire(cls, raw: Any) -> Progress | None:
        """The stored form back (None for anything else: the output starts where the audience is)."""
        if (
            isinstance(raw, list)
            and len(raw) == 2
            and isinstance(raw[0], int)
            and isinstance(raw[1], list)
            and all(isinstance(i, int) for i in raw[1])
        ):
            return cls(raw[0], frozenset(raw[1]))
        return None


@dataclass(frozen=True)
class OutputSpec:
    """One output of a room (see the module). ``progress`` None: not started yet. ``kind`` is a plain string only
    for a stored output of a kind this server does not know (a newer version's): it stays listed and stored, and its
    target refuses to start (``app.outputs.kinds.make_target``)."""

    id: str
    kind: OutputKind | str
    url: str
    created_ms: int
    password: str | None = None
    progress: Progress | None = None
    resume: dict[str, int] = field(default_factory=dict)
    lang: str | None = None  # the room language it sends (None: the spoken one)

    def public(self) -> dict[str, Any]:
        """What ``GET /rooms/{id}/outputs`` shows of it: no secret."""
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "url": redacted_url(self.url),
            "created_ms": self.created_ms,
        }
        if self.lang is not None:
            out["lang"] = self.lang
        if self.kind == OutputKind.OBS:
            out["password"] = self.password is not None
        return out

    def stored(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "url": self.url, "created_ms": self.created_ms}
        if self.lang is not None:
            out["lang"] = self.lang
        if self.password is not None:
            out["password"] = self.password
        if self.progress is not None:
            out["sent"] = self.progress.wire()
        if self.resume:
            out["resume"] = dict(self.resume)
        return out

    @classmethod
    def from_stored(cls, raw: dict[str, Any]) -> OutputSpec:
        """The stored form back. Raises ``SpecError`` for one this server cannot read."""
        try:
            resume = raw.get("resume") or {}
            spec = cls(
                str(raw["id"]),
                _kind(str(raw["kind"])),
                str(raw["url"]),
                int(raw["created_ms"]),
                raw.get("password"),
                Progress.from_wire(raw.get("sent")),
                {str(k): int(v) for k, v in resume.items()},
                str(raw["lang"]) if raw.get("lang") is not None else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SpecError(f"a stored output is unreadable ({exc!r})") from None
        return spec


def parse(
    body: dict[str, Any], created_ms: int, languages: Callable[[str], str | None] = lambda _: _untranslated()
) -> OutputSpec:
    """A new output from a ``POST /rooms/{id}/outputs`` body: ``{"kind": "youtube", "url", "lang"?}`` or
    ``{"kind": "obs", "url", "password"?, "lang"?}``. ``languages``: the room language a ``lang`` asks for (None
    for the spoken one; ``ValueError`` for one the room does not have, its message saying which it has); by
    default there is none. Raises ``SpecError`` for a missing, unknown or ill-typed field, a URL of the wrong scheme
    or a language the room lacks."""
    kind = _kind(body["kind"]) if isinstance(body.get("kind"), str) else None
    if not isinstance(kind, OutputKind):
        raise SpecError(f'"kind" must be one of {", ".join(sorted(OutputKind))}')
    unknown = sorted(set(body) - FIELDS[kind])
    if unknown:
        raise SpecError(f"unknown field {unknown[0]!r} for kind '{kind}': expected {', '.join(sorted(FIELDS[kind]))}")
    url = _url(body.get("url"), SCHEMES[kind])
    if kind == OutputKind.YOUTUBE and "seq" in URL(url).query:
        raise SpecError('"url" must be the ingestion URL without "seq" (each post adds its own)')
    password = body.get("password")
    if password is not None and (not isinstance(password, str) or not 0 < len(password) <= MAX_PASSWORD_CHARS):
        raise SpecError(f'"password" must be a string of 1 to {MAX_PASSWORD_CHARS} characters, or null')
    raw_lang = body.get("lang")
    if raw_lang is not None and not isinstance(raw_lang, str):
        raise SpecError('"lang" must be a language code (BCP 47), or null for the language spoken')
    try:
        lang = languages(raw_lang) if raw_lang else None
    except ValueError as exc:
        raise SpecError(f'"lang": {exc}') from None
    return OutputSpec(secrets.token_urlsafe(6), kind, url, created_ms, password, lang=lang)


def _kind(name: str) -> OutputKind | str:
    """A kind as the enum, or as the string it is when this server does not know it."""
    try:
        return OutputKind(name)
    except ValueError:
        return name


def _untranslated() -> str | None:
    raise ValueError("the room is not translated")


def redacted_url(url: str) -> str:
    """``url`` without its secrets: query values and user information replaced by ``REDACTED``."""
    try:
        parsed = URL(url)
        if parsed.user is not None or parsed.password is not None:
            parsed = parsed.with_user(REDACTED).with_password(None)
        if parsed.query:
            parsed = parsed.with_query([(key, REDACTED) for key in parsed.query])
        return str(parsed)
    except (TypeError, ValueError):
        return REDACTED


def _url(raw: Any, schemes: tuple[str, ...]) -> str:
    if not isinstance(raw, str) or not 0 < len(raw) <= MAX_URL_CHARS:
        raise SpecError(f'"url" must be a string of at most {MAX_URL_CHARS} characters')
    if not raw.isascii() or any(ord(c) < 0x21 or c == "\x7f" for c in raw):
        raise SpecError('"url" must be ASCII (percent-encoded) without spaces or control characters')
    try:
        parsed = URL(raw)
    except (TypeError, ValueError):
        raise SpecError('"url" is not a URL') from None
    if parsed.scheme not in schemes or not parsed.host or "#" in raw:
        raise SpecError(f'"url" must be an absolute {" or ".join(s + "://" for s in schemes)} URL without a fragment')
    return raw
