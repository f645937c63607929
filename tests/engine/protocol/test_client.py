"""Client messages (``engine.protocol.client``): what a ``start`` and a ``stop`` parse to, and bad ones refused with
the code and a message that names the problem."""

from __future__ import annotations

import json

import pytest

from engine import protocol
from engine.protocol import ErrorCode, ProtocolError, StartMessage, StopMessage, parse_client_message


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
