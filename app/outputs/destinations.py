"""Where outputs may connect: the server's outbound policy (docs/operations.md, "Outputs: outbound policy").

An output's URL is an editor's to give, and anyone gets an editor token with a room when the server runs without
``--auth-token``; where it may connect is the operator's decision. By default only public unicast addresses: every
address of a class in ``Refusal`` (this machine, the private and link-local networks, multicast, reserved and
special-purpose ranges, the clouds' metadata services) is refused, whichever way it is spelt (``127.1``,
``2130706433``, ``[::ffff:127.0.0.1]``, an IPv6 address that embeds one: 6to4, NAT64). The operator opens more
with ``--output-allow`` (``DestinationPolicy.allowed``, ``app.outbound``): an address or CIDR entry allows those
addresses, whichever name leads to them; a host name entry allows that name whatever it resolves to (the
operator's own DNS). Either may name a port; then only that one.

Checked twice. When an output is added (``check_destination``): an address at once, a name resolved and every
address it resolves to checked; a name that does not resolve then (no DNS for it yet, or none on the server) is
accepted and left to the second check. And for every connection an output makes (``OutboundSession``): its
resolver (``CheckingResolver``) checks every address a name resolves to at that moment, so a name that resolved to
a public address when it was added and resolves to this machine now is refused (DNS rebinding); a middleware
checks IP-literal hosts, which aiohttp connects to without asking the resolver, and refuses every redirect, so an
output contacts nothing but its URL. No proxy from the environment either.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from ..outbound import OutputDestination, legacy_ipv4, parse_output_destinations

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

RESOLVE_TIMEOUT_S = 5.0  # a name's lookup when an output is added; slower counts as not resolving (checked later)
REDIRECTS = frozenset({301, 302, 303, 307, 308})
# What a peer's headers may cost: aiohttp's defaults allow 128 fields of 8 KiB; an answer needs a dozen.
MAX_LINE_BYTES = 8190
MAX_HEADERS = 64

# The clouds' instance metadata services (credentials live there): AWS, GCP, Azure and OpenStack share
# 169.254.169.254; AWS's ECS task endpoint, AWS's IPv6 one, Alibaba Cloud's, Azure's WireServer (a public address).
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "168.63.129.16")
)
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # "this host on this network": Linux connects it to itself
_PRIVATE = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", "fec0::/10")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix: the IPv4 address in the last 32 bits
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # a network's own translator: where to, unknown
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_TEREDO = ipaddress.ip_network("2001::/32")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


class Refusal(StrEnum):
    """Why the policy refuses an address: its class, as an editor is told (never more than the class)."""

    METADATA = "a cloud metadata address"
    LOOPBACK = "a loopback address (this machine)"
    UNSPECIFIED = "an unspecified address (0.0.0.0 or ::, this machine)"
    LINK_LOCAL = "a link-local address"
    PRIVATE = "a private network address"
    MULTICAST = "a multicast or broadcast address"
    RESERVED = "a reserved or special-purpose address"
    PORT = "port 0"


class DestinationRefused(Exception):
    """A destination the policy refuses, for ``reason``. Not an ``OSError`` on purpose: aiohttp's connector and
    client pass it through unchanged (an ``OSError`` would come out as one of their connection errors)."""

    def __init__(self, reason: Refusal) -> None:
        super().__init__(f"refused by the server's outbound policy: {reason}")
        self.reason = reason


class RedirectRefused(Exception):
    """The destination answered a redirect (HTTP ``status``), which no output follows."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP status {status} (redirects are not followed)")
        self.status = status


