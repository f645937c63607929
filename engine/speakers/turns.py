"""Speaker turns inside an open segment: where the voice changes while no pause is long enough to end the segment.

Two readers who follow each other with a 0.3-1 s gap end up in one segment (the endpointer waits longer than that
for a sentence to end), and a segment gets one embedding and one label. ``TurnDetector`` watches the open segment
as it grows: every ``hop_s`` of audio (every ``confirm_hop_s`` once a window sounds unlike the turn) it asks for the
speaker embedding of the last ``window_s`` when that window is mostly speech, keeps the mean embedding of the
current turn's windows that sound like it (``join_margin``: not those where two voices overlap) as the turn's voice,
and reports a change when ``confirm_windows`` windows in a row fall below ``change_similarity`` to that voice and
agree with each other. The change is placed at the longest pause (else the least speech-like moment) where the
first deviating window says the new voice began, so that the cut falls between words; the caller ends the segment
there (decoding each side on its own audio) and the detector starts the new turn with the windows that lie after
the cut.

Pure and synchronous; one per session. Positions are absolute sample indices of the session's audio, as in the
endpointer; ``probs`` are the endpointer's speech probabilities of its open segment, one per VAD window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.audio.pcm import SAMPLE_RATE
from engine.audio.vad import WINDOW
from engine.speakers.tracker import unit_vector


@dataclass(frozen=True)
class TurnConfig:
    """Change detection inside a segment. Tuned on ``bench/speakers.py --turns`` (alternating LibriSpeech readers
    and the RTTM clips); see docs/benchmarks.md ("Speaker turns")."""

    window_s: float = 1.5
    """Audio per embedding window, seconds. Shorter windows find a change sooner but embed a voice less surely."""
    hop_s: float = 0.5
    """A new window every this many seconds of audio of the open segment."""
    confirm_hop_s: float = 0.25
    """After a window unlike the turn's voice, the next one comes this soon (at most ``hop_s``): a change is confirmed
    a quarter second sooner (new label p50 1.64 -> 1.40 s in the bench) for about 5 % more windows."""
    min_speech: float = 0.6
    """Share of a window's VAD frames that must be speech for it to be embedded (pauses embed as noise)."""
    change_similarity: float = 0.77
    """Cosine to the turn's voice below which a window is another voice. Fitted by ``python -m bench.speaker_fit``
    (0.62-0.83 tried): lower values miss changes, higher ones split single readers; 0.77 also lowered the held-out
    AMI clips' speaker error (docs/benchmarks.md, "Speaker thresholds fitted on data")."""
    join_margin: float = 0.0
    """A window joins the turn's voice (the mean of the windows that joined) only at a cosine of at least
    ``change_similarity + join_margin`` to it. A window in between sounds like neither voice surely, most often two
    voices overlapping: averaged in, it drags the voice towards the other speaker until that speaker no longer
    deviates from it, and the change is never found. Such a window only breaks a run of deviating windows. 0 (the
    default, Resemblyzer's) lets every window that is not unlike the voice join it."""
    confirm_windows: int = 2
    """Consecutive deviating windows that make a change (one alone is often a word the encoder hears oddly)."""
    min_turn_s: float = 1.5
    """A turn needs windows spanning this many seconds of its own audio before changes are looked for."""
    enabled: bool = True

    def __post_init__(self) -> None:
        if not 0.25 <= self.window_s <= 5.0:
            raise ValueError(f"window_s must be within 0.25-5 s, got {self.window_s}")
        if not 0.05 <= self.hop_s <= self.window_s:
            raise ValueError(f"hop_s must be within 0.05 s and window_s, got {self.hop_s}")
        if not 0.05 <= self.confirm_hop_s <= self.hop_s:
            raise ValueError(f"confirm_hop_s must be within 0.05 s and hop_s, got {self.confirm_hop_s}")
        if not 0.0 <= self.min_speech <= 1.0:
            raise ValueError(f"min_speech must be a share in [0, 1], got {self.min_speech}")
        if not -1.0 <= self.change_similarity <= 1.0:
            raise ValueError(f"change_similarity must be a cosine in [-1, 1], got {self.change_similarity}")
        if not 0.0 <= self.join_margin <= 1.0:
            raise ValueError(f"join_margin must be a cosine difference in [0, 1], got {self.join_margin}")
        if self.confirm_windows < 1:
            raise ValueError(f"confirm_windows must be >= 1, got {self.confirm_windows}")
        if self.min_turn_s < 0.0:
            raise ValueError(f"min_turn_s must be >= 0, got {self.min_turn_s}")

    @property
    def window(self) -> int:
        """Window length in samples (a whole number of VAD windows)."""
        return _samples(self.window_s)

    @property
    def hop(self) -> int:
        return _samples(self.hop_s)

    @property
    def confirm_hop(self) -> int:
        return _samples(self.confirm_hop_s)


