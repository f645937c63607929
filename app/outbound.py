"""What ``--output-allow`` accepts: the destinations an operator opens to the rooms' outputs beyond public
addresses (``app.outputs.destinations`` applies them; docs/operations.md, "Outputs: outbound policy").

At the bottom of the layers, beside ``settings``: ``app.config`` checks each value as it is parsed, so a typo stops
the server at once with the usual usage message.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

_HOST_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*")


@dataclass(frozen=True)
class OutputDestination:
    """One ``--output-allow`` entry: the addresses of ``network`` (an address alone: a /32 or /128), or else the
    host ``name`` (lower case, no trailing dot) whatever it resolves to, on ``port`` (None: every port)."""

    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    name: str | None
    port: int | None

    def __str__(self) -> str:
        """The entry as ``parse_output_destinations`` reads it back."""
        if self.network is None:
            where = str(self.name)
        else:
            single = self.network.num_addresses == 1
            where = str(self.network.network_address) if single else str(self.network)
            where = f"[{where}]" if self.network.version == 6 and self.port is not None else where
        return where if self.port is None else f"{where}:{self.port}"


def parse_output_destinations(text: str) -> tuple[OutputDestination, ...]:
    """``text``: comma-separated entries, each a CIDR (``192.168.1.0/24``, ``fd00::/8``), an address
    (``127.0.0.1``, ``::1``) or a host name (``obs.lan``), optionally with ``:port`` (IPv6 in brackets then:
    ``[::1]:4455``). Raises ``ValueError`` naming the entry. An address must be written as dotted quads or IPv6:
    ``127.1`` or ``2130706433`` is refused, neither taken as an address nor as a name."""
    entries = tuple(_entry(item.strip()) for item in text.split(",") if item.strip())
    if not entries:
        raise ValueError(f"output destination {text!r}: expected a CIDR, an address or a host name")
    return entries


def _entry(text: str) -> OutputDestination:
    host, port_text = text, ""
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")) or ":" not in host:
            raise ValueError(f"output destination {text!r}: expected [IPv6] or [IPv6]:port")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:  # more than one: a bare IPv6 address or network, without a port
        host, port_text = text.split(":")
    port = int(port_text) if port_text.isdigit() and 0 < int(port_text) < 65536 else None
    if port_text and port is None:
        raise ValueError(f"output destination {text!r}: the port must be 1 to 65535")
    try:
        network = ipaddress.ip_network(host, strict=False)  # 192.168.1.7/24 means the /24 it is in
    except ValueError:
        network = None
    if network is not None:
        mapped = getattr(network.network_address, "ipv4_mapped", None)
        if mapped is not None and network.prefixlen >= 96:  # ::ffff:a.b.c.d is a.b.c.d, as the policy sees it
            network = ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}")
        return OutputDestination(network, None, port)
    name = host.lower().removesuffix(".")
    if not _HOST_NAME.fullmatch(name) or name.rsplit(".", 1)[-1].isdigit() or legacy_ipv4(name) is not None:
        raise ValueError(f"output destination {text!r}: not a CIDR, an address (dotted quads or IPv6) or a host name")
    return OutputDestination(None, name, port)


def legacy_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address the system's resolver reads in ``text`` when it is one of the old numeric spellings
    (``127.1``, ``2130706433``, ``0x7f.1``, ``0177.0.0.1``) or dotted quads; None for anything else."""
    if not text or not all(c in "0123456789abcdefxABCDEFX." for c in text):
        return None  # a quick no for most names (inet_aton would say no too)
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None
