"""Admission: how many caption sessions at once, counted from the moment an offer is let in.

``POST /offer`` awaits several things before its session exists (loading a stored room, applying the SDP), so a
check of "how many sessions are live" lets every concurrent offer through that is still between its check and its
registration. A slot is taken synchronously, before the first ``await``, and released exactly once: by the
handler when the offer fails, or by the session when it closes.

How many: an operator's fixed ``limit`` (``--max-sessions N``), or, with none (``--max-sessions auto``, the default
for live sessions), the engine's own estimate of how many it holds on time (``engine.stream.capacity``): past it, or
while its finals run late, a new session is refused rather than let in to make every session late. A refusal says
why (``Refusal.reason``: ``full``, ``limit`` or ``shutting_down``) and when to try again (``retry_after_s``, sent as
``Retry-After``); it is the server working as it should, not an error, and is logged as such.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from engine import CapacityEstimate, ErrorCode

log = logging.getLogger(__name__)

RETRY_AFTER_S = 10  # a refused client tries again after about this long (sessions end, load changes, every few s)
SHUTDOWN_RETRY_AFTER_S = 5  # ...and after a stop: a supervisor restarts the server, a balancer moves it elsewhere
LOADING_RETRY_AFTER_S = 10  # ...and while the model loads (a minute or more on a CPU)


@dataclass(frozen=True)
class Refusal:
    """Why a session was not let in: ``reason`` ``full`` (the server's capacity), ``limit`` (the operator's cap) or
    ``shutting_down``; ``message`` for the client; ``retry_after_s`` for its ``Retry-After``."""

    reason: str
    message: str
    retry_after_s: int

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}

    def response(self, extra_headers: dict[str, str] | None = None) -> web.Response:
        """The HTTP answer (``POST /offer``, WHIP): ``503`` with ``Retry-After`` and the JSON error body, code
        ``busy``, with ``reason`` and ``retry_after_s``."""
        body = {"error": {"code": ErrorCode.BUSY.value, "message": self.message, "reason": self.reason,
                          "retry_after_s": self.retry_after_s}}
        return web.json_response(body, status=503, headers={**(extra_headers or {}), **self.headers})


class Slot:
    """One admitted session's place. ``release`` is idempotent."""

    def __init__(self, admission: Admission) -> None:
        self._admission: Admission | None = admission

    def release(self) -> None:
        if self._admission is not None:
            self._admission._in_use -= 1
            self._admission = None


class Admission:
    """At most ``limit`` sessions at once, or, with ``limit`` None, as many as ``capacity()`` says the server holds
    on time (and none while it says its finals run late). ``what`` names the sessions in refusals."""

    def __init__(self, limit: int | None, capacity: Callable[[], CapacityEstimate] | None = None,
                 what: str = "caption sessions") -> None:
        if limit is None and capacity is None:
            raise ValueError("admission needs a limit or a capacity estimate")
        self.limit = limit
        self.capacity = capacity
        self.what = what
        self._in_use = 0
        self.closed = False  # the server is stopping: no new session (``refusal`` says so)
        self.refused: dict[str, int] = {}  # refusals so far, by reason (metrics)
        self.retry_after_s = RETRY_AFTER_S  # what a refused client is told to wait (``Retry-After``)

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def auto(self) -> bool:
        """True when the limit is the server's own capacity estimate, not an operator's number."""
        return self.limit is None

    def estimate(self) -> CapacityEstimate | None:
        """The capacity estimate admission reads (None: it has none)."""
        return self.capacity() if self.capacity is not None else None

    def admit(self) -> Slot | Refusal:
        """A slot, or why not. Never awaits: the check and the take are one step."""
        refusal = self.check()
        if refusal is not None:
            self.refused[refusal.reason] = self.refused.get(refusal.reason, 0) + 1
            log.info("%s refused (%s): %s", self.what, refusal.reason, refusal.message)
            return refusal
        self._in_use += 1
        return Slot(self)

    def try_acquire(self) -> Slot | None:
        """A slot, or ``None`` when ``admit`` refuses (``check`` says why)."""
        taken = self.admit()
        return taken if isinstance(taken, Slot) else None

    def check(self) -> Refusal | None:
        """Why a session would be refused now, or None if it would be let in (nothing is taken)."""
        if self.closed:
            return Refusal("shutting_down", "the server is shutting down; connect again in a moment",
                           SHUTDOWN_RETRY_AFTER_S)
        if self.limit is not None:
            if self._in_use >= self.limit:
                return Refusal("limit", f"all {self.limit} {self.what} are in use; try again in {self.retry_after_s} s",
                               self.retry_after_s)
            return None
        assert self.capacity is not None
        estimate = self.capacity()
        retry = self.retry_after_s
        if estimate.late:
            return Refusal("full", f"the server is full: its sentences already lock {estimate.finals_late_s:.1f} s "
                           f"late; try again in {retry} s", retry)
        if self._in_use >= estimate.sessions:
            return Refusal("full", f"the server is full: it holds {estimate.sessions} live {self.what} on time and "
                           f"all are taken; try again in {retry} s", retry)
        return None

    def close(self) -> None:
        """Admit no one from now on (slots taken stay valid until released)."""
        self.closed = True
