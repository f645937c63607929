"""A room's vocabulary (``app.rooms.vocabulary``): terms and learned fixes respell look-alikes and nothing else."""

from __future__ import annotations

from app.rooms.vocabulary import Corrector


def test_the_rooms_vocabulary_respells_look_alikes_and_leaves_everything_else() -> None:
    fix = Corrector(terms=("Concord", "Dashwood", "Kate's", "Abbie"), learned=("claifren → Claflin",))
    assert fix.apply("Concorde returned to its place.") == "Concord returned to its place."
    assert fix.apply("and Mister John dash wood had then leisure") == "and Mister John Dashwood had then leisure"
    assert fix.apply("I'm Abigail Claifren, you can call me Abby.") == "I'm Abigail Claflin, you can call me Abby.", (
        "Abby is not spelt enough like Abbie to change by itself (an editor's fix of it would teach it)"
    )
    for same in (
        "the concert was free",
        "Dashwood and Kate's cat",
        "Concord is fine",
        "we were in accord",
        "Abbey Road",
        "Concerned, we left.",
        "I met Kate at noon.",
        "Ask Kate.",
    ):
        assert fix.apply(same) == same
    assert Corrector().apply("any text at all") == "any text at all" and not Corrector()
