"""NAT traversal through a real TURN server (Debian's coturn on 127.0.0.1, see ``tests/support/turn_server.py``) with
the relay-only transport policy on both ends: nothing reaches the server but through the relay, as behind a NAT or
firewall that lets only the TURN server through.

- the server's own peer connections gather only a relayed candidate (aiortc's ``iceTransportPolicy=relay``);
- WHIP clients are told the same TURN server, with time-limited credentials for their room;
- the microphone page (time-limited TURN REST credentials), the kiosk and the widget with ``mic=1`` (a static TURN
  user) in real Chromium get the server's ICE configuration from ``GET /ice``, connect through the relay, and show
  captions. Chromium's ``getStats()`` names the selected candidate pair (relayed on both sides), and coturn's log
  shows that the audio the page sent went through its relay, to the server's own allocation.

The recognizer is the named fake: what is tested is the path of the audio, not the words.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from playwright.async_api import Browser, Page

from app.config import IceConfig, TransportPolicy
from app.rooms.keys import ROOMS
from app.webrtc import ice, patches, stun_turn
from app.webrtc.keys import PEERS
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.browser import chromium, write_wav
from tests.support.rtc_client import ArrayAudioTrack
from tests.support.servers import running_server
from tests.support.turn_server import TURNSERVER, PeerUsage, TurnServer, coturn, wait_for_usage

pytestmark = pytest.mark.skipif(TURNSERVER is None, reason="needs turnserver (Debian package coturn)")

CLIP = "ls_1988-24833-0000"
SECRET = "test-shared-secret"

# Every RTCPeerConnection a page creates, kept for getStats() (the page's own objects are private).
RECORD_PEER_CONNECTIONS = """
window.peerConnections = [];
const NativePeerConnection = window.RTCPeerConnection;
window.RTCPeerConnection = class extends NativePeerConnection {
  constructor(...args) { super(...args); window.peerConnections.push(this); }
};
"""

# The selected candidate pair of the page's (only) peer connection, and how much audio it sent.
PATH_STATS = """async () => {
  const pc = window.peerConnections.at(-1);
  const stats = [...(await pc.getStats()).values()];
  const byId = new Map(stats.map((s) => [s.id, s]));
  const transport = stats.find((s) => s.type === "transport" && s.selectedCandidatePairId);
  const pair = transport && byId.get(transport.selectedCandidatePairId);
  const local = pair && byId.get(pair.localCandidateId);
  const remote = pair && byId.get(pair.remoteCandidateId);
  const config = pc.getConfiguration();
  return {
    policy: config.iceTransportPolicy,
    servers: config.iceServers.map((s) => ({urls: s.urls, username: s.username ?? null})),
    local: local?.candidateType ?? null, localAddress: local?.address ?? null, remote: remote?.candidateType ?? null,
    gathered: stats.filter((s) => s.type === "local-candidate").map((s) => s.candidateType),
    energy: stats.find((s) => s.type === "media-source" && s.kind === "audio")?.totalAudioEnergy ?? 0,
    rtpBytes: stats.find((s) => s.type === "outbound-rtp" && s.kind === "audio")?.bytesSent ?? 0,
    answerCandidates: pc.remoteDescription.sdp.split("\\r\\n").filter((l) => l.startsWith("a=candidate:")),
  };
}"""


def relay_config(turn: TurnServer, *, static_user: tuple[str, str] | None = None) -> IceConfig:
    """Loopback-only host policy as every test server has, plus the TURN server and the relay-only policy."""
    url = f"turn:{static_user[0]}:{static_user[1]}@127.0.0.1:{turn.port}" if static_user else turn.url
    return IceConfig(
        hosts=("127.0.0.1",),
        loopback_only=True,
        servers=(url,),
        turn_secret=None if static_user else SECRET,
        transport_policy=TransportPolicy.RELAY,
    )


@pytest.fixture
async def rest_turn(tmp_path: Path) -> AsyncIterator[TurnServer]:
    async with coturn(tmp_path / "coturn", secret=SECRET) as server:
        yield server


@pytest.fixture
async def static_turn(tmp_path: Path) -> AsyncIterator[TurnServer]:
    async with coturn(tmp_path / "coturn", user=("alice", "wonderland")) as server:
        yield server


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    async with chromium(write_wav(tmp_path / "mic.wav", pad(audio(CLIP), 1.0, 3.0))) as b:
        yield b


async def test_server_gathers_only_a_relayed_candidate_with_time_limited_credentials(rest_turn: TurnServer) -> None:
    """aiortc with the relay policy: one candidate, relayed by coturn (which accepted the TURN REST credentials);
    no host candidate although 127.0.0.1 is an allowed host address."""
    config = relay_config(rest_turn)
    patches.install_ice(config)
    try:
        pc = RTCPeerConnection(ice.rtc_configuration(config, label="probe"))
        pc.createDataChannel("captions")
        await pc.setLocalDescription(await pc.createOffer())
        candidates = [line for line in pc.localDescription.sdp.splitlines() if line.startswith("a=candidate:")]
        await pc.close()
    finally:
        patches.install_ice(IceConfig())
    assert len(candidates) == 1 and " typ relay " in candidates[0] and " 127.0.0.1 " in candidates[0], candidates
    assert re.search(r"user <\d+:probe>: incoming packet ALLOCATE processed, success", rest_turn.log_text())


async def relayed_audio_bytes(page: Page, turn: TurnServer, page_user: str) -> int:
    """While captions flow: the page got the server's ICE configuration (relay only, the TURN server, credentials
    for ``page_user``, a regex) and sends its audio over a relayed pair to the server's relayed candidate. Returns
    the audio bytes the page has sent so far."""
    path: dict[str, Any] = await page.evaluate(PATH_STATS)
    assert path["policy"] == "relay"
    assert path["servers"] == [{"urls": [turn.url], "username": path["servers"][0]["username"]}]
    assert re.fullmatch(page_user, path["servers"][0]["username"] or ""), path["servers"]
    assert path["energy"] > 0, "the fake microphone sent silence: nothing would be judged"
    assert (path["local"], path["remote"]) == ("relay", "relay"), path
    assert path["localAddress"] == "127.0.0.1"
    assert set(path["gathered"]) == {"relay"}, path["gathered"]
    assert path["answerCandidates"] and all(" typ relay" in c for c in path["answerCandidates"]), path
    sent = int(path["rtpBytes"])
    assert sent > 5_000, f"only {sent} bytes of audio sent"
    return sent


async def assert_relayed(turn: TurnServer, page_user: str, server_user: str, sent_bytes: int) -> None:
    """After the page and the server closed their connection: coturn relayed at least ``sent_bytes`` from one of
    the page's allocations to its peer, and the server's allocation received at least as much from its peer
    (``page_user``, ``server_user``: regexes of the usernames)."""

    def page_side(usage: list[PeerUsage]) -> bool:
        return any(re.fullmatch(page_user, u.username) and u.sb >= sent_bytes for u in usage)

    def server_side(usage: list[PeerUsage]) -> bool:
        return any(re.fullmatch(server_user, u.username) and u.rb >= sent_bytes for u in usage)

    usage = await wait_for_usage(turn, lambda usage: page_side(usage) and server_side(usage))
    assert page_side(usage), f"no allocation of {page_user!r} relayed the page's {sent_bytes} bytes: {usage}"
    assert server_side(usage), f"no allocation of {server_user!r} received the page's {sent_bytes} bytes: {usage}"


@pytest.mark.e2e
@pytest.mark.slow  # ~9 s: the page streams its clip at real time
async def test_microphone_page_captions_through_the_relay_only(
    fake_engine: CaptionEngine, rest_turn: TurnServer, browser: Browser
) -> None:
    async with running_server(fake_engine, ice=relay_config(rest_turn)) as (url, _), aiohttp.ClientSession() as http:
        async with http.post(f"{url}/rooms", json={"title": "behind NAT"}) as r:
            room = (await r.json())["room"]
        page = await browser.new_page()
        await page.add_init_script(RECORD_PEER_CONNECTIONS)
        await page.goto(f"{url}/?room={room}")
        await page.wait_for_function("window.liveCaptions && window.liveCaptions.state === 'idle'", timeout=30_000)
        await page.click("#toggle")
        await page.wait_for_selector("[data-sentence-id]", timeout=30_000)  # captions arrived
        page_user = rf"\d+:{room}"  # TURN REST username: the expiry and the room
        session = await page.evaluate("window.liveCaptions.session")
        sent = await relayed_audio_bytes(page, rest_turn, page_user)
        await page.click("#toggle")
        await page.wait_for_function("window.liveCaptions.state === 'idle'", timeout=30_000)
        await page.close()
    await assert_relayed(rest_turn, page_user, rf"\d+:{session}", sent)  # the server's own label: its session


@pytest.mark.e2e
@pytest.mark.slow  # ~9 s each: the page streams its clip at real time
@pytest.mark.parametrize(
    ("path", "stop"),
    [
        ("/kiosk?room={room}&mic=1&qr=0", "window.liveCaptions.mic.stop()"),
        # The widget's host page would stop it by postMessage; without one, its connection is closed as stop closes it
        # (a page that merely goes away leaves its TURN allocations to expire, and coturn logs them only then).
        ("/embed?room={room}&mic=1&autostart=1", "window.peerConnections.forEach((pc) => pc.close())"),
    ],
    ids=["kiosk", "widget"],
)
async def test_kiosk_and_widget_microphones_caption_through_the_relay_with_a_static_turn_user(
    fake_engine: CaptionEngine, static_turn: TurnServer, browser: Browser, path: str, stop: str
) -> None:
    config = relay_config(static_turn, static_user=("alice", "wonderland"))
    async with running_server(fake_engine, ice=config) as (url, _), aiohttp.ClientSession() as http:
        async with http.post(f"{url}/rooms", json={"title": "meeting room"}) as r:
            room = (await r.json())["room"]
        page = await browser.new_page()
        await page.add_init_script(RECORD_PEER_CONNECTIONS)
        await page.goto(url + path.format(room=room))
        await page.wait_for_selector("[data-sentence-id]", timeout=30_000)
        sent = await relayed_audio_bytes(page, static_turn, "alice")
        await page.evaluate(stop)
        await page.close()
    await assert_relayed(static_turn, "alice", "alice", sent)


async def test_whip_links_announce_the_relay_the_server_itself_uses(
    fake_engine: CaptionEngine, rest_turn: TurnServer
) -> None:
    """A WHIP publisher gets the TURN server in ``Link`` headers with time-limited credentials for the room (valid
    ones: the server's own allocation with the same secret succeeded), and its audio reaches the relay-only
    server."""
    async with running_server(fake_engine, ice=relay_config(rest_turn)) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(ArrayAudioTrack(pad(audio(CLIP), 0.3, 1.0)))
        await pc.setLocalDescription(await pc.createOffer())
        async with http.post(
            f"{url}/whip/{room.id}", data=pc.localDescription.sdp, headers={"Content-Type": "application/sdp"}
        ) as r:
            assert r.status == 201
            links, answer = r.headers.getall("Link"), await r.text()
        (link,) = links
        m = re.fullmatch(
            rf'<{re.escape(rest_turn.url)}>; rel="ice-server"; username="((\d+):{room.id})"; '
            r'credential="([^"]+)"; credential-type="password"',
            link,
        )
        assert m is not None, link
        assert stun_turn.turn_rest_credentials(SECRET, room.id, int(m[2])) == (m[1], m[3])
        assert all(" typ relay" in line for line in answer.splitlines() if line.startswith("a=candidate:"))
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        for _ in range(200):
            peers = list(app[PEERS].values())
            if peers and peers[0].ingest.audio_s > 1.0:
                break
            await asyncio.sleep(0.1)
        assert peers and peers[0].ingest.audio_s > 1.0, "no audio reached the server through the relay"
        await pc.close()
