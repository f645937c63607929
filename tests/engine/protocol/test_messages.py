"""Server messages (``engine.protocol.messages``): every one round-trips through its JSON form, word times go on the
wire only when asked for, and a malformed message is a ``ValueError``."""

from __future__ import annotations

import json

import pytest

from engine import protocol
from engine.protocol import ErrorCode


def test_word_times_go_on_the_wire_only_when_asked_for() -> None:
    words = (protocol.Word("Hello", 520, 800), protocol.Word("there.", 810, 1200))
    caption = protocol.Caption([protocol.Sentence(0, "Hello there.", 520, 1200, 0, words=words)], "")
    assert "words" not in json.loads(protocol.dumps(caption))["sentences"][0]
    sent = json.loads(protocol.dumps(caption, words=True))["sentences"][0]
    assert sent["words"] == [
        {"w": "Hello", "start_ms": 520, "end_ms": 800},
        {"w": "there.", "start_ms": 810, "end_ms": 1200},
    ]
    back = protocol.parse_server_message(json.loads(protocol.dumps(caption, words=True)))
    assert isinstance(back, protocol.Caption) and back.sentences[0].words == words


@pytest.mark.parametrize(
    "message",
    [
        protocol.Ready("s1", "whisper-base", None, seq=1),
        protocol.Caption(
            [protocol.Sentence(0, "Hello.", 300, 900, 1), protocol.Sentence(1, "Bye.", 1000, 1400, None)],
            "and th",
            latency_ms=420,
            seq=2,
        ),
        protocol.Caption([protocol.Sentence(7, "In a room.", 0, 10, 0, session="abc")], "", is_final=True, seq=3),
        protocol.Speakers({0: 1, 3: 0}, seq=4),
        protocol.Stopped(seq=5),
        protocol.Error(ErrorCode.ENGINE, "the recognizer stopped", seq=6),
        protocol.Storage(False, "not saved", seq=7),
        protocol.RoomStatus("room1", True, 1, 3, True, seq=8),
        protocol.WordTimes(3, (protocol.Word("Hello", 520, 790), protocol.Word("there.", 830, 1210)), seq=9),
        protocol.WordTimes(12, (protocol.Word("Hi.", 40_100, 40_400),), seq=10, session="abc"),
        protocol.Caption(
            [],
            "so the plan is to",
            latency_ms=300,
            seq=11,
            stable=3,
            stable_words=[protocol.Word("the", 900, 1010), protocol.Word("plan", 1010, 1300)],
        ),
        protocol.Caption(
            [protocol.Sentence(4, "Done.", 0, 400, 0, session="abc")],
            "next",
            seq=12,
            partial_spk=1,
            partial_session="abc",
            stable=1,
            stable_words=[protocol.Word("next", 500, 800)],
        ),
    ],
)
def test_every_server_message_round_trips_through_its_json_form(message: protocol.ServerMessage) -> None:
    wire = json.loads(protocol.dumps(message))
    assert wire["type"] and wire["seq"] == message.seq
    assert protocol.parse_server_message(wire) == message


def test_words_and_stable_words_on_the_wire() -> None:
    """The ``words`` update's JSON, and a caption's ``stable``/``stable_words``: absent when there are none."""
    update = protocol.WordTimes(3, (protocol.Word("Hello", 520, 790),), seq=9)
    assert json.loads(protocol.dumps(update)) == {
        "type": "words",
        "seq": 9,
        "id": 3,
        "words": [{"w": "Hello", "start_ms": 520, "end_ms": 790}],
    }
    assert json.loads(protocol.dumps(update, words=True)) == json.loads(protocol.dumps(update))
    plain = json.loads(protocol.dumps(protocol.Caption([], "so the", seq=1)))
    assert "stable" not in plain and "stable_words" not in plain
    back = protocol.parse_server_message(plain)
    assert isinstance(back, protocol.Caption) and back.stable == 0 and back.stable_words == []
    settled = json.loads(
        protocol.dumps(protocol.Caption([], "so the", seq=2, stable=1, stable_words=[protocol.Word("so", 0, 200)]))
    )
    assert settled["stable"] == 1 and settled["stable_words"] == [{"w": "so", "start_ms": 0, "end_ms": 200}]


def test_a_malformed_server_message_is_a_value_error() -> None:
    for bad in (
        {"type": "caption", "seq": 1},
        {"type": "nope", "seq": 1},
        {"seq": 1},
        {"type": "error", "seq": 1, "code": "x", "message": ""},
    ):
        with pytest.raises(ValueError):
            protocol.parse_server_message(bad)
