"""Window choice, the token cap and the loop detector (engine/asr/windows.py), and non-speech tags: no model."""

from __future__ import annotations

import pytest

from engine.asr.guard import strip_nonspeech
from engine.asr.windows import (
    FULL_WINDOW_S,
    STOCK_WINDOW,
    WindowPolicy,
    WindowStats,
    encoder_positions,
    loop_reason,
    max_tokens_for,
    tandem_repeat,
    window_samples,
)
from engine.config import TranscriberConfig, WindowMode


def test_the_smallest_window_that_holds_audio_and_margin() -> None:
    policy = WindowPolicy((2.0, 4.0, 8.0, 15.0, 30.0), margin_s=1.0)
    assert policy.window_for(0.5) == 2.0
    assert policy.window_for(1.0) == 2.0  # exactly fits
    assert policy.window_for(1.01) == 4.0
    assert policy.window_for(6.9) == 8.0
    assert policy.window_for(7.5) == 15.0
    assert policy.window_for(29.5) == 30.0  # past the largest window: the largest (the extractor truncates)
    assert policy.window_for(45.0) == 30.0
    assert [policy.next_window(w) for w in (2.0, 4.0, 15.0, 30.0)] == [4.0, 8.0, 30.0, None]


def test_a_margin_fraction_gives_long_audio_more_room() -> None:
    policy = WindowPolicy((4.0, 8.0, 15.0, 30.0), margin_s=1.0, margin_fraction=0.15)
    assert policy.window_for(2.5) == 4.0  # 1 s is the larger margin
    assert policy.window_for(12.0) == 15.0  # 13.8 s
    assert policy.window_for(13.5) == 30.0  # 15.5 s


def test_stock_is_always_thirty_seconds_and_has_nowhere_to_fall_back() -> None:
    assert STOCK_WINDOW.stock and not WindowPolicy().stock
    assert {STOCK_WINDOW.window_for(s) for s in (0.1, 3.0, 29.0)} == {FULL_WINDOW_S}
    assert STOCK_WINDOW.next_window(FULL_WINDOW_S) is None
    assert TranscriberConfig(window=WindowMode.STOCK).window_policy() is STOCK_WINDOW
    with pytest.raises(ValueError, match="unknown window mode"):
        TranscriberConfig(window="tiny").window_policy()  # type: ignore[arg-type]  # not one of them, on purpose


@pytest.mark.parametrize("buckets", [(), (8.0, 4.0, 30.0), (4.0, 8.0), (0.0, 30.0), (4.0, 4.0, 30.0)])
def test_bad_bucket_sets_are_refused(buckets: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="window"):
        WindowPolicy(buckets)


def test_window_sizes_in_samples_and_encoder_positions() -> None:
    assert window_samples(30.0) == 480_000 and encoder_positions(30.0) == 1500  # Whisper's stock window
    assert window_samples(4.0) == 64_000 and encoder_positions(4.0) == 200
    assert encoder_positions(2.0) == 100


def test_token_cap_follows_the_audio() -> None:
    assert max_tokens_for(0.3, 220) == 24  # even a short word gets room for a sentence's tokens
    assert max_tokens_for(5.0, 220) == 50
    assert max_tokens_for(12.5, 220) == 125
    assert max_tokens_for(29.0, 220) == 220  # never past the configured cap
    assert max_tokens_for(5.0, 10) == 10


SENTENCE = [440, 732, 1273, 2628, 281, 1080, 1081, 32069, 264, 39780, 13]  # an 11-token clause


def test_a_clause_said_twice_in_a_row_is_a_loop() -> None:
    assert tandem_repeat(SENTENCE + SENTENCE) == (11, 2)
    assert tandem_repeat([50, 51, *SENTENCE, *SENTENCE, *SENTENCE[:4]]) == (11, 2)
    assert loop_reason(SENTENCE + SENTENCE, "x", hit_token_cap=False) == "repeated 11-token span x2"


def test_a_short_phrase_spinning_and_one_token_stuck_are_loops() -> None:
    assert tandem_repeat([7, 8, 9] + [3, 4] * 3) == (2, 3)
    assert tandem_repeat([1, 2] + [5] * 5) == (1, 5)
    assert loop_reason([9] * 30, "", hit_token_cap=False) == "repeated 1-token span x30"


def test_natural_repetition_is_not_a_loop() -> None:
    assert tandem_repeat(SENTENCE) is None
    assert tandem_repeat([10, 20, 20, 30]) is None  # "very, very"
    assert tandem_repeat([10, 20, 21, 20, 21, 30]) is None  # a two-token phrase twice: "I think, I think"
    assert tandem_repeat([1, 2, 3, 4, 5, 1, 2, 3, 4, 5]) is None  # five tokens twice: still speech
    assert tandem_repeat([4, 4, 4, 4]) is None  # "no, no, no, no"
    assert tandem_repeat([]) is None and tandem_repeat([1]) is None
    assert loop_reason(SENTENCE, "The two stray kittens gradually make themselves at home.", False) is None


def test_hitting_the_token_cap_or_compressing_too_well_is_a_loop() -> None:
    assert loop_reason(SENTENCE, "text", hit_token_cap=True) == "token cap"
    looping = "and then we went home " * 6
    reason = loop_reason(list(range(60)), looping, hit_token_cap=False)
    assert reason is not None and reason.startswith("compression ratio")


def test_window_counters() -> None:
    stats = WindowStats()
    stats.record(8.0, 0.2, 20, fell_back=True)
    stats.record(4.0, 0.1, 10, fell_back=False)
    stats.record(8.0, 0.3, 30, fell_back=False)
    assert stats.as_list() == [
        {
            "window_s": 4.0,
            "encoder_positions": 200,
            "decodes": 1,
            "fallbacks": 0,
            "decode_s": 0.1,
            "decode_s_p50": 0.1,
            "decode_s_p95": 0.1,
            "tokens": 10,
        },
        {
            "window_s": 8.0,
            "encoder_positions": 400,
            "decodes": 2,
            "fallbacks": 1,
            "decode_s": 0.5,
            "decode_s_p50": 0.25,
            "decode_s_p95": 0.295,
            "tokens": 50,
        },
    ]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("[BLANK_AUDIO]", ""),
        (" (music)", ""),
        ("[Music] Hello there. [inaudible]", "Hello there."),
        ("So we begin (laughs) now.", "So we begin now."),
        ("♪ la la ♪", "la la"),
        ("*applause* Thank you all.", "Thank you all."),
        ("No tags at all.", "No tags at all."),
    ],
)
def test_non_speech_tags_never_reach_the_screen(raw: str, shown: str) -> None:
    assert strip_nonspeech(raw) == shown


@pytest.mark.parametrize(
    ("tokens", "start"),
    [
        ([1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7], 7),  # a whole clause said twice: keep the first
        ([9, 8, 1, 2, 1, 2, 1, 2, 5], 4),  # a short phrase spinning three times
        ([3, 3, 3, 3, 3, 4], 1),  # one token five times
        ([1, 2, 3, 1, 2, 3, 9], None),  # a short phrase twice is speech ("very, very"), not a loop
        ([5, 6, 7, 8], None),
    ],
)
def test_a_looping_partial_is_cut_where_it_began_to_repeat(tokens: list[int], start: int | None) -> None:
    from engine.asr.windows import loop_start, tandem_repeat

    assert loop_start(tokens) == start
    assert (start is None) == (tandem_repeat(tokens) is None)
