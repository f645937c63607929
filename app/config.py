"""Server configuration: one dataclass, filled from command-line flags with environment-variable fallbacks."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine import (
    DEFAULT_SPEAKER_MODEL,
    ENDPOINT_PRESETS,
    SPEAKER_MODEL_NAMES,
    WINDOW_MODES,
    TranscriberConfig,
    normalise_asr_url,
)


def default_db() -> Path:
    """``$XDG_DATA_HOME/live-captions/captions.db`` (``~/.local/share/...`` by default)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "live-captions" / "captions.db"


# ---- ICE servers: what --ice-server and its companions accept -----------------------------------------------------
TRANSPORT_POLICIES = ("all", "relay")

_URL = re.compile(r"(?P<scheme>turns?|stun):(?:(?P<user>[^:@/]+):(?P<password>[^@/]+)@)?"
                  r"(?P<host>[^\[\]:?@/]+)(?::(?P<port>\d{1,5}))?(?P<query>\?transport=(?:udp|tcp))?")


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
    if m is None or (m["scheme"] == "stun" and (m["user"] or m["query"])) or (
            m["scheme"] == "turns" and m["query"] == "?transport=udp"):  # TURN over TLS runs on TCP only
        raise ValueError(f"bad ICE server URL {text!r}: expected stun:host:port, turn:host:port or "
                         "turn:user:pass@host:port (optionally ?transport=udp|tcp after TURN URLs; the host a name "
                         "or an IPv4 address)")
    if m["port"] and not 0 < int(m["port"]) < 65536:
        raise ValueError(f"bad ICE server URL {text!r}: port {m['port']} is out of range")
    url = f"{m['scheme']}:{m['host']}" + (f":{m['port']}" if m["port"] else "") + (m["query"] or "")
    return ServerUrl(url, m["user"], m["password"])


def check_ice(config: IceConfig) -> None:
    """Raise ``ValueError`` with a clear message when ``config`` cannot work: a bad URL, a TURN URL with neither
    credentials nor ``turn_secret``, an unknown policy, or ``relay`` without any TURN server."""
    parsed = [parse_server_url(url) for url in config.servers]
    if config.transport_policy not in TRANSPORT_POLICIES:
        raise ValueError(f"ICE transport policy {config.transport_policy!r}: expected 'all' or 'relay'")
    for server in parsed:
        if server.is_turn and server.username is None and not config.turn_secret:
            raise ValueError(f"TURN server {server.url!r} has no credentials: give turn:user:pass@host:port or "
                             "--turn-secret (the TURN server's static-auth-secret)")
    if config.transport_policy == "relay" and not any(s.is_turn for s in parsed):
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

    hosts: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    turn_secret: str | None = None
    turn_ttl_s: int = 86_400  # a connection lasts at most this long on relayed candidates; pages then reconnect
    transport_policy: str = "all"
    udp_ports: tuple[int, int] | None = None
    loopback_only: bool = False

    def __post_init__(self) -> None:
        check_ice(self)


AUDIO_DECODERS = ("direct", "aiortc")  # see ServerConfig.audio_decoder

