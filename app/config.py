"""Server configuration: one dataclass, each setting declared once on its field (``engine.settings.setting``) and
turned into a command-line flag with an environment-variable fallback (``app.settings``).

``python -m app.config --markdown`` prints docs/configuration.md, generated from the same declarations.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from engine import (
    SPEAKER_MODEL_NAMES,
    Device,
    EndpointPreset,
    EngineConfig,
    TranscriberConfig,
    WindowMode,
    borrow,
    member_of,
    normalise_asr_url,
    setting,
    values_of,
)

from .outbound import parse_output_destinations
from .settings import SettingsParser, config_from, markdown


def default_db() -> Path:
    """``$XDG_DATA_HOME/live-captions/captions.db`` (``~/.local/share/...`` by default)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "live-captions" / "captions.db"


# ---- ICE servers: what --ice-server and its companions accept -----------------------------------------------------
class TransportPolicy(StrEnum):
    """Which ICE candidates the server and the pages use: ``ALL``, or ``RELAY`` (only TURN-relayed ones)."""

    ALL = "all"
    RELAY = "relay"


_URL = re.compile(
    r"(?P<scheme>turns?|stun):(?:(?P<user>[^:@/]+):(?P<password>[^@/]+)@)?"
    r"(?P<host>[^\[\]:?@/]+)(?::(?P<port>\d{1,5}))?(?P<query>\?transport=(?:udp|tcp))?"
)


@dataclass(frozen=True)
class ServerUrl:
    """One ``--ice-server`` value, parsed: ``url`` without credentials (``turn:host:port?transport=tcp``) and the
    static credentials it carried, if any."""

    url: str
    username: str | None = None
    password: str | None = None

    @property
    def is_turn(self) -> bool:
        return self.url.startswith("turn")


def parse_server_url(text: str) -> ServerUrl:
    """``stun:host[:port]``, ``turn[s]:[user:pass@]host[:port][?transport=udp|tcp]``; raises ``ValueError`` naming
    the value otherwise. STUN URLs carry no credentials. The host is a name or an IPv4 address (aiortc cannot
    parse a bracketed IPv6 literal)."""
    m = _URL.fullmatch(text.strip())
    if (
        m is None
        or (m["scheme"] == "stun" and (m["user"] or m["query"]))
        or (m["scheme"] == "turns" and m["query"] == "?transport=udp")
    ):  # TURN over TLS runs on TCP only
        raise ValueError(
            f"bad ICE server URL {text!r}: expected stun:host:port, turn:host:port or "
            "turn:user:pass@host:port (optionally ?transport=udp|tcp after TURN URLs; the host a name "
            "or an IPv4 address)"
        )
    if m["port"] and not 0 < int(m["port"]) < 65536:
        raise ValueError(f"bad ICE server URL {text!r}: port {m['port']} is out of range")
    url = f"{m['scheme']}:{m['host']}" + (f":{m['port']}" if m["port"] else "") + (m["query"] or "")
    return ServerUrl(url, m["user"], m["password"])


