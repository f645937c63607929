"""The query parameters of Deepgram's live ``/v1/listen`` and its credentials, checked before the WebSocket opens.

Deepgram answers a connection it cannot serve with an HTTP error before the upgrade (``dg-error`` header and a JSON
body ``{"err_code", "err_msg", "request_id"}``); ``ParamError`` carries what that answer says.

What each parameter does here (docs/protocol.md has the table):

- ``encoding`` ``linear16`` | ``mulaw`` | ``alaw`` with ``sample_rate`` 8000-48000 (required with an encoding, as
  Deepgram requires it); without ``encoding`` the stream must be a WAV file (its header says the format; Deepgram
  reads other containers too, this server only WAV). ``channels`` must be 1.
- ``language``: a Whisper language (``en``, ``en-US`` -> ``en``); ``multi`` detects it per sentence.
- ``model``: any value; the loaded model answers and is named in every result's ``metadata.model_info``.
- ``interim_results``, ``punctuate``, ``smart_format``, ``diarize``, ``vad_events``: as Deepgram's (see
  ``app.compat.deepgram``). ``endpointing`` (ms or ``false``) is accepted; sentences end where this server's
  endpointer ends them (its silence schedule and sentence pause). ``utterance_end_ms`` (at least 1000) sends
  ``UtteranceEnd`` after that long without words.
- ``keyterm`` and ``keywords`` (``word:intensifier``, the intensifier is dropped) become the recognizer's hotwords.
- ``detect_language=true`` detects the language per sentence (as ``language=multi``).
- ``redact`` (``pci``, ``ssn``, ``numbers`` or ``true``; repeated or comma-separated): the numbers masked in every
  result and in the room's transcript (``redaction``); other kinds (``pii``, ``phi``, entity names) are refused.
- Accepted without effect, because none can mislead: ``version``, ``tier``, ``tag``, ``extra`` (labels for the
  caller), ``mip_opt_out`` (this server keeps nothing to train on), ``no_delay`` (it never holds results back),
  ``numerals`` (Whisper writes numbers as digits), ``filler_words`` (fillers are kept where Whisper writes them),
  ``profanity_filter=false``, ``dictation=false``, and ``room``/``token`` (this server's own).
- ``name``: the person publishing into ``room`` (``app.rooms.names.person_name``; a bad one is refused).
- Refused with ``400`` naming it: any other parameter, ``profanity_filter=true`` and ``dictation=true`` (this server
  has no such filter), and the analyses it does not run (``search``, ``replace``, ``summarize``, ``topics``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from multidict import MultiMapping

from engine import LANGUAGE_CODES, MAX_HOTWORDS, protocol

from ..rooms import BadName, person_name
from .live_audio import ENCODINGS, MAX_RATE_HZ, MIN_RATE_HZ
from .redaction import RedactError, parse_redact

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
# Parameters this server does something with, and those it takes without effect because none can mislead (see the
# module's docstring); every other one is refused, naming it.
_HONOURED = {
    "encoding",
    "sample_rate",
    "channels",
    "multichannel",
    "language",
    "detect_language",
    "model",
    "interim_results",
    "punctuate",
    "smart_format",
    "diarize",
    "diarize_model",
    "endpointing",
    "utterance_end_ms",
    "vad_events",
    "keyterm",
    "keywords",
    "redact",
    "room",
    "name",
    "token",
}
_WITHOUT_EFFECT = {"version", "tier", "tag", "extra", "mip_opt_out", "no_delay", "numerals", "filler_words"}
_ONLY_FALSE = {
    "profanity_filter": "this server has no profanity filter",
    "dictation": "this server does not turn spoken punctuation into marks",
}


class ParamError(ValueError):
    """A parameter Deepgram's API would refuse too; the message names it."""


@dataclass(frozen=True)
class ListenParams:
    encoding: str | None = None  # None: a WAV stream, whose header gives the format
    sample_rate: int | None = None
    language: str | None = "en"  # None: detected per sentence
    model: str = "nova-3"
    interim_results: bool = False
    punctuate: bool = False
    smart_format: bool = False
    diarize: bool = False
    endpointing_ms: int | None = 10  # accepted, not applied (the engine's endpointer decides)
    utterance_end_ms: int | None = None
    vad_events: bool = False
    hotwords: tuple[str, ...] = ()
    redact: frozenset[str] = frozenset()  # redaction.KINDS to mask
    name: str | None = None  # the person publishing (``room``)

    @property
    def formatted(self) -> bool:
        """Transcripts keep Whisper's punctuation and case (``punctuate`` or ``smart_format``)."""
        return self.punctuate or self.smart_format


