"""What the engine asks of a speech recognizer, independent of how it runs.

A ``Transcriber`` decodes one segment of 16 kHz mono audio per call. Calls from many sessions may overlap; the
implementation batches them (vLLM's continuous batching). Cancelling the awaiting task abandons the request and
frees the recognizer: that is the only way to cancel, because an abort for a request the engine has not
registered yet is silently ignored by vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, Protocol

import numpy as np

from engine.asr.timestamps import TimedSpan


class Priority(IntEnum):
    """Lower runs first (vLLM's priority scheduling): a final never waits behind a partial, and live captions
    never wait behind an uploaded file."""

    FINAL = 0
    PARTIAL = 1
    BACKGROUND = 2  # segments of a file (an upload), and a translating session's originals: nobody waits for them

    @property
    def kind(self) -> str:
        """The decode kind's name, as the load, the metrics and ``/ready`` count it (``DECODE_KINDS``)."""
        return self.name.lower()


DECODE_KINDS = tuple(priority.kind for priority in Priority)  # "final", "partial", "background": the one list


class TranscriberState(StrEnum):
    """Lifecycle of the recognizer, visible to callers (``/ready`` reports it)."""

    NEW = "new"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"  # could not start, or its engine process died
    CLOSED = "closed"


@dataclass(frozen=True)
class DecodeRequest:
    """One segment to decode: ``audio`` float32 mono 16 kHz, at most 30 s."""

    request_id: str
    audio: np.ndarray
    priority: Priority
    language: str | None = "en"  # None = let the model detect it
    context: str = ""  # hotwords / prompt text shown to the model before the segment
    # Text the transcript must begin with: the words earlier partials of this segment agreed on. The recognizer
    # forces them as decoder tokens (one prefill step) and generates only what follows; the result's text
    # includes them. Empty for finals.
    prefix: str = ""
    # Ask for Whisper's timestamp tokens (the transcript's ``spans``); a recognizer without them ignores this.
    timestamps: bool = False
    # Sampling temperature of the decoder: 0 = greedy (what live captions use); higher samples more freely.
    temperature: float = 0.0
    # Whisper's task: "transcribe" (the words said) or "translate" (the speech in English, a multilingual model's
    # task for speech in any of its languages). A recognizer without tasks transcribes.
    task: str = "transcribe"


@dataclass(frozen=True)
class Transcript:
    """The recognizer's text for one segment, with what the hallucination guard needs."""

    text: str
    language: str | None
    avg_logprob: float  # mean log-probability per generated token (0 when no token)
    tokens: int
    decode_s: float  # wall time from submit to result, fallbacks included
    window_s: float = 30.0  # encoder window the accepted decode ran in (engine.asr.windows)
    encoder_positions: int = 1500  # encoder positions of that window (1500 = Whisper's stock 30 s)
    fallbacks: int = 0  # decodes thrown away as loops and redone in a larger window
    # Where the text was said (seconds from the start of the decoded audio), when timestamps were asked for and the
    # recognizer gives them; empty otherwise.
    spans: tuple[TimedSpan, ...] = ()
    # The text stops before the audio does: a partial that began to loop is cut where the repetition began (it is
    # shown for a moment and not worth a larger window's decode, which every other session would wait for), or the
    # session found that the decoder ended right after the words it was made to start with. Never a final's text.
    truncated: bool = False
    # The text was cut where the decode began to repeat itself: a partial's (it is ``truncated`` too), or any
    # decode's that looped in the largest window as well. Cut right after a sentence's end, the first copy is most
    # often all of what was said: Whisper repeats the speech into the silence its window pads it with.
    looped: bool = False
    # Per word of ``text`` (split on spaces): the decoder's probability of it, 1.0 for forced words
    # (``engine.asr.confidence``); empty when the recognizer does not say or the words could not be matched.
    word_probs: tuple[float, ...] = ()


class Transcriber(Protocol):
    """A shared recognizer. ``transcribe`` is safe to call concurrently from many tasks."""

    name: str

    @property
    def state(self) -> TranscriberState: ...

    @property
    def detail(self) -> str:
        """Why the state is what it is (error text when FAILED), else empty."""
        ...

    @property
    def warm_costs(self) -> dict[float, float]:
        """Seconds one decode took alone at warm-up, by encoder window (s): what the engine paces partials on and
        estimates its capacity from before live decodes are measured. Empty where the recognizer timed none."""
        ...

    async def start(self) -> None:
        """Load the model; returns when READY. Raises ``EngineNotReady`` if loading fails."""
        ...

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        """Decode one segment. Raises ``EngineNotReady`` unless READY; cancellation aborts the request."""
        ...

    def load(self) -> dict[str, int]:
        """Requests in flight by priority name (``{"final": n, "partial": m, "background": b}``): the engine's
        queue depth."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters for ``/ready``, logs and benches (e.g. decodes and fallbacks per encoder window)."""
        ...

    async def close(self) -> None:
        """Stop the engine and its child processes. Safe to call twice."""
        ...
