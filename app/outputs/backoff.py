"""How long an output waits before sending a caption again: exponential backoff, and a destination's own word
(HTTP ``Retry-After``) when it gives one."""

from __future__ import annotations

from .target import TargetError

FIRST_S = 0.5  # the first retry waits this long...
MAX_S = 30.0  # ...doubling up to this
MAX_RETRY_AFTER_S = 300.0  # a destination's Retry-After is honoured up to this (a typo of an hour stops nothing)


class RetryLater(TargetError):
    """A refusal that names when to try again: ``after_s`` seconds from now (a 429 or 503 with ``Retry-After``).
    Never permanent."""

    def __init__(self, message: str, after_s: float) -> None:
        super().__init__(message, permanent=False)
        self.after_s = after_s


class Backoff:
    """The waits between attempts at one caption: ``first_s``, then doubling up to ``max_s``; ``reset`` after a
    success."""

    def __init__(self, first_s: float = FIRST_S, max_s: float = MAX_S) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self._next_s = first_s

    def next_s(self, error: TargetError | None = None) -> float:
        """Seconds to wait after a failed attempt (``error``: at least the ``Retry-After`` it names, up to
        ``MAX_RETRY_AFTER_S``)."""
        wait = self._next_s
        self._next_s = min(self.max_s, self._next_s * 2)
        if isinstance(error, RetryLater):
            wait = max(wait, min(error.after_s, MAX_RETRY_AFTER_S))
        return wait

    def reset(self) -> None:
        self._next_s = self.first_s
