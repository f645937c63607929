"""ICE policy: host addresses, UDP port range, ICE server URLs, loopback-only candidate filtering."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiortc import RTCIceTransportPolicy, RTCPeerConnection

from app.config import IceConfig, TransportPolicy
from app.webrtc import ice, patches


@pytest.fixture(autouse=True)
def restore_policy() -> Iterator[None]:
    yield
    patches.install_ice(IceConfig())


async def gathered_candidates(policy: IceConfig) -> list[tuple[str, int]]:
    patches.install_ice(policy)
    pc = RTCPeerConnection(ice.rtc_configuration(policy))
    pc.createDataChannel("captions")
    await pc.setLocalDescription(await pc.createOffer())
    lines = [line.split() for line in pc.localDescription.sdp.splitlines() if line.startswith("a=candidate:")]
    await pc.close()
    return [(parts[4], int(parts[5])) for parts in lines]


async def test_host_candidates_only_on_the_given_address() -> None:
    candidates = await gathered_candidates(IceConfig(hosts=("127.0.0.1",)))
    assert candidates and all(addr == "127.0.0.1" for addr, _ in candidates)


async def test_host_candidates_bind_inside_the_port_range() -> None:
    candidates = await gathered_candidates(IceConfig(hosts=("127.0.0.1",), udp_ports=(47310, 47319)))
    assert candidates and all(47310 <= port <= 47319 for _, port in candidates)


def test_ice_server_urls() -> None:
    config = ice.rtc_configuration(
        IceConfig(servers=("stun:stun.example.org:3478", "turn:alice:s3cret@turn.example.org:3478"))
    )
    stun, turn = config.iceServers or []
    assert stun.urls == "stun:stun.example.org:3478" and stun.username is None
    assert (turn.urls, turn.username, turn.credential) == ("turn:turn.example.org:3478", "alice", "s3cret")
    assert config.iceTransportPolicy == RTCIceTransportPolicy.ALL
    assert ice.rtc_configuration(IceConfig()).iceServers == []  # never a public default
    relay = IceConfig(servers=("turn:turn.example.org",), turn_secret="north", transport_policy=TransportPolicy.RELAY)
    config = ice.rtc_configuration(relay, label="session-1")
    assert config.iceTransportPolicy == RTCIceTransportPolicy.RELAY
    assert (config.iceServers or [])[0].username.endswith(":session-1")  # type: ignore[union-attr]


def test_loopback_only_drops_other_candidates() -> None:
    sdp = (
        "\r\n".join(
            [
                "v=0",
                "a=candidate:1 1 udp 2122260223 127.0.0.1 50000 typ host",
                "a=candidate:2 1 udp 2122194687 192.168.1.20 50001 typ host",
                "a=candidate:3 1 udp 2122194687 abcd-1234.local 50002 typ host",
                "a=candidate:4 1 udp 2122194687 ::1 50003 typ host",
            ]
        )
        + "\r\n"
    )
    kept = ice.filter_remote_candidates(sdp, loopback_only=True)
    assert "127.0.0.1" in kept and "::1" in kept
    assert "192.168.1.20" not in kept and ".local" not in kept
    assert ice.filter_remote_candidates(sdp, loopback_only=False) == sdp
