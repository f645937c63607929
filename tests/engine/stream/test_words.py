"""Word times (engine/stream/words.py) and Whisper's timestamp tokens (engine/asr/timestamps.py), on synthetic VAD
probabilities and token ids: pure functions, no model."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.asr.timestamps import TimedSpan, parse_spans
from engine.protocol import Word
from engine.stream.words import place_words

WINDOW_MS = 32.0


def _probs(pattern: str) -> np.ndarray:
    """One VAD window per character: '#' speech, '.' silence."""
    return np.array([0.9 if c == "#" else 0.05 for c in pattern], np.float32)


def test_words_fall_on_speech_and_a_pause_separates_them() -> None:
    # 1.28 s of speech, a 0.64 s pause, 1.28 s of speech: two phrases of three words.
    probs = _probs("#" * 40 + "." * 20 + "#" * 40)
    words = place_words("one two three, four five six", 1000, 1000 + 100 * 32, probs, 0.35, WINDOW_MS)
    assert [w.w for w in words] == ["one", "two", "three,", "four", "five", "six"]
    pause = (1000 + 40 * 32, 1000 + 60 * 32)
    assert words[2].end_ms <= pause[0] + 1 and words[3].start_ms >= pause[1] - 1, words
    assert all(a.end_ms <= b.start_ms for a, b in itertools.pairwise(words))
    assert words[0].start_ms == 1000 and words[-1].end_ms == 1000 + 100 * 32


def test_the_pause_takes_the_boundary_after_punctuation() -> None:
    # By length alone the pause (after 0.70 s of 2.24 s of speech) is nearer the boundary after "abcdefgh"
    # (1.02 s) than the one after "xyz," (0.34 s); a pause after a comma is likelier, and wins.
    probs = _probs("#" * 22 + "." * 10 + "#" * 48)
    words = place_words("xyz, abcdefgh ijklmnop qrstuv", 0, 80 * 32, probs, 0.35, WINDOW_MS)
    assert words[0].end_ms <= 22 * 32 and words[1].start_ms >= 32 * 32, words


def test_timed_spans_place_their_words_inside_them() -> None:
    probs = _probs("#" * 200)  # continuous speech: only the spans can tell where the second sentence starts
    spans = [TimedSpan(0.0, 2.0, "First sentence here."), TimedSpan(2.0, 6.4, "And a second, longer one follows.")]
    words = place_words(
        "First sentence here. And a second, longer one follows.",
        300,
        300 + 200 * 32,
        probs,
        0.35,
        WINDOW_MS,
        spans,
        audio_start_ms=0,
    )
    assert words[2].w == "here." and words[2].end_ms <= 2000 and words[3].start_ms >= 2000
    # Spans whose words are not the text's (the guard changed it) are ignored, not trusted.
    other = place_words("Something else entirely.", 300, 6700, probs, 0.35, WINDOW_MS, spans)
    assert [w.w for w in other] == ["Something", "else", "entirely."]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text("abcdefghij,.", min_size=1, max_size=12).filter(lambda w: w.strip()), min_size=1, max_size=30),
    st.text("#.", min_size=1, max_size=300),
    st.integers(0, 10**6),
)
def test_word_times_are_monotonic_and_inside_the_sentence(words: list[str], pattern: str, start: int) -> None:
    end = start + len(pattern) * 32
    placed = place_words(" ".join(words), start, end, _probs(pattern), 0.35, WINDOW_MS)
    assert [w.w for w in placed] == words
    last = start
    for w in placed:
        assert last <= w.start_ms <= w.end_ms <= end
        last = w.end_ms


def test_parse_spans_reads_whisper_timestamp_tokens() -> None:
    ts = 1000  # id of <|0.00|> in this toy vocabulary; text ids below 900, 999 = end of text
    vocab = {1: "Hello", 2: " there.", 3: " How", 4: " are", 5: " you?"}

    def decode(ids: list[int]) -> str:
        return "".join(vocab[i] for i in ids)

    ids = [1, 2, ts + 60, ts + 65, 3, 4, 5, ts + 150, 999]  # <|1.20|><|1.30|> ... <|3.00|> <|endoftext|>
    spans = parse_spans(ids, ts, decode, lambda t: t < 900)
    assert spans == [TimedSpan(0.0, 1.2, "Hello there."), TimedSpan(1.3, 3.0, "How are you?")]
    # Forced text begins the first stretch; a stretch cut off before its end timestamp ends at the audio's end.
    assert parse_spans([3, 4, 5], ts, decode, lambda t: t < 900, forced="Hello there.", audio_s=2.5) == [
        TimedSpan(0.0, 2.5, "Hello there. How are you?")
    ]
    # A timestamp that goes backwards is read as the previous one.
    assert parse_spans([1, ts + 50, ts + 40, 2, ts + 30], ts, decode, lambda t: t < 900)[1] == TimedSpan(
        1.0, 1.0, "there."
    )


def test_word_wire_form() -> None:
    assert Word("hi", 5, 9).wire() == {"w": "hi", "start_ms": 5, "end_ms": 9}
    assert Word("hi", 5, 9).shifted(100) == Word("hi", 105, 109)
