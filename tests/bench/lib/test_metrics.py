"""The sessions bench's per-sentence measures on made-up caption streams (bench/lib/metrics.py: first correct word,
the cold split), its row and flags (bench/sessions.py), and the "users" clip set's pauses (bench/lib/clips.py), with
no model, no server and no audio decoding."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from itertools import islice, pairwise
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from bench.lib import clips
from bench.lib.client import BenchClient
from bench.lib.clips import USERS_PAUSE_S, SessionClip, Utterance, build_session, pauses, pool, session_clip
from bench.lib.metrics import SessionMetrics, merge, session_metrics
from bench.sessions import parse_args, row_for
from engine.config import ENDPOINT_PRESETS, EndpointPreset

T0 = 100.0  # the client's first packet left at this monotonic time; audio leaves at real time


@dataclass
class Track:
    wall_s: list[float] = field(default_factory=lambda: [T0])


@dataclass
class Client:
    """What ``session_metrics`` reads of a ``BenchClient``: the audio sent at real time from ``T0``, and messages."""

    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    error: str = ""
    track: Track = field(default_factory=Track)

    def sent_at(self, media_s: float) -> float:
        return T0 + media_s


def caption(partial: str = "", sentences: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "caption", "partial": partial, "sentences": sentences or [], "is_final": False}


def sentence(sid: int, text: str, start_s: float, end_s: float) -> dict[str, Any]:
    return {"id": sid, "text": text, "start": int(start_s * 1000), "end": int(end_s * 1000)}


# Two sentences: 1-3 s and 5-7 s of the session's audio; the second says "the mat" again.
CLIP = SessionClip(
    0,
    Path("unused.ogg"),
    10.0,
    (Utterance("a", "The cat sat on the mat.", 1.0, 3.0), Utterance("b", "The mat was red.", 5.0, 7.0)),
)
FIRST = sentence(0, "The cat sat on the mat.", 1.0, 3.0)
SECOND = sentence(1, "The mat was red.", 5.0, 7.0)


def metrics(messages: list[tuple[float, dict[str, Any]]], cold: int = 0) -> SessionMetrics:
    endpoint = ENDPOINT_PRESETS[EndpointPreset.BALANCED]
    return session_metrics(cast(BenchClient, Client(messages)), CLIP, endpoint, cold=cold)


def test_the_first_correct_word_is_the_first_reference_word_shown_not_the_first_text() -> None:
    m = metrics(
        [
            (101.4, caption("Da")),  # new text, but wrong: the first partial, not the first correct word
            (101.8, caption("The cap")),
            (103.0, caption("The cat sat on the mat.")),
            (104.5, caption("", [FIRST])),
            (105.5, caption("The mat")),
            (108.0, caption("", [SECOND])),
        ]
    )
    assert m.first_partial_s == pytest.approx([0.4, 0.5])
    assert m.first_correct_s == pytest.approx([0.8, 0.5])
    assert m.no_partial == m.no_correct == 0


def test_words_of_the_previous_sentence_still_on_screen_do_not_count() -> None:
    m = metrics(
        [
            (102.0, caption("The cat sat on the mat.")),
            # After the second onset (105 s): the first sentence is still in the partial, unlocked, so its
            # "the" and "mat" were on screen before; only "ugh" is new, and it is wrong.
            (105.3, caption("The cat sat on the mat. Ugh")),
            # The first sentence locks: the words in the partial now are new ones, wrong still.
            (105.6, caption("Ugh, zee", [FIRST])),
            (105.9, caption("Ugh, zee mat")),  # a right word
            (108.0, caption("", [SECOND])),
        ]
    )
    assert m.first_partial_s[1] == pytest.approx(0.3)
    assert m.first_correct_s[1] == pytest.approx(0.9)


def test_a_sentence_that_never_shows_a_right_word_counts_in_no_correct() -> None:
    wrong = sentence(1, "Zoo bar.", 5.0, 7.0)
    m = metrics(
        [
            (101.5, caption("The cat")),
            (104.5, caption("", [FIRST])),
            (105.5, caption("Zoo bar")),
            (108.0, caption("", [wrong])),
            (110.0, caption("The mat")),
        ]
    )  # after the sentence locked: not its words any more
    assert m.first_correct_s == pytest.approx([0.5])
    assert m.no_correct == 1 and m.no_partial == 0 and m.lost == 0
    assert merge([m, m]).no_correct == 2


def test_a_sentence_never_locked_is_looked_for_only_until_the_next_one_starts() -> None:
    m = metrics(
        [
            (104.6, caption("Zoo")),
            (105.5, caption("Zoo the cat")),  # the second sentence's onset passed: not the first's words
            (108.0, caption("", [SECOND])),
        ]
    )
    assert m.lost == 1 and m.no_correct == 1
    assert m.first_correct_s == pytest.approx([0.5])


STREAM = [
    (101.5, caption("The cat")),
    (104.5, caption("", [FIRST])),
    (105.5, caption("The mat")),
    (108.0, caption("", [SECOND])),
]


def test_the_cold_split_measures_the_first_sentence_apart() -> None:
    warm = metrics(STREAM)
    assert warm.lock_s == pytest.approx([1.5, 1.0]) and warm.cold_lock_s == []
    m = metrics(STREAM, cold=1)
    assert (m.sentences, m.cold) == (2, 1)
    assert m.cold_lock_s == pytest.approx([1.5]) and m.lock_s == pytest.approx([1.0])
    assert m.cold_first_correct_s == pytest.approx([0.5]) and m.first_correct_s == pytest.approx([0.5])
    assert m.cold_first_partial_s == pytest.approx([0.5]) and len(m.first_partial_s) == 1
    assert len(m.lock_over_silence_s) == len(m.label_s) == 1  # the cold sentence's are left out
    both = merge([m, metrics(STREAM, cold=1)])
    assert both.cold == 2 and both.cold_lock_s == pytest.approx([1.5, 1.5])


def bounds() -> argparse.Namespace:
    return argparse.Namespace(lag_limit_s=1.0, lock_limit_s=0.4, first_bound_s=2.0, lock_bound_s=2.0)


def test_the_row_reports_the_cold_sentences_apart_and_the_first_correct_word() -> None:
    row = row_for("engine", 1, metrics(STREAM, cold=1), 1.0, 10.0, 0, [], bounds())
    assert row["cold_lock_s_max"] == pytest.approx(1.5)
    assert math.isnan(row["cold_lock_s_p50"])  # one cold sentence: no median of it
    assert row["cold_first_correct_s_max"] == pytest.approx(0.5)
    assert row["lock_s_p50"] == pytest.approx(1.0)
    assert row["first_correct_s_p50"] == pytest.approx(0.5) and row["no_correct"] == 0
    two = row_for("engine", 2, merge([metrics(STREAM, cold=1)] * 2), 1.0, 10.0, 0, [], bounds())
    assert two["cold_lock_s_p50"] == pytest.approx(1.5)
    plain = row_for("engine", 1, metrics(STREAM), 1.0, 10.0, 0, [], bounds())
    assert math.isnan(plain["cold_lock_s_max"]) and plain["lock_s_p95"] == pytest.approx(1.475)


def test_as_users_stands_for_the_users_clips_in_20_ms_packets_on_a_cold_server() -> None:
    args = parse_args(["--as-users"])
    assert (args.clips, args.packet_ms, args.cold) == ("users", 20, True)
    plain = parse_args([])
    assert (plain.clips, plain.packet_ms, plain.cold, plain.warmup) == ("read", 60, False, True)


def test_users_pauses_are_drawn_from_their_range_the_same_every_time() -> None:
    first = list(islice(pauses(3, 2.5, "users"), 50))
    assert first == list(islice(pauses(3, 2.5, "users"), 50))
    other = list(islice(pauses(4, 2.5, "users"), 50))
    assert first != other
    assert all(USERS_PAUSE_S[0] <= p <= USERS_PAUSE_S[1] for p in first + other)
    assert max(first) - min(first) > 0.8  # spread over the range, not one value
    assert list(islice(pauses(3, 2.5), 3)) == [2.5, 2.5, 2.5]  # the other sets: the fixed pause


def test_users_sessions_mix_two_read_sentences_with_one_hard_one_with_drawn_pauses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Three seconds of "speech" per clip, all of it speech: no audio is read and no VAD runs.
    monkeypatch.setattr(clips, "clip_audio", lambda _id: np.zeros(3 * 16_000, np.float32))
    monkeypatch.setattr(clips, "speech_bounds", lambda _id: (0.0, 3.0))
    read, hard = set(pool("read")), set(pool("hard"))
    users = pool("users")
    assert all(users[i] in (hard if i % 3 == 2 else read) for i in range(len(users)))
    assert read <= set(users) and hard <= set(users)
    _, utterances = build_session(1, 40.0, 2.5, "users")
    gaps = [b.speech_start_s - a.speech_end_s for a, b in pairwise(utterances)]
    drawn = pauses(1, 2.5, "users")
    assert gaps == pytest.approx([int(next(drawn) * 16_000) / 16_000 for _ in gaps])
    assert [(u.clip_id, u.text) for u in utterances] == list(users[6 : 6 + len(utterances)])
    assert build_session(1, 40.0, 2.5, "users")[1] == utterances
    monkeypatch.setattr(clips, "encode_opus", lambda *_args: None)
    assert session_clip(3, 40.0, 2.5, 20, False, "users").ogg.name == "session-users003-40s-p1.2-2.5.ogg"
    assert session_clip(3, 40.0, 2.5, 60, False, "read").ogg.name == "session003-40s-p2.5-f60.ogg"
