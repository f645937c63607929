"""What a session's voice activity detection hears, as events for its transport: speech starting and stopping (the
segments that become sentences) and how far it has heard. For protocols that announce them (Deepgram's
``SpeechStarted`` and ``UtteranceEnd``, OpenAI Realtime's ``input_audio_buffer.speech_started``/``stopped``); a
listener registers with ``Session.watch_speech`` (``SpeechListeners``).

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


class SpeechListeners:
    """A session's listeners (``Session.watch_speech``): each told every event, synchronously, in the order they
    registered. A listener that raises is reported to ``on_failure`` (called inside the ``except``: it may log the
    exception) and the others are still told. False when there is none (no event need be made)."""

    def __init__(self, on_failure: Callable[[], None]) -> None:
        self._listeners: list[SpeechListener] = []
        self._on_failure = on_failure

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def add(self, listener: SpeechListener) -> Callable[[], None]:
        """Tell ``listener`` every event from now on; returns the call that stops it."""
        self._listeners.append(listener)

        def stop() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return stop

    def tell(self, event: SpeechEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                self._on_failure()
