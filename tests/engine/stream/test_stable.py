"""Stable words and the end-of-sentence rule: pure policy, on scripted partial sequences and texts."""

from __future__ import annotations

import pytest

from engine.stream.sentence_end import ends_sentence
from engine.stream.stable import StableWords, onto


def _run(decodes: list[tuple[str, bool]]) -> tuple[StableWords, list[str]]:
    """Feed (text, ended inside speech) decodes in order; returns the policy and the text shown after each."""
    stable = StableWords()
    shown = [" ".join(stable.update(text.split(), in_speech)) for text, in_speech in decodes]
    return stable, shown


def test_words_two_decodes_agree_on_settle_but_not_the_last_word_of_audio_cut_inside_speech() -> None:
    stable, _shown = _run([("If the reader will accept", True), ("If the reader will excuse me,", True)])
    assert stable.words == "If the reader will".split()
    # The next decode differs only after them: nothing more settles, nothing settled changes.
    stable.update("If the reader will excuse me, I".split(), True)
    assert stable.words == "If the reader will excuse".split()


def test_a_settled_word_is_never_withdrawn_even_when_a_later_decode_disagrees() -> None:
    _stable, shown = _run(
        [
            ("If the reader will accept", True),
            ("If the reader will excuse me,", True),
            ("If a reader would excuse me, I will", True),
        ]
    )
    assert shown[-1].startswith("If the reader will "), shown
    assert shown[-1] == "If the reader will excuse me, I will"


def test_the_last_word_settles_once_the_speaker_has_paused_after_it() -> None:
    stable, _ = _run([("Hello world.", True), ("Hello world.", False)])
    assert stable.words == ["Hello"]  # the first decode's audio ended inside "world"
    stable.update("Hello world.".split(), False)
    assert stable.words == ["Hello", "world."]


def test_spelling_case_and_punctuation_must_agree_exactly() -> None:
    stable, _ = _run([("Hello, world and more", True), ("Hello world and more", True)])
    assert stable.words == []


def test_an_empty_or_rejected_decode_settles_nothing_and_keeps_what_was_settled() -> None:
    stable, shown = _run(
        [
            ("one two three four", True),
            ("one two three four five", True),
            ("", True),
            ("one two three four five six", True),
        ]
    )
    assert shown[2] == "one two three"
    # Compared with the last decode that had words: the fifth word ended that decode's audio.
    assert stable.words == "one two three four".split()


def test_settled_words_are_sent_once() -> None:
    stable, _ = _run([("one two three four", True), ("one two three four five", True)])
    assert stable.take_new() == ["one", "two", "three"]
    assert stable.take_new() == []
    stable.update("one two three four five six".split(), True)
    assert stable.take_new() == ["four"]


@pytest.mark.parametrize(
    ("stable", "decoded", "shown"),
    [
        ("If the reader will", "If the reader will excuse me", "If the reader will excuse me"),
        ("If the reader will", "if the reader will excuse me", "If the reader will excuse me"),  # case is the stable's
        ("If the reader will", "If a reader will excuse me", "If the reader will excuse me"),
        ("If the reader will", "If reader will excuse me", "If the reader will excuse me"),  # one word dropped
        ("If the reader will", "", "If the reader will"),
        ("", "Any text", "Any text"),
    ],
)
def test_a_decode_that_strayed_from_the_settled_words_is_reconciled_onto_them(
    stable: str, decoded: str, shown: str
) -> None:
    assert " ".join(onto(stable.split(), decoded.split())) == shown


@pytest.mark.parametrize(
    "text",
    [
        "I will say nothing of my antecedents.",
        "Is that so?",
        "I think so.",
        "What are you afraid of?",
        "Stop!",
        'He said "yes."',
        "It cost five dollars.",
        "It was 1984.",
        "So I did it.",
        "那是什么？",
    ],
)
def test_text_that_ends_a_sentence(text: str) -> None:
    assert ends_sentence(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "and then,",
        "I went to the store and.",
        "I think that the.",
        "Well, um.",
        "I was thinking...",
        "I was thinking…",
        "so we went to the",
        "He met Dr.",
        "It was John F.",
        "We looked at the results of.",
        "Because.",
    ],
)
def test_text_that_stops_mid_clause_keeps_the_long_wait(text: str) -> None:
    assert not ends_sentence(text)