def _port_range(text: str) -> tuple[int, int] | None:
    """``LOW-HIGH``, both within 1024-65535; nothing: None (any port)."""
    if not text:
        return None
    try:
        low, high = (int(p) for p in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port range like 50000-50100, got {text!r}") from None
    if not 1024 <= low <= high <= 65535:
        raise argparse.ArgumentTypeError(f"port range {text!r} must lie within 1024-65535, low to high")
    return low, high


def _text_or_none(text: str) -> str | None:
    """A secret as given; an empty one is none."""
    return text or None


def check_ice(config: IceConfig) -> None:
    """Raise ``ValueError`` with a clear message when ``config`` cannot work: a bad URL, a TURN URL with neither
    credentials nor ``turn_secret``, an unknown policy, or ``relay`` without any TURN server."""
    parsed = [parse_server_url(url) for url in config.servers]
    if config.transport_policy not in tuple(TransportPolicy):
        raise ValueError(f"ICE transport policy {config.transport_policy!r}: expected 'all' or 'relay'")
    for server in parsed:
        if server.is_turn and server.username is None and not config.turn_secret:
            raise ValueError(
                f"TURN server {server.url!r} has no credentials: give turn:user:pass@host:port or "
                "--turn-secret (the TURN server's static-auth-secret)"
            )
    if config.transport_policy == TransportPolicy.RELAY and not any(s.is_turn for s in parsed):
        raise ValueError("--ice-transport-policy relay needs a TURN server (--ice-server turn:...)")
    if config.turn_ttl_s <= 0:
        raise ValueError(f"TURN credential lifetime must be positive, got {config.turn_ttl_s} s")


@dataclass(frozen=True)
class IceConfig:
    """How the server's WebRTC side finds a path to browsers.

    ``hosts``: restrict host candidates to these local addresses (e.g. ``127.0.0.1``); empty = every interface.
    ``servers``: STUN/TURN URLs (``stun:host:port``, ``turn:user:pass@host:port``, or ``turn:host:port`` with
    ``turn_secret``); empty = none, never a public one. The server and every page use the same list.
    ``turn_secret``: the TURN server's shared secret (coturn ``static-auth-secret``): TURN URLs without static
    credentials get TURN REST credentials that expire ``turn_ttl_s`` seconds after they are handed out.
    ``transport_policy``: ``all``, or ``relay`` (only relayed candidates, on the server and in the pages).
    ``udp_ports``: bind host candidates within this inclusive port range (firewalled deployments), or None.
    ``loopback_only``: accept only loopback candidates from the browser (tests: no packet leaves the machine).

    Raises ``ValueError`` for a configuration that cannot work (``check_ice``).
    """

    hosts: tuple[str, ...] = setting(
        (), flag="--ice-host", default_text="every interface", help="only offer host candidates on this local address"
    )
    servers: tuple[str, ...] = setting(
        (),
        flag="--ice-server",
        default_text="none",
        help="STUN/TURN server URL for the server and every page, e.g. stun:stun.example.org:3478, "
        "turn:turn.example.org:3478 (with --turn-secret) or turn:user:pass@turn.example.org:3478",
    )
    turn_secret: str | None = setting(
        None,
        parse=_text_or_none,
        help="shared secret of the TURN server (coturn: use-auth-secret, static-auth-secret): browsers get "
        "time-limited TURN credentials instead of a fixed user:pass",
    )
    # A connection lasts at most this long on relayed candidates; pages then reconnect.
    turn_ttl_s: int = setting(86_400, help="lifetime of the time-limited TURN credentials, in seconds (86400: one day)")
    transport_policy: TransportPolicy = setting(
        TransportPolicy.ALL,
        flag="--ice-transport-policy",
        parse=member_of(TransportPolicy),
        choices=values_of(TransportPolicy),
        help="'relay': the server and the pages use only TURN-relayed candidates (hides both ends' addresses; needs "
        "a TURN server)",
    )
    udp_ports: tuple[int, int] | None = setting(
        None,
        parse=_port_range,
        default_text="any",
        help="bind WebRTC host candidates within this UDP port range, e.g. 50000-50100",
    )
    loopback_only: bool = setting(False, help="accept only loopback ICE candidates (test setups)")

    def __post_init__(self) -> None:
        check_ice(self)


# What --ptime-ms may ask of a sender: audio per packet, in ms (0: the sender's choice).
PTIMES_MS = (0, 10, 20, 40, 60)


class AudioDecoder(StrEnum):
    """How a WebRTC stream's Opus becomes the engine's audio: ``DIRECT`` decodes on arrival at 16 kHz mono
    (app.webrtc.rtp_audio); ``AIORTC`` is aiortc's decoder thread at 48 kHz stereo, then resampled (the old path,
    kept for comparison and as a fallback)."""

    DIRECT = "direct"
    AIORTC = "aiortc"


class MetricsAccess(StrEnum):
    """Who may read ``GET /metrics``: ``OFF`` (404), ``OPEN`` (anyone), ``TOKEN`` (the server's --auth-token when one
    is set, else anyone)."""

    OFF = "off"
    OPEN = "open"
    TOKEN = "token"


def _max_sessions(text: str) -> int | None:
    """``auto`` (None: the server's own capacity estimate) or a number of sessions, 0 or more."""
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number of sessions, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"max sessions must be 0 or more, got {value}")
    return value


