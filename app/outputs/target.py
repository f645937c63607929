"""What an output sends its locked sentences to: one ``Target`` per configured destination (YouTube's caption
ingestion, OBS over obs-websocket, ...). The runner (``app.outputs.runner``) follows the room's audience stream (the
delayed, corrected one: ``app.rooms.audience``) and hands each newly locked sentence to its target, in order, one
at a time, retrying a failed send with backoff; a target only knows how to deliver one caption and what state its
destination is in.

Contract of ``send``: deliver ``caption`` once. Return when the destination took it. Raise ``TargetError`` when it
did not (the runner retries the same caption later, with backoff, unless ``permanent``: a wrong password, a URL the
destination refuses for good; the output then shows the error and waits for its configuration to change). A target
that must not send a caption twice (YouTube's ``seq``) keeps what it needs to know across retries itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class OutgoingCaption:
    """One locked sentence on its way out, as the room's audience has it (corrected, after the room's delay)."""

    seq: int  # the room event that carried it
    sentence_id: int  # its room-wide id
    text: str
    start_wall_ms: int  # when it began on the wall clock (ms since the Unix epoch): room creation + its start
    end_wall_ms: int
    spk: int | None  # the speaker label, if known
    speaker: str | None  # the speaker's name for display ("Speaker 2", or the one an editor gave), if known
    speaker_changed: bool  # another speaker (or publisher) spoke the sentence before this one


class TargetError(Exception):
    """A send that did not reach its destination. ``permanent``: retrying cannot help (bad credentials, a refused
    address); the output waits for a new configuration."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Target(ABC):
    """A destination of one output. ``kind`` names it in the API (``{"kind": "youtube", ...}``)."""

    kind: ClassVar[str]

    @abstractmethod
    async def send(self, caption: OutgoingCaption) -> None:
        """Deliver ``caption`` (see the module's contract). Raises ``TargetError``."""

    def status(self) -> dict[str, Any]:
        """What the destination is doing, for ``GET /rooms/{id}/outputs`` (e.g. ``{"streaming": true}`` for OBS).
        Never a secret."""
        return {}

    async def close(self) -> None:  # noqa: B027 (not abstract: a target without a connection has nothing to close)
        """Let go of connections (the output was removed, the room ended, or the server stops)."""
