"""Speaker labels of locked sentences (``engine.stream.labels``): a sentence locks without waiting for its speaker
embedding, with the label its voice showed, and a ``speakers`` correction follows only where the tracker, labelling
in sentence order once the embeddings are in, disagrees.

Voices here are orthogonal unit vectors (one per speaker), so the tracker's answer is known without a model.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
import pytest

from engine.logs import SessionLog
from engine.observe import SessionStats
from engine.speakers.tracker import SpeakerConfig, SpeakerTracker
from engine.stream.labels import Labels

A, B, C = np.eye(3, dtype=np.float32)


def _labels() -> tuple[Labels, SpeakerTracker, list[dict[int, int]], SessionStats]:
    """Labels over a fresh tracker, with the ``speakers`` corrections it posts, in order, and its counters."""
    tracker = SpeakerTracker(SpeakerConfig())
    posted: list[dict[int, int]] = []
    stats = SessionStats()
    labels = Labels(tracker, posted.append, stats=stats, log=SessionLog(logging.getLogger(__name__), "t"))
    return labels, tracker, posted, stats


def _ready(vector: np.ndarray | None) -> asyncio.Future[np.ndarray | None]:
    fut: asyncio.Future[np.ndarray | None] = asyncio.get_running_loop().create_future()
    fut.set_result(vector)
    return fut


def _later() -> asyncio.Future[np.ndarray | None]:
    return asyncio.get_running_loop().create_future()


async def _settle() -> None:
    """Let the done callbacks of resolved futures run."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_sentence_whose_embedding_is_in_locks_with_its_tracker_label() -> None:
    labels, tracker, posted, stats = _labels()
    assert labels.label(0, _ready(A), 4.0, False, voice=None) == 0
    assert labels.label(1, _ready(B), 4.0, False, voice=0) == 1  # its voice's guess is not needed: it is in
    assert labels.label(2, _ready(None), 0.5, False, voice=None) == 1  # too short to embed: the sentence before's
    await _settle()
    assert tracker.labels == {0: 0, 1: 1, 2: 1}
    assert posted == [] and stats.provisional_labels == 0 and labels.waiting == 0


async def test_a_late_embedding_locks_with_the_voice_label_and_corrects_only_a_wrong_one() -> None:
    labels, tracker, posted, stats = _labels()
    assert labels.label(0, _ready(A), 4.0, False, voice=None) == 0
    right, wrong = _later(), _later()
    assert labels.label(1, right, 4.0, False, voice=0) == 0  # locks at once, with the label shown beside its text
    assert labels.label(2, wrong, 4.0, True, voice=0) == 0
    assert labels.waiting == 2 and 1 not in tracker.labels
    right.set_result(A)
    await _settle()
    assert posted == [] and labels.waiting == 1  # the guess was right: nothing to correct
    wrong.set_result(B)  # another voice: a new speaker
    await _settle()
    assert posted == [{2: 1}]
    assert tracker.labels == {0: 0, 1: 0, 2: 1}
    assert (stats.provisional_labels, stats.corrected_labels) == (2, 1)
    # The next short sentence continues the corrected speaker, as the tracker would have it.
    assert labels.label(3, _ready(None), 0.5, False, voice=None) == 1


async def test_labels_are_assigned_in_sentence_order_whatever_order_embeddings_come_in() -> None:
    labels, tracker, posted, _ = _labels()
    assert labels.label(0, _ready(A), 4.0, False, voice=None) == 0
    first = _later()
    assert labels.label(1, first, 4.0, False, voice=None) == 0  # no voice label: the sentence before's
    # The next one's embedding is in, but the tracker must label sentence 1 first: it shows what it would get now.
    assert labels.label(2, _ready(C), 4.0, False, voice=None) == 1
    assert labels.label(3, _ready(None), 0.5, False, voice=None) == 1  # short: continues the label shown before it
    await _settle()
    assert labels.waiting == 3 and posted == []
    first.set_result(B)  # sentence 1 was a second speaker: C is then the third, and the short one follows C
    await _settle()
    assert tracker.labels == {0: 0, 1: 1, 2: 2, 3: 2}
    assert posted == [{1: 1, 2: 2, 3: 2}]
    assert labels.waiting == 0


async def test_a_short_sentence_behind_a_late_one_continues_the_label_before_it_whatever_its_voice_showed() -> None:
    labels, tracker, posted, _ = _labels()
    assert labels.label(0, _ready(A), 4.0, False, voice=None) == 0
    late = _later()
    assert labels.label(1, late, 4.0, False, voice=None) == 0
    # Too short to embed (its embedding is in: None): the tracker will give it sentence 1's label, not its voice's.
    assert labels.label(2, _ready(None), 0.5, False, voice=1) == 0
    late.set_result(A)
    await labels.drained()
    assert tracker.labels == {0: 0, 1: 0, 2: 0} and posted == []


async def test_a_failed_embedding_costs_the_label_not_the_sentence() -> None:
    labels, tracker, posted, _ = _labels()
    assert labels.label(0, _ready(A), 4.0, False, voice=None) == 0
    broken, dropped = _later(), _later()
    assert labels.label(1, broken, 4.0, False, voice=1) == 1  # its voice looked new
    assert labels.label(2, dropped, 4.0, False, voice=None) == 1
    broken.set_exception(RuntimeError("speaker model failed"))
    dropped.cancel()
    await labels.drained()
    assert tracker.labels == {0: 0, 1: 0, 2: 0}  # no embedding: the context label
    assert posted == [{1: 0, 2: 0}]


async def test_drained_returns_once_every_sentence_is_labelled() -> None:
    labels, tracker, posted, _ = _labels()
    late = _later()
    assert labels.label(0, late, 4.0, False, voice=None) == 0
    asyncio.get_running_loop().call_later(0.05, late.set_result, A)
    await asyncio.wait_for(labels.drained(), 2.0)
    assert tracker.labels == {0: 0} and posted == [] and labels.waiting == 0


@pytest.mark.parametrize("voice", [None, 0])
async def test_the_first_sentence_is_speaker_zero_until_told_otherwise(voice: int | None) -> None:
    labels, _, posted, _ = _labels()
    late = _later()
    assert labels.label(0, late, 4.0, False, voice=voice) == 0
    late.set_result(B)
    await labels.drained()
    assert posted == []  # the tracker's first speaker is 0, whoever it is


def test_the_bench_counts_corrections_while_live_not_the_reclustering_at_stop() -> None:
    from bench.lib.metrics import live_relabels

    def caption(*sentences: tuple[int, int], final: bool = False) -> dict[str, Any]:
        return {
            "type": "caption",
            "is_final": final,
            "partial": "",
            "sentences": [{"id": sid, "spk": spk} for sid, spk in sentences],
        }

    messages: list[tuple[float, dict[str, Any]]] = [
        (1.0, caption((0, 0))),
        (2.0, caption((1, 0))),
        (2.2, {"type": "speakers", "relabel": {"1": 1}}),  # sentence 1 corrected after its lock
        (3.0, caption((2, 1))),
        (3.1, {"type": "speakers", "relabel": {"2": 1}}),  # names a sentence but changes nothing
        (4.0, caption(final=True)),
        (4.1, {"type": "speakers", "relabel": {"0": 1}}),  # the re-clustering at stop
    ]
    assert live_relabels(messages) == ({1: 2.2}, 1)
