"""What the server can hold: the recognizer's measured load, the capacity estimate and the admission decision, with
a fake clock (no model, no waiting). The way each protocol refuses a full server is in
``tests/functional/test_capacity_refusals.py``; partials thinning under load in
``tests/engine/stream/test_scheduler.py``."""

from __future__ import annotations

import pytest

from app.ops.admission import Admission, Slot
from engine.config import CapacityConfig
from engine.stream.capacity import Capacity
from engine.stream.load import FINAL, PARTIAL, RecognizerLoad
from tests.support.clock import Clock

WINDOWS = (4.0, 8.0, 15.0, 30.0)


def window_for(audio_s: float) -> float:
    """Whisper's windows as the engine uses them: the smallest that holds the audio and a second."""
    return next(w for w in (*WINDOWS, 30.0) if w >= audio_s + 1.0)


def capacity(clock: Clock, cpu: list[float], parallel: int = 1, **config: float) -> tuple[Capacity, RecognizerLoad]:
    load = RecognizerLoad(clock, parallel=parallel)
    cap = Capacity(
        CapacityConfig(**config),
        load,
        front_cores=1.0,
        most=256,
        window_for=window_for,
        clock=clock,
        cpu_clock=lambda: cpu[0],
    )
    return cap, load


def test_the_warm_up_gives_a_first_estimate() -> None:
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu)
    assert cap.estimate().sessions == 256  # nothing known of the recognizer at all: only the VAD's rows limit
    load.seed({4.0: 0.1, 8.0: 0.2})
    estimate = cap.estimate()
    # A typical speaker (read speech): a sentence of 3.5 s every 5 s, partials every 2 s at the thinnest; per
    # sentence 0.1 (first words) + (1 + 3.5 / 2) * 0.2 + 0.2 / 3 = 0.717 recognizer-s, so 0.143 per second.
    assert estimate.source == "warm-up"
    assert estimate.per_session_s == pytest.approx(0.2 * (0.1 + 2.75 * 0.2 + 0.2 / 3), rel=1e-6)
    assert estimate.sessions == int(0.7 / estimate.per_session_s) == 4
    assert not estimate.late and estimate.front_cpu_per_session is None
    two, two_load = capacity(clock, cpu, parallel=2)  # two ``vllm serve`` instances: twice as many
    two_load.seed({4.0: 0.1, 8.0: 0.2})
    assert two.estimate().sessions == int(2 * 0.7 / estimate.per_session_s) == 9


def speak(
    clock: Clock,
    cap: Capacity,
    load: RecognizerLoad,
    cpu: list[float],
    sessions: int,
    seconds: int,
    partial_s: float,
    front_cpu_per_s: float,
    talkers: int | None = None,
    voices: bool = False,
    talker_cpu_per_s: float = 0.0,
) -> None:
    """``sessions`` live sessions for ``seconds``, ``talkers`` of them (all: None) speaking: each second each talker
    runs one partial decode that costs ``partial_s`` (one at a time: charged exactly that) and locks a sentence of
    2 s of speech every 4 s; every session costs the front end ``front_cpu_per_s``, each talker ``talker_cpu_per_s``
    more. ``voices``: the engine tells the capacity how many talk (``Capacity.sample``), else it does not."""
    talkers = sessions if talkers is None else talkers
    for second in range(seconds):
        for _ in range(talkers):
            t = load.begin(PARTIAL)
            clock.now += partial_s / talkers
            load.end(t, window_s=4.0)
        clock.now += 1.0 - partial_s
        cpu[0] += front_cpu_per_s * sessions + talker_cpu_per_s * talkers
        if second % 4 == 3:
            for _ in range(talkers):
                cap.lock_lag(0.1, 2.0)
        cap.sample(sessions, talkers if voices else None)


def test_the_measured_load_replaces_the_warm_up() -> None:
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu, measured_after_s=30.0)
    load.seed({4.0: 1.0, 8.0: 2.0})  # a slow warm-up: 1 session at first
    assert cap.estimate().sessions == 1
    speak(clock, cap, load, cpu, sessions=2, seconds=24, partial_s=0.1, front_cpu_per_s=0.01)
    assert cap.estimate().source == "warm-up"  # 24 s of speech is not enough
    speak(clock, cap, load, cpu, sessions=2, seconds=20, partial_s=0.1, front_cpu_per_s=0.01)
    estimate = cap.estimate()
    assert estimate.source == "measured"
    # Each session locks a 2 s sentence every 4 s: (2 + 2 / 2) partials of 0.05 s each per 2 s of speech; it speaks
    # half of its time, and a session is taken to speak at least as much as a typical speaker (0.7).
    assert estimate.per_session_s == pytest.approx(3 * 0.05 / 2.0 * 0.7, rel=0.15)
    assert estimate.sessions == pytest.approx(0.7 / estimate.per_session_s, abs=1)
    assert estimate.front_cpu_per_session == pytest.approx(0.01, rel=0.15)
    clock.now += 600  # the server goes quiet: the last measurement holds
    cap.sample(0)
    assert cap.estimate().source == "measured" and cap.estimate().sessions == estimate.sessions


def test_silent_sessions_do_not_make_the_speakers_look_cheap() -> None:
    clock, cpu = Clock(), [0.0]
    busy, busy_load = capacity(clock, cpu)
    speak(clock, busy, busy_load, cpu, sessions=4, seconds=60, partial_s=0.2, front_cpu_per_s=0.02)
    quiet_cpu = [0.0]
    quiet, quiet_load = capacity(clock, quiet_cpu)
    # Ten kiosks open, two of them speaking: the two cost what four speakers cost each, per second of speech.
    speak(clock, quiet, quiet_load, quiet_cpu, sessions=10, seconds=60, partial_s=0.1, front_cpu_per_s=0.02, talkers=2)
    assert quiet.estimate().per_session_s == pytest.approx(busy.estimate().per_session_s, rel=0.2)
    assert quiet.estimate().sessions == pytest.approx(busy.estimate().sessions, abs=1)
    # ...and the front end's CPU is taken per session as it is (silent sessions cost it VAD and WebRTC all the same).
    assert quiet.estimate().front_cpu_per_session == pytest.approx(0.02, rel=0.1)


