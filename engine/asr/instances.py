"""Recognizer instances reached over HTTP, and which one takes the next request.

Pure bookkeeping, no I/O (``engine.asr.remote`` does the requests and the probes): each ``Instance`` is UP, DOWN
or PROBING and counts its requests in flight; ``InstancePool.pick`` gives a request the UP instance with the fewest
requests in flight (least loaded: a long decode on one instance sends the next requests to the others). An
instance that fails is marked DOWN at once, which also wakes every request in flight on it
(``Instance.went_down``) so that they go to another instance instead of waiting for a dead one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit


class InstanceState(StrEnum):
    PROBING = "probing"  # not known to be up yet (start, or coming back: health answered, warming up)
    UP = "up"
    DOWN = "down"  # failed; probed again every few seconds


def normalise_url(url: str) -> str:
    """``url`` as a base URL without a trailing slash; raises ``ValueError`` naming what is wrong with it."""
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"recognizer URL {url!r} must look like http://host:port (the base of a `vllm serve`)")
    if parts.query or parts.fragment:
        raise ValueError(f"recognizer URL {url!r} must not carry a query or fragment")
    try:
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise ValueError(f"recognizer URL {url!r} has an invalid port") from None
    return text.rstrip("/")


@dataclass
class Instance:
    """One ``vllm serve`` instance."""

    url: str
    state: InstanceState = InstanceState.PROBING
    inflight: int = 0
    decodes: int = 0  # requests answered
    failures: int = 0  # times marked DOWN
    error: str = ""  # why it last went DOWN
    model: str = ""  # the model id it serves (GET /v1/models)
    # Set when the instance goes DOWN; a fresh event each time it comes UP.
    went_down: asyncio.Event = field(default_factory=asyncio.Event)

    def as_dict(self) -> dict[str, object]:
        return {
            "url": self.url,
            "state": self.state.value,
            "inflight": self.inflight,
            "decodes": self.decodes,
            "failures": self.failures,
            "error": self.error,
            "model": self.model,
        }


class InstancePool:
    """The instances of one remote recognizer, in the order they were given."""

    def __init__(self, urls: Iterable[str]) -> None:
        normalised = [normalise_url(u) for u in urls]
        if not normalised:
            raise ValueError("no recognizer URL given")
        if len(set(normalised)) != len(normalised):
            raise ValueError(f"recognizer URLs repeat: {', '.join(normalised)}")
        self.instances = [Instance(u) for u in normalised]
        self.changed = asyncio.Event()  # set (and replaced) whenever an instance comes UP
        self._all_down_since_s: float | None = time.monotonic()

    def pick(self, exclude: Iterable[Instance] = ()) -> Instance | None:
        """The UP instance with the fewest requests in flight (ties: fewest answered so far, then given order),
        skipping ``exclude``; None when no instance qualifies."""
        skip = {id(i) for i in exclude}
        candidates = [i for i in self.instances if i.state is InstanceState.UP and id(i) not in skip]
        if not candidates:
            return None
        return min(candidates, key=lambda i: (i.inflight, i.decodes))

    @property
    def up(self) -> list[Instance]:
        return [i for i in self.instances if i.state is InstanceState.UP]

    def mark_up(self, instance: Instance) -> None:
        if instance.state is InstanceState.UP:
            return
        instance.state = InstanceState.UP
        instance.error = ""
        instance.went_down = asyncio.Event()
        self._all_down_since_s = None
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def mark_down(self, instance: Instance, error: str) -> bool:
        """Take ``instance`` out (its requests in flight are woken to go elsewhere). True if it was not DOWN."""
        was_down = instance.state is InstanceState.DOWN
        instance.error = error
        if not was_down:
            instance.state = InstanceState.DOWN
            instance.failures += 1
            instance.went_down.set()
        if not self.up and self._all_down_since_s is None:
            self._all_down_since_s = time.monotonic()
        return not was_down

    def all_down_s(self, now: float | None = None) -> float:
        """Seconds since the last instance stopped being UP (since creation at start); 0 while one is UP."""
        if self._all_down_since_s is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self._all_down_since_s

    def describe(self) -> str:
        """Every instance's URL and state, with the error of those DOWN: for logs and error details."""

        def one(i: Instance) -> str:
            return f"{i.url} {i.state.value}" + (f" ({i.error})" if i.error and i.state is not InstanceState.UP else "")

        return "; ".join(one(i) for i in self.instances)
