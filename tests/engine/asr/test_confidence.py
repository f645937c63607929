"""Word probabilities from the decoder's tokens: Whisper's BPE pieces grouped into the words of the text."""

from __future__ import annotations

import math

import pytest

from engine.asr.confidence import text_word_probabilities, word_probabilities
from engine.asr.prompts import joined


def test_a_words_probability_is_the_product_of_its_tokens() -> None:
    pieces = [" If", " the", " read", "er", " will"]
    logs = [math.log(p) for p in (0.9, 0.8, 0.5, 0.4, 0.7)]
    assert word_probabilities(pieces, logs) == pytest.approx([0.9, 0.8, 0.2, 0.7])


def test_punctuation_joins_the_word_it_follows_and_a_first_piece_without_a_space_opens_a_word() -> None:
    pieces = ["Yes", ",", " Mr", ".", " Smi", "th", "."]
    logs = [math.log(p) for p in (0.5, 0.5, 1.0, 0.5, 0.8, 0.5, 0.5)]
    assert word_probabilities(pieces, logs) == pytest.approx([0.5, 1.0, 0.4])


def test_pieces_with_spaces_inside_or_alone_follow_the_text() -> None:
    pieces = [" a b", " ", "c"]
    logs = [math.log(0.5), math.log(0.9), math.log(0.4)]
    assert "".join(pieces).split() == ["a", "b", "c"]
    assert word_probabilities(pieces, logs) == pytest.approx([0.5, 0.5, 0.4])


def test_forced_words_are_certain_and_words_the_cleaning_changed_give_nothing() -> None:
    pieces, logs = [" wor", "ld", "."], [math.log(0.5), math.log(0.8), math.log(0.1)]
    assert text_word_probabilities("Hello world.", "Hello", " world.", pieces, logs) == pytest.approx((1.0, 0.4))
    # A non-speech tag taken out of the text: the words no longer line up with the tokens.
    assert text_word_probabilities("Hello", "Hello", " [Music] world.", [" [Music]", *pieces], [0.0, *logs]) == ()


def test_a_decode_that_goes_on_inside_the_last_forced_word_glues_onto_it() -> None:
    assert joined("Somehow or other", ", Kat has") == "Somehow or other, Kat has"
    assert joined("Somehow or other", " Kat  has") == "Somehow or other Kat has"
    assert joined("", "Kat has") == "Kat has"
    logs = [math.log(p) for p in (0.5, 0.9, 0.8)]
    # The comma leaves "other," as sure as the forced "other"; letters added to it make it the decoder's word.
    assert text_word_probabilities(
        "Somehow or other, Kat has", "Somehow or other", ", Kat has", [",", " Kat", " has"], logs
    ) == pytest.approx((1.0, 1.0, 1.0, 0.9, 0.8))
    assert text_word_probabilities(
        "the thirteen days", "the thir", "teen days", ["teen", " days"], logs[:2]
    ) == pytest.approx((1.0, 0.5, 0.9))
    with pytest.raises(ValueError):
        word_probabilities([" a"], [])


def test_punctuation_does_not_lower_a_words_probability_unless_it_is_all_the_word_is() -> None:
    pieces = [" antecedents", ",", " nor", " -"]
    logs = [math.log(p) for p in (0.99, 0.5, 0.9, 0.3)]
    assert word_probabilities(pieces, logs) == pytest.approx([0.99, 0.9, 0.3])
