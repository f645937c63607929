"""ICE policy for the server's WebRTC side: which local addresses and ports it offers, which ICE servers and
transport policy it uses (``app.webrtc.stun_turn``), and (in loopback-only mode) which remote candidates it accepts.

aioice enumerates host addresses through a module-level function and binds ephemeral ports; ``host_addresses``
and ``ranged_candidates`` are what replaces them, process-wide, when ``app.webrtc.patches.install_ice`` applies
this policy.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aioice.candidate
import aioice.ice
from aioice import Candidate
from aiortc import RTCConfiguration, RTCIceServer, RTCIceTransportPolicy

from ..config import IceConfig
from .stun_turn import ice_servers

log = logging.getLogger(__name__)


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a hostname, e.g. an mDNS ".local" name
        return False


HostAddresses = Callable[[bool, bool], list[str]]  # aioice.ice.get_host_addresses(use_ipv4, use_ipv6)
ComponentCandidates = Callable[..., Awaitable[list[Candidate]]]  # aioice's Connection.get_component_candidates


def host_addresses(hosts: tuple[str, ...], original: HostAddresses) -> HostAddresses:
    """aioice's host-address lookup under this policy: ``hosts`` (IPv4 and IPv6 literals) as given, filtered by the
    address families aioice asks for; no ``hosts``: ``original`` (aioice's own enumeration)."""

    def addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        if not hosts:
            return original(use_ipv4, use_ipv6)
        # aioice never offers loopback by itself; an explicit list is taken as given.
        return [h for h in hosts if (":" in h and use_ipv6) or (":" not in h and use_ipv4)]

    return addresses


def ranged_candidates(low: int, high: int, original: ComponentCandidates) -> ComponentCandidates:
    """aioice's candidate gathering with host candidates bound within UDP ports [low, high]; server-reflexive and
    relayed gathering is left to ``original`` (aioice's own method)."""

    async def gather(
        self: aioice.ice.Connection,
        component: int,
        addresses: list[str],
        timeout: int = 5,  # noqa: ASYNC109 (aioice's own signature)
    ) -> list[Candidate]:
        loop = asyncio.get_running_loop()
        candidates: list[Candidate] = []
        for address in addresses:
            bound = await _bind_in_range(loop, self, address, low, high)
            if bound is None:
                log.warning("no free UDP port in %d-%d on %s", low, high, address)
                continue
            protocol, port = bound
            protocol.local_candidate = Candidate(
                foundation=aioice.candidate.candidate_foundation("host", "udp", address),
                component=component,
                transport="udp",
                priority=aioice.candidate.candidate_priority(component, "host"),
                host=address,
                port=port,
                type="host",
            )
            self._protocols.append(protocol)
            candidates.append(protocol.local_candidate)
        others: list[Candidate] = await original(self, component, [], timeout)
        return candidates + others

    return gather


async def _bind_in_range(
    loop: asyncio.AbstractEventLoop, connection: Any, address: str, low: int, high: int
) -> tuple[Any, int] | None:
    for port in range(low, high + 1):
        try:
            transport, protocol = await loop.create_datagram_endpoint(
                lambda: aioice.ice.StunProtocol(connection), local_addr=(address, port)
            )
        except OSError:
            continue
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        return protocol, port
    return None


def rtc_configuration(config: IceConfig, label: str | None = None) -> RTCConfiguration:
    """The server side's ``RTCConfiguration``: the configured STUN/TURN servers with the credentials to use now
    (``app.webrtc.stun_turn``; ``label`` names the session in time-limited TURN usernames) and the transport policy
    (``relay``: aioice gathers only a relayed candidate). Empty list = no ICE servers (aiortc's default would be a
    public STUN host: never used). aiortc uses the first STUN and the first TURN server of the list only."""
    servers = [
        RTCIceServer(urls=s.urls, username=s.username, credential=s.credential) for s in ice_servers(config, label)
    ]
    return RTCConfiguration(iceServers=servers, iceTransportPolicy=RTCIceTransportPolicy(config.transport_policy))


_CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ \S+ \d+ (\S+) ")


def filter_remote_candidates(sdp: str, loopback_only: bool) -> str:
    """Drop candidate lines the server must not contact (non-loopback ones in loopback-only mode)."""
    if not loopback_only:
        return sdp
    kept = []
    for line in sdp.splitlines():
        m = _CANDIDATE.match(line)
        if m and not is_loopback(m.group(1)):
            continue
        kept.append(line)
    return "\r\n".join(kept) + "\r\n"