# Who may read ``GET /metrics``: "off" (404), "open" (anyone), "token" (the server's --auth-token when one is set,
# else anyone).
METRICS_ACCESS = ("off", "open", "token")


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    model: str | None = None
    language: str | None = "en"
    preset: str = "balanced"
    sentence_pause_ms: int | None = None  # silence that locks a finished sentence; None: the preset's, 0: off
    window: str = "fit"  # encoder window: "fit" (per request, engine.asr.windows) or "stock" (always 30 s)
    cpu_threads: int = TranscriberConfig.cpu_threads  # CPU engine threads; 0 = one per core
    word_timestamps: bool = False  # Whisper's timestamp tokens in every decode (word times; costs decode time)
    word_align: bool = True  # word times from Whisper's cross-attention, one extra pass per locked sentence
    device: str = "auto"
    # `vllm serve` instances to decode on instead of an in-process engine (base URLs, e.g. http://10.0.0.5:8000)
    asr_urls: tuple[str, ...] = ()
    speakers: bool = True
    speaker_model: str = DEFAULT_SPEAKER_MODEL  # speaker-embedding model (engine.speakers.models)
    tls_cert: str | None = None
    tls_key: str | None = None
    ice: IceConfig = field(default_factory=IceConfig)
    # Live sessions at once: None ("auto") lets in as many as the engine estimates it holds on time (a warm-up
    # measurement, then the measured decode load: engine.stream.capacity); a number is an operator's fixed cap.
    max_sessions: int | None = None
    max_file_jobs: int = 2  # uploaded files transcribing at once (OpenAI-compatible API); more get 429
    # WebSocket streams (FunASR, Deepgram, OpenAI Realtime): a client that takes no message for this long is cut off
    # (its open sentence is still locked and stored, its slot freed at once)
    send_timeout_s: float = 10.0
    stream_idle_s: float = 300.0  # ...one that sends no audio this long is ended (keep-alives don't count); 0: never
    stream_max_s: float = 4 * 3600.0  # ...and every stream ends after this long (clients reconnect); 0: never
    max_upload_mb: int = 25  # largest accepted upload (OpenAI's own limit); larger get 413
    funasr_port: int | None = None  # also speak FunASR's protocol at the root path of this port
    # "direct": Opus decoded on arrival at 16 kHz mono (app.webrtc.rtp_audio); "aiortc": aiortc's decoder thread at
    # 48 kHz stereo, then resampled (the old path, kept for comparison and as a fallback)
    audio_decoder: str = "direct"
    # Audio per packet asked of senders (a=ptime in the answer; browsers follow it): 60 ms = a third of the packets
    # to receive for at most 40 ms more delay; 0 = ask nothing (browsers send 20 ms)
    ptime_ms: int = 60
    max_lag_s: float = 2.0  # more audio than this waiting in a stream's receive queue for this long: shed it
    stop_timeout_s: float = 30.0  # how long a vanished client's session may take to finish its last sentence
    # SIGTERM/Ctrl-C: how long live sessions get to finish their open sentences before the server exits anyway
    # (well inside Kubernetes' default 30 s grace period, with room for the engine to close)
    drain_timeout_s: float = 15.0
    room_idle_s: float = 300.0  # a room nobody uses leaves memory after this long (it loads again on demand)
    # The transcript store: a SQLite file, or a postgresql:// URL shared by several front ends; None keeps
    # transcripts in memory only (tests)
    db_path: str | None = None
    auth_token: str | None = None  # when set, creating rooms and publishing (POST /offer) need this token
    embed_origins: tuple[str, ...] = ()  # host page origins allowed to frame /embed (CSP frame-ancestors)
    public_url: str | None = None  # base URL phones use (QR codes); default: the URL the request came to
    metrics: str = "token"  # who may read GET /metrics (METRICS_ACCESS)
    # When the speech engine dies after loading, end the process with EXIT_ENGINE_FAILED (after ending every
    # session with the reason) so a supervisor starts a fresh one. Off for apps embedded in another process.
    exit_on_engine_failure: bool = False


    def __post_init__(self) -> None:
        if self.audio_decoder not in AUDIO_DECODERS:
            raise ValueError(f"audio decoder must be one of {', '.join(AUDIO_DECODERS)}, got {self.audio_decoder!r}")
        if self.ptime_ms not in (0, 10, 20, 40, 60):
            raise ValueError(f"ptime must be 0 (sender's choice), 10, 20, 40 or 60 ms, got {self.ptime_ms}")
        if self.send_timeout_s <= 0 or self.stream_idle_s < 0 or self.stream_max_s < 0:
            raise ValueError("the send timeout must be over 0 s, the stream idle and length limits 0 (none) or more")
        if self.metrics not in METRICS_ACCESS:
            raise ValueError(f"metrics access must be one of {', '.join(METRICS_ACCESS)}, got {self.metrics!r}")


EXIT_ENGINE_FAILED = 3  # the process exit status after the speech engine died (see exit_on_engine_failure)


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(f"LIVE_CAPTIONS_{name}", "")
    return value or default


