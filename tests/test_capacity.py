"""What the server can hold: the recognizer's measured load, the capacity estimate and the admission decision, with
a fake clock (no model, no waiting). The way each protocol refuses a full server is in ``test_capacity_refusals.py``;
partials thinning under load in ``test_scheduling.py``."""

from __future__ import annotations

import pytest

from app.ops.admission import Admission, Refusal, Slot
from engine import CapacityEstimate
from engine.config import CapacityConfig
from engine.stream.capacity import Capacity
from engine.stream.load import FINAL, PARTIAL, RecognizerLoad


class Clock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_decodes_in_flight_share_the_wall_time_they_ran() -> None:
    clock = Clock()
    load = RecognizerLoad(clock)
    a = load.begin(PARTIAL)
    clock.now += 1.0  # a alone: 1 s
    b = load.begin(FINAL)
    clock.now += 2.0  # a and b together: 1 s each
    assert load.end(b) == pytest.approx(1.0)
    clock.now += 0.5  # a alone again
    assert load.end(a, window_s=8.0) == pytest.approx(2.5)
    assert load.charged_s(FINAL) == pytest.approx(1.0) and load.charged_s(PARTIAL) == pytest.approx(2.5)
    assert load.busy_s == pytest.approx(3.5)  # wall time with anything in flight, not the charges' sum
    clock.now += 100.0
    assert load.busy() < 0.01  # the recent busy share decays once it is idle
    assert load.decodes(PARTIAL) == 1 and load.decodes(FINAL) == 1


def test_a_partials_cost_starts_at_the_warm_up_and_follows_what_is_measured() -> None:
    clock = Clock()
    load = RecognizerLoad(clock)
    assert load.cost_s(8.0) == 0.0  # nothing known yet
    load.seed({4.0: 0.2, 8.0: 0.4})
    assert load.cost_s(8.0) == pytest.approx(0.4)
    assert load.cost_s(16.0) == pytest.approx(0.8)  # an unmeasured window: the nearest one's, scaled
    for _ in range(30):
        t = load.begin(PARTIAL)
        clock.now += 0.1
        load.end(t, window_s=8.0)
    assert load.cost_s(8.0) == pytest.approx(0.1, abs=0.01)  # live decodes replace the warm-up's figure
    cancelled = load.begin(PARTIAL)
    clock.now += 5.0
    load.end(cancelled)  # a cancelled partial is charged but teaches no cost
    assert load.cost_s(8.0) == pytest.approx(0.1, abs=0.01) and load.decodes(PARTIAL) == 30


def capacity(clock: Clock, cpu: list[float], **config: float) -> tuple[Capacity, RecognizerLoad]:
    load = RecognizerLoad(clock)
    cap = Capacity(CapacityConfig(**config), load, front_cores=1.0, clock=clock, cpu_clock=lambda: cpu[0])
    return cap, load


def test_the_warm_up_gives_a_first_estimate() -> None:
    clock, cpu = Clock(), [0.0]
    cap, _load = capacity(clock, cpu)
    cap.warmed_up({4.0: 0.1, 8.0: 0.2})
    estimate = cap.estimate()
    # A typical speaker (read speech): a sentence of 3.5 s every 5 s, partials every 2 s at the thinnest; per
    # sentence 0.1 (first words) + (1 + 3.5 / 2) * 0.2 + 0.2 / 3 = 0.717 recognizer-s, so 0.143 per second.
    assert estimate.source == "warm-up"
    assert estimate.per_session_s == pytest.approx(0.2 * (0.1 + 2.75 * 0.2 + 0.2 / 3), rel=1e-6)
    assert estimate.sessions == int(0.85 / estimate.per_session_s) == 5
    assert not estimate.late and estimate.front_cpu_per_session is None


def speak(clock: Clock, cap: Capacity, load: RecognizerLoad, cpu: list[float], sessions: int, seconds: int,
          partial_s: float, front_cpu_per_s: float) -> None:
    """``sessions`` live sessions for ``seconds``: each second each session runs one partial decode that costs
    ``partial_s`` (one at a time: charged exactly that) and locks a sentence of 2 s of speech every 4 s at once."""
    for second in range(seconds):
        for _ in range(sessions):
            t = load.begin(PARTIAL)
            clock.now += partial_s / sessions
            load.end(t, window_s=4.0)
        clock.now += 1.0 - partial_s
        cpu[0] += front_cpu_per_s * sessions
        if second % 4 == 3:
            for _ in range(sessions):
                cap.lock_lag(0.1, 2.0)
        cap.sample(sessions)


