"""``speechdata.wer``: what counts as the same word when captions are scored against a reference."""

from __future__ import annotations

from speechdata.wer import normalise, wer


def test_case_and_punctuation_do_not_count_but_apostrophes_inside_words_stay() -> None:
    assert normalise("He's here, 'quite' well-known.") == ["he's", "here", "quite", "well", "known"]
    assert wer("HE'S HERE QUITE WELL KNOWN", "He's here, quite well-known.") == 0.0


def test_a_title_written_as_print_does_is_the_word_the_reader_said() -> None:
    assert (
        wer("MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES", "Mr. Quilter is the apostle of the middle classes")
        == 0.0
    )
    assert wer("MISSUS BENNET AND DOCTOR LEE", "Mrs. Bennet and Dr. Lee") == 0.0


def test_contractions_and_numbers_still_count_as_written() -> None:
    assert wer("I AM FROM THE CUTTER", "I'm from the cutter") == 2 / 5  # one substitution, one deletion
    assert wer("TWENTY ONE MEN", "21 men") == 2 / 3


def test_a_word_never_becomes_two() -> None:
    text = "Mr. and Mrs. Dr. Smith's well-known 21 cats"
    assert len(normalise(text)) == len(text.replace("-", " ").split())
