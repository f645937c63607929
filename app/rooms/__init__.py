"""Rooms: named caption channels. Publishers (microphone sessions) post into a room; viewers read it.

A room re-numbers what its publishers send onto one room-level stream:
- sentence ids are room-wide (0, 1, 2, ...), times are milliseconds since the room was created (so sentences of
  successive or concurrent publisher sessions share one timeline), and each sentence names its ``session``;
- speaker labels are room-wide too: each voice of each publisher gets its own (``app.rooms.names``), and a publisher
  that joins as a person (``name``) names its voices with durable ``correction`` events (editor ``"publisher"``)
  before anything that shows them;
- every durable event (a ``caption`` carrying newly locked sentences, a ``speakers`` relabel, a ``words`` update
  of a sentence's word times) gets the next room ``seq`` and is committed to the ``TranscriptStore`` *before* any
  viewer sees it; viewers resume from a seq;
- partial text and ``room`` status messages are ephemeral: they repeat the latest seq and are never stored. The
  partial is the open text of every speaking publisher, joined; its ``stable`` count is how many of its leading
  words are settled (a publisher's count, then the next one's only if the first one's text is all settled).

Several front ends on one shared store (PostgreSQL, ``TranscriptStore.shared``) serve the same rooms:
- the store gives out seqs and sentence ids inside each commit, so publishers on different front ends never
  collide; a relabel names room sentence ids, which are the same everywhere;
- each front end delivers every durable event of a room to its viewers in seq order, once: its own commits
  directly, the others' when the store tells of them (``Room.heard``), read back from the table. An event whose seq
  is more than one past what viewers here got first brings in the events between (read from the table), so a late
  or lost notice delays an event, never reorders or drops it;
- what stays per front end, by design: the partial (open) text (a publisher's partials reach the viewers of the
  front end it publishes to), the ``room`` status counts (the publishers and viewers *of this front end*), and
  memory (each front end loads and lets go of rooms itself). A publisher's *stable* words do travel: the room
  announces them through the store, and viewers elsewhere see them as that publisher's open text until its
  sentence locks (``app.rooms.open_text``).

Editors (``app.rooms.edit_routes``) correct locked sentences and name speakers through durable ``correction``
events, and set the vocabulary live sessions in the room decode with; a room may hold its audience back a few
seconds (``app.rooms.audience``) so that corrections land before anyone reads the error. A correction is final
until the next: word times and relabels that arrive after it apply to the sentence as corrected
(``app.rooms.late``).

Viewers cost no audio and no model work: one small in-memory queue each. A slow viewer's queued partials are
coalesced (newest wins); a viewer that falls ``_VIEWER_QUEUE_MAX`` durable events behind is cut off and resumes
from the store when it reconnects, so the server never buffers without bound.
"""

from __future__ import annotations

from aiohttp import web

from . import edit_routes, language_routes, routes
from .keys import ROOMS, STORE
from .names import BadName, person_name
from .open_text import merged_stable
from .publisher import RoomPublisher
from .registry import RoomRegistry
from .room import ROOM_ID_PATTERN, Room, RoomStats
from .routes import base_url, may_edit, stream_language, viewable_room
from .store import MEMORY, RoomRecord, SentenceRecord, Snapshot, StoreError, TimedEvent, TranscriptStore, open_store
from .stream import as_corrected, in_language
from .translating import SOURCE_LANGUAGE, Translates, asked_language
from .viewer import Viewer, ViewerState

__all__ = [
    "MEMORY",
    "ROOMS",
    "ROOM_ID_PATTERN",
    "SOURCE_LANGUAGE",
    "STORE",
    "BadName",
    "Room",
    "RoomPublisher",
    "RoomRecord",
    "RoomRegistry",
    "RoomStats",
    "SentenceRecord",
    "Snapshot",
    "StoreError",
    "TimedEvent",
    "TranscriptStore",
    "Translates",
    "Viewer",
    "ViewerState",
    "add_routes",
    "as_corrected",
    "asked_language",
    "base_url",
    "in_language",
    "may_edit",
    "merged_stable",
    "open_store",
    "person_name",
    "stream_language",
    "viewable_room",
]


def add_routes(app: web.Application) -> None:
    """Rooms, their viewer streams and their editors' API."""
    routes.add_routes(app)
    edit_routes.add_routes(app)
    language_routes.add_routes(app)
