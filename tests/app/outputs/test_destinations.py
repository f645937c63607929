"""Outputs cannot be turned against the server (app/outputs/destinations.py, failures.py): where an output may
connect is the operator's (``--output-allow``), checked when it is added and again at every connection; nothing a
destination sends reaches the editor or fills the server's memory; an OBS request times out whatever else the
socket carries; URLs' secrets stay out of errors and logs; the server runs a bounded number of outputs.

Nothing here contacts an address other than loopback: names are answered by ``StubResolver`` (never a DNS server),
refused addresses are refused before any connection (a policy test checks the refusal, never sends), and every
destination that answers is a stand-in on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from app.config import ServerConfig, build_parser, config_from_args
from app.outputs import OUTPUTS, DestinationPolicy, OutgoingCaption, TargetError, registry
from app.outputs.destinations import DestinationRefused, Refusal
from app.outputs.obs import MAX_MESSAGE_BYTES, ObsTarget
from app.outputs.youtube import YouTubeTarget
from app.rooms import SentenceRecord
from app.rooms.keys import ROOMS
from app.settings import SettingsError
from app.transcripts import break_lines
from engine import CaptionEngine
from engine.protocol import Word
from tests.support.api import call, new_room
from tests.support.obs_stand_in import PASSWORD, StandInObs
from tests.support.servers import running_server, serving
from tests.support.youtube_stand_in import stand_in

TOKEN = "server-token-for-destinations"
SECRET = "db_password=hunter2"  # what a destination says that the editor must never read
LOOPBACK = DestinationPolicy.from_settings(["127.0.0.1"])


class StubResolver(AbstractResolver):
    """Answers every name with ``addresses`` (changed by the test as it goes); none: the name does not resolve.
    Never asks a DNS server."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if not self.addresses:
            raise OSError(socket.EAI_NONAME, "Name or service not known")
        return [
            ResolveResult(
                hostname=host,
                host=a,
                port=port,
                family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                proto=0,
                flags=0,
            )
            for a in self.addresses
        ]

    async def close(self) -> None:
        pass


def caption(text: str = "Hello from the destinations test.") -> OutgoingCaption:
    return OutgoingCaption(1, 1, text, 1_700_000_000_000, 1_700_000_002_000, 0, "Speaker 1", False)


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.02)


async def lock(app: web.Application, room_id: str, text: str) -> None:
    """One sentence locked in the room, as a publisher's is."""
    room = await app[ROOMS].get(room_id)
    assert room is not None
    words = tuple(Word(w, i * 300, i * 300 + 280) for i, w in enumerate(text.split()))
    await room.commit_sentences([SentenceRecord(-1, "pub", text, 0, words[-1].end_ms, 0, words)])


