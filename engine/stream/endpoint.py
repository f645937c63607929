"""The endpointer: turns per-window speech probabilities into segments with a dynamic silence schedule.

Pure and synchronous, one per session, like Silero's VADIterator: ``push(probs)`` returns what happened, ``flush()``
closes whatever is open. All positions are absolute sample indices of the session's audio.

A segment opens after ``min_speech_ms`` of consecutive speech (with ``preroll_ms`` of audio before the onset kept),
and closes when the trailing silence reaches the schedule's value for the speech so far (long segments close on
shorter pauses), sooner when the session says its text ends a sentence (``end_sentence``), or when it hits the
hard cap, in which case it is cut at the quietest window of its last seconds
and the rest carries on as the next segment. ``split`` ends the open segment at a given sample in the same way (a
change of speaker found by ``engine.speakers.turns``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from engine.audio.pcm import SAMPLE_RATE
from engine.audio.vad import WINDOW
from engine.config import EndpointConfig, VadConfig


class CloseReason(StrEnum):
    SILENCE = "silence"
    SENTENCE = "sentence"  # a short pause after text that ends a sentence (``end_sentence``)
    CAP = "cap"
    TURN = "turn"  # another voice began (``split``)
    FLUSH = "flush"


@dataclass(frozen=True)
class SegmentOpened:
    """Speech began; the segment's audio starts at sample ``start_sample`` (pre-roll included)."""

    index: int
    start_sample: int
    speech_start_sample: int
    after_turn: bool = False  # opened by ``Endpointer.split``: another voice than the segment before it


@dataclass(frozen=True)
class SegmentClosed:
    """The segment ``index`` is complete: its audio is samples [start_sample, end_sample); speech ran
    [speech_start_sample, speech_end_sample). ``probs``: the VAD's speech probability of each 512-sample window from
    ``speech_start_sample`` to ``end_sample`` (where the words were said: ``engine.stream.words``)."""

    index: int
    start_sample: int
    end_sample: int
    speech_start_sample: int
    speech_end_sample: int
    reason: CloseReason
    probs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32), compare=False, repr=False)
    after_turn: bool = False  # the segment began at a change of voice (its ``SegmentOpened.after_turn``)

    @property
    def speech_samples(self) -> int:
        """How long its speech ran, in samples."""
        return self.speech_end_sample - self.speech_start_sample


SegmentEvent = SegmentOpened | SegmentClosed

_CAP_SEARCH_MS = 3_000  # where to look for a quiet cut before the cap


def _ms(samples: int) -> int:
    return samples * 1000 // SAMPLE_RATE


def _samples(ms: int) -> int:
    return ms * SAMPLE_RATE // 1000


