"""The partial-churn measure of the benches (bench/lib/churn.py) on made-up caption streams."""

from __future__ import annotations

from typing import Any

from bench.lib.churn import partial_churn
from bench.lib.splits import inside_splits


def caption(partial: str, *locked: str) -> dict[str, Any]:
    return {"type": "caption", "partial": partial, "sentences": [{"text": t} for t in locked]}


def test_partials_that_grow_into_the_locked_sentence_cost_nothing() -> None:
    stream = [
        caption("The two"),
        caption("The two stray"),
        caption("The two stray kittens"),
        caption("", "The two stray kittens gradually make themselves at home."),
    ]
    assert partial_churn(stream) == (0, 9)


def test_words_the_locked_sentence_changed_or_dropped_count() -> None:
    stream = [
        caption("The tool"),  # "tool" became "two"
        caption("The two stray kit tens"),  # "kit tens" became "kittens ..."
        caption("", "The two stray kittens."),
        caption("Thank you"),  # never locked
        caption(
            "",
        ),
    ]
    changed, shown = partial_churn(stream)
    assert shown == 2 + 5 + 2
    assert changed == 1 + 2 + 2


def test_partials_are_compared_with_the_text_locked_after_them() -> None:
    stream = [caption("Hello there"), caption("", "Hello there."), caption("General"), caption("", "General Kenobi.")]
    assert partial_churn(stream) == (0, 3)


def shown(partial: str, stable: int = 0, *locked: str) -> dict[str, Any]:
    return {"type": "caption", "partial": partial, "stable": stable, "sentences": [{"text": t} for t in locked]}


def test_flicker_counts_tentative_words_that_do_not_lock_as_shown() -> None:
    from bench.lib.churn import flicker

    stream = [
        shown("The tool"),  # "tool" locks as "two": 1 of 2
        shown("The two stray", 1),  # "The" settled; "two stray" tentative, both lock so
        shown("The two stray kit", 3),  # "kit" locks as "kittens."
        shown("The two stray kittens,", 3),  # "kittens," locks as "kittens." (punctuation aside)
        shown("", 0, "The two stray kittens."),
    ]
    assert flicker(stream) == (1 + 1, 2 + 2 + 1 + 1, 0)
    # Settled words do not count: the same stream without them would count every word shown.
    unsettled = [dict(m, stable=0) for m in stream]
    assert flicker(unsettled) == (2, 2 + 3 + 4 + 4, 0)


def test_a_settled_word_that_changes_or_turns_tentative_again_is_withdrawn() -> None:
    from bench.lib.churn import flicker

    changed = [shown("If the reader", 2), shown("If a reader", 2)]
    assert flicker(changed)[2] == 1
    unsettled = [shown("If the reader", 2), shown("If the reader will", 1)]
    assert flicker(unsettled)[2] == 1
    locked = [shown("If the reader", 2), shown("", 0, "If the reader.")]
    assert flicker(locked)[2] == 0


def test_a_split_counts_as_inside_a_sentence_only_where_the_whole_decode_reads_on() -> None:
    whole = ["I'm Abigail Claflin. You can call me Abby, and then", "we went home."]
    # A split at the whole decode's full stop, one at its boundary, one inside its sentence.
    split = ["I'm Abigail Claflin.", "You can call me Abby.", "And then.", "We went home."]
    assert inside_splits(split, whole) == (1, 3)
    assert inside_splits(whole, whole) == (0, 1)
    # A split after the last word of the whole decode's text ends nothing that goes on.
    assert inside_splits(["one two", "three"], ["one two"]) == (0, 1)


def test_changed_words_are_told_apart_by_what_became_of_them() -> None:
    from bench.lib.churn import flicker, flicker_causes

    stream = [
        shown("Yeah"),  # a lone word whose segment goes away unlocked
        shown(""),
        shown("And swimming"),  # "swimming" locks as "symbols"
        shown("And swimming balls that"),  # "swimming balls" locks as "symbols"
        shown("And uh symbols that"),  # the lock goes on without "uh"
        shown("", 0, "And symbols that you know."),
    ]
    causes = flicker_causes(stream)
    assert causes == {"never_locked": 1, "replaced": 1 + 2, "dropped": 1}
    assert sum(causes.values()) == flicker(stream)[0]
    # A partial still on screen when the stream ends never locked either.
    assert flicker_causes([shown("", 0, "Hello."), shown("Thank you")]) == {
        "never_locked": 2,
        "replaced": 0,
        "dropped": 0,
    }