async def output_in_state(base: str, editor: str, state: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The room's one output, once it is in ``state``."""
    deadline = time.monotonic() + timeout_s
    while True:
        [listed] = (await call("GET", base, editor))[1]["outputs"]
        if listed["state"] == state:
            return dict(listed)
        assert time.monotonic() < deadline, f"never {state}: {listed}"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def raw_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[int]:
    """A TCP server on loopback running ``handle`` per connection; yields its port."""

    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went: what these servers are for
        finally:
            writer.close()

    server = await asyncio.start_server(guarded, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- the policy, pure ---------------------------------------------------------------------------------------------
REFUSED = {
    Refusal.LOOPBACK: [
        "localhost",
        "LOCALHOST.",
        "captions.localhost",
        "127.0.0.1",
        "127.1",
        "2130706433",
        "0x7f.1",
        "0177.0.0.1",
        "127.8.9.10",
        "[::1]",
        "::ffff:127.0.0.1",
        "[::ffff:7f00:1]",
        "2002:7f00:1::",
    ],
    Refusal.UNSPECIFIED: ["0.0.0.0", "0", "0.1.2.3", "[::]"],
    Refusal.METADATA: ["169.254.169.254", "169.254.170.2", "[fd00:ec2::254]", "100.100.100.200", "168.63.129.16"],
    Refusal.LINK_LOCAL: ["169.254.1.1", "[fe80::1]", "[fe80::1%25eth0]"],
    Refusal.PRIVATE: [
        "10.0.0.1",
        "172.16.5.4",
        "172.31.255.255",
        "192.168.1.10",
        "100.64.0.1",
        "100.127.0.1",
        "[fc00::1]",
        "[fd12:3456::1]",
        "64:ff9b::a00:1",
    ],
    Refusal.MULTICAST: ["224.0.0.1", "239.255.255.250", "255.255.255.255", "[ff02::1]"],
    Refusal.RESERVED: [
        "240.0.0.1",
        "192.0.2.1",
        "198.18.0.1",
        "203.0.113.9",
        "[2001:db8::1]",
        "[::127.0.0.1]",
        "[2001::1]",
        "[64:ff9b:1::1]",
    ],
}


@pytest.mark.parametrize(("reason", "host"), [(r, h) for r, hosts in REFUSED.items() for h in hosts])
def test_every_refused_class_is_refused_whatever_its_spelling(reason: Refusal, host: str) -> None:
    with pytest.raises(DestinationRefused) as refused:
        DestinationPolicy().check_without_lookup(host, 4455)
    assert refused.value.reason is reason and str(refused.value).endswith(reason.value)


def test_public_unicast_addresses_pass_and_names_need_a_lookup() -> None:
    policy = DestinationPolicy()
    for host in ("8.8.8.8", "[2606:4700:4700::1111]", "64:ff9b::808:808", "2002:808:808::1"):
        assert policy.check_without_lookup(host, 443) is True, host
    assert policy.check_without_lookup("upload.youtube.com", 80) is False


def test_allowed_entries_open_exactly_those_destinations() -> None:
    policy = DestinationPolicy.from_settings(["192.168.1.0/24,obs.lan:4455", "127.0.0.1:4455", "[::1]"])
    for host, port in (
        ("192.168.1.77", 9),
        ("obs.lan", 4455),
        ("OBS.LAN.", 4455),
        ("127.0.0.1", 4455),
        ("[::ffff:127.0.0.1]", 4455),
        ("[::1]", 80),
    ):
        assert policy.check_without_lookup(host, port) is True, (host, port)
    for host, port in (
        ("192.168.2.1", 4455),
        ("127.0.0.1", 4456),
        ("127.0.0.2", 4455),
        ("localhost", 4455),
        ("10.0.0.1", 4455),
    ):
        with pytest.raises(DestinationRefused):
            policy.check_without_lookup(host, port)
    assert policy.check_without_lookup("obs.lan", 80) is False, "another port of an allowed name: checked as any"
    # an allowed address is allowed whichever name leads to it
    policy.check_address("192.168.1.5", 4455, name="anything.example")
    with pytest.raises(DestinationRefused):
        policy.check_address("192.168.7.5", 4455, name="anything.example")


@pytest.mark.parametrize(
    "bad", ["", "127.1", "2130706433", "obs lan", "[::1", "[::1]x", "10.0.0.0/33", "h:0", "h:65536", "h:port", "-h.lan"]
)
def test_bad_allow_entries_are_refused_naming_them(bad: str) -> None:
    with pytest.raises(ValueError):
        DestinationPolicy.from_settings([bad])


def test_output_allow_is_a_flag_and_a_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("LIVE_CAPTIONS_")]:
        monkeypatch.delenv(name)
    args = ["--output-allow", "192.168.1.0/24, OBS.lan:4455", "--output-allow", "[::1]:4455"]
    config = config_from_args(build_parser().parse_args(args))
    assert config.output_allow == ("192.168.1.0/24,obs.lan:4455", "[::1]:4455")
    assert ServerConfig().output_allow == ()
    monkeypatch.setenv("LIVE_CAPTIONS_OUTPUT_ALLOW", "127.0.0.1:4455,10.1.0.0/16")
    assert config_from_args(build_parser().parse_args([])).output_allow == ("127.0.0.1:4455", "10.1.0.0/16")
    monkeypatch.setenv("LIVE_CAPTIONS_OUTPUT_ALLOW", "127.1")
    with pytest.raises(SettingsError) as refused:
        build_parser().parse_args([])
    assert str(refused.value).startswith("LIVE_CAPTIONS_OUTPUT_ALLOW: output destination '127.1'")
    with pytest.raises(ValueError):
        ServerConfig(output_allow=("obs lan",))


# ---- at creation, over HTTP ---------------------------------------------------------------------------------------
@pytest.fixture
async def strict_server(fake_engine: CaptionEngine, tmp_path: Path) -> AsyncIterator[tuple[str, web.Application]]:
    """A server without --output-allow: outputs reach public addresses only."""
    async with running_server(fake_engine, auth_token=TOKEN, db_path=str(tmp_path / "d.db")) as served:
        yield served


async def test_an_output_to_each_refused_class_gets_400(strict_server: tuple[str, web.Application]) -> None:
    url, _ = strict_server
    made = await new_room(url, TOKEN)
    base, editor = f"{url}/rooms/{made['room']}/outputs", made["editor_token"]
    for reason, hosts in REFUSED.items():
        for host in hosts:
            host = f"[{host}]" if ":" in host and not host.startswith("[") else host  # an IPv6 URL's brackets
            for body in (
                {"kind": "youtube", "url": f"http://{host}/closedcaption?cid=x"},
                {"kind": "obs", "url": f"ws://{host}:4455"},
            ):
                status, answer = await call("POST", base, editor, body)
                assert status == 400 and answer["error"]["code"] == "bad_message", (body, answer)
                message = answer["error"]["message"]
                assert "outbound policy" in message and reason.value in message, (body, message)
    assert (await call("GET", base, editor))[1]["outputs"] == []


async def test_a_name_is_checked_at_creation_and_again_at_every_connection(
    strict_server: tuple[str, web.Application], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, app = strict_server
    dns = StubResolver()  # nothing resolves: as on a server without DNS for public names
    monkeypatch.setattr(app[OUTPUTS], "policy", DestinationPolicy(resolver=lambda: dns))
    made = await new_room(url, TOKEN)
    base, editor = f"{url}/rooms/{made['room']}/outputs", made["editor_token"]
    public = {"kind": "youtube", "url": "http://upload.youtube.com/closedcaption?cid=stream-key"}
    assert (await call("POST", base, editor, public))[0] == 201, "a public ingestion name that does not resolve"
    dns.addresses = ["93.184.215.14", "10.1.2.3"]  # every address counts: one private one refuses the name
    status, answer = await call("POST", base, editor, {**public, "url": "http://mixed.example/closedcaption?cid=x"})
    assert status == 400 and Refusal.PRIVATE.value in answer["error"]["message"]
    other = await new_room(url, TOKEN)
    base, editor = f"{url}/rooms/{other['room']}/outputs", other["editor_token"]
    async with stand_in() as youtube:  # where a rebound name would lead: loopback, so nothing leaves the machine
        port = youtube.url.rsplit(":", 1)[1]
        dns.addresses = ["93.184.215.14"]  # public when the output is added...
        rebinding = {"kind": "youtube", "url": f"http://rebind.example:{port}/closedcaption?cid=x"}
        assert (await call("POST", base, editor, rebinding))[0] == 201
        dns.addresses = ["127.0.0.1"]  # ...this machine when it connects
        await lock(app, other["room"], "Nobody may read this one.")
        listed = await output_in_state(base, editor, "failed")
        assert listed["last_error"] == f"refused by the server's outbound policy: {Refusal.LOOPBACK.value}"
        assert youtube.posts == [] and youtube.attempts == 0 and not youtube.refused
    assert "rebind.example" in dns.asked


async def test_obs_on_an_allowed_address_works_and_no_other_port(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    obs = StandInObs(PASSWORD)
    await obs.start()
    try:
        async with running_server(
            fake_engine, auth_token=TOKEN, db_path=str(tmp_path / "a.db"), output_allow=(f"127.0.0.1:{obs.port}",)
        ) as (url, app):
            made = await new_room(url, TOKEN)
            base, editor = f"{url}/rooms/{made['room']}/outputs", made["editor_token"]
            other = {"kind": "obs", "url": f"ws://127.0.0.1:{closed_port()}"}
            assert (await call("POST", base, editor, other))[0] == 400, "the allowed port only"
            assert (await call("POST", base, editor, {"kind": "obs", "url": obs.url, "password": PASSWORD}))[0] == 201
            await lock(app, made["room"], "Captions into OBS on an allowed address.")
            await until(lambda: bool(obs.captions), what="the caption in OBS")
    finally:
        await obs.stop()
    assert [" ".join(c.split()) for c in obs.captions] == ["Captions into OBS on an allowed address."]


async def test_a_target_refuses_a_rebound_name_before_connecting() -> None:
    obs = StandInObs(None)
    await obs.start()
    try:
        dns = StubResolver("127.0.0.1")
        target = ObsTarget(f"ws://obs.example:{obs.port}", None, policy=DestinationPolicy(resolver=lambda: dns))
        with pytest.raises(TargetError) as refused:
            await target.send(caption())
        await target.close()
        assert refused.value.permanent and "outbound policy" in str(refused.value)
        assert obs.protocols == [] and dns.asked == ["obs.example"], "refused before any connection"
        youtube = YouTubeTarget(f"http://[::ffff:127.0.0.1]:{obs.port}/x", break_lines)  # a literal: no lookup
        with pytest.raises(TargetError) as refused:
            await youtube.send(caption())
        await youtube.close()
        assert refused.value.permanent and Refusal.LOOPBACK.value in str(refused.value) and obs.protocols == []
    finally:
        await obs.stop()


# ---- redirects ----------------------------------------------------------------------------------------------------
async def test_no_output_follows_a_redirect() -> None:
    obs = StandInObs(None)
    await obs.start()

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(obs.url.replace("ws://", "http://") + "/")  # aiohttp would follow it to OBS

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    try:
        async with serving(app) as base:
            target = ObsTarget(base.replace("http://", "ws://"), None, policy=LOOPBACK)
            with pytest.raises(TargetError) as refused:
                await target.send(caption())
            await target.close()
            assert refused.value.permanent and "HTTP status 302" in str(refused.value)
            youtube = YouTubeTarget(base + "/closedcaption?cid=x", break_lines, policy=LOOPBACK)
            with pytest.raises(TargetError) as refused:
                await youtube.send(caption())
            await youtube.close()
            assert refused.value.permanent and "redirects are not followed" in str(refused.value)
    finally:
        await obs.stop()
    assert obs.protocols == [], "OBS at the redirect's end never heard of it"


# ---- nothing from a destination reaches the editor -----------------------------------------------------------------
async def _http_secret(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: bytes) -> None:
    await reader.readuntil(b"\r\n\r\n")
    body = f"<h1>{SECRET}</h1>".encode()
    writer.write(
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: text/html\r\nX-Leak: "
        + SECRET.encode()
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    await writer.drain()
    await asyncio.sleep(0.5)


async def _garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(f"{SECRET} 5.7.44-log mysql_native_password\r\n\r\n".encode())  # a database's banner
    await writer.drain()
    await asyncio.sleep(0.5)


async def _ws_peer(request: web.Request, mode: str) -> web.WebSocketResponse:
    """A WebSocket server that is not quite OBS: it says ``SECRET`` the way ``mode`` says."""
    ws = web.WebSocketResponse(protocols=("obswebsocket.json",))
    await ws.prepare(request)
    if mode == "text":
        await ws.send_str(SECRET)
    elif mode == "close":
        await ws.close(code=4242, message=SECRET.encode())
    elif mode == "comment":  # an OBS that refuses the caption with words of its own
        await ws.send_json({"op": 0, "d": {"obsWebSocketVersion": SECRET, "rpcVersion": 1}})
        await ws.receive()
        await ws.send_json({"op": 2, "d": {"negotiatedRpcVersion": 1}})
        async for msg in ws:
            d = json.loads(msg.data)["d"]
            ok = d["requestType"] != "SendStreamCaption"
            await ws.send_json(
                {
                    "op": 7,
                    "d": {
                        "requestId": d["requestId"],
                        "requestType": d["requestType"],
                        "requestStatus": {"result": ok, "code": 100 if ok else 702, "comment": SECRET},
                        "responseData": {"obsVersion": SECRET, "outputActive": True},
                    },
                }
            )
    return ws


def _ws_handler(mode: str) -> Callable[[web.Request], Awaitable[web.WebSocketResponse]]:
    async def handle(request: web.Request) -> web.WebSocketResponse:
        return await _ws_peer(request, mode)

    return handle


@contextlib.asynccontextmanager
async def secret_peers() -> AsyncIterator[dict[str, str]]:
    """Loopback destinations that each answer with ``SECRET`` in their own way: name -> base URL (host:port)."""

    async def http_500(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _http_secret(r, w, b"500 Internal Server Error")

    async def http_200(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _http_secret(r, w, b"200 OK")

    app = web.Application()
    for mode in ("text", "close", "comment"):
        app.router.add_get(f"/{mode}", _ws_handler(mode))
    async with (
        raw_server(http_500) as p500,
        raw_server(http_200) as p200,
        raw_server(_garbage) as pdb,
        serving(app) as ws_base,
    ):
        ws = ws_base.removeprefix("http://")
        yield {
            "http 500": f"127.0.0.1:{p500}",
            "http 200": f"127.0.0.1:{p200}",
            "database": f"127.0.0.1:{pdb}",
            "closed": f"127.0.0.1:{closed_port()}",
            "ws text": f"{ws}/text",
            "ws close": f"{ws}/close",
            "ws comment": f"{ws}/comment",
        }


YOUTUBE_ERRORS = {
    "http 500": "HTTP status 500",
    "http 200": None,
    "database": "the answer is not HTTP",
    "closed": "connection refused",
}
OBS_ERRORS = {
    "http 500": "not obs-websocket (HTTP status 500 to the WebSocket handshake)",
    "http 200": "not obs-websocket (HTTP status 200 to the WebSocket handshake)",
    "database": "OBS is not reachable: the answer is not HTTP",
    "closed": "OBS is not reachable: connection refused",
    "ws text": "OBS sent something that is not obs-websocket",
    "ws close": "the connection to OBS dropped while waiting for Hello (close code 4242)",
    "ws comment": "OBS refused the caption (code 702)",
}


async def test_last_error_never_holds_a_byte_the_peer_sent(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with secret_peers() as peers:
        for name, expected in YOUTUBE_ERRORS.items():
            youtube = YouTubeTarget(f"http://{peers[name]}/closedcaption?cid=x", break_lines, policy=LOOPBACK)
            try:
                await youtube.send(caption())
                error = None
            except TargetError as exc:
                error = str(exc)
            finally:
                await youtube.close()
            assert error == expected, name
        for name, expected in OBS_ERRORS.items():
            obs = ObsTarget(f"ws://{peers[name]}", None, policy=LOOPBACK, response_timeout_s=2)
            with pytest.raises(TargetError) as failed:
                await obs.send(caption())
            assert SECRET not in json.dumps(obs.status()), "obs_version: a version number or nothing"
            await obs.close()
            assert str(failed.value) == expected, name
    assert "hunter2" not in caplog.text


async def test_the_editor_sees_classes_not_what_the_destination_said(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    async with (
        secret_peers() as peers,
        running_server(fake_engine, auth_token=TOKEN, output_allow=("127.0.0.1",), db_path=str(tmp_path / "e.db")) as (
            url,
            app,
        ),
    ):
        rooms = {}
        for name in ("http 500", "database", "closed"):
            made = await new_room(url, TOKEN)
            rooms[name] = (f"{url}/rooms/{made['room']}/outputs", made["editor_token"])
            assert (
                await call(
                    "POST",
                    rooms[name][0],
                    made["editor_token"],
                    {"kind": "youtube", "url": f"http://{peers[name]}/closedcaption?cid=x"},
                )
            )[0] == 201
            await lock(app, made["room"], "A caption for a destination that is no YouTube.")
        for name, (base, editor) in rooms.items():
            listed = await output_in_state(base, editor, "retrying")
            assert listed["last_error"] == YOUTUBE_ERRORS[name] and "hunter2" not in json.dumps(listed), name
            assert (await call("DELETE", f"{base}/{listed['id']}", editor))[0] == 200


async def test_a_huge_error_body_costs_the_server_no_memory() -> None:
    size = 100 * 1024 * 1024

    async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: "
            + str(size).encode()
            + b"\r\n\r\n"
        )
        sent = 0
        while sent < size:
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)

    chunk = (SECRET.encode() + b" ") * 3200  # 64 KB, made once: the stand-in's own memory is not measured
    async with raw_server(huge) as port:
        youtube = YouTubeTarget(f"http://127.0.0.1:{port}/closedcaption?cid=x", break_lines, policy=LOOPBACK)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            with pytest.raises(TargetError) as failed:
                await youtube.send(caption())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            await youtube.close()
    assert str(failed.value) == "HTTP status 500"
    assert peak - before < 5 * 1024 * 1024, f"{(peak - before) / 2**20:.1f} MiB for one refused post"


async def test_obs_messages_are_small() -> None:
    async def big_hello(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=("obswebsocket.json",))
        await ws.prepare(request)
        await ws.send_json({"op": 0, "d": {"rpcVersion": 1, "padding": "x" * (2 * MAX_MESSAGE_BYTES)}})
        await ws.receive()
        return ws

    app = web.Application()
    app.router.add_get("/", big_hello)
    async with serving(app) as base:
        obs = ObsTarget(base.replace("http://", "ws://"), None, policy=LOOPBACK)
        with pytest.raises(TargetError) as failed:
            await obs.send(caption())
        await obs.close()
    assert str(failed.value).startswith("the connection to OBS dropped while waiting for Hello")


# ---- timeouts that time out ---------------------------------------------------------------------------------------
async def test_an_obs_that_chatters_but_never_answers_fails_within_the_deadline() -> None:
    obs = StandInObs(PASSWORD)
    obs.chatter_s = 0.05  # ten events for every half second the client waits
    await obs.start()
    target = ObsTarget(obs.url, PASSWORD, response_timeout_s=0.5, policy=LOOPBACK)
    began = time.monotonic()
    try:
        async with asyncio.timeout(5):
            with pytest.raises(TargetError) as failed:
                await target.send(caption())
    finally:
        await target.close()
        await obs.stop()
    assert time.monotonic() - began < 2
    assert not failed.value.permanent and str(failed.value) == "OBS did not answer GetVersion within 0.5 s"


# ---- secrets in URLs ----------------------------------------------------------------------------------------------
async def test_an_obs_urls_credentials_never_show(
    fake_engine: CaptionEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = ("PASS-s3cret", "K-s3cret")
    obs = StandInObs(None)
    await obs.start()
    try:
        target = ObsTarget(f"ws://user:PASS-s3cret@127.0.0.1:{obs.port}/?key=K-s3cret", None, policy=LOOPBACK)
        await target.send(caption())
        await target.close()
        assert obs.captions and "obs ws://REDACTED@127.0.0.1" in caplog.text
    finally:
        await obs.stop()
    with pytest.raises(ValueError) as bad:
        ObsTarget("http://user:PASS-s3cret@127.0.0.1/?key=K-s3cret", None)
    assert not any(s in str(bad.value) for s in secrets)
    async with running_server(
        fake_engine, auth_token=TOKEN, output_allow=("127.0.0.1",), db_path=str(tmp_path / "c.db")
    ) as (url, app):
        made = await new_room(url, TOKEN)
        base, editor = f"{url}/rooms/{made['room']}/outputs", made["editor_token"]
        body = {"kind": "obs", "url": f"ws://user:PASS-s3cret@127.0.0.1:{closed_port()}/?key=K-s3cret"}
        assert (await call("POST", base, editor, body))[0] == 201
        await lock(app, made["room"], "Where is OBS?")
        listed = await output_in_state(base, editor, "retrying")
        assert listed["last_error"] == "OBS is not reachable: connection refused"
        assert listed["url"].startswith("ws://REDACTED@127.0.0.1:") and listed["url"].endswith("/?key=REDACTED")
        assert not any(s in json.dumps(listed) for s in secrets)
    assert "connection refused" in caplog.text and not any(s in caplog.text for s in secrets)


# ---- a server-wide limit ------------------------------------------------------------------------------------------
async def test_the_server_runs_a_bounded_number_of_outputs(
    fake_engine: CaptionEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "MAX_SERVER_OUTPUTS", 3)  # as 64, without 64 outputs
    async with running_server(
        fake_engine, auth_token=TOKEN, output_allow=("127.0.0.1",), db_path=str(tmp_path / "l.db")
    ) as (url, _):
        first, second = await new_room(url, TOKEN), await new_room(url, TOKEN)
        body = {"kind": "youtube", "url": f"http://127.0.0.1:{closed_port()}/closedcaption?cid=x"}
        for made in (first, first, second):
            assert (await call("POST", f"{url}/rooms/{made['room']}/outputs", made["editor_token"], body))[0] == 201
        status, answer = await call("POST", f"{url}/rooms/{second['room']}/outputs", second["editor_token"], body)
        assert status == 409 and answer["error"]["code"] == "too_many_outputs"
        assert "this server runs at most 3 outputs at once" in answer["error"]["message"]
        assert (await call("POST", f"{url}/rooms/{first['room']}/end", first["editor_token"]))[0] == 200
        base = f"{url}/rooms/{first['room']}/outputs"
        deadline = time.monotonic() + 10
        while {o["state"] for o in (await call("GET", base, first["editor_token"]))[1]["outputs"]} != {"stopped"}:
            assert time.monotonic() < deadline, "the ended room's outputs never stopped"
            await asyncio.sleep(0.05)
        for _ in range(2):  # stopped outputs hold nothing and count no more
            status, answer = await call("POST", f"{url}/rooms/{second['room']}/outputs", second["editor_token"], body)
            assert status == 201, answer
