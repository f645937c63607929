"""Wire protocol pieces: client message validation, the coalescing mailbox, the hallucination guard."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from engine import protocol
from engine.asr.guard import reject_reason
from engine.asr.transcriber import Transcript
from engine.config import GuardConfig
from engine.protocol import ErrorCode, ProtocolError, StartMessage, StopMessage, parse_client_message
from engine.stream.mailbox import Mailbox


def test_start_and_stop_parse() -> None:
    assert parse_client_message('{"type":"stop"}') == StopMessage()
    msg = parse_client_message(json.dumps({"type": "start", "language": "auto", "hotwords": [" Quilter ", ""]}))
    assert msg == StartMessage(language=None, hotwords=("Quilter",), language_given=False)
    # Naming no language is English alone, and in a room the room's (which "es" named is not).
    assert parse_client_message('{"type":"start"}') == StartMessage(language="en", hotwords=(), language_given=False)
    assert parse_client_message('{"type":"start","language":"es"}') == StartMessage(language="es", hotwords=())
    words = parse_client_message('{"type":"start","words":true}')
    assert isinstance(words, StartMessage) and words.words is True
    translated = parse_client_message('{"type":"start","language":"zh","task":"translate"}')
    assert isinstance(translated, StartMessage) and translated.task == "translate" and translated.language == "zh"
    with pytest.raises(ProtocolError):
        parse_client_message('{"type":"start","task":"summarise"}')


def test_a_translation_asks_whisper_for_its_translate_task_in_the_language_spoken() -> None:
    from engine.asr.prompts import decoder_prompt
    from engine.models.resolve import ModelSpec

    multilingual = ModelSpec("whisper-base", "", multilingual=True, embedded=True)
    assert decoder_prompt(multilingual, "zh", "", task="translate").endswith("<|zh|><|translate|><|notimestamps|>")
    assert decoder_prompt(multilingual, "zh", "").endswith("<|zh|><|transcribe|><|notimestamps|>")
    english_only = ModelSpec("whisper-tiny.en", "", multilingual=False, embedded=True)
    assert "translate" not in decoder_prompt(english_only, "en", "", task="translate")


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
    ("raw", "code"),
    [
        ("{", ErrorCode.BAD_MESSAGE),
        ("[1]", ErrorCode.BAD_MESSAGE),
        ('{"type":"dance"}', ErrorCode.BAD_MESSAGE),
        ('{"type":"start","language":"xx"}', ErrorCode.BAD_MESSAGE),
        ('{"type":"start","hotwords":"a,b"}', ErrorCode.BAD_MESSAGE),
        ('{"type":"start","words":"yes"}', ErrorCode.BAD_MESSAGE),
        ('{"type":"start","hotwords":' + json.dumps(["w"] * 40) + "}", ErrorCode.BAD_MESSAGE),
        ("x" * (protocol.MAX_CLIENT_MESSAGE_BYTES + 1), ErrorCode.TOO_LARGE),
        (b"\xff\xfe", ErrorCode.BAD_MESSAGE),
    ],
)
def test_bad_client_messages_name_the_problem(raw: str | bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as err:
        parse_client_message(raw)
    assert err.value.code is code and str(err.value)


async def test_mailbox_merges_partials_but_never_drops_sentences() -> None:
    box = Mailbox()
    box.post(protocol.Ready("s", "m", "en"))
    box.post_caption([protocol.Sentence(0, "one", 0, 10, 0)], "two thr")
    box.post_caption([], "two three")
    box.post_caption([protocol.Sentence(1, "two three", 20, 30, 1)], "")
    box.post(protocol.Stopped())
    box.close()
    got = [m async for m in _drain(box)]
    assert [m.wire()["type"] for m in got] == ["ready", "caption", "stopped"]
    caption = got[1]
    assert isinstance(caption, protocol.Caption)
    assert [s.id for s in caption.sentences] == [0, 1] and caption.partial == ""
    assert [m.seq for m in got] == [1, 2, 3]


async def test_mailbox_keeps_order_around_other_messages() -> None:
    box = Mailbox()
    box.post_caption([], "a")
    box.post(protocol.Error(ErrorCode.OVERLOADED, "behind"))
    box.post_caption([], "a b")
    box.close()
    got = [m async for m in _drain(box)]
    assert [(m.wire()["type"], m.wire().get("partial")) for m in got] == [
        ("caption", "a"),
        ("error", None),
        ("caption", "a b"),
    ]


async def _drain(box: Mailbox) -> AsyncIterator[protocol.ServerMessage]:
    while (m := await box.get()) is not None:
        yield m


def _t(text: str, logprob: float = -0.2, tokens: int = 8) -> Transcript:
    return Transcript(text, "en", logprob, tokens, 0.1)


@pytest.mark.parametrize(
    ("transcript", "level", "speech_ms", "rejected"),
    [
        (_t("The two stray kittens gradually make themselves at home."), -25.0, 3000, False),
        (_t(""), -25.0, 3000, True),
        (_t("  ...  "), -25.0, 3000, True),
        (_t("I'm not sure if I can get it right.", logprob=-1.4), -30.0, 2000, True),
        (_t("Thank you.", logprob=-0.3), -55.0, 800, True),  # stock phrase on near-silence
        (_t("Thank you.", logprob=-0.2), -24.0, 800, False),  # said out loud, it stays
        (_t("the end of the road " * 12), -25.0, 9000, True),  # a loop
        (_t("hello"), -25.0, 100, True),  # too little speech to trust
    ],
)
def test_guard(transcript: Transcript, level: float, speech_ms: int, rejected: bool) -> None:
    assert (reject_reason(transcript, level, speech_ms, GuardConfig()) is not None) is rejected


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
