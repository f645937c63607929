"""Admission: at most ``limit`` caption sessions, counted from the moment an offer is let in.

``POST /offer`` awaits several things before its session exists (loading a stored room, applying the SDP), so a
check of "how many sessions are live" lets every concurrent offer through that is still between its check and its
registration. A slot is taken synchronously, before the first ``await``, and released exactly once: by the
handler when the offer fails, or by the session when it closes.
"""

from __future__ import annotations


class Slot:
    """One admitted session's place. ``release`` is idempotent."""

    def __init__(self, admission: Admission) -> None:
        self._admission: Admission | None = admission

    def release(self) -> None:
        if self._admission is not None:
            self._admission._in_use -= 1
            self._admission = None


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_use = 0
        self.closed = False  # the server is stopping: no new session (``refusal`` says so)

    @property
    def in_use(self) -> int:
        return self._in_use

    def try_acquire(self) -> Slot | None:
        """A slot, or ``None`` when all ``limit`` are taken. Never awaits: the check and the take are one step."""
        if self.closed or self._in_use >= self.limit:
            return None
        self._in_use += 1
        return Slot(self)

    def close(self) -> None:
        """Admit no one from now on (slots taken stay valid until released)."""
        self.closed = True

    def refusal(self, what: str) -> str:
        """Why ``try_acquire`` said no, for the client: ``what`` names the slots (``"caption sessions"``)."""
        if self.closed:
            return "the server is shutting down; connect again in a moment"
        return f"all {self.limit} {what} are in use; try later"
