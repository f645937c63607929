"""What crosses HTTP between this engine and a ``vllm serve`` instance (``engine.asr.remote``): the audio of one
decode as the WAV file of a ``POST /v1/audio/transcriptions``, padded so that the instance's windowed Whisper picks
the window wanted, and the instance's answers read back: a stream of server-sent events (stopped early when the text
loops), a ``verbose_json`` body with timed segments, or an error body. What is the instance's fault is
``InstanceFailed`` (the caller tries another).
"""

from __future__ import annotations

import io
import json
import re
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.asr.guard import strip_nonspeech
from engine.asr.timestamps import TimedSpan
from engine.asr.windows import SAMPLE_RATE, WindowPolicy, tandem_repeat

_LOOP_CHECK_EVERY = 4  # streamed words between checks for a repetition loop
# The margin the windowed Whisper of ``vllm serve`` adds to the audio when it picks a window (its default policy):
# audio padded to ``window - margin`` makes it pick ``window``.
_SERVER_MARGIN_S = WindowPolicy().margin_s
_WORD = re.compile(r"[\w']+")


class InstanceFailed(Exception):
    """One instance could not answer one request (refused, 5xx, timeout, broken stream): try another."""


@dataclass
class Reply:
    """One decode's answer, as read from the instance."""

    text: str
    finish_reason: str | None
    tokens: int
    avg_logprob: float | None  # None when the instance does not say (streamed decodes)
    spans: tuple[TimedSpan, ...] = ()
    language: str | None = None


def wav_bytes(audio: np.ndarray, pad_to_samples: int = 0) -> bytes:
    """``audio`` (float32, 16 kHz mono, -1..1) as a 16-bit PCM WAV file, zero-padded to ``pad_to_samples``."""
    pcm = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    pcm16 = np.round(pcm * 32767.0).astype("<i2")
    if pcm16.size < pad_to_samples:
        pcm16 = np.concatenate([pcm16, np.zeros(pad_to_samples - pcm16.size, dtype="<i2")])
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm16.tobytes())
    return buf.getvalue()


def padded_samples(window_s: float) -> int:
    """Samples to pad a request's audio to so that the server's windowed Whisper picks ``window_s``."""
    return max(0, round((window_s - _SERVER_MARGIN_S) * SAMPLE_RATE))


async def stream_reply(lines: AsyncIterator[str], stop_on_loop: bool) -> Reply:
    """Read vLLM's server-sent events (``data: {json}`` lines, ``data: [DONE]`` last) into a reply; with
    ``stop_on_loop``, stop reading (the caller then closes the connection) as soon as the text repeats itself."""
    parts: list[str] = []
    finish: str | None = None
    tokens = 0
    chunks = 0
    checked = 0
    async for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        event = json.loads(payload)
        if "error" in event:
            error = event["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise InstanceFailed(f"error in stream: {message}")
        if event.get("usage"):
            tokens = int(event["usage"].get("completion_tokens") or 0)
        for choice in event.get("choices") or ():
            parts.append((choice.get("delta") or {}).get("content") or "")
            chunks += 1
            finish = choice.get("finish_reason") or finish
        if stop_on_loop and chunks >= checked + _LOOP_CHECK_EVERY:
            checked = chunks
            if tandem_repeat(word_ids("".join(parts))) is not None:
                finish = "loop"
                break
    return Reply(" ".join("".join(parts).split()), finish, tokens or chunks, None)


def verbose_reply(body: dict[str, Any], language: str | None) -> Reply:
    """A ``verbose_json`` answer: text, timed segments and their mean log-probability."""
    segments = body.get("segments") or []
    spans = tuple(
        TimedSpan(float(s["start"]), float(s["end"]), strip_nonspeech(" ".join(str(s["text"]).split())))
        for s in segments
    )
    counts = [len(s.get("tokens") or ()) for s in segments]
    tokens = sum(counts)
    avg = sum(float(s.get("avg_logprob", 0.0)) * n for s, n in zip(segments, counts, strict=True)) / max(1, tokens)
    return Reply(
        " ".join(str(body.get("text", "")).split()),
        "stop",
        tokens,
        avg if tokens else None,
        tuple(s for s in spans if s.text),
        body.get("language") or language,
    )


def word_ids(text: str) -> list[int]:
    """The words of ``text`` as small integers (equal words, equal ids): what the loop check reads when no token
    ids come back."""
    ids: dict[str, int] = {}
    return [ids.setdefault(w, len(ids)) for w in _WORD.findall(text.lower())]


def error_message(body: str) -> str:
    """vLLM's ``{"error": {"message": ...}}`` (or FastAPI's ``{"detail": ...}``) as one short line."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:200]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:200]
    if isinstance(data, dict) and data.get("detail"):
        return str(data["detail"])[:200]
    return body.strip()[:200]
