"""The outputs of one server's rooms: made, listed, removed, kept in the store with how far each got, started again
when the server starts, stopped when it stops.

Saving: a room's outputs are one JSON list in the store (``TranscriptStore.set_outputs``), written when one is added
or removed, and with each output's progress (``spec.Progress``: the last caption its destination took, and what
its target keeps, YouTube's ``seq``) at most every ``save_every_s`` while captions go out, and when the server
stops. A server that starts again resumes each output after its saved progress: a clean stop resends nothing but
a caption whose send was cut off in flight (the destination may have taken it: once more, under the same YouTube
``seq``); a crash may resend what went out in the last ``save_every_s`` (2 s). Captions are not lost either way:
the output reads what it did not send from the store.

Limits: ``MAX_OUTPUTS`` per room (stopped and failed ones count: they are listed until removed), and
``MAX_SERVER_OUTPUTS`` running at once on the server, every room together (each holds a connection and two tasks;
stopped and failed ones hold none and do not count). Outputs stored before a restart start again whatever the
count: the limits refuse new ones only. Where an output may connect is ``policy``'s (``destinations``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from ..ops import ServerMetrics
from ..rooms import Room, RoomRegistry, StoreError, TranscriptStore
from . import kinds
from .destinations import DestinationPolicy
from .layout import Layout
from .runner import OutputRunner, OutputState, audience_seq
from .spec import OutputSpec, Progress, SpecError
from .target import TargetError

log = logging.getLogger(__name__)

MAX_OUTPUTS = 8  # per room
MAX_SERVER_OUTPUTS = 64  # running at once, every room of the server together
SAVE_EVERY_S = 2.0
STOP_GRACE_S = 2.0  # a stopping server gives its outputs this long to send what its sessions locked on the way out


class TooManyOutputs(Exception):
    """The room has ``MAX_OUTPUTS`` already, or the server runs ``MAX_SERVER_OUTPUTS``; the message says which."""


@dataclass
class _RoomOutputs:
    """One room's outputs here; ``lock`` keeps the list and its store writes in one order."""

    runners: list[OutputRunner] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    saver: asyncio.Task[None] | None = None


