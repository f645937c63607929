"""How busy the shared recognizer is, measured from the decodes themselves.

The scheduler tells ``RecognizerLoad`` when each decode starts and ends (``begin``/``end``). The wall time during which
k decodes are in flight on ``parallel`` recognizers (one in-process engine; several ``vllm serve`` instances) is shared
equally among them when k > ``parallel`` (processor sharing: on a CPU the requests of one engine step share its cores),
so each decode is charged about what it would have cost alone, however many ran beside it. On a GPU a batched step
costs about what one request costs, so there each decode is charged less than it would alone: the recognizer's measured
need is then an upper bound (and the front end's CPU usually limits first). From those charges:

- ``charged_s(kind)``: every second charged so far to decodes of that kind (a counter: windows are the reader's);
- ``busy(kind)``: the recent share of the recognizers' time charged to that kind (an exponential average over
  ``tau_s``); with no kind, their recent busy share (0-1);
- ``cost_s(window_s)``: what one partial decode in that encoder window costs, smoothed; seeded with the recognizer's
  own timing at warm-up (``seed``), so that the first speaker is paced on a measurement, not a guess.

Times are seconds of the given clock (monotonic). Nothing here awaits or touches the model: the scheduler calls in on
the event loop as decodes come and go.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine.asr.transcriber import DECODE_KINDS, Priority

PARTIAL = Priority.PARTIAL.kind
FINAL = Priority.FINAL.kind
BACKGROUND = Priority.BACKGROUND.kind
KINDS = DECODE_KINDS

TAU_S = 10.0  # the recent busy share averages over about this long
COST_SMOOTHING = 0.25  # weight of each new partial decode in its window's cost


@dataclass
class Ticket:
    """One decode in flight: its kind (``KINDS``) and the seconds charged to it so far."""

    kind: str
    charged_s: float = 0.0


class RecognizerLoad:
    """The recognizer's busy time and each decode's cost, from ``begin``/``end`` calls; see the module docstring."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, tau_s: float = TAU_S, parallel: int = 1) -> None:
        """``parallel``: recognizers that decode side by side (``vllm serve`` instances), each as fast as one."""
        self._clock = clock
        self._tau_s = tau_s
        self.parallel = max(1, parallel)
        self._last = clock()
        self._inflight: list[Ticket] = []
        self._charged = dict.fromkeys(KINDS, 0.0)
        self._recent = dict.fromkeys(KINDS, 0.0)  # exponential averages of the share of time charged to each kind
        self._decodes = dict.fromkeys(KINDS, 0)  # decodes finished (not cancelled), by kind
        self._costs: dict[float, float] = {}  # encoder window (s) -> smoothed cost of one partial decode (s)
        self.busy_s = 0.0  # wall time with at least one decode in flight

    # ---- decodes coming and going ---------------------------------------------------------------------------
    def begin(self, kind: str) -> Ticket:
        """A decode of ``kind`` was sent to the recognizer now."""
        if kind not in KINDS:
            raise ValueError(f"decode kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self._advance()
        ticket = Ticket(kind)
        self._inflight.append(ticket)
        return ticket

    def end(self, ticket: Ticket, window_s: float | None = None) -> float:
        """The decode of ``ticket`` came back (or was cancelled, or failed). ``window_s``: the encoder window of a
        partial that finished, to learn that window's cost from (None: a final, or nothing finished). Returns the
        seconds charged to it. Ending a ticket twice charges nothing more."""
        self._advance()
        if ticket in self._inflight:
            self._inflight.remove(ticket)
            if window_s is not None or ticket.kind != PARTIAL:
                self._decodes[ticket.kind] += 1
            if ticket.kind == PARTIAL and window_s is not None:
                old = self._costs.get(window_s)
                self._costs[window_s] = (
                    ticket.charged_s
                    if old is None
                    else ((1 - COST_SMOOTHING) * old + COST_SMOOTHING * ticket.charged_s)
                )
        return ticket.charged_s

    def _advance(self) -> None:
        """Share the wall time since the last event among the decodes in flight."""
        now = self._clock()
        dt = max(0.0, now - self._last)
        self._last = now
        if dt == 0.0:
            return
        n = len(self._inflight)
        shares = dict.fromkeys(KINDS, 0.0)
        if n:
            self.busy_s += dt
            each = dt * min(1.0, self.parallel / n)
            for ticket in self._inflight:
                ticket.charged_s += each
                self._charged[ticket.kind] += each
                shares[ticket.kind] += each
        decay = math.exp(-dt / self._tau_s)
        for kind in KINDS:
            rate = shares[kind] / (dt * self.parallel)
            self._recent[kind] = self._recent[kind] * decay + rate * (1.0 - decay)

    # ---- what the load is -----------------------------------------------------------------------------------
    def charged_s(self, kind: str | None = None) -> float:
        """Seconds charged so far to decodes of ``kind`` (all kinds: None), those still in flight included."""
        self._advance()
        return sum(self._charged.values()) if kind is None else self._charged[kind]

    def decodes(self, kind: str) -> int:
        """Decodes of ``kind`` that finished so far (cancelled partials not counted)."""
        return self._decodes[kind]

    def busy(self, kind: str | None = None) -> float:
        """The recent share of the recognizers' time (0-1) charged to decodes of ``kind`` (all kinds: None)."""
        self._advance()
        return min(1.0, sum(self._recent.values()) if kind is None else self._recent[kind])

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    # ---- what a partial costs -------------------------------------------------------------------------------
    def seed(self, costs: Mapping[float, float]) -> None:
        """Costs of one decode per encoder window, measured alone (the recognizer's warm-up): the starting point
        of windows not measured live yet."""
        for window_s, cost_s in costs.items():
            if cost_s > 0:
                self._costs.setdefault(float(window_s), float(cost_s))

    def cost_s(self, window_s: float) -> float:
        """The expected cost of one partial decode in an encoder window of ``window_s`` seconds: its own smoothed
        cost, else the nearest measured window's scaled by the windows' ratio (the encoder's work follows the
        window), else 0 (nothing measured yet)."""
        known = self._costs.get(window_s)
        if known is not None:
            return known
        if not self._costs:
            return 0.0
        nearest = min(self._costs, key=lambda w: abs(math.log(w / window_s)) if w > 0 and window_s > 0 else math.inf)
        return self._costs[nearest] * window_s / nearest

    def costs(self) -> dict[float, float]:
        """Each encoder window's expected partial cost (s), for reports."""
        return dict(sorted(self._costs.items()))
