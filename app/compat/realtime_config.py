"""The configuration of an OpenAI Realtime transcription session: what ``session.update`` (the GA API, session
``type: "transcription"``) and ``transcription_session.update`` (the beta API) may set, and the session object the
server reports back (``session.created``, ``session.updated``, ``transcription_session.updated``).

What each setting does here:

- Audio format: ``audio/pcm`` at 24 kHz (beta ``pcm16``), ``audio/pcmu`` and ``audio/pcma`` at 8 kHz (beta
  ``g711_ulaw``, ``g711_alaw``); mono, resampled to 16 kHz like every stream. Any other format or rate is an error,
  as OpenAI's.
- ``transcription``: ``language`` (ISO-639-1; none: detected per sentence) and ``prompt`` (context for the
  recognizer, as the file API's ``prompt``) apply to the whole session: set them before the first audio. ``model``
  is reported back as given; the loaded model transcribes.
- ``turn_detection``: ``server_vad`` (or ``semantic_vad``) is this server's endpointer: its threshold, padding and
  silence values are reported back but the engine's own VAD and silence schedule decide; ``null``: the client
  commits the buffer.
- ``noise_reduction`` is accepted and reported back; it changes nothing. ``include`` with
  ``item.input_audio_transcription.logprobs`` adds ``logprobs`` to each ``completed`` event (``logprobs``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from engine import LANGUAGE_CODES

# beta format name -> (encoding, rate)
_BETA_FORMATS = {"pcm16": ("linear16", 24000), "g711_ulaw": ("mulaw", 8000), "g711_alaw": ("alaw", 8000)}
_FORMATS = {"audio/pcm": ("linear16", 24000), "audio/pcmu": ("mulaw", 8000), "audio/pcma": ("alaw", 8000)}
DEFAULT_TURN_DETECTION: dict[str, Any] = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
}


class ConfigError(ValueError):
    """A setting OpenAI's API would refuse too: ``param`` names it (``session.audio.input.format.rate``)."""

    def __init__(self, message: str, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param, self.code = param, code


@dataclass(frozen=True)
class RealtimeConfig:
    format: str = "audio/pcm"  # the GA name of the input format
    language: str | None = None
    prompt: str = ""
    model: str = "whisper-1"
    turn_detection: dict[str, Any] | None = field(default_factory=lambda: dict(DEFAULT_TURN_DETECTION))
    noise_reduction: Any = None
    include: Any = None

    @property
    def logprobs(self) -> bool:
        """``include`` asks for the transcription's log-probabilities."""
        return isinstance(self.include, list) and "item.input_audio_transcription.logprobs" in self.include

    @property
    def encoding(self) -> str:
        return _FORMATS[self.format][0]

    @property
    def rate(self) -> int:
        return _FORMATS[self.format][1]

    @property
    def server_vad(self) -> bool:
        return self.turn_detection is not None

    @property
    def transcription(self) -> dict[str, Any]:
        return {"model": self.model, "language": self.language, "prompt": self.prompt}

    def session(self, session_id: str) -> dict[str, Any]:
        """The GA session object (``type: "transcription"``)."""
        fmt: dict[str, Any] = {"type": self.format}
        if self.format == "audio/pcm":
            fmt["rate"] = self.rate
        return {
            "type": "transcription",
            "id": session_id,
            "object": "realtime.transcription_session",
            "audio": {
                "input": {
                    "format": fmt,
                    "transcription": self.transcription,
                    "noise_reduction": self.noise_reduction,
                    "turn_detection": self.turn_detection,
                }
            },
            "include": self.include,
        }

    def beta_session(self, session_id: str) -> dict[str, Any]:
        """The beta transcription session object."""
        beta = next(name for name, value in _BETA_FORMATS.items() if value == _FORMATS[self.format])
        return {
            "id": session_id,
            "object": "realtime.transcription_session",
            "input_audio_format": beta,
            "input_audio_transcription": self.transcription,
            "turn_detection": self.turn_detection,
            "input_audio_noise_reduction": self.noise_reduction,
            "include": self.include,
        }


def _obj(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{param} must be an object", param)
    return value


def _transcription(config: RealtimeConfig, value: Any, param: str) -> RealtimeConfig:
    if value is None:
        return config
    t = _obj(value, param)
    changes: dict[str, Any] = {}
    if "language" in t:
        language = t["language"]
        if language in (None, "", "auto"):
            changes["language"] = None
        elif not isinstance(language, str) or language.split("-")[0].lower() not in LANGUAGE_CODES:
            raise ConfigError(f"language {language!r} is not supported", f"{param}.language")
        else:
            changes["language"] = language.split("-")[0].lower()
    if "prompt" in t:
        if not isinstance(t["prompt"], str | None):
            raise ConfigError("prompt must be a string", f"{param}.prompt")
        changes["prompt"] = (t["prompt"] or "")[:1000]
    if isinstance(t.get("model"), str):
        changes["model"] = t["model"]
    return dataclasses.replace(config, **changes)


def _turn_detection(value: Any, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    td = _obj(value, param)
    kind = td.get("type", "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise ConfigError(f"turn_detection type {kind!r}: expected server_vad, semantic_vad or null", f"{param}.type")
    return {**(DEFAULT_TURN_DETECTION if kind == "server_vad" else {}), **td, "type": kind}


def apply_update(config: RealtimeConfig, session: Any, beta: bool) -> RealtimeConfig:
    """``config`` with a ``session.update``'s (``beta``: ``transcription_session.update``'s) ``session`` applied:
    fields it leaves out keep their values. Raises ``ConfigError``."""
    s = _obj(session, "session")
    if beta:
        changes: dict[str, Any] = {}
        if "input_audio_format" in s:
            fmt = s["input_audio_format"]
            if fmt not in _BETA_FORMATS:
                raise ConfigError(
                    f"input_audio_format {fmt!r}: expected pcm16, g711_ulaw or g711_alaw", "session.input_audio_format"
                )
            changes["format"] = next(n for n, v in _FORMATS.items() if v == _BETA_FORMATS[fmt])
        if "turn_detection" in s:
            changes["turn_detection"] = _turn_detection(s["turn_detection"], "session.turn_detection")
        if "input_audio_noise_reduction" in s:
            changes["noise_reduction"] = s["input_audio_noise_reduction"]
        if "include" in s:
            changes["include"] = s["include"]
        config = dataclasses.replace(config, **changes)
        return _transcription(config, s.get("input_audio_transcription"), "session.input_audio_transcription")
    if s.get("type", "transcription") != "transcription":
        raise ConfigError("this server runs transcription sessions only (session.type 'transcription')", "session.type")
    changes = {"include": s["include"]} if "include" in s else {}
    audio_input = _obj(_obj(s.get("audio") or {}, "session.audio").get("input") or {}, "session.audio.input")
    if audio_input.get("format") is not None:
        fmt = _obj(audio_input["format"], "session.audio.input.format")
        kind = fmt.get("type", "audio/pcm")
        if kind not in _FORMATS:
            raise ConfigError(
                f"format {kind!r}: expected audio/pcm, audio/pcmu or audio/pcma", "session.audio.input.format.type"
            )
        if fmt.get("rate") not in (None, _FORMATS[kind][1]):
            raise ConfigError(
                f"rate {fmt['rate']!r}: {kind} is {_FORMATS[kind][1]} Hz only", "session.audio.input.format.rate"
            )
        changes["format"] = kind
    if "turn_detection" in audio_input:
        changes["turn_detection"] = _turn_detection(audio_input["turn_detection"], "session.audio.input.turn_detection")
    if "noise_reduction" in audio_input:
        changes["noise_reduction"] = audio_input["noise_reduction"]
    config = dataclasses.replace(config, **changes)
    return _transcription(config, audio_input.get("transcription"), "session.audio.input.transcription")
