"""A clock the test moves by hand, for code that takes its clock as an argument (``clock=``)."""

from __future__ import annotations


class Clock:
    """Monotonic seconds that move only when the test sets ``now``."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
