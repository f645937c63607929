"""Client -> server messages on the ``captions`` data channel (``start``, ``stop``) and their validation."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .codes import ErrorCode, ProtocolError
from .languages import LANGUAGE_CODES

MAX_CLIENT_MESSAGE_BYTES = 4096
MAX_HOTWORDS = 32
MAX_HOTWORD_CHARS = 48


@dataclass(frozen=True)
class StartMessage:
    language: str | None
    hotwords: tuple[str, ...]
    words: bool = False  # send each locked sentence's word times
    task: str = "transcribe"  # "translate": captions in English of speech in ``language`` (Whisper's task)
    language_given: bool = True  # False: it named none (or null, "auto"): a session in a room then takes the room's


TASKS = ("transcribe", "translate")


@dataclass(frozen=True)
class StopMessage:
    pass


ClientMessage = StartMessage | StopMessage


def parse_client_message(raw: str | bytes) -> ClientMessage:
    """Validate one client message. Raises ``ProtocolError`` with a message fit to show the client."""
    if len(raw) > MAX_CLIENT_MESSAGE_BYTES:
        raise ProtocolError(ErrorCode.TOO_LARGE, f"message over {MAX_CLIENT_MESSAGE_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "a message must be a JSON object")
    kind = data.get("type")
    if kind == "stop":
        return StopMessage()
    if kind != "start":
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"unknown message type {kind!r}; expected 'start' or 'stop'")
    language = data.get("language", "en")
    if language in ("", "auto"):
        language = None
    if language is not None and (not isinstance(language, str) or language not in LANGUAGE_CODES):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"unknown language {language!r}")
    hotwords = data.get("hotwords") or []
    if not isinstance(hotwords, list) or not all(isinstance(h, str) for h in hotwords):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "hotwords must be a list of strings")
    if len(hotwords) > MAX_HOTWORDS or any(len(h) > MAX_HOTWORD_CHARS for h in hotwords):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"at most {MAX_HOTWORDS} hotwords of at most {MAX_HOTWORD_CHARS} characters"
        )
    words = data.get("words", False)
    if not isinstance(words, bool):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "words must be true or false")
    task = data.get("task", "transcribe")
    if task not in TASKS:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, 'task must be "transcribe" or "translate"')
    return StartMessage(
        language,
        tuple(h.strip() for h in hotwords if h.strip()),
        words,
        task,
        language_given=language is not None and "language" in data,
    )
