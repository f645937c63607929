"""The audience's hold-back delay (``app.rooms.holdback``) on a fake clock: what is released when, and a correction
within the delay as the only version the audience gets."""

from __future__ import annotations

from app.rooms.holdback import Holdback, empty
from engine.protocol import Caption, Correction, Sentence, Speakers


def caption(*sentences: Sentence) -> Caption:
    return Caption(list(sentences), "")


def test_the_audience_gets_each_caption_after_the_delay_and_everything_in_seq_order() -> None:
    hold = Holdback(5.0, released=10)
    s0, s1 = Sentence(0, "first one", 0, 900, 0), Sentence(1, "second one", 1000, 1900, 0)
    hold.add(11, caption(s0), committed_s=100.0)
    hold.add(12, Correction((Sentence(7, "an old one, fixed", 0, 500, 0),)), committed_s=101.0)  # no delay of its own
    hold.add(13, caption(s1), committed_s=102.0)
    hold.add(12, caption(s1), committed_s=102.5)  # a repeat: ignored
    assert hold.held == 3 and hold.behind_ms(103.0) == 3000 and hold.held_sentences() == {0, 1}
    assert hold.due(104.99) == [] and hold.next_due_s() == 105.0
    assert [seq for seq, _ in hold.due(105.0)] == [11, 12], "the correction waits for the caption before it"
    assert hold.released == 12 and hold.held == 1
    assert [seq for seq, _ in hold.due(107.0)] == [13] and hold.held == 0 and hold.behind_ms(108.0) == 0


def test_a_correction_within_the_delay_is_the_only_version_the_audience_gets() -> None:
    hold = Holdback(5.0)
    hold.add(
        1,
        caption(Sentence(0, "mister dash wood arrived", 0, 900, 0), Sentence(1, "uh hallucination", 900, 1200, 0)),
        committed_s=0.0,
    )
    fixed = Sentence(0, "Mister Dashwood arrived.", 0, 900, 1)
    hold.add(2, Correction((fixed,), (1,), {1: "Dr. Lee"}, "Ann"), committed_s=3.0)
    hold.add(3, Speakers({0: 2}), committed_s=3.5)
    hold.add(
        4,
        Correction((Sentence(0, "Mister Dashwood", 0, 500, 2), Sentence(8, "arrived.", 500, 900, 2))),
        committed_s=4.0,
    )  # a split of a held sentence: its new part is held with it
    out = hold.due(5.0)
    assert [seq for seq, _ in out] == [1, 2, 3, 4]
    first = out[0][1]
    assert isinstance(first, Caption)
    assert [(s.id, s.text, s.spk) for s in first.sentences] == [(0, "Mister Dashwood", 2), (8, "arrived.", 2)]
    rest = [m for _, m in out[1:]]
    assert isinstance(rest[0], Correction) and rest[0].names == {1: "Dr. Lee"} and not rest[0].sentences
    assert not empty(rest[0]) and empty(rest[1]) and empty(rest[2]), "what the captions took goes as a seq alone"
