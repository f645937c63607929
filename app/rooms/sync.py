"""The events other front ends commit to a room on a shared store (``TranscriptStore.shared``): the store tells of
them (``heard``), and the room's journal reads them back and delivers them, in seq order, in the background. A late
or lost notice delays an event, never reorders or drops it (see the package's docstring)."""

from __future__ import annotations

import asyncio
import logging

from .journal import Journal
from .store.base import StoreError

log = logging.getLogger(__name__)


class Sync:
    """Catches ``journal`` up with what the store has of its room."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._heard = journal.seq  # the newest seq the store told of (other front ends' commits)
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """Reading new events back now."""
        return self._task is not None and not self._task.done()

    def heard(self, seq: int | None = None) -> None:
        """The store committed event ``seq`` of this room (``None``: maybe something; look). The journal delivers
        every event up to it, in order, read from the store in the background."""
        journal = self._journal
        if seq is not None and seq <= journal.seq:
            return  # delivered already (this front end's own commit, or read with an earlier notice)
        self._heard = max(self._heard, journal.seq + 1 if seq is None else seq)
        if not self.busy:
            self._task = asyncio.create_task(self._sync(), name=f"room-sync-{journal.record.id}")

    async def _sync(self) -> None:
        journal = self._journal
        try:
            async with journal.lock:
                # While the store refuses this front end's writes, its seqs here are its own guesses: nothing to
                # read them against (the next commit that gets through brings the others' events in).
                while self._heard > journal.seq and not journal.unsaved:
                    if not await journal.deliver_stored():
                        self._heard = journal.seq  # nothing newer stored (a look that found nothing)
        except StoreError as exc:  # the next notice, a viewer's catch-up or the sweep tries again
            log.warning("room %s: could not read new events: %s", journal.record.id, exc)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
