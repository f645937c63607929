"""What the engine reports as it works, for whoever counts (the server's Prometheus metrics, a bench).

An ``EngineObserver`` gets one call per event, at the one place where the event happens: audio a session received,
a decode the recognizer finished, the first text a sentence showed, a sentence locked. Its methods are no-ops here;
subclass and override what you need, and add it with ``CaptionEngine.observers.add``.

Contract: calls come on the event loop, synchronously, in the middle of the engine's work, so an observer must be
cheap (count and return; no I/O, no waiting). An observer that raises is logged once and otherwise ignored: counting
never breaks captioning. Latencies are seconds of the engine's monotonic clock, measured from when the audio in
question reached the session (``Session.feed``), so they are what the server adds, not the network before it.

``SessionStats`` are one session's own counters (``Session.stats``), read by benches and logs once it is done.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


class EngineObserver:
    """Receives engine events; every method does nothing unless overridden."""

    def audio_received(self, seconds: float, background: bool) -> None:
        """A session was fed ``seconds`` of audio; ``background``: a file's session (an upload), not a live one."""

    def decoded(self, kind: str, window_s: float, decode_s: float, fallbacks: int) -> None:
        """The recognizer finished a decode of ``kind`` (``engine.DECODE_KINDS``) in ``decode_s`` seconds of wall
        time (submit to result, queueing and fallbacks included), in an encoder window of ``window_s`` seconds.
        ``fallbacks``: decodes of it thrown away as loops and redone in a larger window. Cancelled or failed
        decodes are not reported; a partial that became its segment's final is reported once, as a partial."""

    def first_text(self, latency_s: float) -> None:
        """A sentence of a live session showed text for the first time (its first non-empty partial, or its locked
        text if no partial showed): ``latency_s`` after its first speech reached the session."""

    def locked(self, latency_s: float) -> None:
        """A sentence of a live session locked ``latency_s`` after its last speech reached the session (the
        endpoint's silence wait and the final decode)."""

    def lock_lag(self, seconds: float, speech_s: float) -> None:
        """A sentence of a live session (``speech_s`` seconds of speech) locked ``seconds`` after the audio that closed
        its segment reached the session: what its final decode (and any wait for the VAD) added to the endpoint's
        silence. How late finals run: near 0 when the closing partial, decoded during the silence, became the final."""


class Observers(EngineObserver):
    """Hands each event to every observer added (the engine holds one of these as ``CaptionEngine.observers``)."""

    def __init__(self) -> None:
        self._observers: list[EngineObserver] = []
        self._failed: set[int] = set()  # ids of observers whose failure was logged already

    def add(self, observer: EngineObserver) -> None:
        """Start reporting to ``observer`` (adding it twice is a no-op)."""
        if observer not in self._observers:
            self._observers.append(observer)

    def remove(self, observer: EngineObserver) -> None:
        """Stop reporting to ``observer``; a no-op if it was not added."""
        if observer in self._observers:
            self._observers.remove(observer)
        self._failed.discard(id(observer))

    def __len__(self) -> int:
        return len(self._observers)

    def _failure(self, observer: EngineObserver) -> None:
        if id(observer) not in self._failed:
            self._failed.add(id(observer))
            log.exception("engine observer %r failed (further failures of it are not logged)", observer)

    def audio_received(self, seconds: float, background: bool) -> None:
        for observer in self._observers:
            try:
                observer.audio_received(seconds, background)
            except Exception:
                self._failure(observer)

    def decoded(self, kind: str, window_s: float, decode_s: float, fallbacks: int) -> None:
        for observer in self._observers:
            try:
                observer.decoded(kind, window_s, decode_s, fallbacks)
            except Exception:
                self._failure(observer)

    def first_text(self, latency_s: float) -> None:
        for observer in self._observers:
            try:
                observer.first_text(latency_s)
            except Exception:
                self._failure(observer)

    def locked(self, latency_s: float) -> None:
        for observer in self._observers:
            try:
                observer.locked(latency_s)
            except Exception:
                self._failure(observer)

    def lock_lag(self, seconds: float, speech_s: float) -> None:
        for observer in self._observers:
            try:
                observer.lock_lag(seconds, speech_s)
            except Exception:
                self._failure(observer)


@dataclass
class SessionStats:
    """One session's counters, for benches and logs."""

    segments: int = 0
    closed: dict[str, int] = field(default_factory=dict)  # segments closed, by why (``CloseReason`` values)
    sentences: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # segments the guard dropped, by reason
    partials: int = 0
    rejoined: int = 0  # changes of voice undone: both halves dropped, decoded again as one that the guard kept
    final_decode_s: list[float] = field(default_factory=list)
    languages: dict[str, int] = field(default_factory=dict)  # sentences kept, by the language they were decoded in
    provisional_labels: int = 0  # sentences that locked before their speaker embedding was in (``Labels``)
    corrected_labels: int = 0  # ... whose label a ``speakers`` message then changed
