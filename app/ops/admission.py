"""Admission: whether a new live session may start now, and how many at once, counted from the moment it is let in.

Every way a live session starts (``POST /offer``, WHIP, Deepgram's ``/v1/listen``, OpenAI's ``/v1/realtime``,
FunASR) asks ``Admission.admit`` once, before its first ``await``, and gets a ``Slot`` or a ``Refusal``; an engine
that will not open the session after all (``EngineNotReady`` or ``EngineError`` from ``open_session``) is the same
refusal (``Admission.refusal_for``). Each protocol only puts the refusal in its own wire form.

Why before the first ``await``: an offer awaits several things before its session exists (loading a stored room,
applying the SDP), so a check of "how many sessions are live" lets every concurrent offer through that is still
between its check and its registration. A slot is taken synchronously and released exactly once: by the handler
when the offer fails, or by the session when it closes.

What is checked, in order: the server is stopping (``shutting_down``); the speech engine is not ready (``loading``
while it starts, ``engine_failed`` once it failed); then how many: an operator's fixed ``limit`` (``--max-sessions
N``: ``limit``), or, with none (``--max-sessions auto``, the default for live sessions), the engine's own estimate of
how many it holds on time (``engine.stream.capacity``): past it, or while its finals run late, ``full``, rather than
let a new session make every session late. A refusal says why (``Refusal.reason``, a ``RefusalReason``) and, where
waiting helps, when to try again (``retry_after_s``, sent as ``Retry-After``); a failed engine does not come back
by waiting (the server exits for its supervisor when the engine dies, and a model that failed to load needs the
operator), so it says no time. A refusal is the server working as it should, not an error, and is logged as such.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from aiohttp import web

from engine import CapacityEstimate, EngineError, EngineNotReady, EngineState, ErrorCode

from ..responses import json_error

log = logging.getLogger(__name__)

RETRY_AFTER_S = 10  # a refused client tries again after about this long (sessions end, load changes, every few s)
SHUTDOWN_RETRY_AFTER_S = 5  # ...and after a stop: a supervisor restarts the server, a balancer moves it elsewhere
LOADING_RETRY_AFTER_S = 10  # ...and while the model loads (a minute or more on a CPU)


class RefusalReason(StrEnum):
    """Why a live session was not let in (the ``reason`` of the wire's refusals, and of the refusals metric)."""

    LOADING = "loading"  # the speech model is still loading
    ENGINE_FAILED = "engine_failed"  # the speech engine failed: no session until the server is restarted
    FULL = "full"  # the server's own capacity: as many sessions as it holds on time, or its finals run late
    LIMIT = "limit"  # every slot of the operator's --max-sessions N is taken
    SHUTTING_DOWN = "shutting_down"  # the server is stopping

    @property
    def temporary(self) -> bool:
        """Trying again later helps (it does not for a failed engine)."""
        return self is not RefusalReason.ENGINE_FAILED

    @property
    def code(self) -> ErrorCode:
        """This server's error code for it: ``loading``, ``engine`` (failed), else ``busy``."""
        return _CODES.get(self, ErrorCode.BUSY)


_CODES = {RefusalReason.LOADING: ErrorCode.LOADING, RefusalReason.ENGINE_FAILED: ErrorCode.ENGINE}
# RFC 6455 close codes for a refusal told over an open WebSocket: 1013 Try Again Later, 1011 Internal Error.
WS_TRY_AGAIN_LATER = 1013
WS_INTERNAL_ERROR = 1011


@dataclass(frozen=True)
class Refusal:
    """Why a session was not let in: ``reason``; ``message`` for the client; ``retry_after_s`` for its
    ``Retry-After`` (None where waiting does not help: a failed engine)."""

    reason: RefusalReason
    message: str
    retry_after_s: int | None

    @property
    def code(self) -> ErrorCode:
        return self.reason.code

    @property
    def headers(self) -> dict[str, str]:
        """``Retry-After`` where trying again later helps, else none."""
        return {} if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}

    @property
    def close_code(self) -> int:
        """The WebSocket close code for it, once a socket is open: 1013 (try again later), or 1011 for a failed
        engine."""
        return WS_TRY_AGAIN_LATER if self.reason.temporary else WS_INTERNAL_ERROR

    def response(self, extra_headers: Mapping[str, str] | None = None) -> web.Response:
        """This server's HTTP answer (``POST /offer``, WHIP, FunASR before the upgrade): ``503`` with the JSON error,
        code ``loading``, ``engine`` or ``busy`` (``RefusalReason.code``), with ``reason`` and ``retry_after_s``
        (null for a failed engine), and ``Retry-After`` where waiting helps."""
        return json_error(
            503,
            self.code,
            self.message,
            headers={**(extra_headers or {}), **self.headers},
            reason=self.reason.value,
            retry_after_s=self.retry_after_s,
        )

    @classmethod
    def engine(cls, state: EngineState | str, detail: str = "") -> Refusal:
        """The refusal for an engine in ``state`` (not ready): ``loading`` while it starts, ``shutting_down`` once
        it closed, else ``engine_failed``."""
        value = state.value if isinstance(state, EngineState) else state
        if value in (EngineState.NEW, EngineState.LOADING):
            return cls(
                RefusalReason.LOADING,
                f"the speech model is loading; try again in {LOADING_RETRY_AFTER_S} s",
                LOADING_RETRY_AFTER_S,
            )
        if value == EngineState.CLOSED:
            return _shutting_down()
        # FAILED, or a state this module does not know: waiting is not known to help, so none is promised.
        why = f" ({detail})" if detail else ""
        return cls(
            RefusalReason.ENGINE_FAILED,
            f"the speech engine failed{why}; it takes no sessions until the server is restarted",
            None,
        )

    @classmethod
    def from_engine(cls, exc: EngineError) -> Refusal:
        """The refusal for what ``open_session`` raised after admission let the session in: ``EngineNotReady``
        (the engine's state changed meanwhile) as ``engine`` says, any other ``EngineError`` (every VAD row
        taken: the engine's own limit) as ``full``."""
        if isinstance(exc, EngineNotReady):
            return cls.engine(exc.state, str(exc))
        return cls(RefusalReason.FULL, f"the server is full: {exc}; try again in {RETRY_AFTER_S} s", RETRY_AFTER_S)