def _port_range(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        low, high = (int(p) for p in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port range like 50000-50100, got {text!r}") from None
    if not 1024 <= low <= high <= 65535:
        raise argparse.ArgumentTypeError(f"port range {text!r} must lie within 1024-65535, low to high")
    return low, high


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


def _metrics_access(text: str) -> str:
    # A ``type`` rather than ``choices``: argparse checks choices only on the command line, and this also checks the
    # environment variable's value (the default).
    if text not in METRICS_ACCESS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(METRICS_ACCESS)}, got {text!r}")
    return text


def _db_target(text: str) -> str:
    """A SQLite path or a ``postgresql://`` URL; any other URL is refused here, before anything starts."""
    if "://" in text and not text.startswith(("postgresql://", "postgres://")):
        raise argparse.ArgumentTypeError(f"{text.split('://', 1)[0]!r} databases are not supported: give a SQLite "
                                         f"file path or a postgresql:// URL")
    return text


def _asr_url(text: str) -> str:
    try:
        return normalise_asr_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m app",
                                description="Live captions server: open the page, allow the microphone, read captions. "
                                            "Every flag also reads LIVE_CAPTIONS_<NAME> from the environment.")
    p.add_argument("--host", default=_env("HOST", "127.0.0.1"), help="address to listen on (env LIVE_CAPTIONS_HOST)")
    p.add_argument("--port", type=int, default=int(_env("PORT") or os.environ.get("PORT") or 8080),
                   help="HTTP(S) port (env LIVE_CAPTIONS_PORT or PORT; default 8080)")
    p.add_argument("--model", default=_env("MODEL"),
                   help="embedded name (whisper-base [default], whisper-tiny.en), a local Hugging Face folder or a "
                        "hub id such as openai/whisper-large-v3-turbo")
    p.add_argument("--language", default=_env("LANGUAGE", "en"), help="default caption language, or 'auto'")
    p.add_argument("--preset", choices=sorted(ENDPOINT_PRESETS), default=_env("PRESET", "balanced"),
                   help="endpointing preset: how long a pause closes a sentence")
    p.add_argument("--sentence-pause-ms", type=int,
                   default=int(_env("SENTENCE_PAUSE_MS") or 0) if _env("SENTENCE_PAUSE_MS") else None,
                   help="silence after which a sentence whose text ends one locks (default: the preset's, 400 ms "
                        "balanced, 300 ms low-latency; 0: every sentence waits for the preset's silence schedule)")
    p.add_argument("--window", choices=sorted(WINDOW_MODES), default=_env("WINDOW", "fit"),
                   help="Whisper encoder window: 'fit' pads each request to a window that fits its audio (fast), "
                        "'stock' always to 30 s")
    p.add_argument("--cpu-threads", type=int, default=int(_env("CPU_THREADS", str(TranscriberConfig.cpu_threads)) or 0),
                   help="compute threads of the CPU speech engine (0, the default: every core while one session "
                        "speaks, half of them while several do; a number fixes it; an OMP_NUM_THREADS in the "
                        "environment wins)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=_env("DEVICE", "auto"))
    p.add_argument("--asr-url", action="append", type=_asr_url, default=None, metavar="URL",
                   help="decode on this `vllm serve` instance (base URL, e.g. http://10.0.0.5:8000) instead of an "
                        "in-process engine; repeat for several: requests go to the least loaded one that is up "
                        "(env LIVE_CAPTIONS_ASR_URLS, comma-separated; serve the model as the README says)")
    p.add_argument("--word-timestamps", action="store_true", default=_env("WORD_TIMESTAMPS", "") == "1",
                   help="decode with Whisper's timestamp tokens: word times (and so subtitle cues) follow the "
                        "model's timed stretches, not only the VAD; costs 20-50 %% more decode time (see "
                        "docs/benchmarks.md)")
    p.add_argument("--no-word-align", action="store_true", default=_env("NO_WORD_ALIGN") == "1",
                   help="word times from the VAD alone, not from Whisper's cross-attention (saves a second encoder "
                        "pass per locked sentence; subtitle cues then split less accurately: docs/benchmarks.md)")
    p.add_argument("--no-speakers", action="store_true", default=_env("NO_SPEAKERS") == "1",
                   help="skip speaker labels")
    p.add_argument("--speaker-model", choices=SPEAKER_MODEL_NAMES,
                   default=_env("SPEAKER_MODEL", DEFAULT_SPEAKER_MODEL),
                   help="speaker-embedding model (env LIVE_CAPTIONS_SPEAKER_MODEL): 'resemblyzer' (GE2E, 2019) or "
                        "'campplus' (CAM++, 2023: fewer speaker confusions, more CPU per window; see "
                        "docs/benchmarks.md)")
    p.add_argument("--tls-cert", default=_env("TLS_CERT"), help="PEM certificate: browsers allow the microphone "
                                                               "only on HTTPS or localhost")
    p.add_argument("--tls-key", default=_env("TLS_KEY"), help="PEM private key for --tls-cert")
    p.add_argument("--ice-host", action="append", default=None,
                   help="only offer host candidates on this local address (repeatable; env LIVE_CAPTIONS_ICE_HOSTS, "
                        "comma-separated)")
    p.add_argument("--ice-server", action="append", default=None,
                   help="STUN/TURN server URL for the server and every page, e.g. stun:stun.example.org:3478, "
                        "turn:turn.example.org:3478 (with --turn-secret) or turn:user:pass@turn.example.org:3478 "
                        "(repeatable; env LIVE_CAPTIONS_ICE_SERVERS, comma-separated; default: none)")
    p.add_argument("--turn-secret", default=_env("TURN_SECRET"),
                   help="shared secret of the TURN server (coturn: use-auth-secret, static-auth-secret): browsers get "
                        "time-limited TURN credentials instead of a fixed user:pass (env LIVE_CAPTIONS_TURN_SECRET)")
    p.add_argument("--turn-ttl-s", type=int, default=int(_env("TURN_TTL_S", "86400") or 86400),
                   help="lifetime of the time-limited TURN credentials, in seconds (default 86400: one day)")
    p.add_argument("--ice-transport-policy", choices=TRANSPORT_POLICIES,
                   default=_env("ICE_TRANSPORT_POLICY", "all"),
                   help="'relay': the server and the pages use only TURN-relayed candidates (hides both ends' "
                        "addresses; needs a TURN server); default 'all'")
    p.add_argument("--udp-ports", type=_port_range, default=_port_range(_env("UDP_PORTS")),
                   help="bind WebRTC host candidates within this UDP port range, e.g. 50000-50100")
    p.add_argument("--loopback-only", action="store_true", default=_env("LOOPBACK_ONLY") == "1",
                   help="accept only loopback ICE candidates (test setups)")
    p.add_argument("--audio-decoder", choices=AUDIO_DECODERS, default=_env("AUDIO_DECODER", "direct"),
                   help="'direct' (default): decode Opus on arrival straight to 16 kHz mono; 'aiortc': aiortc's "
                        "decoder thread at 48 kHz stereo, then resample (env LIVE_CAPTIONS_AUDIO_DECODER)")
    p.add_argument("--ptime-ms", type=int, choices=(0, 10, 20, 40, 60), default=int(_env("PTIME_MS", "60") or 60),
                   help="audio per packet asked of senders (a=ptime): 60 (default) = a third of the packets to "
                        "receive for at most 40 ms more delay; 0 = the sender's choice, 20 ms for browsers "
                        "(env LIVE_CAPTIONS_PTIME_MS)")
    p.add_argument("--max-sessions", type=_max_sessions, default=_env("MAX_SESSIONS") or "auto",
                   help="live sessions at once: 'auto' (default) as many as the server measures it holds on time "
                        "(its capacity, in /ready and /metrics), or a number; more get 503 busy with Retry-After "
                        "(env LIVE_CAPTIONS_MAX_SESSIONS)")
    p.add_argument("--max-file-jobs", type=int, default=int(_env("MAX_FILE_JOBS", "2") or 2),
                   help="uploaded files (/v1/audio/transcriptions) transcribing at once; more get 429 (they decode "
                        "behind every live session)")
    p.add_argument("--send-timeout-s", type=float, default=float(_env("SEND_TIMEOUT_S", "10") or 10),
                   help="a streaming client (Deepgram, OpenAI Realtime, FunASR) that takes no message for this long "
                        "is cut off; its open sentence is still locked and stored (default 10)")
    p.add_argument("--stream-idle-s", type=float, default=float(_env("STREAM_IDLE_S", "300") or 300),
                   help="a streaming client that sends no audio for this long is closed, keep-alives or not "
                        "(default 300; 0: never)")
    p.add_argument("--stream-max-s", type=float, default=float(_env("STREAM_MAX_S", "14400") or 14400),
                   help="a streaming connection ends after this long, after its open sentence (default 14400 = 4 h; "
                        "0: never)")
    p.add_argument("--drain-timeout-s", type=float, default=float(_env("DRAIN_TIMEOUT_S", "15") or 15),
                   help="on SIGTERM or Ctrl-C, how long live sessions get to finish their open sentences before the "
                        "server exits anyway (default 15; keep it under your supervisor's stop timeout)")
    p.add_argument("--max-upload-mb", type=int, default=int(_env("MAX_UPLOAD_MB", "25") or 25),
                   help="largest file /v1/audio/transcriptions accepts, in MB; larger get 413")
    p.add_argument("--funasr-port", type=int, default=int(_env("FUNASR_PORT", "0") or 0) or None,
                   help="also listen on this port for FunASR's realtime WebSocket protocol at the root path, where "
                        "FunASR's own server listens (e.g. 10095); it is always at /funasr on the main port")
    p.add_argument("--db", type=_db_target, default=_env("DB", str(default_db())),
                   help=f"where every room's transcript is kept: a SQLite file (default {default_db()}; "
                        f"':memory:' keeps nothing), or a postgresql://user:password@host/db URL shared by several "
                        f"front ends serving the same rooms (env LIVE_CAPTIONS_DB)")
    p.add_argument("--auth-token", default=_env("AUTH_TOKEN"),
                   help="require this token to create rooms and to caption a microphone (env LIVE_CAPTIONS_AUTH_TOKEN; "
                        "clients send 'Authorization: Bearer <token>' or ?token=)")
    p.add_argument("--embed-origin", action="append", default=None,
                   help="host page origin allowed to embed the widget, e.g. https://www.example.org (repeatable; "
                        "env LIVE_CAPTIONS_EMBED_ORIGINS, comma-separated; '*' = any; default: this server only)")
    p.add_argument("--public-url", default=_env("PUBLIC_URL"),
                   help="base URL phones reach this server at, for the kiosk's QR code, e.g. https://captions.lan:8443")
    p.add_argument("--metrics", type=_metrics_access, default=_env("METRICS", "token"), metavar="{off,open,token}",
                   help="GET /metrics (Prometheus): 'token' (default) needs --auth-token as a bearer token when one "
                        "is set, else is open like 'open'; 'off' answers 404 (env LIVE_CAPTIONS_METRICS)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """Raises ``ValueError`` for flags that cannot work together (see ``IceConfig``)."""
    hosts = args.ice_host if args.ice_host is not None else [h for h in (_env("ICE_HOSTS") or "").split(",") if h]
    servers = args.ice_server if args.ice_server is not None else [
        s for s in (_env("ICE_SERVERS") or "").split(",") if s]
    origins = args.embed_origin if args.embed_origin is not None else [
        o for o in (_env("EMBED_ORIGINS") or "").split(",") if o]
    language = None if args.language in ("auto", "") else args.language
    try:
        asr_urls = args.asr_url if args.asr_url is not None else [
            _asr_url(u) for u in (_env("ASR_URLS") or "").split(",") if u.strip()]
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"LIVE_CAPTIONS_ASR_URLS: {exc}") from None
    return ServerConfig(
        host=args.host, port=args.port, model=args.model, language=language, preset=args.preset,
        sentence_pause_ms=args.sentence_pause_ms,
        window=args.window, cpu_threads=args.cpu_threads, word_timestamps=args.word_timestamps,
        word_align=not args.no_word_align,
        device=args.device, asr_urls=tuple(dict.fromkeys(asr_urls)), speakers=not args.no_speakers,
        speaker_model=args.speaker_model, tls_cert=args.tls_cert, tls_key=args.tls_key,
        ice=IceConfig(hosts=tuple(hosts), servers=tuple(servers), turn_secret=args.turn_secret or None,
                      turn_ttl_s=args.turn_ttl_s, transport_policy=args.ice_transport_policy,
                      udp_ports=args.udp_ports, loopback_only=args.loopback_only),
        funasr_port=args.funasr_port, audio_decoder=args.audio_decoder, ptime_ms=args.ptime_ms,
        max_sessions=args.max_sessions, max_file_jobs=args.max_file_jobs,
        max_upload_mb=args.max_upload_mb, drain_timeout_s=args.drain_timeout_s,
        send_timeout_s=args.send_timeout_s, stream_idle_s=args.stream_idle_s, stream_max_s=args.stream_max_s,
        db_path=args.db, auth_token=args.auth_token or None,
        embed_origins=tuple(o.strip().rstrip("/") for o in origins), public_url=args.public_url,
        metrics=args.metrics,
        exit_on_engine_failure=True,
    )
