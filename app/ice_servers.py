"""The STUN/TURN servers every WebRTC peer of this server is given, from one source: the server's own peer
connections (aiortc), the pages' (``GET /ice``, read before each connection) and WHIP clients' (``Link`` headers),
so that the two ends of a connection never disagree about how to reach each other.

TURN credentials are either static (``turn:user:pass@host:port``: the same pair goes to every browser) or
time-limited, TURN REST style (``--turn-secret``, what coturn's ``use-auth-secret`` with ``static-auth-secret``
checks): username ``<expiry, Unix seconds>:<label>``, password ``base64(HMAC-SHA1(secret, username))``. Browsers
necessarily see the TURN credentials they use; time-limited ones stop working ``ttl_s`` after they were handed out,
so a copied pair is not a standing key to the relay. The label names the room (or the session) in the TURN
server's log.

``iceTransportPolicy`` ``relay``: both ends use relayed candidates only (aiortc >= 1.16 applies it natively:
aioice then gathers no host or server-reflexive candidates).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import IceConfig

TRANSPORT_POLICIES = ("all", "relay")
DEFAULT_LABEL = "live-captions"  # the label of credentials for a page that publishes into no given room yet

_URL = re.compile(r"(?P<scheme>turns?|stun):(?:(?P<user>[^:@/]+):(?P<password>[^@/]+)@)?"
                  r"(?P<host>[^\[\]:?@/]+)(?::(?P<port>\d{1,5}))?(?P<query>\?transport=(?:udp|tcp))?")
_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,64}")


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


@dataclass(frozen=True)
class IceServer:
    """One entry of a WebRTC ``RTCConfiguration.iceServers`` list, with the credentials to use now."""

    urls: str
    username: str | None = None
    credential: str | None = None

    def wire(self) -> dict[str, str]:
        """The browser's ``RTCIceServer`` dictionary."""
        entry = {"urls": self.urls}
        if self.username is not None and self.credential is not None:
            entry.update(username=self.username, credential=self.credential)
        return entry


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


def check(config: IceConfig) -> None:
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


def turn_rest_credentials(secret: str, label: str, expiry_s: int) -> tuple[str, str]:
    """TURN REST credentials valid until ``expiry_s`` (Unix seconds): ``("<expiry_s>:<label>", password)`` with
    password ``base64(HMAC-SHA1(secret, username))``, as coturn computes it for ``use-auth-secret``."""
    username = f"{expiry_s}:{label}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode("ascii")


def safe_label(label: str | None) -> str:
    """``label`` if it is a plain name (a room or session id), else ``DEFAULT_LABEL``: a label ends up in the TURN
    server's log and must not carry a ``:`` (the username's separator)."""
    return label if label and _LABEL.fullmatch(label) else DEFAULT_LABEL


def ice_servers(config: IceConfig, label: str | None = None, now_s: float | None = None) -> list[IceServer]:
    """The configured servers with the credentials to use now: static ones as given; TURN URLs without static
    credentials get TURN REST credentials for ``label`` that expire ``config.turn_ttl_s`` after ``now_s`` (default:
    the current time). Empty when nothing is configured (never a public default)."""
    expiry_s = int(time.time() if now_s is None else now_s) + config.turn_ttl_s
    servers = []
    for server in (parse_server_url(url) for url in config.servers):
        if not server.is_turn:
            servers.append(IceServer(server.url))
        elif server.username is not None:
            servers.append(IceServer(server.url, server.username, server.password))
        elif config.turn_secret:
            servers.append(IceServer(server.url, *turn_rest_credentials(config.turn_secret, safe_label(label),
                                                                        expiry_s)))
    return servers


def page_config(config: IceConfig, label: str | None = None, now_s: float | None = None) -> dict[str, Any]:
    """What a page passes to ``new RTCPeerConnection(...)``: ``{"iceServers": [...], "iceTransportPolicy": ...}``."""
    return {"iceServers": [s.wire() for s in ice_servers(config, label, now_s)],
            "iceTransportPolicy": config.transport_policy}


def link_headers(servers: list[IceServer]) -> list[str]:
    """``Link`` header values announcing ``servers`` to a WHIP client (RFC 9725: STUN/TURN server configuration)."""
    links = []
    for server in servers:
        link = f'<{server.urls}>; rel="ice-server"'
        if server.username is not None and server.credential is not None:
            link += (f'; username="{_quoted(server.username)}"; credential="{_quoted(server.credential)}"; '
                     'credential-type="password"')
        links.append(link)
    return links


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
