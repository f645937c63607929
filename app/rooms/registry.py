"""The rooms one server knows, loaded from the store on demand and let go when idle."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from ..auth import new_token, token_digest
from .room import Room, RoomStats
from .store.base import RoomRecord, StoreError, TranscriptStore, now_ms
from .translating import SOURCE_LANGUAGE, RoomTranslating, Translates, TranslationStats

log = logging.getLogger(__name__)

ROOM_ID_BYTES = 12  # 96 random bits, 16 URL-safe characters: not guessable, short enough for a QR code


@dataclass(frozen=True)
class NewRoom:
    """A room just made, with the tokens that are shown only now: ``viewer_token`` (private rooms; None for open
    ones) and ``editor_token`` (only its digest is kept)."""

    room: Room
    viewer_token: str | None
    editor_token: str


class RoomRegistry:
    """The rooms this server knows. A room is in memory while someone uses it (a publisher, a viewer, unsaved
    events) and for ``idle_s`` after; then a sweep every ``sweep_s`` lets it go, and it loads again from the store
    on demand. Reads that only look (status, transcript, QR code) get a detached copy and load nothing."""

    def __init__(
        self, store: TranscriptStore, idle_s: float = 300.0, sweep_s: float = 30.0, translator: Translates | None = None
    ) -> None:
        self.store = store
        self.translator = translator  # the translation engines (None: this front end translates nothing)
        self.translation_stats = TranslationStats()
        self._warmed: set[tuple[str, str]] = set()  # (source, target) pairs whose engine was started
        self.idle_s = idle_s
        self.sweep_s = sweep_s
        self.stats = RoomStats()
        self._rooms: dict[str, Room] = {}
        self._loading = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the sweep, and hear of other front ends' commits and announcements (needs the running event
        loop)."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="room-sweep")
            self.store.watch(self._heard, self._missed, self._announced)

    def _heard(self, room_id: str, seq: int) -> None:
        room = self._rooms.get(room_id)
        if room is not None:  # a room not in memory reads the store when it loads
            room.heard(seq)

    def _missed(self) -> None:
        for room in self._rooms.values():
            room.heard()

    def _announced(self, room_id: str, body: dict[str, Any]) -> None:
        room = self._rooms.get(room_id)
        if room is not None:  # a room not in memory has no viewers here
            room.heard_announcement(body)

    async def create(
        self,
        title: str = "",
        private: bool = False,
        unsaved_ok: bool = False,
        delay_s: float = 0.0,
        languages: tuple[str, ...] = (),
        language: str = SOURCE_LANGUAGE,
    ) -> NewRoom:
        """A new room with an unguessable id and an editor token; ``private`` rooms get a viewer token (kept with
        the room: its QR code and links carry it); ``delay_s``: its audience's hold-back delay; ``languages``: what
        its sentences are translated into (checked by the caller: ``translatable(language)``); ``language``: what its
        sessions speak (a Whisper language code, checked by the caller). Raises ``StoreError`` if the
        store cannot take it, unless ``unsaved_ok``: then the room lives in memory and is written with its events
        once the store takes writes again (a microphone session's own room: captions must not wait for a disk)."""
        viewer_token = new_token() if private else None
        editor_token = new_token()
        record = RoomRecord(
            secrets.token_urlsafe(ROOM_ID_BYTES),
            int(time.time() * 1000),
            title[:200],
            token_digest(viewer_token) if viewer_token else None,
            viewer_token,
            token_digest(editor_token),
            delay_s,
            languages=languages,
            language=language,
        )
        room = self._translating(Room(record, self.store, 0, 0, self.stats))
        try:
            await self.store.save_room(record)
        except StoreError as exc:
            if not unsaved_ok:
                raise
            room.journal.record_refused(str(exc))
            log.error("room %s: %s; kept in memory until the store recovers", room.id, exc)
        self._add(room)
        log.info(
            "room %s created%s%s",
            room.id,
            " (viewer token required)" if private else "",
            f" (audience {delay_s:g} s behind)" if delay_s else "",
        )
        return NewRoom(room, viewer_token, editor_token)

    async def get(self, room_id: str, keep: bool = True) -> Room | None:
        """The room, or ``None`` if there is none. ``keep=False`` (a read that only looks): a room not in memory
        comes back detached (never registered, not to be joined or subscribed to), so reads never pin rooms."""
        room = self._rooms.get(room_id)
        if room is not None:
            if keep:
                room.touch()
            return room
        async with self._loading:  # two first requests for one stored room must not build two Room objects
            room = self._rooms.get(room_id)
            if room is None:
                record = await self.store.room(room_id)
                if record is None:
                    return None
                last_seq, next_id = await self.store.counters(room_id)
                # New voices' labels continue above the stored ones (a detached room has no publishers).
                next_label = await self.store.next_label(room_id) if keep else 0
                room = Room(record, self.store, last_seq, next_id, self.stats, next_label)
                if keep:
                    self._translating(room)
                    if record.delay_s:  # what its audience did not get yet (a restart; another front end's)
                        since = now_ms() - int(record.delay_s * 1000)
                        room.audience.seed(await self.store.timed_events(room_id, since_ms=since))
                    self._add(room)
            return room

    def in_memory(self) -> list[Room]:
        """The rooms held in memory now."""
        return list(self._rooms.values())

    def loaded(self, room_id: str) -> Room | None:
        """The room if it is in memory now (loads nothing)."""
        return self._rooms.get(room_id)

    def translatable(self, source: str = SOURCE_LANGUAGE) -> frozenset[str]:
        """The languages this front end's engines can translate ``source`` into (none without engines)."""
        return self.translator.targets(source) if self.translator is not None else frozenset()

    def _translating(self, room: Room) -> Room:
        """``room`` with its translation side, where this front end has engines."""
        if self.translator is not None:
            # A pair's engine starts (Apertium: 0.1-0.6 s of CPU) when a room first has it, before its first
            # sentence needs it: in a thread, off the loop, and never at a server's start.
            cold = [lang for lang in room.languages if (room.language, lang) not in self._warmed]
            if cold:
                self._warmed.update((room.language, lang) for lang in cold)
                asyncio.get_running_loop().run_in_executor(None, self.translator.warm, room.language, cold)
            room.translating = RoomTranslating(
                room.id,
                self.translator,
                lambda: room.languages,
                room.commit_translation,
                self.translation_stats,
                room.language,
            )
        return room

    def _add(self, room: Room) -> Room:
        self._rooms[room.id] = room
        self.stats.rooms_loaded += 1
        return room

    async def sweep(self) -> int:
        """Let idle rooms go and retry unsaved events; returns how many rooms left memory."""
        now = time.monotonic()
        for room in [r for r in self._rooms.values() if r.needs_saving]:
            await room.retry_unsaved()
        if self.store.shared:  # a safety net under the store's notices: rooms with viewers look once a sweep
            for room in self._rooms.values():
                if room.viewers:
                    room.heard()
                room.expire_open()
        idle = [room_id for room_id, room in self._rooms.items() if room.idle(now, self.idle_s)]
        for room_id in idle:
            del self._rooms[room_id]
        self.stats.rooms_evicted += len(idle)
        return len(idle)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            try:
                await self.sweep()
            except Exception:  # a sweep must never end the sweeping
                log.exception("room sweep failed")

    def snapshot_stats(self) -> dict[str, Any]:
        """Counts for ``/ready`` and ``/metrics``: rooms in memory and their viewers now, totals since start."""
        return {
            "in_memory": len(self._rooms),
            "viewers": sum(len(r.viewers) for r in self._rooms.values()),
            "loaded": self.stats.rooms_loaded,
            "evicted": self.stats.rooms_evicted,
            "viewers_dropped": self.stats.viewers_dropped,
            "unsaved_events": sum(len(r.unsaved) for r in self._rooms.values()),
            "unsaved_rooms": sum(not r.journal.record_saved for r in self._rooms.values()),
            "corrections": self.stats.corrections,
            "translations": dataclasses.asdict(self.translation_stats),
            "translations_waiting": sum(
                r.translating.waiting for r in self._rooms.values() if r.translating is not None
            ),
            "held_events": sum(r.audience.lag().held for r in self._rooms.values()),
        }

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for room in self._rooms.values():
            room.close()
