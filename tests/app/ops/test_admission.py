"""The admission decision (``app.ops.admission``) against a capacity estimate given by hand: what a full server
refuses, why, and the operator's own number."""

from __future__ import annotations

from app.ops.admission import Admission, Refusal, Slot
from engine import CapacityEstimate


def test_admission_counts_the_voices_talking() -> None:
    """Sessions of their own are voices; a meeting's silent microphones are not, until they talk."""
    silent = [0]
    now = CapacityEstimate(2, "measured", 0.1, 0.05, 0.5, 0.2, False, connections=5)
    admission = Admission(None, capacity=lambda: now, silent=lambda: silent[0])
    assert all(isinstance(admission.admit(), Slot) for _ in range(2))  # two readers: as many as talk on time
    refusal = admission.admit()  # a third reader would make them late
    assert isinstance(refusal, Refusal) and refusal.reason == "full" and "talk at once" in refusal.message
    assert isinstance(admission.admit(shared=True), Slot)  # a meeting's next microphone, silent
    silent[0] = 1
    assert isinstance(admission.admit(shared=True), Slot)
    silent[0] = 2
    assert isinstance(admission.admit(), Refusal)  # still two voices: no third of its own
    assert isinstance(admission.admit(shared=True), Slot)
    silent[0] = 3
    refusal = admission.admit(shared=True)  # five connected: as many as the front end holds
    assert isinstance(refusal, Refusal) and "holds 5 live" in refusal.message
    assert now.as_dict(5, 2)["headroom"] == 0 and now.as_dict(3, 0)["headroom"] == 2


def estimate(sessions: int, late: bool = False) -> CapacityEstimate:
    return CapacityEstimate(sessions, "measured", 0.1, 0.05, 0.5, 2.0 if late else 0.2, late)


def test_auto_admission_takes_what_the_server_holds_and_refuses_the_rest() -> None:
    now = [estimate(3)]
    admission = Admission(None, capacity=lambda: now[0])
    slots = [admission.admit() for _ in range(3)]
    assert all(isinstance(s, Slot) for s in slots)
    refusal = admission.admit()
    assert isinstance(refusal, Refusal) and refusal.reason == "full" and (refusal.retry_after_s or 0) > 0
    assert "holds 3 live caption sessions" in refusal.message and refusal.headers["Retry-After"]
    now[0] = estimate(3, late=True)
    first = slots[0]
    assert isinstance(first, Slot)
    first.release()  # (a slot is free again, but the admitted sessions' sentences run late)
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