def _bool(query: MultiMapping[str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ParamError(f"{name} must be true or false, got {value!r}")


def _int(query: MultiMapping[str], name: str) -> int | None:
    value = query.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ParamError(f"{name} must be an integer, got {value!r}") from None


def parse_language(value: str | None, default: str | None) -> str | None:
    """A Deepgram language tag (``en``, ``en-US``, ``multi``) as a Whisper language code, None = detect."""
    if value is None:
        return default
    if value.lower() == "multi":
        return None
    code = value.split("-")[0].lower()
    if code not in LANGUAGE_CODES:
        raise ParamError(f"language {value!r} is not supported by this server's model")
    return code


def parse_params(
    query: MultiMapping[str], default_language: str | None, also: frozenset[str] = frozenset()
) -> ListenParams:
    """The checked parameters of a ``/v1/listen`` connection (``also``: more that the caller honours, e.g. the file
    API's ``utterances``). Raises ``ParamError``."""
    for name in query:
        if name in also:
            continue
        if name in _ONLY_FALSE and _bool(query, name, False):
            raise ParamError(f"{name}=true is not supported: {_ONLY_FALSE[name]}")
        if name not in _HONOURED and name not in _WITHOUT_EFFECT and name not in _ONLY_FALSE:
            raise ParamError(f"parameter {name!r} is not supported by this server")
    try:
        redact = parse_redact(query.getall("redact", []))
    except RedactError as exc:
        raise ParamError(str(exc)) from None
    try:
        person = person_name(query.get("name"))
    except BadName as exc:
        raise ParamError(str(exc)) from None
    detect = _bool(query, "detect_language", False)
    encoding = query.get("encoding")
    if encoding is not None:
        encoding = encoding.lower()
        if encoding not in ENCODINGS:
            raise ParamError(
                f"encoding {encoding!r} is not supported here: use {', '.join(ENCODINGS)}, or send a WAV "
                "stream without an encoding"
            )
    rate = _int(query, "sample_rate")
    if encoding is not None and rate is None:
        raise ParamError("sample_rate is required when encoding is given")
    if rate is not None and not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
        raise ParamError(f"sample_rate must be between {MIN_RATE_HZ} and {MAX_RATE_HZ} Hz, got {rate}")
    channels = _int(query, "channels")
    if channels not in (None, 1):
        raise ParamError(f"channels={channels}: this server transcribes one channel; send mono audio")
    if _bool(query, "multichannel", False):
        raise ParamError("multichannel is not supported: send one channel per connection")
    endpointing = query.get("endpointing")
    endpointing_ms: int | None = 10
    if endpointing is not None:
        endpointing_ms = None if endpointing.lower() == "false" else _int(query, "endpointing")
        if endpointing_ms is not None and endpointing_ms < 0:
            raise ParamError("endpointing must be a number of milliseconds or false")
    utterance_end = _int(query, "utterance_end_ms")
    if utterance_end is not None and utterance_end < 1000:
        raise ParamError("utterance_end_ms must be at least 1000")
    words = [
        *query.getall("keyterm", []),
        *(k.rsplit(":", 1)[0] if k.count(":") else k for k in query.getall("keywords", [])),
    ]
    hotwords = tuple(dict.fromkeys(w.strip()[: protocol.MAX_HOTWORD_CHARS] for w in words if w.strip()))
    return ListenParams(
        encoding=encoding,
        sample_rate=rate,
        language=None if detect else parse_language(query.get("language"), default_language),
        model=query.get("model") or "nova-3",
        interim_results=_bool(query, "interim_results", False),
        punctuate=_bool(query, "punctuate", False),
        smart_format=_bool(query, "smart_format", False),
        diarize=_bool(query, "diarize", False) or "diarize_model" in query,
        endpointing_ms=endpointing_ms,
        utterance_end_ms=utterance_end,
        vad_events=_bool(query, "vad_events", False),
        hotwords=hotwords[:MAX_HOTWORDS],
        redact=redact,
        name=person,
    )


def presented_key(request: web.Request) -> tuple[str | None, bool]:
    """The API key as Deepgram's clients send it: ``Authorization: Token <key>`` (or ``Bearer <token>``), else the
    WebSocket subprotocols ``token, <key>`` (browsers cannot set headers). Returns (key, came as a subprotocol)."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() in ("token", "bearer") and value.strip():
        return value.strip(), False
    protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    if len(protocols) >= 2 and protocols[0].lower() in ("token", "bearer"):
        return protocols[1], True
    return request.query.get("token") or None, False
