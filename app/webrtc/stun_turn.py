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
from typing import Any

from ..config import IceConfig, parse_server_url

DEFAULT_LABEL = "live-captions"  # the label of credentials for a page that publishes into no given room yet

_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,64}")


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
            servers.append(
                IceServer(server.url, *turn_rest_credentials(config.turn_secret, safe_label(label), expiry_s))
            )
    return servers


def page_config(config: IceConfig, label: str | None = None, now_s: float | None = None) -> dict[str, Any]:
    """What a page passes to ``new RTCPeerConnection(...)``: ``{"iceServers": [...], "iceTransportPolicy": ...}``."""
    return {
        "iceServers": [s.wire() for s in ice_servers(config, label, now_s)],
        "iceTransportPolicy": config.transport_policy,
    }


def link_headers(servers: list[IceServer]) -> list[str]:
    """``Link`` header values announcing ``servers`` to a WHIP client (RFC 9725: STUN/TURN server configuration)."""
    links = []
    for server in servers:
        link = f'<{server.urls}>; rel="ice-server"'
        if server.username is not None and server.credential is not None:
            link += (
                f'; username="{_quoted(server.username)}"; credential="{_quoted(server.credential)}"; '
                'credential-type="password"'
            )
        links.append(link)
    return links


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
