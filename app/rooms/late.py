"""What a late update does to a locked sentence. Two updates follow a lock: the aligner's word times (a second or so
after it) and a speaker relabel (whenever the publishing session re-clusters its voices). An editor may have
corrected the sentence meanwhile, and a correction is final until the next correction, so each update applies to the
sentence as it now is (read inside the room's lock, through its read path), never to the sentence as it locked:

- Word times time the words the recognizer wrote. On a sentence whose text is still those words they are its new
  words; on a corrected (or respelt) one they are mapped onto its words now as an edit maps a sentence's old times
  onto its new words (``edits.retimed``, the aligner's words as the old ones): a word the editor left alone gets the
  aligner's time, one the editor typed shares the time of those it replaced. The recognizer's words never come back.
- A relabel moves a sentence from the label the session gave it (at the lock, or by its last relabel) to another.
  A sentence whose label is no longer the one the session gave it has one an editor set: that one stays. (An editor
  who sets the very label the session gave leaves nothing to tell apart: a later relabel moves it.)

The pure parts are here; ``Room.commit_words`` and ``Room.commit_relabel`` read, commit and broadcast.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping

from engine.protocol import Word

from . import edits
from .store.base import SentenceRecord


async def words_now(record: SentenceRecord, aligned: tuple[Word, ...]) -> tuple[Word, ...]:
    """The aligner's ``aligned`` words (the recognizer's words, room timeline) as they apply to ``record`` now (see
    the module); ``record``'s own words when ``aligned`` has none. A sentence an editor changed is retimed in a
    worker thread (``edits``: a few ms at most, more than the event loop should spend)."""
    if not aligned:
        return record.words
    heard = " ".join(w.w for w in aligned)
    if heard == record.text:  # the common case: nobody changed it
        return aligned
    said = dataclasses.replace(record, text=heard, words=aligned)
    return await asyncio.to_thread(edits.retimed, said, record.text.split())


def relabel_now(
    relabel: Mapping[int, int], given: Mapping[int, int | None], now: Mapping[int, SentenceRecord]
) -> tuple[dict[int, int], list[SentenceRecord]]:
    """The part of ``relabel`` (sentence id -> label) that applies to the sentences as they are ``now``, and the
    sentences that keep the label an editor set (see the module). ``given``: the label the session gave each one.
    A sentence not in ``now`` (deleted) takes nothing."""
    applies = {sid: spk for sid, spk in relabel.items() if sid in now and now[sid].spk == given.get(sid)}
    kept = [now[sid] for sid in relabel if sid in now and sid not in applies]
    return applies, kept
