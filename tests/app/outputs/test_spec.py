"""An output's configuration (``app.outputs.spec``): the kinds the API takes, what is stored and shown, and a stored
output of a kind this server does not know (a newer version's), which stays listed and stored and refuses to start."""

from __future__ import annotations

import json

import pytest

from app.outputs.destinations import DestinationPolicy
from app.outputs.kinds import make_target
from app.outputs.layout import Layout
from app.outputs.spec import OutputKind, OutputSpec, Progress, SpecError, parse
from app.outputs.target import TargetError


def test_the_api_takes_the_kinds_there_are_and_says_which_those_are() -> None:
    youtube = parse({"kind": "youtube", "url": "https://upload.youtube.example/closedcaption?cid=k"}, created_ms=5)
    obs = parse({"kind": "obs", "url": "ws://obs.example:4455", "password": "p"}, created_ms=6)
    assert youtube.kind is OutputKind.YOUTUBE and obs.kind is OutputKind.OBS
    assert json.loads(json.dumps(obs.public())) == {
        "id": obs.id,
        "kind": "obs",
        "url": "ws://obs.example:4455",
        "created_ms": 6,
        "password": True,
    }
    for body in ({"kind": "rtmp", "url": "rtmp://x.example/"}, {"kind": 3, "url": "x"}, {"url": "https://x.example"}):
        with pytest.raises(SpecError, match='"kind" must be one of obs, youtube'):
            parse(body, created_ms=0)
    with pytest.raises(SpecError, match="unknown field 'password' for kind 'youtube'"):
        parse({"kind": "youtube", "url": "https://x.example/", "password": "p"}, created_ms=0)


def test_a_stored_output_comes_back_as_it_was() -> None:
    made = parse(
        {"kind": "youtube", "url": "https://upload.youtube.example/closedcaption?cid=k", "lang": "es"},
        created_ms=5,
        languages=lambda tag: tag,
    )
    stored = OutputSpec(
        made.id, made.kind, made.url, 5, progress=Progress(3, frozenset({7})), resume={"seq": 9}, lang="es"
    )
    again = OutputSpec.from_stored(json.loads(json.dumps(stored.stored())))
    assert again == stored and again.kind is OutputKind.YOUTUBE


def test_a_stored_output_of_a_kind_this_server_does_not_know_stays_and_refuses_to_start() -> None:
    raw = {"id": "o9", "kind": "teletext", "url": "https://ttx.example/", "created_ms": 1, "sent": [4, []]}
    spec = OutputSpec.from_stored(raw)
    assert spec.kind == "teletext" and not isinstance(spec.kind, OutputKind)
    assert spec.stored() == raw, "stored again unchanged: a newer server can still run it"
    assert spec.public()["kind"] == "teletext"
    with pytest.raises(TargetError, match="unknown output kind 'teletext'") as refused:
        make_target(spec, Layout(lambda _words, _chars, _lines: None, lambda _spk, _names: ""), DestinationPolicy())
    assert refused.value.permanent
