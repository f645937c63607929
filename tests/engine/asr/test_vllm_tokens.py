"""Whisper's tokens as the recognizer reads them (``engine.asr.vllm_tokens``), on a tokenizer written out by hand with
Whisper's layout (text pieces, then ``<|endoftext|>``, languages, tasks and timestamps): no model. The real tokenizer
is read by the functional tests of the real engine (tests/functional/test_engine_live.py, test_windows_live.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from engine.asr.vllm_tokens import WhisperTokens

TEXT = [" Some", "how", " some", " it", " worked", "."]  # ids 0-5
SPECIAL = ["<|endoftext|>", "<|en|>", "<|zh|>", "<|yue|>", "<|transcribe|>", "<|EN|>", "<|0.00|>", "<|0.02|>"]  # 6-13


class HandTokenizer:
    """The part of Hugging Face's ``WhisperTokenizer`` the recognizer uses, over ``TEXT`` and ``SPECIAL``."""

    def __init__(self, timestamps: bool = True) -> None:
        tokens = TEXT + (SPECIAL if timestamps else SPECIAL[:6])
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.tokens = dict(enumerate(tokens))

    def get_vocab(self) -> dict[str, int]:
        return dict(self.ids)

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.ids.get(token, self.ids["<|endoftext|>"])  # an unknown token is the unknown id, as Whisper's

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.tokens[token_id]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.tokens[i] for i in ids if i < self.ids["<|endoftext|>"])

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        assert not add_special_tokens
        out, rest = [], text
        while rest:
            piece = max((t for t in TEXT if rest.startswith(t)), key=len)
            out.append(self.ids[piece])
            rest = rest[len(piece) :]
        return out


@dataclass
class Logprob:
    logprob: float


@dataclass
class Completion:
    cumulative_logprob: float
    logprobs: list[dict[int, Any]] | None


def test_the_special_ids_languages_and_timestamps_are_read_off_the_vocabulary() -> None:
    tokens = WhisperTokens.of(HandTokenizer())
    assert tokens.first_special == 6 and tokens.first_timestamp == 12 and tokens.timed
    assert tokens.languages == {7: "en", 8: "zh", 9: "yue"}, "lower-case codes of 2-3 letters only"
    assert [tokens.is_text(i) for i in (0, 5, 6, 12)] == [True, True, False, False]
    assert tokens.token_id("<|nope|>") > 13, "an unknown token is no id of the vocabulary, not <|endoftext|>"
    untimed = WhisperTokens.of(HandTokenizer(timestamps=False))
    assert not untimed.timed and untimed.first_special == 6


def test_before_the_model_is_loaded_no_text_has_ids_and_nothing_is_timed() -> None:
    tokens = WhisperTokens()
    assert tokens.text_ids("it worked") == [] and not tokens.timed and tokens.languages == {}
    assert WhisperTokens.of(None).first_special == tokens.first_special


def test_text_and_its_ids_as_whisper_writes_them() -> None:
    tokens = WhisperTokens.of(HandTokenizer())
    assert tokens.text_ids("it worked.") == [3, 4, 5] and tokens.text_ids("") == []
    assert tokens.text([3, 12, 4, 5]) == "it worked." and tokens.text([]) == ""
    assert tokens.piece(4) == " worked"


def test_a_words_probability_counts_its_other_spellings_among_the_alternatives() -> None:
    tokens = WhisperTokens.of(HandTokenizer())
    # " Some" chosen at 0.4, " some" at 0.35 beside it: one word to a reader, 0.75; a special token is not a spelling.
    alternatives = {0: Logprob(math.log(0.4)), 2: Logprob(math.log(0.35)), 6: Logprob(math.log(0.2))}
    assert math.exp(tokens.spelling_logprob(alternatives, 0)) == pytest.approx(0.75)
    alone = {3: Logprob(math.log(0.6)), 4: Logprob(math.log(0.3))}
    assert math.exp(tokens.spelling_logprob(alone, 3)) == pytest.approx(0.6)


def test_the_mean_log_probability_leaves_out_timestamps() -> None:
    tokens = WhisperTokens.of(HandTokenizer())
    ids = [12, 3, 4, 13]  # <|0.00|> it worked <|0.02|>
    logprobs = [{12: Logprob(-2.0)}, {3: Logprob(-0.1)}, {4: Logprob(-0.3)}, {13: Logprob(-1.6)}]
    completion = Completion(-4.0, logprobs)
    assert tokens.avg_logprob(completion, ids, timestamps=True) == pytest.approx(-0.2)
    assert tokens.avg_logprob(completion, ids, timestamps=False) == pytest.approx(-1.0)
    assert tokens.avg_logprob(Completion(-4.0, None), ids, timestamps=True) == pytest.approx(-1.0)