class OutputRegistry:
    """Every output this server knows (see the module). ``layout``: line breaking and speaker names for the
    targets; ``metrics``: where sends and failures are counted (``/metrics``); ``policy``: where outputs may
    connect (None: public addresses only)."""

    def __init__(
        self,
        rooms: RoomRegistry,
        store: TranscriptStore,
        layout: Layout,
        metrics: ServerMetrics | None = None,
        save_every_s: float = SAVE_EVERY_S,
        policy: DestinationPolicy | None = None,
    ) -> None:
        self.rooms = rooms
        self.store = store
        self.layout = layout
        self.metrics = metrics
        self.save_every_s = save_every_s
        self.policy = policy or DestinationPolicy()
        self._rooms: dict[str, _RoomOutputs] = {}
        self._adding = 0  # outputs being added (saved, not started yet): they count as running
        self._loading = asyncio.Lock()
        self._closed = False
        if metrics is not None:
            metrics.watch_outputs(self.counts, sorted(kinds.FACTORIES))

    async def start(self) -> None:
        """Start the stored outputs of every room that has some and did not end (the server starts)."""
        try:
            room_ids = await self.store.rooms_with_outputs()
        except StoreError as exc:  # the server serves all the same; the outputs start when added again
            log.error("the rooms' outputs cannot be read (%s): none started", exc)
            return
        for room_id in room_ids:
            try:
                entry = await self._entry(room_id)
            except StoreError as exc:
                log.error("room %s: its outputs cannot be read (%s): not started", room_id, exc)
                continue
            for runner in entry.runners:
                runner.start()
            if entry.runners:
                log.info("room %s: %d outputs started again", room_id, len(entry.runners))

    async def outputs(self, room_id: str) -> list[OutputRunner]:
        """The room's outputs (read from the store if this server has not seen them: then shown ``stopped``)."""
        return list((await self._entry(room_id)).runners)

    async def add(self, room: Room, spec: OutputSpec) -> OutputRunner:
        """A new output of ``room`` (loaded: the output follows it), saved, then started where the room's audience is
        now. Raises ``TooManyOutputs``, ``StoreError``."""
        # Counted and reserved before the first await: two rooms adding at once cannot both take the last place.
        if self.running() >= MAX_SERVER_OUTPUTS:
            raise TooManyOutputs(
                f"this server runs at most {MAX_SERVER_OUTPUTS} outputs at once, every room "
                "together: try again once others have stopped, or ask its operator"
            )
        self._adding += 1
        try:
            entry = await self._entry(room.id)
            async with entry.lock:
                if len(entry.runners) >= MAX_OUTPUTS:
                    raise TooManyOutputs(f"a room has at most {MAX_OUTPUTS} outputs")
                runner = self._runner(room.id, dataclasses.replace(spec, progress=Progress(audience_seq(room))))
                entry.runners.append(runner)
                try:
                    await self._write(room.id, entry)
                except StoreError:
                    entry.runners.remove(runner)
                    raise
            runner.start()
        finally:
            self._adding -= 1
        log.info("room %s: output %s (%s) added", room.id, spec.id, spec.kind)
        return runner

    def running(self) -> int:
        """Outputs this server runs now, every room together: started and neither stopped nor failed, and those
        being added."""
        idle = (OutputState.STOPPED, OutputState.FAILED)
        return self._adding + sum(r.state not in idle for entry in self._rooms.values() for r in entry.runners)

    async def remove(self, room_id: str, output_id: str) -> bool:
        """Stop output ``output_id`` and forget it; False if the room has no such output. Raises ``StoreError``."""
        entry = await self._entry(room_id)
        async with entry.lock:
            runner = next((r for r in entry.runners if r.spec.id == output_id), None)
            if runner is None:
                return False
            entry.runners.remove(runner)
            try:
                await self._write(room_id, entry)
            except StoreError:
                entry.runners.append(runner)
                raise
        await runner.close()
        log.info("room %s: output %s removed", room_id, output_id)
        return True

    def counts(self) -> dict[tuple[str, str], int]:
        """``(kind, state) -> outputs``, every kind and state included (zeros too), for ``/metrics``."""
        out = {(kind, state.value): 0 for kind in kinds.FACTORIES for state in OutputState}
        for entry in self._rooms.values():
            for runner in entry.runners:
                key = (runner.spec.kind, runner.state.value)
                out[key] = out.get(key, 0) + 1
        return out

    async def close(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop every output (up to ``grace_s`` for what waits to go out), then save how far each got. Safe to call
        twice."""
        if self._closed:
            return
        self._closed = True
        runners = [r for entry in self._rooms.values() for r in entry.runners]
        await asyncio.gather(*(r.close(grace_s) for r in runners))
        for room_id, entry in self._rooms.items():
            if entry.saver is not None:
                entry.saver.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await entry.saver
            if entry.runners:
                await self._save(room_id, entry)

    # ---- what runners tell (runner.RunnerEvents) ---------------------------------------------------------------
    def caption_sent(self, runner: OutputRunner) -> None:
        if self.metrics is not None:
            self.metrics.output_sent(runner.spec.kind)
        entry = self._rooms.get(runner.room_id)
        if entry is not None and not self._closed and (entry.saver is None or entry.saver.done()):
            entry.saver = asyncio.create_task(
                self._save_later(runner.room_id, entry), name=f"outputs-save-{runner.room_id}"
            )

    def send_failed(self, runner: OutputRunner) -> None:
        if self.metrics is not None:
            self.metrics.output_send_error(runner.spec.kind)

    # ---- helpers ---------------------------------------------------------------------------------------------
    async def _entry(self, room_id: str) -> _RoomOutputs:
        entry = self._rooms.get(room_id)
        if entry is not None:
            return entry
        async with self._loading:  # two first requests for one room must not make its outputs twice
            entry = self._rooms.get(room_id)
            if entry is None:
                record = await self.store.room(room_id)
                entry = _RoomOutputs()
                for raw in record.outputs if record is not None else ():
                    try:
                        entry.runners.append(self._runner(room_id, OutputSpec.from_stored(raw)))
                    except SpecError as exc:
                        log.error("room %s: %s; it is left out", room_id, exc)
                self._rooms[room_id] = entry
            return entry

    def _runner(self, room_id: str, spec: OutputSpec) -> OutputRunner:
        """A runner of ``spec``; one whose target cannot be made here shows ``failed`` with the reason."""
        try:
            target, error = kinds.make_target(spec, self.layout, self.policy), None
        except TargetError as exc:
            target, error = None, str(exc)
        except Exception as exc:  # a target's constructor refusing its configuration
            log.exception("room %s: output %s cannot be made", room_id, spec.id)
            target, error = None, f"{type(exc).__name__}: {exc}"
        return OutputRunner(room_id, spec, target, self.rooms, self.layout, self, error)

    async def _save_later(self, room_id: str, entry: _RoomOutputs) -> None:
        await asyncio.sleep(self.save_every_s)
        await self._save(room_id, entry)

    async def _save(self, room_id: str, entry: _RoomOutputs) -> None:
        """Write the room's outputs with their progress; a failing store is logged (the next save tries again)."""
        async with entry.lock:
            try:
                await self._write(room_id, entry)
            except StoreError as exc:
                log.warning("room %s: could not save its outputs' progress: %s", room_id, exc)

    async def _write(self, room_id: str, entry: _RoomOutputs) -> None:
        """The caller holds ``entry.lock``."""
        await self.store.set_outputs(room_id, [_stored(r) for r in entry.runners])


def _stored(runner: OutputRunner) -> dict[str, Any]:
    resume = kinds.resume_state(runner.target) if runner.target is not None else runner.spec.resume
    return dataclasses.replace(runner.spec, progress=runner.progress, resume=resume).stored()
