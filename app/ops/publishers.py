"""The one way in for a publisher: admission, then the room it publishes into. ``POST /offer``, WHIP and the
streaming protocols (Deepgram, OpenAI Realtime, FunASR) all start a live session through ``admit_publisher``, so the
same condition gets the same refusal (``Refusal``, with its ``RefusalReason``) at every way in; each protocol only
writes it in its own wire form."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from ..rooms import ROOMS, Room
from .admission import Refusal, Slot
from .keys import ADMISSION


class Refused(Exception):
    """A session that may not start: ``refusal`` says why (``RefusalReason``) and when to try again."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class NoRoom(Exception):
    """The room the publisher names does not exist."""

    def __init__(self) -> None:
        super().__init__("there is no such room")


@dataclass(frozen=True)
class Admitted:
    """An admitted publisher's slot (its session releases it on close) and room (None: it named none)."""

    slot: Slot
    room: Room | None


async def admit_publisher(app: web.Application, room_id: str | None) -> Admitted:
    """Take the session's admission slot (``Admission.admit``: the engine's state and the capacity, checked and taken
    before the first await, so concurrent connects cannot overshoot), then find room ``room_id`` (None: no room).
    Raises ``Refused``, or ``NoRoom`` (the slot given back)."""
    slot = app[ADMISSION].admit()
    if isinstance(slot, Refusal):
        raise Refused(slot)
    try:
        room = await app[ROOMS].get(room_id) if room_id else None
    except BaseException:
        slot.release()
        raise
    if room_id and room is None:
        slot.release()
        raise NoRoom
    return Admitted(slot, room)