def _shutting_down() -> Refusal:
    return Refusal(
        RefusalReason.SHUTTING_DOWN, "the server is shutting down; connect again in a moment", SHUTDOWN_RETRY_AFTER_S
    )


class EngineStatus(Protocol):
    """What admission reads of the speech engine (``engine.CaptionEngine``)."""

    @property
    def state(self) -> EngineState: ...

    @property
    def detail(self) -> str: ...


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
    on time (and none while it says its finals run late); with ``engine``, none while the engine it returns is not
    ready. ``what`` names the sessions in refusals."""

    def __init__(
        self,
        limit: int | None,
        capacity: Callable[[], CapacityEstimate] | None = None,
        what: str = "caption sessions",
        engine: Callable[[], EngineStatus] | None = None,
        silent: Callable[[], int] | None = None,
    ) -> None:
        if limit is None and capacity is None:
            raise ValueError("admission needs a limit or a capacity estimate")
        self.limit = limit
        self.capacity = capacity
        self.engine = engine
        # How many of the sessions in use are a meeting's silent microphones (``admit_publisher``'s
        # ``silent_microphones``): connected, costing VAD and WebRTC only. None: every session counts as talking.
        self.silent = silent
        self.what = what
        self._in_use = 0
        self.closed = False  # the server is stopping: no new session (``refusal`` says so)
        self.refused: dict[str, int] = {}  # refusals so far, by reason as on the wire (metrics)
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

    @property
    def talking(self) -> int:
        """Sessions in use that count as talking: all but a meeting's silent microphones (``silent``)."""
        return self._in_use - (self.silent() if self.silent is not None else 0)

    def admit(self, shared: bool = False) -> Slot | Refusal:
        """A slot, or why not. Never awaits: the check and the take are one step. ``shared``: the session joins a room
        that has a publisher already (a meeting's next microphone: silent until its person talks)."""
        refusal = self.check(shared)
        if refusal is not None:
            return self._counted(refusal)
        self._in_use += 1
        return Slot(self)

    def refusal_for(self, exc: EngineError) -> Refusal:
        """The refusal of a session that ``admit`` let in and the engine would not open after all
        (``Refusal.from_engine``), counted as ``admit``'s are. The caller releases its slot."""
        return self._counted(Refusal.from_engine(exc))

    def _counted(self, refusal: Refusal) -> Refusal:
        self.refused[refusal.reason.value] = self.refused.get(refusal.reason.value, 0) + 1
        log.info("%s refused (%s): %s", self.what, refusal.reason.value, refusal.message)
        return refusal

    def try_acquire(self) -> Slot | None:
        """A slot, or ``None`` when ``admit`` refuses (``check`` says why)."""
        taken = self.admit()
        return taken if isinstance(taken, Slot) else None

    def check(self, shared: bool = False) -> Refusal | None:
        """Why a session would be refused now, or None if it would be let in (nothing is taken); ``shared``: as
        ``admit``. A session of its own counts as a voice; a meeting's next microphone only once it talks, so it is
        let in while the server holds it connected (``CapacityEstimate.holds``)."""
        if self.closed:
            return _shutting_down()
        if self.engine is not None:
            engine = self.engine()
            if engine.state is not EngineState.READY:
                return Refusal.engine(engine.state, engine.detail)
        retry = self.retry_after_s
        if self.limit is not None:
            if self._in_use >= self.limit:
                return Refusal(
                    RefusalReason.LIMIT, f"all {self.limit} {self.what} are in use; try again in {retry} s", retry
                )
            return None
        assert self.capacity is not None
        estimate = self.capacity()
        if estimate.late:
            return Refusal(
                RefusalReason.FULL,
                f"the server is full: its sentences already lock "
                f"{estimate.finals_late_s:.1f} s late; try again in {retry} s",
                retry,
            )
        if self._in_use >= estimate.holds:
            return Refusal(
                RefusalReason.FULL,
                f"the server is full: it holds {estimate.holds} live {self.what} on "
                f"time and all are taken; try again in {retry} s",
                retry,
            )
        if not shared and self.talking >= estimate.sessions:
            return Refusal(
                RefusalReason.FULL,
                f"the server is full: {estimate.sessions} of its live {self.what} talk "
                f"at once, as many as it captions on time; try again in {retry} s",
                retry,
            )
        return None

    def close(self) -> None:
        """Admit no one from now on (slots taken stay valid until released)."""
        self.closed = True