class Endpointer:
    """One session's segmenter. Not thread-safe; cheap (a few comparisons per 32 ms window)."""

    def __init__(self, vad: VadConfig, endpoint: EndpointConfig) -> None:
        self.vad = vad
        self.cfg = endpoint
        self._min_onset = max(1, -(-_samples(vad.min_speech_ms) // WINDOW))
        self.reset()

    def reset(self) -> None:
        self.position_sample = 0  # samples consumed so far
        self.segments = 0  # segments opened so far
        self._onset_run = 0
        self._last_end = 0  # end of the previous segment: pre-roll never reaches back over it
        self._open: SegmentOpened | None = None
        self._speech_end_sample = 0
        self._silence = 0  # trailing silent windows in the open segment
        self._probs: list[float] = []  # probabilities of the open segment's windows since speech_start

    @property
    def open_segment(self) -> SegmentOpened | None:
        return self._open

    @property
    def speech_end_sample(self) -> int:
        """End of the last speech window of the open segment (absolute sample index)."""
        return self._speech_end_sample

    @property
    def onset_start_sample(self) -> int:
        """Where the run of speech windows that has not opened a segment yet began (``position_sample`` if there is
        none): a segment that opens later has its speech start here or after."""
        return self.position_sample - self._onset_run * WINDOW

    @property
    def open_probs(self) -> np.ndarray:
        """Speech probability of each VAD window of the open segment from its ``speech_start`` on (empty if none)."""
        return np.asarray(self._probs, np.float32)

    def push(self, probs: np.ndarray) -> list[SegmentEvent]:
        """Consume one probability per 512-sample window, in order; return segment events in order."""
        events: list[SegmentEvent] = []
        for p in probs.tolist():
            start = self.position_sample
            self.position_sample += WINDOW
            if self._open is None:
                self._onset_run = self._onset_run + 1 if p >= self.vad.onset else 0
                if self._onset_run >= self._min_onset:
                    onset = self.position_sample - self._onset_run * WINDOW
                    self._begin(onset, events)
                continue
            self._probs.append(p)
            if p >= self.vad.offset:
                self._speech_end_sample = self.position_sample
                self._silence = 0
            else:
                self._silence += 1
            speech_ms = _ms(self._speech_end_sample - self._open.speech_start_sample)
            if _ms(self._silence * WINDOW) >= self.cfg.silence_for(speech_ms):
                events.append(self._close(self._closing_end(), CloseReason.SILENCE))
            elif _ms(self.position_sample - self._open.start_sample) >= self.cfg.max_segment_ms:
                self._cut_at_cap(start, events)
        return events

    def end_sentence(self) -> SegmentClosed | None:
        """Close the open segment now, in a pause, because its text ends a sentence (the session decides that; the
        schedule's silence is the longest wait). Its audio ends ``postroll_ms`` after its speech, as at the schedule's
        close. Returns the event, or None when nothing is open or the speaker is talking (no pause)."""
        if self._open is None or not self._silence:
            return None
        return self._close(self._closing_end(), CloseReason.SENTENCE)

    def flush(self) -> SegmentClosed | None:
        """Close the open segment now (end of stream). Returns its event, or None if nothing was open."""
        self._onset_run = 0
        if self._open is None:
            return None
        return self._close(self._closing_end(), CloseReason.FLUSH)

    def split(self, at: int) -> list[SegmentEvent]:
        """End the open segment at sample ``at`` (reason ``TURN``) and open the next one there with the audio after it.
        Returns the two events, or none when nothing is open or ``at`` is not inside the open segment's speech."""
        opened = self._open
        if opened is None or not opened.speech_start_sample + WINDOW <= at <= self.position_sample - WINDOW:
            return []
        at = opened.speech_start_sample + (at - opened.speech_start_sample) // WINDOW * WINDOW
        kept = (self.position_sample - at) // WINDOW
        tail = self._probs[len(self._probs) - kept :]
        # The old segment's speech ends at its last speech window before the cut.
        before = self._probs[: len(self._probs) - kept]
        speech = [i for i, p in enumerate(before) if p >= self.vad.offset]
        speech_end = self._speech_end_sample
        self._speech_end_sample = opened.speech_start_sample + (speech[-1] + 1) * WINDOW if speech else at
        events: list[SegmentEvent] = [self._close(at, CloseReason.TURN)]
        # The new segment's speech starts at its first speech window after the cut; its audio at the cut (the
        # pre-roll reaches back to the previous segment's end and no further).
        first = next((i for i, p in enumerate(tail) if p >= self.vad.offset), 0)
        self._begin(at + first * WINDOW, events, after_turn=True)
        self._probs = list(tail[first:])
        self._speech_end_sample = speech_end
        self._silence = 0
        for p in reversed(self._probs):
            if p >= self.vad.offset:
                break
            self._silence += 1
        return events

    def _begin(self, onset: int, events: list[SegmentEvent], preroll: bool = True, after_turn: bool = False) -> None:
        pre = _samples(self.cfg.preroll_ms) if preroll else 0
        self._open = SegmentOpened(self.segments, max(onset - pre, self._last_end, 0), onset, after_turn)
        self.segments += 1
        self._speech_end_sample = self.position_sample
        self._silence = 0
        self._onset_run = 0
        n_windows = (self.position_sample - onset) // WINDOW
        self._probs = [1.0] * n_windows
        events.append(self._open)

    def _closing_end(self) -> int:
        """Where the open segment ends if it closed now: its speech's end plus the post-roll, within the audio in."""
        return min(self._speech_end_sample + _samples(self.cfg.postroll_ms), self.position_sample)

    def _close(self, end: int, reason: CloseReason) -> SegmentClosed:
        assert self._open is not None
        opened = self._open
        windows = max(0, (end - opened.speech_start_sample) // WINDOW)
        closed = SegmentClosed(
            opened.index,
            opened.start_sample,
            end,
            opened.speech_start_sample,
            min(self._speech_end_sample, end),
            reason,
            np.asarray(self._probs[:windows], np.float32),
            opened.after_turn,
        )
        self._open = None
        self._last_end = end
        self._probs = []
        self._onset_run = 0
        return closed

    def _cut_at_cap(self, window_start: int, events: list[SegmentEvent]) -> None:
        """Cut at the least speech-like window of the last few seconds; what follows opens the next segment."""
        assert self._open is not None
        search = min(len(self._probs), max(1, _samples(_CAP_SEARCH_MS) // WINDOW))
        tail = np.asarray(self._probs[-search:])
        quiet = int(np.argmin(tail))
        cut = self.position_sample - (search - quiet) * WINDOW  # start of the quietest window
        cut = max(cut, self._open.speech_start_sample + WINDOW)
        still_speaking = self._silence == 0
        self._speech_end_sample = min(self._speech_end_sample, cut)
        events.append(self._close(cut, CloseReason.CAP))
        if still_speaking or cut < window_start:
            kept = (self.position_sample - cut) // WINDOW
            self._begin(cut, events, preroll=False)
            self._probs = list(tail[len(tail) - kept :]) if kept else []
