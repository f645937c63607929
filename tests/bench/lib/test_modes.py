"""The benches' engine settings from the command line (bench/lib/modes.py ``with_settings``: ``--set`` of
bench.serve, bench.sessions and bench.profile), with no model and no server."""

from __future__ import annotations

import pytest

from bench import profile, serve, sessions
from bench.lib.modes import with_settings
from engine.config import EngineConfig


def test_a_setting_changes_that_field_alone_in_its_own_type() -> None:
    base = EngineConfig()
    changed = with_settings(base, ["partial.interval_s=0.65", "partial.min_new_audio_ms=240"])
    assert changed.partial.interval_s == 0.65
    assert changed.partial.min_new_audio_ms == 240 and isinstance(changed.partial.min_new_audio_ms, int)
    assert changed.partial.session_share == base.partial.session_share
    assert changed.endpoint == base.endpoint and changed.transcriber == base.transcriber
    assert with_settings(base, []) == base


def test_bool_settings_read_true_and_false() -> None:
    base = EngineConfig()
    assert with_settings(base, ["transcriber.timestamps=false"]).transcriber.timestamps is False
    assert with_settings(base, ["transcriber.timestamps=1"]).transcriber.timestamps is True
    with pytest.raises(ValueError, match="not a bool"):
        with_settings(base, ["transcriber.timestamps=maybe"])


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("partial.interval_s", "SECTION.FIELD=VALUE"),
        ("interval_s=0.6", "SECTION.FIELD=VALUE"),
        ("nosuch.interval_s=0.6", "no engine config section"),
        ("speakers.x=1", "no engine config section"),
        ("partial.nosuch=1", "no field"),
        ("partial.interval_s=soon", "could not convert"),
    ],
)
def test_a_bad_setting_is_refused_by_name(setting: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        with_settings(EngineConfig(), [setting])


def test_every_bench_that_starts_a_server_takes_repeated_settings() -> None:
    argv = ["--set", "partial.interval_s=0.6", "--set", "partial.session_share=0.4"]
    expected = ["partial.interval_s=0.6", "partial.session_share=0.4"]
    assert serve.build_parser().parse_args(argv).settings == expected
    assert sessions.parse_args(argv).settings == expected
    assert profile.build_parser().parse_args(argv).settings == expected
    assert serve.build_parser().parse_args([]).settings == []
