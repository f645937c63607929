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
  not make the others look cheap), and the front end's CPU per live session-second, counted in the seconds that had
  live sessions and no file session open: ``source`` "measured" (kept when the server goes quiet, until new
  measurements replace it).

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
_QUIET_MEASURED_S = 10.0  # session-seconds nobody talked in that measure what a silent session costs the front end


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
    # Live sessions it holds connected, talking or not (a silent microphone costs VAD and WebRTC only); None: as many
    # as ``sessions`` (an estimate that knows nothing of silent sessions).
    connections: int | None = None

    @property
    def holds(self) -> int:
        """Live sessions it holds connected (``connections``, else ``sessions``)."""
        return self.sessions if self.connections is None else self.connections

    def as_dict(self, live: int, talking: int | None = None) -> dict[str, object]:
        """For ``/ready`` and logs, with ``live`` sessions open (connected), ``talking`` of them counted as voices
        (None: all; a meeting's silent microphones are not): ``sessions`` is how many may talk at once on time,
        ``connections`` how many may be connected; headroom: how many more voices it takes (fewer than none when past
        either)."""
        talking = live if talking is None else talking
        return {
            "sessions": self.sessions,
            "connections": self.holds,
            "live": live,
            "talking": talking,
            "headroom": min(self.sessions - talking, self.holds - live),
            "source": self.source,
            "per_session_s": round(self.per_session_s, 4),
            "front_cpu_per_session": None
            if self.front_cpu_per_session is None
            else round(self.front_cpu_per_session, 4),
            "recognizer_busy": round(self.recognizer_busy, 3),
            "finals_late_s": round(self.finals_late_s, 3),
            "late": self.late,
        }


@dataclass(frozen=True)
class _Sample:
    t: float
    live: int
    speaking: int  # of them talking (``DecodeScheduler.speaking``)
    final_s: float  # cumulative recognizer seconds charged to finals
    partial_s: float  # ... to partials
    partials: int  # cumulative partial decodes finished
    front_cpu_s: float  # cumulative CPU seconds of this process
    files: int  # file sessions open (``SessionOptions.background``): their CPU is no live session's


@dataclass(frozen=True)
class _Lock:
    """A live sentence's lock: when (the clock's seconds), how long after its segment closed, and its speech."""

    t: float
    lag_s: float
    speech_s: float


@dataclass(frozen=True)
class _Measured:
    need: float  # recognizer seconds per second a talking voice needs at the thinnest partial cadence
    # The front end's CPU seconds per second per connected session, all of them (None: no second of the window was
    # one to measure it in, and none before)
    per_connection: float | None
    voice: float | None  # ...per talking voice, beyond what a silent session costs


