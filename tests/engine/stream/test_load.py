"""The recognizer's measured load (``engine.stream.load``): decodes in flight share the wall time they ran, and a
partial's cost starts at the warm-up's and follows what is measured. A fake clock: no model, no waiting."""

from __future__ import annotations

import pytest

from engine.stream.load import FINAL, PARTIAL, RecognizerLoad
from tests.support.clock import Clock


def test_decodes_in_flight_share_the_wall_time_they_ran() -> None:
    """Processor sharing: k decodes in flight on one recognizer are charged 1/k of the time each; on two recognizers
    (``vllm serve`` instances) two decodes run side by side, each charged all of it."""
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
    pool = RecognizerLoad(clock, parallel=2)
    a, b, c = pool.begin(PARTIAL), pool.begin(PARTIAL), pool.begin(FINAL)
    clock.now += 3.0
    assert pool.end(a) == pytest.approx(2.0) and pool.end(b) == pytest.approx(2.0)  # 3 on 2: 2/3 of the time each
    clock.now += 1.0
    assert pool.end(c) == pytest.approx(3.0)  # then alone on one of the two


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