def _db_target(text: str) -> str:
    """A SQLite path or a ``postgresql://`` URL; any other URL is refused here, before anything starts."""
    if "://" in text and not text.startswith(("postgresql://", "postgres://")):
        raise argparse.ArgumentTypeError(
            f"{text.split('://', 1)[0]!r} databases are not supported: give a SQLite file path or a postgresql:// URL"
        )
    return text


def _asr_url(text: str) -> str:
    try:
        return normalise_asr_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port_or_off(text: str) -> int | None:
    """A port number; 0 is none (off)."""
    return int(text) or None


def _origin(text: str) -> str:
    """A web origin as the browser sends it: no trailing slash."""
    return text.strip().rstrip("/")


def _output_allow(text: str) -> str:
    """One ``--output-allow`` value: its entries, checked, written the canonical way and comma-separated."""
    try:
        return ",".join(str(entry) for entry in parse_output_destinations(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True)
class ServerConfig:
    """The caption server: where it listens, what decodes the speech, who may do what, where transcripts go.

    Every field declared with ``setting`` (or borrowed from the engine's config) is a flag of ``python -m app``
    with an environment-variable fallback (docs/configuration.md); the fields after them are set in code.
    """

    host: str = setting("127.0.0.1", help="address to listen on")
    port: int = setting(8080, env=("LIVE_CAPTIONS_PORT", "PORT"), help="HTTP(S) port")
    model: str | None = borrow(TranscriberConfig, "model")
    language: str | None = borrow(EngineConfig, "default_language")
    preset: EndpointPreset = setting(
        EndpointPreset.BALANCED,
        parse=member_of(EndpointPreset),
        choices=values_of(EndpointPreset),
        help="endpointing preset: how long a pause closes a sentence",
    )
    sentence_pause_ms: int | None = setting(
        None,
        parse=int,
        default_text="the preset's",
        help="silence after which a sentence whose text ends one locks (the preset's: 400 ms balanced, 300 ms "
        "low-latency; 0: every sentence waits for the preset's silence schedule)",
    )
    window: WindowMode = borrow(TranscriberConfig, "window")  # encoder window (engine.asr.windows)
    cpu_threads: int = borrow(TranscriberConfig, "cpu_threads")  # CPU engine threads; 0 = one per core
    cpu_decoder_threads: int = borrow(TranscriberConfig, "cpu_decoder_threads")  # of those, for text-only steps
    device: Device = borrow(TranscriberConfig, "device")
    # `vllm serve` instances to decode on instead of an in-process engine (base URLs, e.g. http://10.0.0.5:8000);
    # the engine's config cannot check them (engine.asr imports it), this flag does
    asr_urls: tuple[str, ...] = borrow(TranscriberConfig, "asr_urls", parse=_asr_url)
    # Whisper's timestamp tokens in every decode (word times; costs decode time)
    word_timestamps: bool = borrow(TranscriberConfig, "timestamps")
    # word times from Whisper's cross-attention, one extra pass per locked sentence
    word_align: bool = borrow(EngineConfig, "word_align")
    speakers: bool = borrow(EngineConfig, "speakers")
    # speaker-embedding model (engine.speakers.models, whose names the engine's config may not import)
    speaker_model: str = borrow(EngineConfig, "speaker_model", choices=SPEAKER_MODEL_NAMES)
    tls_cert: str | None = setting(
        None,
        default_text="none: plain HTTP",
        help="PEM certificate: browsers allow the microphone only on HTTPS or localhost",
    )
    tls_key: str | None = setting(None, help="PEM private key for --tls-cert")
    ice: IceConfig = field(default_factory=IceConfig)
    audio_decoder: AudioDecoder = setting(
        AudioDecoder.DIRECT,
        parse=member_of(AudioDecoder),
        choices=values_of(AudioDecoder),
        help="'direct': decode Opus on arrival straight to 16 kHz mono; 'aiortc': aiortc's decoder thread at 48 kHz "
        "stereo, then resample",
    )
    # Audio per packet asked of senders (a=ptime in the answer; browsers follow it)
    ptime_ms: int = setting(
        60,
        choices=PTIMES_MS,
        help="audio per packet asked of senders (a=ptime): 60 = a third of the packets to receive for at most 40 ms "
        "more delay; 0 = the sender's choice, 20 ms for browsers",
    )
    # Live sessions at once: None ("auto") lets in as many as the engine estimates it holds on time (a warm-up
    # measurement, then the measured decode load: engine.stream.capacity); a number is an operator's fixed cap.
    max_sessions: int | None = setting(
        None,
        parse=_max_sessions,
        default_text="auto",
        help="live sessions at once: 'auto' as many as the server measures it holds on time (its capacity, in /ready "
        "and /metrics), or a number; more get 503 busy with Retry-After",
    )
    max_file_jobs: int = setting(
        2,
        help="uploaded files (/v1/audio/transcriptions) transcribing at once; more get 429 (they decode behind "
        "every live session)",
    )
    # WebSocket streams (FunASR, Deepgram, OpenAI Realtime): a client that takes no message for this long is cut off
    # (its open sentence is still locked and stored, its slot freed at once)
    send_timeout_s: float = setting(
        10.0,
        help="a streaming client (Deepgram, OpenAI Realtime, FunASR) that takes no message for this long is cut "
        "off; its open sentence is still locked and stored",
    )
    stream_idle_s: float = setting(
        300.0, help="a streaming client that sends no audio for this long is closed, keep-alives or not (0: never)"
    )
    stream_max_s: float = setting(
        4 * 3600.0, help="a streaming connection ends after this long (4 h), after its open sentence (0: never)"
    )
    # SIGTERM/Ctrl-C: how long live sessions get to finish their open sentences before the server exits anyway
    # (well inside Kubernetes' default 30 s grace period, with room for the engine to close)
    drain_timeout_s: float = setting(
        15.0,
        help="on SIGTERM or Ctrl-C, how long live sessions get to finish their open sentences before the server "
        "exits anyway (keep it under your supervisor's stop timeout)",
    )
    max_upload_mb: int = setting(
        25, help="largest file /v1/audio/transcriptions accepts, in MB (OpenAI's own limit); larger get 413"
    )
    funasr_port: int | None = setting(
        None,
        parse=_port_or_off,
        default_text="none",
        help="also listen on this port for FunASR's realtime WebSocket protocol at the root path, where FunASR's own "
        "server listens (e.g. 10095; 0: none); it is always at /funasr on the main port",
    )
    # The transcript store: a SQLite file, or a postgresql:// URL shared by several front ends; None keeps
    # transcripts in memory only (tests; the flag's default is a file)
    db_path: str | None = setting(
        None,
        flag="--db",
        parse=_db_target,
        flag_default=lambda: str(default_db()),
        default_text="$XDG_DATA_HOME/live-captions/captions.db (XDG_DATA_HOME: ~/.local/share when unset)",
        help="where every room's transcript is kept: a SQLite file (':memory:' keeps nothing), or a "
        "postgresql://user:password@host/db URL shared by several front ends serving the same rooms",
    )
    auth_token: str | None = setting(
        None,
        parse=_text_or_none,
        help="require this token to create rooms and to caption a microphone (clients send 'Authorization: Bearer "
        "<token>' or ?token=)",
    )
    embed_origins: tuple[str, ...] = setting(
        (),
        flag="--embed-origin",
        parse=_origin,
        default_text="this server only",
        help="host page origin allowed to embed the widget (CSP frame-ancestors), e.g. https://www.example.org "
        "('*': any)",
    )
    public_url: str | None = setting(
        None,
        default_text="the URL the request came to",
        help="base URL phones reach this server at, for the kiosk's QR code, e.g. https://captions.lan:8443",
    )
    metrics: MetricsAccess = setting(
        MetricsAccess.TOKEN,
        parse=member_of(MetricsAccess),
        choices=values_of(MetricsAccess),
        help="GET /metrics (Prometheus): 'token' needs --auth-token as a bearer token when one is set, else is open "
        "like 'open'; 'off' answers 404",
    )
    output_allow: tuple[str, ...] = setting(
        (),
        parse=_output_allow,
        env=("LIVE_CAPTIONS_OUTPUT_ALLOW",),
        metavar="DESTINATIONS",
        default_text="none: outputs reach public addresses only",
        help="let room outputs (OBS, YouTube) reach these destinations, which the outbound policy refuses otherwise "
        "(loopback, private, link-local, ...; docs/operations.md#outputs-outbound-policy): CIDRs "
        "(192.168.1.0/24), addresses (127.0.0.1, [::1]) or host names (obs.lan), each optionally with :port "
        "(obs.lan:4455); one value may list several, comma-separated",
    )
    apertium: bool = setting(
        True,
        help="no Apertium: rooms cannot have languages unless --translate-url "
        "serves them (Apertium, from Debian, is the offline default)",
    )
    translate_url: str | None = setting(
        None,
        metavar="URL",
        default_text="none",
        help="an OpenAI-compatible chat-completions endpoint (e.g. `vllm serve` of an instruction-tuned model) that "
        "translates room languages, asked before Apertium (docs/protocol.md#rooms-in-other-languages)",
    )
    translate_model: str = setting("", help="the model name --translate-url serves")
    translate_api_key: str | None = setting(
        None, env=("LIVE_CAPTIONS_TRANSLATE_API_KEY",), default_text="none", help="bearer token for --translate-url"
    )
    # Not flags: set in code.
    max_lag_s: float = 2.0  # more audio than this waiting in a stream's receive queue for this long: shed it
    stop_timeout_s: float = 30.0  # how long a vanished client's session may take to finish its last sentence
    room_idle_s: float = 300.0  # a room nobody uses leaves memory after this long (it loads again on demand)
    # When the speech engine dies after loading, end the process with EXIT_ENGINE_FAILED (after ending every
    # session with the reason) so a supervisor starts a fresh one. Off for apps embedded in another process; on for
    # ``python -m app`` (config_from_args).
    exit_on_engine_failure: bool = False

    def __post_init__(self) -> None:
        if self.audio_decoder not in tuple(AudioDecoder):
            raise ValueError(f"audio decoder must be one of {', '.join(AudioDecoder)}, got {self.audio_decoder!r}")
        if self.ptime_ms not in PTIMES_MS:
            raise ValueError(f"ptime must be 0 (sender's choice), 10, 20, 40 or 60 ms, got {self.ptime_ms}")
        if self.send_timeout_s <= 0 or self.stream_idle_s < 0 or self.stream_max_s < 0:
            raise ValueError("the send timeout must be over 0 s, the stream idle and length limits 0 (none) or more")
        if self.metrics not in tuple(MetricsAccess):
            raise ValueError(f"metrics access must be one of {', '.join(MetricsAccess)}, got {self.metrics!r}")
        for allowed in self.output_allow:
            parse_output_destinations(allowed)  # raises ValueError naming a bad entry


EXIT_ENGINE_FAILED = 3  # the process exit status after the speech engine died (see exit_on_engine_failure)


def build_parser() -> argparse.ArgumentParser:
    """``python -m app``'s flags: one per setting of ``ServerConfig`` (``app.settings``), and ``--verbose``."""
    p = SettingsParser(
        ServerConfig,
        prog="python -m app",
        description="Live captions server: open the page, allow the microphone, read captions. "
        "Every flag also reads LIVE_CAPTIONS_<NAME> from the environment (the flag wins; "
        "docs/configuration.md lists them all).",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    return p


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The config of parsed ``build_parser()`` arguments. Raises ``ValueError`` for flags that cannot work together
    (see ``IceConfig``)."""
    return config_from(ServerConfig, args, exit_on_engine_failure=True)


def configuration_markdown() -> str:
    """docs/configuration.md."""
    return markdown(ServerConfig, "Configuration", _INTRO)


_INTRO = """\
<!-- Generated from the settings' declarations (app/config.py, engine/config.py) by
     `python -m app.config --markdown > docs/configuration.md`: edit those, then run it again. -->

Every setting of the caption server (`python -m app`, or `live-captions`) is a command-line flag and an environment
variable: a flag given wins, else the variable, else the default. An empty variable counts as unset. Switches (flags
without a value) read `true`/`false`, `1`/`0`, `yes`/`no` or `on`/`off` from the environment; a repeatable flag reads
a comma-separated list. A value the server cannot take, from either, stops it with a message naming the flag or the
variable. The tables are grouped by the dataclass that declares each setting."""


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        raise SystemExit("usage: python -m app.config --markdown > docs/configuration.md")
    # Through the package, not this __main__ copy, so that the docs name the classes by their modules.
    from app.config import configuration_markdown as generated

    print(generated(), end="")