def test_the_measured_load_replaces_the_warm_up() -> None:
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu, measured_after_s=60.0)
    cap.warmed_up({4.0: 1.0, 8.0: 2.0})  # a slow warm-up: 1 session at first
    assert cap.estimate().sessions == 1
    speak(clock, cap, load, cpu, sessions=2, seconds=20, partial_s=0.1, front_cpu_per_s=0.01)
    assert cap.estimate().source == "warm-up"  # 40 session-seconds is not enough
    speak(clock, cap, load, cpu, sessions=2, seconds=20, partial_s=0.1, front_cpu_per_s=0.01)
    estimate = cap.estimate()
    assert estimate.source == "measured"
    # Each session locks a 2 s sentence every 4 s: (2 + 2 / 2) partials of 0.05 s each per 4 s = 0.0375 s/s.
    assert estimate.per_session_s == pytest.approx(0.0375, rel=0.15)
    assert estimate.sessions == pytest.approx(0.85 / 0.0375, rel=0.15)
    assert estimate.front_cpu_per_session == pytest.approx(0.01, rel=0.1)
    clock.now += 600  # the server goes quiet: the last measurement holds
    cap.sample(0)
    assert cap.estimate().source == "measured" and cap.estimate().sessions == estimate.sessions


def test_the_front_ends_cpu_can_be_what_limits() -> None:
    clock, cpu = Clock(), [0.0]
    cap, load = capacity(clock, cpu, measured_after_s=30.0)
    speak(clock, cap, load, cpu, sessions=3, seconds=30, partial_s=0.01, front_cpu_per_s=0.2)
    estimate = cap.estimate()
    assert estimate.front_cpu_per_session == pytest.approx(0.2, rel=0.1)
    assert estimate.sessions == int(0.85 * 1.0 / estimate.front_cpu_per_session) == 4  # one core for the front


def test_late_finals_count_only_while_sessions_are_live_and_recently() -> None:
    clock, cpu = Clock(), [0.0]
    cap, _load = capacity(clock, cpu)
    cap.warmed_up({4.0: 0.05, 8.0: 0.1})
    cap.sample(2)
    for lag in (0.1, 0.2, 2.5, 2.6, 3.0, 0.1, 2.8, 2.9, 3.1, 2.7):
        cap.lock_lag(lag, 3.0)
    estimate = cap.estimate()
    assert estimate.late and estimate.finals_late_s >= 2.5
    cap.sample(0)
    assert not cap.estimate().late  # nobody live: nothing can be late now
    cap.sample(1)
    assert cap.estimate().late
    clock.now += CapacityConfig().late_window_s + 1
    assert not cap.estimate().late and cap.estimate().finals_late_s == 0.0  # it recovered


def estimate(sessions: int, late: bool = False) -> CapacityEstimate:
    return CapacityEstimate(sessions, "measured", 0.1, 0.05, 0.5, 2.0 if late else 0.2, late)


def test_auto_admission_takes_what_the_server_holds_and_refuses_the_rest() -> None:
    now = [estimate(3)]
    admission = Admission(None, capacity=lambda: now[0])
    slots = [admission.admit() for _ in range(3)]
    assert all(isinstance(s, Slot) for s in slots)
    refusal = admission.admit()
    assert isinstance(refusal, Refusal) and refusal.reason == "full" and refusal.retry_after_s > 0
    assert "holds 3 live caption sessions" in refusal.message and refusal.headers["Retry-After"]
    now[0] = estimate(3, late=True)
    slots[0].release()  # (a slot is free again, but the admitted sessions' sentences run late)
    refusal = admission.admit()
    assert isinstance(refusal, Refusal) and refusal.reason == "full" and "late" in refusal.message
    now[0] = estimate(5)
    assert isinstance(admission.admit(), Slot)
    assert admission.refused == {"full": 2}


def test_an_operators_number_wins_over_the_estimate() -> None:
    admission = Admission(1, capacity=lambda: estimate(50))
    assert isinstance(admission.admit(), Slot)
    refusal = admission.admit()
    assert isinstance(refusal, Refusal) and refusal.reason == "limit"
    generous = Admission(10, capacity=lambda: estimate(1, late=True))
    assert all(isinstance(generous.admit(), Slot) for _ in range(10))  # the operator decided: no capacity check
