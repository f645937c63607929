"""This server's JSON errors: built in one place (``app/responses.py``), each with a code of one enum
(``engine.ErrorCode``), whose values are the strings clients already read, every one of them documented."""

from __future__ import annotations

import ast
import json
import re

from app.responses import error_body, http_error, json_error
from engine import ErrorCode
from tests.support.paths import ROOT

APP = ROOT / "app"
# Other services' protocols answer in their own shapes, not this server's: OpenAI's ``{"error": {"message", "type",
# "param", "code"}}`` (Deepgram's has no "error" key).
THEIR_SHAPES = {"compat/openai_rest.py"}


def sources() -> dict[str, str]:
    return {str(p.relative_to(APP)): p.read_text() for p in sorted(APP.rglob("*.py"))}


def builds_error_body(tree: ast.AST) -> bool:
    """Whether the code holds a ``{"error": {...}}`` literal (docstrings and comments do not count)."""
    return any(
        isinstance(node, ast.Dict)
        and any(
            isinstance(k, ast.Constant) and k.value == "error" and isinstance(v, ast.Dict)
            for k, v in zip(node.keys, node.values, strict=True)
        )
        for node in ast.walk(tree)
    )


def test_no_module_but_responses_builds_an_error_body() -> None:
    builders = {name for name, text in sources().items() if builds_error_body(ast.parse(text))}
    assert builders - THEIR_SHAPES == {"responses.py"}, builders


def test_every_error_answer_names_its_code_from_the_enum() -> None:
    # A string where the code goes (json_error(404, "no_room", ...)) is a code the enum may not hold.
    literal = re.compile(r"""\b(?:json_error|http_error|_error)\([^,()]*,\s*f?["']""")
    found = {name: literal.findall(text) for name, text in sources().items()}
    assert not {name: hits for name, hits in found.items() if hits}


def test_the_codes_are_the_strings_clients_know_and_all_are_documented() -> None:
    assert {c.value for c in ErrorCode} == {
        "bad_message",
        "too_large",
        "bad_state",
        "engine",
        "overloaded",
        "busy",
        "loading",  # the data channel's too
        "unauthorized",
        "bad_parameter",
        "bad_sdp",
        "no_room",
        "no_session",
        "no_sentence",
        "no_output",
        "no_segment",
        "no_viewer_token",
        "room_ended",
        "too_many_outputs",
        "storage",
    }
    protocol = (ROOT / "docs" / "protocol.md").read_text()
    assert not [c.value for c in ErrorCode if f"`{c.value}`" not in protocol]


def test_the_raised_form_is_the_returned_one() -> None:
    returned = json_error(409, ErrorCode.ROOM_ENDED, "the room has ended", headers={"X-A": "1"}, param="kind")
    raised = http_error(409, ErrorCode.ROOM_ENDED, "the room has ended", headers={"X-A": "1"}, param="kind")
    assert raised.status == returned.status == 409 and raised.reason == "Conflict"
    assert raised.content_type == returned.content_type == "application/json"
    assert raised.headers["X-A"] == returned.headers["X-A"] == "1"
    assert (
        json.loads(raised.text or "")
        == json.loads(returned.text or "")
        == error_body(ErrorCode.ROOM_ENDED, "the room has ended", param="kind")
        == {"error": {"code": "room_ended", "message": "the room has ended", "param": "kind"}}
    )
    too_large = http_error(413, ErrorCode.TOO_LARGE, "over 16 KiB")  # (aiohttp's own 413 wants more arguments)
    assert too_large.status == 413 and json.loads(too_large.text or "")["error"]["code"] == "too_large"
