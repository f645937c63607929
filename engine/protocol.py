"""The caption wire protocol: the one place that defines every message on the ``captions`` data channel.

Server -> client (JSON, one message per data-channel message; every message has ``type`` and a per-session
increasing ``seq``):

- ``{"type":"ready","seq":N,"session":ID,"model":NAME,"language":CODE|null}`` once the session can take audio.
- ``{"type":"caption","seq":N,"sentences":[{"id":K,"text":T,"start":MS,"end":MS,"spk":S|null}],"partial":P,
  "is_final":false,"latency_ms":L}``: ``sentences`` are only the sentences locked since the previous message
  (each is sent once and never changes); ``partial`` is the whole text of the open segment (may be empty, replaces
  the previous partial); ``start``/``end`` are milliseconds of session audio; ``latency_ms`` (optional) is how far
  the text trails the live audio at the moment the message is produced.
- ``{"type":"speakers","seq":N,"relabel":{"K":S,...}}``: corrected speaker labels for earlier sentences (after the
  re-clustering at stop). Sentence text never changes.
- After a stop: ``{"type":"caption",...,"is_final":true}`` (the last sentences, empty partial), then
  ``{"type":"stopped","seq":N}``.
- ``{"type":"error","seq":N,"code":C,"message":M}`` for anything the client must know; see ``ErrorCode``.
- ``{"type":"storage","seq":N,"saving":false,"message":M}`` when the server cannot save this session's captions
  (a full disk: live captions and viewers go on, the transcript file misses them until space returns), and
  ``{"type":"storage","seq":N,"saving":true,"message":M}`` once everything held back has been saved.

Client -> server: ``{"type":"start","language":"en"|null,"hotwords":[...]}`` (optional; defaults apply if audio
simply flows) and ``{"type":"stop"}``. Field names follow FunASR's realtime service where they overlap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

MAX_CLIENT_MESSAGE_BYTES = 4096
MAX_HOTWORDS = 32
MAX_HOTWORD_CHARS = 48
LANGUAGE_CODES = frozenset(
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi "
    "ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd "
    "gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue".split()
)


class ErrorCode(StrEnum):
    """Machine-readable error codes on the wire (HTTP error bodies use the same codes)."""

    BAD_MESSAGE = "bad_message"  # not JSON, not an object, unknown type, bad field
    TOO_LARGE = "too_large"  # message over MAX_CLIENT_MESSAGE_BYTES
    BAD_STATE = "bad_state"  # e.g. start after stop
    ENGINE = "engine"  # the recognizer failed; captions may be missing
    OVERLOADED = "overloaded"  # audio arrives faster than it can be processed; some was skipped
    BUSY = "busy"  # too many sessions
    LOADING = "loading"  # the model is still loading


class ProtocolError(ValueError):
    """A client message that breaks the protocol; ``code`` goes on the wire."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class StartMessage:
    language: str | None
    hotwords: tuple[str, ...]


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
        raise ProtocolError(ErrorCode.BAD_MESSAGE,
                            f"at most {MAX_HOTWORDS} hotwords of at most {MAX_HOTWORD_CHARS} characters")
    return StartMessage(language, tuple(h.strip() for h in hotwords if h.strip()))


def sentence(sentence_id: int, text: str, start_ms: int, end_ms: int, spk: int | None) -> dict[str, Any]:
    """One locked sentence as it appears in ``caption.sentences``."""
    return {"id": sentence_id, "text": text, "start": start_ms, "end": end_ms, "spk": spk}


def ready(session: str, model: str, language: str | None) -> dict[str, Any]:
    return {"type": "ready", "session": session, "model": model, "language": language}


def speakers(relabel: dict[int, int]) -> dict[str, Any]:
    return {"type": "speakers", "relabel": {str(k): v for k, v in sorted(relabel.items())}}


def stopped() -> dict[str, Any]:
    return {"type": "stopped"}


def error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"type": "error", "code": code.value, "message": message}


def storage(saving: bool, message: str) -> dict[str, Any]:
    return {"type": "storage", "saving": saving, "message": message}


def dumps(message: dict[str, Any]) -> str:
    """Serialise a message compactly (no NaN: the browser's JSON.parse would reject it)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
