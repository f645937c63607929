"""The meeting bench's scores (``bench.lib.meeting_scores``) on hand-made captions: what they count and what not."""

from __future__ import annotations

from bench.lib.meeting_scores import HeardWord, cp_wer, duplicates, unmatched, wrong_mic
from speechdata.corpus import Turn


def words(stream: str, text: str, start_s: float, step_s: float = 0.3) -> list[HeardWord]:
    return [HeardWord(stream, w, start_s + i * step_s) for i, w in enumerate(text.split())]


def test_a_copied_run_is_a_duplicate_and_one_shared_word_is_not() -> None:
    copied = words("a", "we could press the key", 1.0) + words("b", "we could press the key", 1.05)
    assert duplicates(copied) == 5
    echo = words("a", "it gives you a menu display", 1.0) + words("b", "menu right", 1.9)
    assert duplicates(echo) == 0


def test_wrong_microphone_words_are_the_neighbours_not_the_owners() -> None:
    turns = [Turn(0.0, 3.0, "ann"), Turn(3.0, 6.0, "ben")]
    references = {"ann": "hello there everyone", "ben": "thanks for coming"}
    heard = (
        words("ann", "hello there everyone", 0.2)
        + words("ann", "thanks for", 4.0)
        + words("ben", "thanks for coming", 3.4)
    )
    assert wrong_mic(heard, {"ann": "ann", "ben": "ben"}, turns, references) == 2
    # The turns are loose: an owner's own words inside someone else's turn are still the owner's.
    late = words("ben", "thanks for coming", 2.0)
    assert wrong_mic(late, {"ben": "ben"}, turns, references) == 0


def test_cp_wer_assigns_streams_to_speakers() -> None:
    refs = {"ann": "hello there everyone", "ben": "thanks for coming"}
    cp, assigned = cp_wer(refs, {"mic2": "thanks for coming", "mic1": "hello there"})
    assert assigned == {"ann": "mic1", "ben": "mic2"} and abs(cp - 1 / 6) < 1e-9
    # One stream for two speakers: it is one speaker's (three words too many), and the other's words are missing.
    cp, _ = cp_wer(refs, {"mic1": "hello there everyone thanks for coming"})
    assert cp == 1.0
    assert unmatched(["a", "b", "c"], ["a", "x", "c", "d"]) == [False, True, False, True]
