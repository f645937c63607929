"""What a session's voice activity detection hears, as events for its transport: speech starting and stopping (the
segments that become sentences) and how far it has heard. For protocols that announce them (Deepgram's
``SpeechStarted`` and ``UtteranceEnd``, OpenAI Realtime's ``input_audio_buffer.speech_started``/``stopped``); a
listener registers with ``Session.watch_speech``.

Times are ms of session audio. Every segment is reported, in order, however short: its start when the endpointer
opens it, its stop when it closes (a pause, a change of voice, a length cap, a flush or the end of the stream).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SpeechStarted:
    """Segment ``index`` opened: its audio starts at ``start_ms`` (pre-roll included), its speech at ``speech_ms``."""

    index: int
    start_ms: int
    speech_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    """Segment ``index`` closed; its speech ended at ``speech_end_ms``."""

    index: int
    speech_end_ms: int


@dataclass(frozen=True)
class Heard:
    """The VAD has heard the session's audio up to ``position_ms`` (after each step of about 60 ms)."""

    position_ms: int


SpeechEvent = SpeechStarted | SpeechStopped | Heard
SpeechListener = Callable[[SpeechEvent], None]