class CannotResolve(OSError):
    """A name that does not resolve now (an ``OSError``: aiohttp reports it as a failed lookup)."""


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` (a URL's host, brackets or not) is written as, in any spelling the system reads as
    one, IPv4-mapped IPv6 as the IPv4 address it maps; None for a name."""
    text = host.strip("[]")
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # a zone (fe80::1%eth0) changes no class
    except ValueError:
        return legacy_ipv4(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def classify(ip: IPAddress) -> Refusal | None:
    """The class that refuses ``ip`` by default, or None for a public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:  # reaches the IPv4 address it embeds: as allowed as that one
            return classify(embedded)
        if (
            ip in _NAT64_LOCAL
            or ip in _TEREDO
            or (ip in _IPV4_COMPATIBLE and not (ip.is_loopback or ip.is_unspecified))
        ):
            return Refusal.RESERVED  # on to an IPv4 address that cannot be checked here
    if ip in METADATA:
        return Refusal.METADATA  # before link-local: say what it is
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
        return Refusal.UNSPECIFIED
    if ip.is_loopback:
        return Refusal.LOOPBACK
    if ip.is_link_local:
        return Refusal.LINK_LOCAL
    if ip.is_multicast or ip == _BROADCAST:
        return Refusal.MULTICAST
    if any(ip.version == n.version and ip in n for n in _PRIVATE):
        return Refusal.PRIVATE
    if ip.is_reserved or not ip.is_global:
        return Refusal.RESERVED
    return None


def _is_localhost(name: str) -> bool:
    """RFC 6761: ``localhost`` and every name under it are this machine, whatever a resolver says."""
    return name == "localhost" or name.endswith(".localhost")


@dataclass(frozen=True)
class DestinationPolicy:
    """Where this server's outputs may connect (see the module). ``allowed``: the operator's ``--output-allow``
    entries. ``resolver``: makes the resolver names are looked up with (aiohttp's default; tests give a stub)."""

    allowed: tuple[OutputDestination, ...] = ()
    resolver: Callable[[], AbstractResolver] = field(default=aiohttp.DefaultResolver, compare=False, repr=False)

    @classmethod
    def from_settings(cls, entries: Iterable[str]) -> DestinationPolicy:
        """The policy of ``ServerConfig.output_allow`` (each item one entry or a comma-separated list of them).
        Raises ``ValueError`` naming a bad entry."""
        return cls(tuple(d for text in entries for d in parse_output_destinations(text)))

    def check_address(self, ip: IPAddress | str, port: int, name: str | None = None) -> None:
        """Return if an output may connect to ``ip`` on ``port`` (reached through host name ``name``, if any);
        raise ``DestinationRefused`` otherwise."""
        address = ip if not isinstance(ip, str) else literal_address(ip)
        if address is None:
            raise ValueError(f"not an IP address: {ip!r}")
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if self._allows(address, port) or (name is not None and self._allows_name(name, port)):
            return
        if not 0 < port < 65536:
            raise DestinationRefused(Refusal.PORT)
        reason = classify(address)
        if reason is not None:
            raise DestinationRefused(reason)

    def check_without_lookup(self, host: str, port: int) -> bool:
        """What ``host`` can be told without a lookup: True when it may be connected to (an address the policy
        allows; a name ``--output-allow`` names); False for a name whose addresses must be checked. Raises
        ``DestinationRefused`` for an address it refuses and for ``localhost`` names."""
        address = literal_address(host)
        if address is not None:
            self.check_address(address, port)
            return True
        name = host.lower().rstrip(".")
        if self._allows_name(name, port):
            return True
        if _is_localhost(name):
            raise DestinationRefused(Refusal.LOOPBACK)
        return False

    async def resolve_allowed(
        self,
        host: str,
        port: int,
        family: socket.AddressFamily = socket.AF_UNSPEC,
        resolver: AbstractResolver | None = None,
    ) -> list[ResolveResult]:
        """The addresses to connect to for ``host`` on ``port``, every one of them allowed. ``resolver``: the one
        to look names up with (None: a new one of ``self.resolver``). Raises ``DestinationRefused`` when any
        address is refused, ``CannotResolve`` when the name does not resolve."""
        address = literal_address(host)
        if address is not None:
            self.check_address(address, port)
            return [
                ResolveResult(
                    hostname=host,
                    host=str(address),
                    port=port,
                    family=_family(address),
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            ]
        trusted = self.check_without_lookup(host, port)
        own = resolver is None
        lookup = self.resolver() if resolver is None else resolver
        try:
            results = await lookup.resolve(host, port, family)
        except OSError as exc:
            raise CannotResolve(exc.errno, "the host name does not resolve") from None
        finally:
            if own:
                await lookup.close()
        if not results:
            raise CannotResolve(None, "the host name does not resolve")
        if not trusted:
            for result in results:  # every one: a name with one refused address is refused
                self.check_address(result["host"], port, host.lower().rstrip("."))
        return results

    async def check_destination(self, url: str, timeout_s: float = RESOLVE_TIMEOUT_S) -> None:
        """The check when an output is added: return if ``url`` may be used (or its host does not resolve now,
        nor within ``timeout_s``: then it is checked at each connection); raise ``DestinationRefused``."""
        parsed = URL(url)
        host, port = parsed.raw_host, parsed.port
        if host is None or port is None:
            raise ValueError(f"not an absolute URL: {url!r}")
        try:
            async with asyncio.timeout(timeout_s):
                await self.resolve_allowed(host, port)
        except (CannotResolve, TimeoutError):
            pass  # the connection's own check decides (see the module)

    def session(self, timeout: aiohttp.ClientTimeout | None = None) -> OutboundSession:
        """An HTTP client that connects only where this policy allows (see ``OutboundSession``)."""
        return OutboundSession(self, timeout)

    def _allows(self, ip: IPAddress, port: int) -> bool:
        return any(
            d.network is not None and ip.version == d.network.version and ip in d.network and d.port in (None, port)
            for d in self.allowed
        )

    def _allows_name(self, name: str, port: int) -> bool:
        return any(d.name == name and d.port in (None, port) for d in self.allowed)


class CheckingResolver(AbstractResolver):
    """aiohttp's resolver for outputs: ``inner``'s answers, each address checked by ``policy`` for every lookup
    the connector makes (``DestinationPolicy.resolve_allowed``)."""

    def __init__(self, policy: DestinationPolicy, inner: AbstractResolver) -> None:
        self.policy = policy
        self.inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return await self.policy.resolve_allowed(host, port, family, self.inner)

    async def close(self) -> None:
        await self.inner.close()


class OutboundSession:
    """One output's HTTP client (``http``): every name looked up through a ``CheckingResolver``, every request's
    IP-literal host checked, every redirect refused (``RedirectRefused``), no proxy, small header limits.
    ``close()`` lets go of it all; safe to call twice."""

    def __init__(self, policy: DestinationPolicy, timeout: aiohttp.ClientTimeout | None = None) -> None:
        self.policy = policy
        self._resolver = CheckingResolver(policy, policy.resolver())
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(resolver=self._resolver),
            timeout=timeout or aiohttp.ClientTimeout(),
            trust_env=False,
            middlewares=(self._guard,),
            max_line_size=MAX_LINE_BYTES,
            max_field_size=MAX_LINE_BYTES,
            max_headers=MAX_HEADERS,
        )

    async def close(self) -> None:
        await self.http.close()
        await self._resolver.close()

    async def _guard(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """Every request of the session, redirects' included, passes here (an aiohttp client middleware)."""
        host, port = request.url.raw_host, request.url.port
        if host is None or port is None:
            raise DestinationRefused(Refusal.RESERVED)
        # aiohttp skips the resolver for IP literals (and the resolver checks names): the literals are checked here.
        address = literal_address(host)
        if address is not None:
            self.policy.check_address(address, port)
        response = await handler(request)
        if response.status in REDIRECTS:
            response.close()
            raise RedirectRefused(response.status)
        return response


def _family(address: IPAddress) -> socket.AddressFamily:
    return socket.AF_INET if address.version == 4 else socket.AF_INET6