class Capacity(EngineObserver):
    """The engine's live-session capacity; see the module docstring. Hears ``lock_lag`` as an engine observer."""

    def __init__(
        self,
        config: CapacityConfig,
        load: RecognizerLoad,
        *,
        front_cores: float,
        most: int,
        window_for: Callable[[float], float] = lambda _s: 30.0,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
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
        self._locks: deque[_Lock] = deque()  # the live sentences' locks in the window
        self._measured: _Measured | None = None  # the last measurement (kept when the server goes quiet)
        self._idle: float | None = None  # a silent session's front-end CPU as last measured (``_front``)
        self._live = 0
        self._speaking = 0

    # ---- inputs ---------------------------------------------------------------------------------------------
    def sample(self, live: int, speaking: int | None = None, files: int = 0) -> None:
        """Now ``live`` live sessions are open, ``speaking`` of them talking (None: all), and ``files`` file
        sessions."""
        now = self._clock()
        self._live = live
        self._speaking = live if speaking is None else min(live, speaking)
        self._samples.append(
            _Sample(
                now,
                live,
                self._speaking,
                self.load.charged_s(FINAL),
                self.load.charged_s(PARTIAL),
                self.load.decodes(PARTIAL),
                self._cpu_clock(),
                files,
            )
        )
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
        self._locks.append(_Lock(now, max(0.0, seconds), max(0.0, speech_s)))
        self._forget_locks(now)

    def _forget_locks(self, now: float) -> None:
        while self._locks and now - self._locks[0].t > self.config.window_s:
            self._locks.popleft()

    # ---- the estimate ---------------------------------------------------------------------------------------
    def _measure(self) -> _Measured | None:
        """What a talking voice needs of the recognizer (speaking at least as much as the typical speaker) and of the
        front end, and what a connected session costs the front end, over the window; None while it holds under
        ``measured_after_s`` seconds of speech."""
        cfg = self.config
        samples = list(self._samples)
        if len(samples) < 2:
            return None
        first, last = samples[0], samples[-1]
        locks = [lock for lock in self._locks if lock.t >= first.t]
        speech_s = sum(lock.speech_s for lock in locks)
        session_s = sum(a.live * (b.t - a.t) for a, b in itertools.pairwise(samples))
        voice_s = sum(a.speaking * (b.t - a.t) for a, b in itertools.pairwise(samples))
        if speech_s < cfg.measured_after_s or session_s <= 0:
            return None
        partials = last.partials - first.partials
        partial_cost = (
            (last.partial_s - first.partial_s) / partials if partials else self.load.cost_s(self._window_for(4.0))
        )
        needed = sum(PARTIALS_PER_SENTENCE + lock.speech_s / cfg.thinnest_interval_s for lock in locks)
        per_speech_s = ((last.final_s - first.final_s) + partial_cost * needed) / speech_s
        # A voice speaks this share of the time it talks: as measured, but never less than a typical speaker does (a
        # silent session, a kiosk waiting for its meeting, is not a voice, and does not make the voices look cheap).
        talking_s = voice_s if voice_s > 0 else session_s
        speaking = max(min(1.0, speech_s / talking_s), cfg.speaking_fraction)
        per_connection, voice = self._front(samples)
        return _Measured(per_speech_s * speaking, per_connection, voice)

    def _front(self, samples: list[_Sample]) -> tuple[float | None, float | None]:
        """The front end's CPU per connected session-second and per talking voice-second (``_Measured``), over the
        seconds of ``samples`` in which live sessions were open and no file was: the process's CPU in the others is
        no live session's (a file's VAD and alignment, the work after a meeting ends, a transcript's export). The last
        measurement's (or None) when the window has no such second."""
        # (Both ends of a second: in the one in which the last session closed the process may already be at other work.)
        counted = [
            (a, b) for a, b in itertools.pairwise(samples) if min(a.live, b.live) > 0 and a.files == b.files == 0
        ]
        session_s = sum(a.live * (b.t - a.t) for a, b in counted)
        if session_s <= 0:
            last = self._measured
            return (last.per_connection, last.voice) if last is not None else (None, None)
        voice_s = sum(a.speaking * (b.t - a.t) for a, b in counted)
        talking_s = voice_s if voice_s > 0 else session_s
        cpu_s = sum(b.front_cpu_s - a.front_cpu_s for a, b in counted)
        # Every connected session's VAD and WebRTC, and a talking voice's speaker embeddings and word alignment on
        # top: what is left per second of talking once the silent sessions' share is taken out. That share is
        # ``idle_front_cpu`` a session, or what the seconds in which nobody talked measured, if more: a machine
        # slower than the one it was measured on must not charge its silent sessions' cost to the few voices.
        silent_s = max(0.0, session_s - talking_s)
        quiet = [(a, b) for a, b in counted if a.speaking == b.speaking == 0]
        quiet_s = sum(a.live * (b.t - a.t) for a, b in quiet)
        if quiet_s >= _QUIET_MEASURED_S:  # (kept, like the rest, until seconds like these measure it again)
            self._idle = sum(b.front_cpu_s - a.front_cpu_s for a, b in quiet) / quiet_s
        return cpu_s / session_s, max(0.0, cpu_s - self._idle_cost() * silent_s) / talking_s

    def _idle_cost(self) -> float:
        """A connected, silent session's front-end CPU (s per s): ``idle_front_cpu``, or as measured if more."""
        return max(self.config.idle_front_cpu, self._idle or 0.0)

    def _prior(self) -> float:
        """Recognizer seconds per second of a typical speaker at the thinnest cadence, from the cost of one decode
        per window (``RecognizerLoad.cost_s``: the warm-up's, then live ones): per sentence its first words in the
        window of a short decode, the partials it needs in the window its speech fits, and a final decode of a third
        of them (the rest lock with their closing partial). 0 while nothing is known."""
        cfg = self.config
        speech_s = cfg.speaking_fraction / cfg.sentences_per_s  # one sentence's speech
        first = self.load.cost_s(self._window_for(1.0))
        sentence = self.load.cost_s(self._window_for(speech_s))
        per_sentence = (
            first + (PARTIALS_PER_SENTENCE - 1 + speech_s / cfg.thinnest_interval_s) * sentence + sentence / 3
        )
        return cfg.sentences_per_s * per_sentence

    def finals_late_s(self) -> float:
        """The ``LATE_QUANTILE`` of the close-to-lock times of the last ``late_window_s`` (0 with none)."""
        since = self._clock() - self.config.late_window_s
        lags = sorted(lock.lag_s for lock in self._locks if lock.t >= since)
        if not lags:
            return 0.0
        return lags[min(len(lags) - 1, int(LATE_QUANTILE * len(lags)))]

    def estimate(self) -> CapacityEstimate:
        """How many live sessions the engine holds on time now (see the module docstring)."""
        cfg = self.config
        measured = self._measured
        need = measured.need if measured is not None else self._prior()
        measured_voice = measured.voice if measured is not None else None
        voice = measured_voice if measured_voice is not None else cfg.voice_front_cpu
        budget = cfg.target_busy * self.load.parallel
        sessions = self.most if need <= 0 else int(budget / need)
        front = cfg.target_busy * self.front_cores
        silent = max(0, self._live - self._speaking)
        idle = self._idle_cost()
        if measured_voice is not None and voice > 0:
            # What the silent ones leave of the front end's cores, for voices.
            sessions = min(sessions, int(max(0.0, front - idle * silent) / voice))
        sessions = max(1, min(self.most, sessions))
        # Connected at most: those voices talking, and as many silent microphones as the rest of the front end's
        # cores carry.
        spare = max(0.0, front - sessions * (voice + idle))
        connections = min(self.most, sessions + int(spare / idle)) if idle > 0 else self.most
        late_s = self.finals_late_s()
        busy = self.load.busy()
        late = self._live > 1 and busy >= LATE_BUSY and late_s > cfg.late_after_s
        return CapacityEstimate(
            sessions,
            "measured" if measured is not None else "warm-up",
            need,
            measured.per_connection if measured is not None else None,
            busy,
            late_s,
            late,
            connections,
        )
