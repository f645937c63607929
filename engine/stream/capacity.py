"""How many live sessions the engine holds on time, and whether it holds the ones it has.

A live session needs the recognizer for each sentence: its first words, its closing decode (which most often becomes
its final), partials in between, and a final decode of its own where the closing one could not serve. Partials thin
out under load (``DecodeScheduler.partial_share``), the rest does not. So what a session *needs* is, per sentence,
two partial decodes plus one per ``CapacityConfig.thinnest_interval_s`` of its speech, and its finals, in recognizer
seconds (``RecognizerLoad`` charges each decode its share of the time it ran). The capacity is how many sessions
speaking like that fit in ``target_busy`` of the recognizers' time, and, on the front end, in ``target_busy`` of the
cores it has (VAD, speaker embeddings, word alignment, WebRTC: its process CPU per live session):

- before enough live speech has been measured (``measured_after_s`` seconds of locked sentences), from the recognizer's
  cost of one decode in each window (its warm-up, ``RecognizerLoad.cost_s``) and a typical speaker
  (``speaking_fraction``, ``sentences_per_s``): ``source`` "warm-up";
- from then on, from what the speech of the last ``window_s`` actually cost the recognizer, per second of speech, for
  a session that speaks at least as much as the typical speaker (silent sessions, a kiosk waiting for its meeting, do
  not make the others look cheap), and the front end's CPU per live session-second: ``source`` "measured" (kept when
  the server goes quiet, until new measurements replace it).

It is never more than ``most`` (the VAD's rows), and that many while nothing at all is known of the recognizer's cost.
Whatever the estimate, when finals run late (from a segment's close to its lock, p90 over ``late_window_s``, past
``late_after_s``) while several sessions share a busy recognizer, the server holds no more than it has: ``late``.

``sample`` is called about once a second (the engine's sampler), ``lock_lag`` at each lock (an ``EngineObserver``
event); ``estimate`` is cheap (a few sums over at most ``window_s`` samples) and called on every admission check.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from engine.config import CapacityConfig
from engine.observe import EngineObserver
from engine.stream.load import FINAL, PARTIAL, RecognizerLoad

LATE_QUANTILE = 0.9
LATE_BUSY = 0.5  # finals that run late count as load only while the recognizer is at least this busy
PARTIALS_PER_SENTENCE = 2  # its first words and its closing decode, however thin the partials between


@dataclass(frozen=True)
class CapacityEstimate:
    """What the engine can hold: ``sessions`` live sessions on time; see ``Capacity``."""

    sessions: int
    source: str  # "warm-up" or "measured"
    per_session_s: float  # recognizer seconds per second one live session needs at the thinnest partial cadence
    front_cpu_per_session: float | None  # the front end's CPU seconds per second per live session (None: unmeasured)
    recognizer_busy: float  # the recognizers' recent busy share (0-1)
    finals_late_s: float  # p90 of how long recent live sentences took from their segment's close to their lock
    late: bool  # finals run later than ``CapacityConfig.late_after_s`` under load: admit no one

    def as_dict(self, live: int) -> dict[str, object]:
        """For ``/ready`` and logs, with ``live`` sessions open: headroom = sessions - live."""
        return {"sessions": self.sessions, "live": live, "headroom": self.sessions - live, "source": self.source,
                "per_session_s": round(self.per_session_s, 4),
                "front_cpu_per_session": None if self.front_cpu_per_session is None
                else round(self.front_cpu_per_session, 4),
                "recognizer_busy": round(self.recognizer_busy, 3), "finals_late_s": round(self.finals_late_s, 3),
                "late": self.late}


@dataclass(frozen=True)
class _Sample:
    t: float
    live: int
    final_s: float  # cumulative recognizer seconds charged to finals
    partial_s: float  # ... to partials
    partials: int  # cumulative partial decodes finished
    front_cpu_s: float  # cumulative CPU seconds of this process


class Capacity(EngineObserver):
    """The engine's live-session capacity; see the module docstring. Hears ``lock_lag`` as an engine observer."""

    def __init__(self, config: CapacityConfig, load: RecognizerLoad, *, front_cores: float, most: int,
                 window_for: Callable[[float], float] = lambda _s: 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        """``front_cores``: cores the front end (this process) may use; ``most``: sessions it can ever hold (the VAD's
        rows); ``window_for``: the encoder window (s) a decode of that much audio (s) runs in; ``clock``: monotonic
        seconds; ``cpu_clock``: this process's CPU seconds (``time.process_time``: every thread, not the recognizer's
        own process)."""
        self.config = config
        self.load = load
        self.front_cores = max(0.1, front_cores)
        self.most = max(1, most)
        self._window_for = window_for
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._samples: deque[_Sample] = deque()
        self._locks: deque[tuple[float, float, float]] = deque()  # (clock time, close-to-lock s, speech s) of locks
        self._measured: tuple[float, float] | None = None  # last measured (per-session s, front CPU/session)
        self._live = 0

    # ---- inputs ---------------------------------------------------------------------------------------------
    def sample(self, live: int) -> None:
        """Now ``live`` live sessions are open."""
        now = self._clock()
        self._live = live
        self._samples.append(_Sample(now, live, self.load.charged_s(FINAL), self.load.charged_s(PARTIAL),
                                     self.load.decodes(PARTIAL), self._cpu_clock()))
        while self._samples and now - self._samples[0].t > self.config.window_s:
            self._samples.popleft()
        self._forget_locks(now)
        measured = self._measure()
        if measured is not None:
            self._measured = measured

    def lock_lag(self, seconds: float, speech_s: float) -> None:
        """A live sentence of ``speech_s`` seconds of speech locked ``seconds`` after its segment closed
        (``EngineObserver.lock_lag``)."""
        now = self._clock()
        self._locks.append((now, max(0.0, seconds), max(0.0, speech_s)))
        self._forget_locks(now)

    def _forget_locks(self, now: float) -> None:
        while self._locks and now - self._locks[0][0] > self.config.window_s:
            self._locks.popleft()

    # ---- the estimate ---------------------------------------------------------------------------------------
    def _measure(self) -> tuple[float, float] | None:
        """(recognizer s per session-second, front CPU s per session-second) of a session speaking at least as much as
        the typical speaker, over the window; None while it holds under ``measured_after_s`` seconds of speech."""
        cfg = self.config
        samples = list(self._samples)
        if len(samples) < 2:
            return None
        first, last = samples[0], samples[-1]
        locks = [(lag, speech_s) for t, lag, speech_s in self._locks if t >= first.t]
        speech_s = sum(s for _lag, s in locks)
        session_s = sum(a.live * (b.t - a.t) for a, b in itertools.pairwise(samples))
        if speech_s < cfg.measured_after_s or session_s <= 0:
            return None
        partials = last.partials - first.partials
        partial_cost = ((last.partial_s - first.partial_s) / partials if partials
                        else self.load.cost_s(self._window_for(4.0)))
        needed = sum(PARTIALS_PER_SENTENCE + s / cfg.thinnest_interval_s for _lag, s in locks)
        per_speech_s = ((last.final_s - first.final_s) + partial_cost * needed) / speech_s
        # A session speaks this share of its time: as measured, but never less than a typical speaker does. (The
        # front end's CPU is taken per session-second as it is: most of it, VAD, Opus and the event loop, is paid
        # whether the session speaks or not.)
        speaking = max(min(1.0, speech_s / session_s), cfg.speaking_fraction)
        front = (last.front_cpu_s - first.front_cpu_s) / session_s
        return per_speech_s * speaking, front

    def _prior(self) -> float:
        """Recognizer seconds per second of a typical speaker at the thinnest cadence, from the cost of one decode
        per window (``RecognizerLoad.cost_s``: the warm-up's, then live ones): per sentence its first words in the
        window of a short decode, the partials it needs in the window its speech fits, and a final decode of a third
        of them (the rest lock with their closing partial). 0 while nothing is known."""
        cfg = self.config
        speech_s = cfg.speaking_fraction / cfg.sentences_per_s  # one sentence's speech
        first = self.load.cost_s(self._window_for(1.0))
        sentence = self.load.cost_s(self._window_for(speech_s))
        per_sentence = first + (PARTIALS_PER_SENTENCE - 1 + speech_s / cfg.thinnest_interval_s) * sentence \
            + sentence / 3
        return cfg.sentences_per_s * per_sentence

    def finals_late_s(self) -> float:
        """The ``LATE_QUANTILE`` of the close-to-lock times of the last ``late_window_s`` (0 with none)."""
        since = self._clock() - self.config.late_window_s
        lags = sorted(lag for t, lag, _speech in self._locks if t >= since)
        if not lags:
            return 0.0
        return lags[min(len(lags) - 1, int(LATE_QUANTILE * len(lags)))]

    def estimate(self) -> CapacityEstimate:
        """How many live sessions the engine holds on time now (see the module docstring)."""
        cfg = self.config
        front: float | None
        if self._measured is not None:
            need, front = self._measured
            source = "measured"
        else:
            need, front, source = self._prior(), None, "warm-up"
        budget = cfg.target_busy * self.load.parallel
        sessions = self.most if need <= 0 else int(budget / need)
        if front is not None and front > 0:
            sessions = min(sessions, int(cfg.target_busy * self.front_cores / front))
        late_s = self.finals_late_s()
        busy = self.load.busy()
        late = self._live > 1 and busy >= LATE_BUSY and late_s > cfg.late_after_s
        return CapacityEstimate(max(1, min(self.most, sessions)), source, need, front, busy, late_s, late)
