"""Speaker labels of a session's locked sentences, in sentence order, without a sentence waiting for its embedding.

A closed segment's speaker embedding starts when it closes, beside its final decode, and on a loaded CPU it often
finishes after the decode: by 0.06-0.12 s for a 3 s sentence and 0.16-0.32 s for a 7-11 s one on 2 cores
(docs/benchmarks.md). Where the client applies ``speakers`` corrections (``SessionOptions.relabels``), a sentence
whose embedding is not in yet locks at once with a provisional label, and the tracker labels it once the embedding
is in; a ``speakers`` message corrects the sentences whose label that changed.

- The provisional label is what the client already saw beside the sentence's partial text: its voice's label
  (``Voices.label``, from the turn detector's windows), else the label of the sentence before it, as the tracker
  gives a segment too short to embed.
- The tracker labels sentences in the order they locked (each label depends on those before it), so a sentence
  whose embedding is in still waits behind an earlier one whose embedding is not; meanwhile it shows the label the
  tracker would give it now (``SpeakerTracker.peek``).
- Where nothing waits and the embedding is in, the sentence locks with its tracker label, as it always did.

For such a sentence the embedding starts only once its text is decoded, so that on a CPU it does not slow the decode
the lock waits for (lock p95 of one speaker 0.79-1.16 s against 0.88-1.37 s on 2 cores: docs/benchmarks.md).
Sentences whose client cannot take a correction, and a file's, wait for their embedding (started beside the decode)
before they lock (``Finals``), so here their label is always final.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.logs import SessionLog
from engine.observe import SessionStats
from engine.speakers.tracker import SpeakerTracker


@dataclass
class _Waiting:
    """A locked sentence whose tracker label waits for its embedding (or for an earlier sentence's)."""

    sid: int
    embed: asyncio.Future[np.ndarray | None]
    speech_s: float
    new_voice: bool
    shown: int  # the label it locked with (or was last corrected to)


class Labels:
    """One session's speaker labels for its locked sentences (``label``), with corrections posted by ``on_relabel``."""

    def __init__(
        self,
        tracker: SpeakerTracker,
        on_relabel: Callable[[dict[int, int]], None],
        *,
        stats: SessionStats,
        log: SessionLog,
    ) -> None:
        """``on_relabel`` gets ``{sentence id: label}`` for locked sentences whose label changed once labelled;
        ``stats`` counts provisional labels and corrections."""
        self._tracker = tracker
        self._on_relabel = on_relabel
        self._stats = stats
        self._log = log
        self._waiting: deque[_Waiting] = deque()
        self._last = 0  # the label the newest locked sentence shows (a short sentence after it continues it)

    @property
    def waiting(self) -> int:
        """Locked sentences not labelled by the tracker yet."""
        return len(self._waiting)

    def label(
        self, sid: int, embed: asyncio.Future[np.ndarray | None], speech_s: float, new_voice: bool, voice: int | None
    ) -> int:
        """The label sentence ``sid`` locks with: its tracker label if ``embed`` (its embedding, None: too short) is
        in and no earlier sentence waits, else a provisional one (``voice``: the label its voice showed, if any);
        ``new_voice``: a change of voice began it. Call in sentence order."""
        if not self._waiting and embed.done():
            label = self._tracker.assign(sid, self._result(embed), speech_s, new_voice)
        else:
            if embed.done():
                # In, behind an earlier sentence: what the tracker would say now. Without an embedding (too short,
                # or it failed) the tracker gives the label before it, whatever the voice showed.
                embedding = self._result(embed, warn=False)
                label = self._tracker.peek(embedding, speech_s, new_voice) if embedding is not None else self._last
            else:
                label = voice if voice is not None else self._last
            self._waiting.append(_Waiting(sid, embed, speech_s, new_voice, label))
            self._stats.provisional_labels += 1
            embed.add_done_callback(lambda _f: self._drain())
        self._last = label
        return label

    async def drained(self) -> None:
        """Return once every locked sentence has its tracker label (any correction was posted)."""
        while self._waiting:
            await asyncio.wait([w.embed for w in self._waiting])
            self._drain()

    def _drain(self) -> None:
        """Label the waiting sentences at the head whose embeddings are in, in order; post what changed."""
        changed: dict[int, int] = {}
        while self._waiting and self._waiting[0].embed.done():
            item = self._waiting.popleft()
            label = self._tracker.assign(item.sid, self._result(item.embed), item.speech_s, item.new_voice)
            if label != item.shown:
                changed[item.sid] = label
            if not self._waiting:
                self._last = label
        if changed:
            self._stats.corrected_labels += len(changed)
            self._log.debug("speaker labels corrected after lock: %s", changed)
            self._on_relabel(changed)

    def _result(self, embed: asyncio.Future[np.ndarray | None], warn: bool = True) -> np.ndarray | None:
        """The embedding ``embed`` (done) holds; None if it failed or was cancelled (that costs the label, never the
        text; ``warn``: log the failure, once per sentence)."""
        if embed.cancelled():
            return None
        if (exc := embed.exception()) is not None:
            if warn:
                self._log.warning("speaker embedding failed: %s", exc)
            return None
        return embed.result()