def test_a_meeting_of_eight_microphones_two_talking_fits() -> None:
    """Eight connected microphones, two of them talking: the capacity counts voices, not connections. A silent one
    costs the front end ``idle_front_cpu``; what is left of the front end's CPU per second of talking is a voice's."""
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu, measured_after_s=30.0)
    idle = CapacityConfig().idle_front_cpu
    speak(
        clock,
        cap,
        load,
        cpu,
        sessions=8,
        seconds=60,
        partial_s=0.1,
        front_cpu_per_s=idle,
        talkers=2,
        voices=True,
        talker_cpu_per_s=0.1,
    )
    estimate = cap.estimate()
    assert estimate.source == "measured"
    assert estimate.sessions >= 2  # both voices on time
    assert estimate.holds >= 8  # and every microphone connected
    # The voices' own front-end cost is what was spent on them, the silent microphones' taken out.
    spoken = cap._measured
    assert spoken is not None and spoken.voice == pytest.approx(idle + 0.1, rel=0.1)
    # The first microphone is a voice; the seven that join its room after it are silent until they talk.
    silent = [0]
    admission = Admission(None, capacity=cap.estimate, silent=lambda: silent[0])
    assert isinstance(admission.admit(), Slot)
    for _ in range(7):
        assert isinstance(admission.admit(shared=True), Slot)
        silent[0] = admission.in_use - 2  # two of them talk
    assert admission.talking == 2


def test_the_front_ends_cpu_can_be_what_limits() -> None:
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu, measured_after_s=30.0, speaking_fraction=0.5)
    speak(clock, cap, load, cpu, sessions=3, seconds=30, partial_s=0.01, front_cpu_per_s=0.2)
    estimate = cap.estimate()
    front = estimate.front_cpu_per_session
    assert front is not None and front == pytest.approx(0.2, rel=0.1)
    assert estimate.sessions == int(0.7 * 1.0 / front) == 3  # one core for the front


def test_late_finals_count_only_with_several_sessions_on_a_busy_recognizer() -> None:
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu)
    load.seed({4.0: 0.05, 8.0: 0.1})
    ticket = load.begin(FINAL)  # the recognizer busy for the last 20 s
    clock.now += 20.0
    cap.sample(2)
    for lag in (0.1, 0.2, 2.5, 2.6, 3.0, 0.1, 2.8, 2.9, 3.1, 2.7):
        cap.lock_lag(lag, 3.0)
    estimate = cap.estimate()
    assert estimate.late and estimate.finals_late_s >= 2.5
    cap.sample(1)
    assert not cap.estimate().late  # one session's long finals are its own, not the load's
    cap.sample(2)
    assert cap.estimate().late
    load.end(ticket)
    clock.now += 25.0
    assert load.busy() < 0.5 and not cap.estimate().late  # an idle recognizer: those finals were slow, not late
    clock.now += CapacityConfig().late_window_s
    assert cap.estimate().finals_late_s == 0.0  # and they are forgotten


def test_the_front_ends_cpu_is_counted_only_while_live_sessions_alone_run() -> None:
    """What the process spends with no live session open (the work after a meeting, the next one's set-up) or while a
    file is transcribed is no live session's cost: it does not make a meeting's next microphones look dear."""
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu, measured_after_s=30.0)
    speak(clock, cap, load, cpu, sessions=2, seconds=40, partial_s=0.1, front_cpu_per_s=0.05)
    for _ in range(10):  # the meeting is over; the process works a full core on something else
        clock.now += 1.0
        cpu[0] += 1.0
        cap.sample(0)
    for _ in range(10):  # a file is transcribed beside one silent live session
        clock.now += 1.0
        cpu[0] += 1.0
        cap.sample(1, 0, files=1)
    estimate = cap.estimate()
    assert estimate.source == "measured"
    assert estimate.front_cpu_per_session == pytest.approx(0.05, rel=0.1)
    assert estimate.holds >= 8  # a meeting's phones still join
    clock.now += 120  # the window holds no second to measure the front end in: its last figure stands
    for _ in range(3):
        clock.now += 1.0
        cpu[0] += 1.0
        cap.sample(0)
    assert cap.estimate().front_cpu_per_session == pytest.approx(0.05, rel=0.1)


def test_silent_microphones_that_cost_more_than_assumed_are_not_charged_to_the_voices() -> None:
    """On a machine where a connected, silent session costs the front end four times ``idle_front_cpu``, the seconds
    in which nobody talked say so, and the voices' own cost stays what it is."""
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu, measured_after_s=30.0)
    idle = 4 * CapacityConfig().idle_front_cpu
    speak(clock, cap, load, cpu, sessions=6, seconds=20, partial_s=0.0, front_cpu_per_s=idle, talkers=0, voices=True)
    speak(
        clock,
        cap,
        load,
        cpu,
        sessions=6,
        seconds=60,
        partial_s=0.1,
        front_cpu_per_s=idle,
        talkers=2,
        voices=True,
        talker_cpu_per_s=0.1,
    )
    spoken = cap._measured
    assert spoken is not None and spoken.voice == pytest.approx(idle + 0.1, rel=0.15)
