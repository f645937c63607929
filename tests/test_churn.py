"""The partial-churn measure of the benches (bench/churn.py) on made-up caption streams."""

from __future__ import annotations

from typing import Any

from bench.churn import partial_churn


def caption(partial: str, *locked: str) -> dict[str, Any]:
    return {"type": "caption", "partial": partial, "sentences": [{"text": t} for t in locked]}


def test_partials_that_grow_into_the_locked_sentence_cost_nothing() -> None:
    stream = [caption("The two"), caption("The two stray"), caption("The two stray kittens"),
              caption("", "The two stray kittens gradually make themselves at home.")]
    assert partial_churn(stream) == (0, 9)


def test_words_the_locked_sentence_changed_or_dropped_count() -> None:
    stream = [caption("The tool"),  # "tool" became "two"
              caption("The two stray kit tens"),  # "kit tens" became "kittens ..."
              caption("", "The two stray kittens."),
              caption("Thank you"),  # never locked
              caption("", )]
    changed, shown = partial_churn(stream)
    assert shown == 2 + 5 + 2
    assert changed == 1 + 2 + 2


def test_partials_are_compared_with_the_text_locked_after_them() -> None:
    stream = [caption("Hello there"), caption("", "Hello there."), caption("General"),
              caption("", "General Kenobi.")]
    assert partial_churn(stream) == (0, 3)
