"""How the sessions bench pairs the words that settled on a publisher's channel with their arrival at a room viewer
on another front end (bench/lib/remote_viewer.py), on made-up message streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from bench.lib.client import BenchClient
from bench.lib.remote_viewer import RemoteViewer, stable_delays

OFFSET_MS = 1200  # the room's timeline runs ahead of the session's by this much


def word(w: str, start_ms: int, end_ms: int, shift: int = 0) -> dict[str, Any]:
    return {"w": w, "start_ms": start_ms + shift, "end_ms": end_ms + shift}


def caption(
    stable: list[dict[str, Any]] | None = None, sentences: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"type": "caption", "partial": "", "stable_words": stable or [], "sentences": sentences or []}


@dataclass
class Publisher:
    """What ``stable_delays`` reads of a ``BenchClient``: audio sent at real time from t=100 s, and messages."""

    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    started_s: float = 100.0

    def sent_at(self, media_s: float) -> float:
        return 100.0 + media_s


def delays(publisher: Publisher, viewer: RemoteViewer | None) -> Any:
    return stable_delays(cast(BenchClient, publisher), viewer)


def test_each_settled_word_is_timed_on_both_front_ends_from_the_end_of_its_audio() -> None:
    pub = Publisher(
        [(101.0, caption([word("The", 0, 300), word("two", 300, 600)])), (101.5, caption([word("stray", 600, 900)]))]
    )
    viewer = RemoteViewer("")
    viewer.captions = [
        (101.1, caption([word("The", 0, 300, OFFSET_MS), word("two", 300, 600, OFFSET_MS)])),
        (101.7, caption([word("stray", 600, 900, OFFSET_MS)])),
    ]
    d = delays(pub, viewer)
    assert d.local_s == pytest.approx([0.7, 0.4, 0.6])
    assert d.remote_s == pytest.approx([0.8, 0.5, 0.8])
    assert d.missing == 0


def test_a_word_whose_sentence_locked_before_its_announcement_arrives_with_the_lock() -> None:
    pub = Publisher([(101.0, caption([word("The", 0, 300)])), (101.4, caption([word("two", 300, 600)]))])
    viewer = RemoteViewer("")
    viewer.captions = [
        (101.1, caption([word("The", 0, 300, OFFSET_MS)])),
        (102.5, caption(sentences=[{"start": OFFSET_MS, "end": 650 + OFFSET_MS, "text": "The two."}])),
    ]
    d = delays(pub, viewer)
    assert d.remote_s == pytest.approx([0.8, 1.9])
    assert d.missing == 0


def test_a_word_that_never_reached_the_other_front_end_is_counted_missing() -> None:
    pub = Publisher([(101.0, caption([word("The", 0, 300)])), (101.4, caption([word("two", 300, 600)]))])
    viewer = RemoteViewer("")
    viewer.captions = [(101.1, caption([word("The", 0, 300, OFFSET_MS)]))]
    d = delays(pub, viewer)
    assert d.remote_s == pytest.approx([0.8])
    assert d.missing == 1


def test_without_a_viewer_only_the_channel_is_timed() -> None:
    pub = Publisher([(101.0, caption([word("The", 0, 300)]))])
    d = delays(pub, None)
    assert d.local_s == pytest.approx([0.7])
    assert d.remote_s == [] and d.missing == 0