@dataclass(frozen=True)
class Window:
    """One embedding window of the open segment: audio samples [start_sample, end_sample), asked for during turn
    ``turn``."""

    turn: int
    start_sample: int
    end_sample: int


class TurnDetector:
    """Finds voice changes in the open segment. ``open`` at each segment start, ``next_window`` after each VAD push
    (it says which window to embed, if any), ``add`` with each window's embedding (it may return a cut position),
    ``close`` when the segment ends. Results of windows asked for before a ``close`` or a cut are ignored."""

    def __init__(self, config: TurnConfig, speech_threshold: float) -> None:
        """``speech_threshold``: the VAD probability at or above which a frame is speech (``VadConfig.offset``)."""
        self.config = config
        self.threshold = speech_threshold
        self.turn = 0  # increases at every open and cut: stale window results are recognised by it
        self.active = False
        self.start = 0  # where the current turn's audio starts
        self._next_end = 0  # the next window ends here (or later)
        self._voice: list[tuple[Window, np.ndarray]] = []  # windows of the current turn's voice
        self._deviating: list[tuple[Window, np.ndarray]] = []  # consecutive windows unlike it, newest last

    def open(self, start: int) -> None:
        """A segment opened; its speech starts at sample ``start``."""
        self._begin(start, [])
        self.active = self.config.enabled

    def close(self) -> None:
        """The segment ended (pending windows are dropped)."""
        self.turn += 1
        self.active = False
        self._voice, self._deviating = [], []

    def due(self, position: int) -> bool:
        """Whether ``next_window`` would consider a window now (cheap; ``position``: audio the VAD has seen)."""
        return self.active and position >= self._next_end and position - self.start >= self.config.window

    def next_window(self, position: int, probs: np.ndarray, probs_start: int) -> Window | None:
        """The window to embed now, or None. ``position``: audio the VAD has seen; ``probs``: speech probability of
        each VAD window of the open segment from sample ``probs_start`` on."""
        cfg = self.config
        if not self.due(position):
            return None
        end = position - (position - probs_start) % WINDOW
        start = end - cfg.window
        self._next_end = end + cfg.hop
        if self._speech_share(probs, probs_start, start, end) < cfg.min_speech:
            return None
        return Window(self.turn, start, end)

    def add(self, window: Window, embedding: np.ndarray, probs: np.ndarray, probs_start: int) -> int | None:
        """Take one window's embedding; return the sample where a new voice begins when this confirms a change
        (the caller cuts the segment there and calls ``cut``), else None."""
        if not self.active or window.turn != self.turn:
            return None
        unit = unit_vector(embedding)
        voice = self._voice_vector()
        spans_turn = (
            bool(self._voice) and self._voice[-1][0].end_sample - self._voice[0][0].start_sample >= self._min_turn
        )
        if voice is None or not spans_turn:
            # Too little of the turn to judge a window against: every window makes the voice.
            self._voice.append((window, unit))
            return None
        similarity = float(unit @ voice)
        if similarity >= self.config.change_similarity:
            if similarity >= self.config.change_similarity + self.config.join_margin:
                self._voice.append((window, unit))
            self._deviating = []
            return None
        self._deviating.append((window, unit))
        self._keep_agreeing_run()
        self._next_end = min(self._next_end, window.end_sample + self.config.confirm_hop)
        if len(self._deviating) < self.config.confirm_windows:
            return None
        first = self._deviating[0][0]
        return self._change_point(first, probs, probs_start)

    @property
    def voice(self) -> tuple[np.ndarray, float] | None:
        """The current turn's voice so far: (unit embedding, seconds of audio its windows span), or None before its
        first window."""
        vector = self._voice_vector()
        if vector is None:
            return None
        return vector, (self._voice[-1][0].end_sample - self._voice[0][0].start_sample) / SAMPLE_RATE

    def cut(self, at: int) -> None:
        """The caller ended the segment at ``at``; the new turn keeps the deviating windows that lie after it."""
        # Windows mostly after the cut are the new voice already: a label can show for it at once.
        after = [(w, e) for w, e in self._deviating if (w.start_sample + w.end_sample) // 2 >= at]
        self._begin(at, after)

    @property
    def _min_turn(self) -> int:
        return round(self.config.min_turn_s * SAMPLE_RATE)

    def _begin(self, start: int, voice: list[tuple[Window, np.ndarray]]) -> None:
        self.turn += 1
        self.start = start
        self._next_end = start + self.config.window
        self._voice = [(Window(self.turn, w.start_sample, w.end_sample), e) for w, e in voice]
        self._deviating = []

    def _voice_vector(self) -> np.ndarray | None:
        if not self._voice:
            return None
        return unit_vector(np.sum([e for _, e in self._voice], axis=0))

    def _keep_agreeing_run(self) -> None:
        """Keep only the newest run of deviating windows that sound like one another (one new voice, not a stretch
        of noise). A window that straddles the change sounds like neither voice: it must not block the windows of
        the new voice that follow it (they all deviate from the old turn, so the run would otherwise never agree
        again for the rest of the segment)."""
        run = len(self._deviating) - 1
        while run > 0 and float(self._deviating[run - 1][1] @ self._deviating[run][1]) >= self.config.change_similarity:
            run -= 1
        del self._deviating[:run]

    def _speech_share(self, probs: np.ndarray, probs_start: int, start: int, end: int) -> float:
        lo, hi = max(0, (start - probs_start) // WINDOW), max(0, (end - probs_start) // WINDOW)
        frames = probs[lo:hi]
        return float((frames >= self.threshold).mean()) if frames.size else 0.0

    def _change_point(self, first: Window, probs: np.ndarray, probs_start: int) -> int:
        """Where the new voice begins. The first deviating window is mostly the new voice and the window a hop before
        it mostly the old: the change lies between the previous window's middle and this one's. Within that span (a
        little wider), the middle of the longest pause, else the least speech-like frame."""
        half = self.config.window // 2
        lo = max(first.start_sample + half - self.config.hop - half // 2, self.start + WINDOW)
        hi = first.end_sample - half // 2
        i0, i1 = max(0, (lo - probs_start) // WINDOW), max(0, (hi - probs_start) // WINDOW)
        frames = probs[i0:i1]
        if frames.size == 0:
            return max(lo, min(hi, first.start_sample + half))
        quiet = frames < self.threshold
        best_len, best_mid, run = 0, -1, 0
        for i, q in enumerate(quiet.tolist()):
            run = run + 1 if q else 0
            if run > best_len:
                best_len, best_mid = run, i - run // 2
        index = best_mid if best_len else int(np.argmin(frames))
        return probs_start + (i0 + index) * WINDOW


def _samples(seconds: float) -> int:
    """Seconds as samples, a whole number (at least one) of VAD windows."""
    return max(1, round(seconds * SAMPLE_RATE / WINDOW)) * WINDOW