def test_a_word_settles_only_once_it_has_held_for_the_minimum_age() -> None:
    stable = StableWords(min_age_s=1.0)
    # Decodes every half second of audio; "which plays" holds for two decodes, then more audio corrects it.
    stable.update("Concorde returned which plays".split(), True, 1.0)
    stable.update("Concorde returned which plays amidst".split(), True, 1.5)
    assert stable.words == []  # agreed, but held for only 0.5 s
    stable.update("Concorde returned to its place amidst the".split(), True, 2.0)
    assert stable.words == ["Concorde", "returned"]  # held since the decode at 1.0 s
    stable.update("Concorde returned to its place amidst the tents".split(), True, 2.5)
    assert stable.words == ["Concorde", "returned"]  # "to its place" is 0.5 s old
    stable.update("Concorde returned to its place amidst the tents.".split(), True, 3.0)
    assert stable.words == "Concorde returned to its place amidst the".split()  # held since 2.0 s


def test_punctuation_the_decode_wrote_after_forced_words_that_had_it_is_not_doubled() -> None:
    assert onto("that you don't.".split(), "that you don't . When you".split()) == "that you don't. When you".split()
    assert onto("Mr.".split(), "Mr. John".split()) == ["Mr.", "John"]


def test_a_word_the_decoder_was_unsure_of_does_not_settle_nor_does_any_after_it() -> None:
    stable = StableWords(min_prob=0.5)
    probs = (0.99, 0.98, 0.3, 0.9, 0.95)  # "which" is a guess in both decodes
    stable.update("Concorde returned which plays amidst".split(), True, 1.0, probs)
    stable.update("Concorde returned which plays amidst the".split(), True, 1.5, (*probs, 0.6))
    assert stable.words == ["Concorde", "returned"]
    # Once the decoder is sure of it, it settles with the words after it that held.
    sure = (0.99, 0.98, 0.8, 0.9, 0.95, 0.9, 0.9)
    stable.update("Concorde returned which plays amidst the tents".split(), True, 2.0, sure)
    assert stable.words == "Concorde returned which plays amidst".split()  # "the" ended the last decode's audio


def test_probabilities_apply_to_the_decodes_own_words_after_the_settled_ones() -> None:
    stable = StableWords(["Well", "hello"], min_prob=0.5)
    # A recognizer that could not force the settled words heard only the second: onto keeps both and the decode's
    # words after "hello"; the probabilities are the decode's own, word for word.
    stable.update("hello there my friend".split(), True, 1.0, (0.2, 0.9, 0.4, 0.9))
    stable.update("hello there my friend again".split(), True, 1.5, (0.2, 0.9, 0.4, 0.9, 0.9))
    assert stable.words == ["Well", "hello", "there"]


def test_a_decode_without_probabilities_is_trusted() -> None:
    stable = StableWords(min_prob=0.9)
    stable.update("one two three".split(), True, 1.0)
    stable.update("one two three four".split(), False, 1.5)
    stable.update("one two three four".split(), False, 2.0)
    assert stable.words == "one two three four".split()


def test_words_one_decode_is_sure_of_settle_at_once_once_enough_of_its_words_follow_them() -> None:
    stable = StableWords(min_prob=0.4, sure_prob=0.9, sure_after=2)
    # The first decode: "the" is a guess, so only the sure words before it settle, each followed by two words.
    settled_first = stable.update("Concorde returned the plays amidst".split(), True, 1.0, (0.99, 0.95, 0.5, 0.9, 0.9))
    assert stable.words == ["Concorde", "returned"]
    assert settled_first[:2] == ["Concorde", "returned"]
    # Words the decoder is sure of but that too few words follow wait, as do words after an unsure one.
    stable.update("Concorde returned to its place".split(), True, 1.3, (0.99, 0.95, 0.95, 0.99, 0.99))
    assert stable.words == "Concorde returned to".split()


def test_without_sure_words_a_first_decode_settles_nothing() -> None:
    stable = StableWords(min_prob=0.4)
    stable.update("Concorde returned to its place in the".split(), True, 1.0, (0.99,) * 7)
    assert stable.words == []
