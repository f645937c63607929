"""ICE policy for the server's WebRTC side: which local addresses and ports it offers, which ICE servers and
transport policy it uses (``app.webrtc.stun_turn``), and (in loopback-only mode) which remote candidates it accepts.

aioice enumerates host addresses through a module-level function and binds ephemeral ports; both are replaced
here, process-wide, by ``install``. One server per process is the model (``create_app`` calls it once); calling it
again with another policy replaces the previous one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aioice.ice
from aioice import Candidate
from aiortc import RTCConfiguration, RTCIceServer, RTCIceTransportPolicy

from ..config import IceConfig
from .stun_turn import ice_servers

log = logging.getLogger(__name__)

_original_host_addresses = aioice.ice.get_host_addresses
_original_component_candidates = aioice.ice.Connection.get_component_candidates


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a hostname, e.g. an mDNS ".local" name
        return False


def install(config: IceConfig) -> None:
    """Apply the host-address and port-range policy to every peer connection created from now on."""
    hosts = list(config.hosts)

    def host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        if not hosts:
            return _original_host_addresses(use_ipv4, use_ipv6)
        # aioice never offers loopback by itself; an explicit list is taken as given.
        return [h for h in hosts if (":" in h and use_ipv6) or (":" not in h and use_ipv4)]

    aioice.ice.get_host_addresses = host_addresses
    if config.udp_ports is None:
        aioice.ice.Connection.get_component_candidates = _original_component_candidates  # type: ignore[method-assign]
    else:
        aioice.ice.Connection.get_component_candidates = _ranged_candidates(  # type: ignore[method-assign,assignment]
            *config.udp_ports)


def _ranged_candidates(low: int, high: int) -> Callable[..., Awaitable[list[Candidate]]]:
    """Host candidates bound within [low, high]; server-reflexive/relayed gathering is left to aioice."""

    async def gather(self: aioice.ice.Connection, component: int, addresses: list[str],
                     timeout: int = 5) -> list[Candidate]:  # noqa: ASYNC109 (aioice's own signature)
        loop = asyncio.get_running_loop()
        candidates: list[Candidate] = []
        for address in addresses:
            bound = await _bind_in_range(loop, self, address, low, high)
            if bound is None:
                log.warning("no free UDP port in %d-%d on %s", low, high, address)
                continue
            protocol, port = bound
            protocol.local_candidate = Candidate(
                foundation=aioice.ice.candidate_foundation("host", "udp", address), component=component,
                transport="udp", priority=aioice.ice.candidate_priority(component, "host"), host=address,
                port=port, type="host")
            self._protocols.append(protocol)
            candidates.append(protocol.local_candidate)
        others: list[Candidate] = await _original_component_candidates(self, component, [], timeout)
        return candidates + others

    return gather


async def _bind_in_range(loop: asyncio.AbstractEventLoop, connection: Any, address: str, low: int,
                         high: int) -> tuple[Any, int] | None:
    for port in range(low, high + 1):
        try:
            transport, protocol = await loop.create_datagram_endpoint(
                lambda: aioice.ice.StunProtocol(connection), local_addr=(address, port))
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
    servers = [RTCIceServer(urls=s.urls, username=s.username, credential=s.credential)
               for s in ice_servers(config, label)]
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
