"""Server configuration declared once: flags, environment fallbacks, defaults and docs/configuration.md all come from
the config dataclasses' field declarations (app.config, engine.config, app.settings, engine.settings)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from app.config import IceConfig, ServerConfig, build_parser, config_from_args, configuration_markdown, default_db
from app.settings import SettingsError
from engine import EngineConfig, TranscriberConfig, declared
from tests.support.paths import ROOT

DOCS = ROOT / "docs" / "configuration.md"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting from the machine's own environment leaks into these tests."""
    for name in os.environ:
        if name.startswith("LIVE_CAPTIONS_") or name == "PORT":
            monkeypatch.delenv(name)


def parse(*argv: str) -> ServerConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def test_the_committed_docs_are_the_generated_ones() -> None:
    assert DOCS.read_text(encoding="utf-8") == configuration_markdown(), (
        "docs/configuration.md is out of date: run `python -m app.config --markdown > docs/configuration.md`"
    )


def test_without_flags_or_environment_the_config_is_the_dataclass_default() -> None:
    # Two fields differ on purpose: the command line keeps transcripts in a file and exits when the engine dies.
    assert parse() == ServerConfig(db_path=str(default_db()), exit_on_engine_failure=True)


def test_every_flag_has_help_a_default_and_its_variable_in_help() -> None:
    text = " ".join(build_parser().format_help().split())
    settings = declared(ServerConfig, deep=True)
    assert len(settings) == 44
    for d in settings:
        assert d.flag in text and d.setting.help
        assert f"default: {d.show_default()}; env {' or '.join(d.setting.env)})" in text, d.flag
    flags = [d.flag for d in settings]
    names = [name for d in settings for name in d.setting.env]
    assert len(set(flags)) == len(flags) and len(set(names)) == len(names)


def test_the_engine_declares_the_engine_settings_the_server_passes_through() -> None:
    owners = {d.name: d.setting.owner for d in declared(ServerConfig)}
    assert owners["model"] is owners["window"] is owners["word_timestamps"] is TranscriberConfig
    assert owners["language"] is owners["word_align"] is owners["speakers"] is EngineConfig
    assert owners["host"] is ServerConfig
    assert ServerConfig().word_align is EngineConfig().word_align
    assert ServerConfig().cpu_threads == TranscriberConfig().cpu_threads
    engine = {d.name: d for d in declared(TranscriberConfig) + declared(EngineConfig)}
    server = {d.name: d for d in declared(ServerConfig)}
    assert server["word_timestamps"].setting.help == engine["timestamps"].setting.help
    assert server["language"].flag == engine["default_language"].flag == "--language"


