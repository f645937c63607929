"""When each piece of a session's audio arrived: the latencies a session reports are measured from there."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable


class Arrivals:
    """The end sample and clock time (monotonic seconds) of every push of audio into one session, oldest first."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._times: deque[tuple[int, float]] = deque()  # (audio end sample, clock time of arrival)

    def __bool__(self) -> bool:
        return bool(self._times)

    def add(self, end: int) -> None:
        """Audio up to sample ``end`` arrived now."""
        self._times.append((end, self._clock()))

    def since(self, sample: int) -> float:
        """Seconds since the audio holding ``sample`` (a session sample index) arrived; 0 if that is not known."""
        if not self._times:
            return 0.0
        i = min(bisect.bisect_left(self._times, sample, key=lambda a: a[0]), len(self._times) - 1)
        return max(0.0, self._clock() - self._times[i][1])

    def forget_before(self, sample: int) -> None:
        """No latency will be asked for before ``sample``: forget what only covers earlier audio."""
        while len(self._times) > 1 and self._times[1][0] <= sample:
            self._times.popleft()

    def clear(self) -> None:
        self._times.clear()
