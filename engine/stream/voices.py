"""A change of voice inside the open segment, and the speaker label its voice would lock with.

Turns in conversation are often separated by less silence than the endpoint waits for, so the session looks for
another voice inside the open segment: the turn detector (``engine.speakers.turns``) asks for the embeddings of
short windows of its speech (``watch``; the speaker service computes them off the event loop), and once it
confirms a change, ``on_turn`` gets the sample where the new voice began (the session splits the segment there).
``label`` is the label the open segment would lock with now, shown beside its partial text. Without a speaker
service, or with turns off, nothing is watched and ``label`` stays None.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from engine.audio.pcm import AudioBuffer
from engine.speakers.service import SpeakerService
from engine.speakers.tracker import SpeakerTracker
from engine.speakers.turns import TurnDetector, Window
from engine.stream.endpoint import Endpointer, SegmentOpened


class Voices:
    """One session's voice watch over its open segment."""

    def __init__(
        self,
        service: SpeakerService | None,
        tracker: SpeakerTracker | None,
        turns: TurnDetector | None,
        *,
        endpointer: Endpointer,
        audio: AudioBuffer,
        live: Callable[[], bool],
        on_turn: Callable[[int | None], None],
    ) -> None:
        """``tracker``/``turns``: the session's speaker tracker and turn detector; ``audio``: the session's buffer;
        ``live``: whether the session is still live (windows are asked for and taken only then); ``on_turn`` runs
        after each window's embedding is taken, with the sample where another voice began, or None (no change)."""
        self._service = service
        self._tracker = tracker
        self._turns = turns
        self._endpointer = endpointer
        self._audio = audio
        self._live = live
        self._on_turn = on_turn
        self.label: int | None = None  # provisional speaker label of the open segment (``relabel``)

    def opened(self, event: SegmentOpened, cut: int | None) -> None:
        """A segment opened; ``cut``: at that sample, by a split for a change of voice."""
        self.label = None
        if self._turns is not None and cut is not None:
            self._turns.cut(cut)
        elif self._turns is not None:
            self._turns.open(event.speech_start_sample)

    def closed(self, cut: int | None) -> None:
        """The open segment closed; ``cut``: by a split for a change of voice (the voice watch goes on)."""
        if self._turns is not None and cut is None:
            self._turns.close()

    def watch(self) -> None:
        """Ask for the embedding of the open segment's next window when the turn detector wants one."""
        opened = self._endpointer.open_segment
        if (
            self._turns is None
            or self._service is None
            or opened is None
            or not self._live()
            or not self._turns.due(self._endpointer.position_sample)
        ):
            return
        window = self._turns.next_window(
            self._endpointer.position_sample, self._endpointer.open_probs, opened.speech_start_sample
        )
        if window is None:
            return
        fut = self._service.embed_window(self._audio.slice(window.start_sample, window.end_sample))
        fut.add_done_callback(lambda f: self._on_window(window, f))

    def _on_window(self, window: Window, fut: asyncio.Future[np.ndarray | None]) -> None:
        opened = self._endpointer.open_segment
        if fut.cancelled() or fut.exception() is not None or self._turns is None or opened is None or not self._live():
            return
        vector = fut.result()
        if vector is None:
            return
        self._on_turn(self._turns.add(window, vector, self._endpointer.open_probs, opened.speech_start_sample))

    def relabel(self) -> bool:
        """Update ``label``, the label the open segment's voice would lock with now; True if it changed."""
        voice = self._turns.voice if self._turns is not None else None
        opened = self._endpointer.open_segment
        new_voice = opened is not None and opened.after_turn
        label = (
            self._tracker.peek(*voice, new_voice=new_voice) if voice is not None and self._tracker is not None else None
        )
        changed = label != self.label
        self.label = label
        return changed
