"""The one way in for a publisher: admission, then the room it publishes into. ``POST /offer``, WHIP and the
streaming protocols (Deepgram, OpenAI Realtime, FunASR) all start a live session through ``admit_publisher``, so the
same condition gets the same refusal (``Refusal``, with its ``RefusalReason``) at every way in; each protocol only
writes it in its own wire form. The person a publisher names (``app.rooms.names.person_name``, checked by each way in
before admission, refused in its own wire form) comes along to its room."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from ..keys import ENGINE
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
    """An admitted publisher's slot (its session releases it on close), room (None: it named none) and person
    (``name``, None: unnamed), which its session joins the room as."""

    slot: Slot
    room: Room | None
    name: str | None = None


def silent_microphones(app: web.Application) -> int:
    """Live publishers that are a meeting's silent microphones: in each room with several publishers here, all but
    those talking now (``CaptionEngine.speaking_sessions``), one of them counted as talking even when none is (the
    room's next words). Admission counts the others as voices (``Admission.silent``)."""
    speaking = app[ENGINE].speaking_sessions()
    silent = 0
    for room in app[ROOMS].in_memory():
        if len(room.publishers) >= 2:
            talking = sum(1 for session in room.publishers if session in speaking)
            silent += len(room.publishers) - max(1, talking)
    return silent


async def admit_publisher(app: web.Application, room_id: str | None, name: str | None = None) -> Admitted:
    """Take the session's admission slot (``Admission.admit``: the engine's state and the capacity, checked and taken
    before the first await, so concurrent connects cannot overshoot), then find room ``room_id`` (None: no room).
    ``name``: the publisher's person, checked already. Raises ``Refused``, or ``NoRoom`` (the slot given back)."""
    loaded = app[ROOMS].loaded(room_id) if room_id else None
    slot = app[ADMISSION].admit(shared=loaded is not None and bool(loaded.publishers))
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
    return Admitted(slot, room, name)