def test_the_environment_fills_in_what_the_command_line_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "9000")
    assert parse().port == 9000
    monkeypatch.setenv("LIVE_CAPTIONS_PORT", "9001")  # the project's own name first
    assert parse().port == 9001
    assert parse("--port", "9002").port == 9002  # a flag wins
    monkeypatch.setenv("LIVE_CAPTIONS_STREAM_IDLE_S", "12.5")
    monkeypatch.setenv("LIVE_CAPTIONS_LANGUAGE", "auto")
    monkeypatch.setenv("LIVE_CAPTIONS_FUNASR_PORT", "10095")
    monkeypatch.setenv("LIVE_CAPTIONS_UDP_PORTS", "50000-50100")
    monkeypatch.setenv("LIVE_CAPTIONS_ICE_HOSTS", "127.0.0.1, 10.0.0.2,,127.0.0.1")
    monkeypatch.setenv("LIVE_CAPTIONS_EMBED_ORIGINS", "https://a.example/,https://b.example")
    monkeypatch.setenv("LIVE_CAPTIONS_AUTH_TOKEN", "")  # empty is unset
    config = parse()
    assert (config.stream_idle_s, config.language, config.funasr_port, config.auth_token) == (12.5, None, 10095, None)
    assert config.ice.udp_ports == (50000, 50100) and config.ice.hosts == ("127.0.0.1", "10.0.0.2")
    assert config.embed_origins == ("https://a.example", "https://b.example")
    assert parse("--ice-host", "::1").ice.hosts == ("::1",)  # a repeatable flag replaces the variable's list


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("Yes", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("OFF", False),
    ],
)
def test_switches_read_the_usual_words_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, text: str, value: bool
) -> None:
    monkeypatch.setenv("LIVE_CAPTIONS_NO_SPEAKERS", text)
    monkeypatch.setenv("LIVE_CAPTIONS_WORD_TIMESTAMPS", text)
    monkeypatch.setenv("LIVE_CAPTIONS_LOOPBACK_ONLY", text)
    config = parse()
    assert (config.speakers, config.word_timestamps, config.ice.loopback_only) == (not value, value, value)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("LIVE_CAPTIONS_NO_SPEAKERS", "maybe", "expected true/false, 1/0, yes/no or on/off, got 'maybe'"),
        ("LIVE_CAPTIONS_PORT", "eighty", "expected a number, got 'eighty'"),
        ("LIVE_CAPTIONS_DEVICE", "tpu", "expected one of auto, cpu, cuda, got 'tpu'"),
        ("LIVE_CAPTIONS_PTIME_MS", "30", "expected one of 0, 10, 20, 40, 60, got 30"),
        ("LIVE_CAPTIONS_UDP_PORTS", "80-90", "port range '80-90' must lie within 1024-65535"),
        ("LIVE_CAPTIONS_MAX_SESSIONS", "many", "expected 'auto' or a number of sessions, got 'many'"),
        ("LIVE_CAPTIONS_DB", "mysql://db/captions", "'mysql' databases are not supported"),
    ],
)
def test_a_bad_environment_value_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    message: str,
) -> None:
    monkeypatch.setenv(name, text)
    with pytest.raises(SettingsError) as refused:
        build_parser().parse_args([])
    assert refused.value.code == 2 and str(refused.value).startswith(f"{name}: {message}")
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m app") and f"python -m app: error: {name}: {message}" in err


def test_a_flag_given_overrides_a_bad_environment_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIVE_CAPTIONS_NO_SPEAKERS", "maybe")
    monkeypatch.setenv("LIVE_CAPTIONS_PORT", "eighty")
    config = parse("--no-speakers", "--port", "8081")
    assert (config.speakers, config.port) == (False, 8081)


def test_flags_keep_their_checks_and_messages(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["--port", "x"], "argument --port: invalid int value: 'x'"),
        (["--window", "wide"], "argument --window: invalid choice: 'wide'"),
        (["--udp-ports", "1-2"], "argument --udp-ports: port range '1-2' must lie within"),
    ):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert message in capsys.readouterr().err
    config = parse(
        "--sentence-pause-ms",
        "0",
        "--max-sessions",
        "auto",
        "--funasr-port",
        "0",
        "--language",
        "de",
        "--no-word-align",
        "--asr-url",
        "http://gpu1:8000/",
        "--asr-url",
        "http://gpu1:8000",
    )
    assert (config.sentence_pause_ms, config.max_sessions, config.funasr_port, config.language) == (0, None, None, "de")
    assert config.word_align is False and config.asr_urls == ("http://gpu1:8000",)


def test_nested_configs_are_built_from_their_own_flags() -> None:
    ice = parse("--ice-server", "stun:stun.example.org", "--turn-ttl-s", "60").ice
    assert ice == dataclasses.replace(IceConfig(), servers=("stun:stun.example.org",), turn_ttl_s=60)


def test_the_file_tool_takes_the_engine_settings_from_the_same_declarations() -> None:
    from engine.__main__ import build_parser as engine_parser

    args = engine_parser().parse_args(["talk.wav"])
    assert (args.model, args.language, args.window, args.device, args.no_speakers) == (None, "en", "fit", "auto", False)
    args = engine_parser().parse_args(
        ["talk.wav", "--language", "auto", "--no-speakers", "--speaker-model", "resemblyzer"]
    )
    assert (args.language, args.no_speakers, args.speaker_model) == (None, True, "resemblyzer")
    assert "default caption language, or 'auto'" in " ".join(engine_parser().format_help().split())
