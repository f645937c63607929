"""The ICE servers handed to pages, WHIP clients and the server itself: TURN REST credentials, static ones, the
page configuration (``GET /ice``), the flags, and configurations that cannot work."""

from __future__ import annotations

import pytest
from aiohttp import ClientSession

from app.__main__ import main
from app.config import IceConfig, TransportPolicy, build_parser, config_from_args
from app.webrtc import stun_turn
from engine.stream.engine import CaptionEngine
from tests.support.servers import running_server

NOW_S = 1_700_000_000


def test_turn_rest_credentials_are_what_coturn_computes() -> None:
    # Expected password from OpenSSL: printf '1700000000:room-1234' | openssl dgst -sha1 -hmac north -binary | base64
    assert stun_turn.turn_rest_credentials("north", "room-1234", 1_700_000_000) == (
        "1700000000:room-1234",
        "pOy98nSpSWqk832XuN5bGMeBPg8=",
    )


def test_time_limited_credentials_expire_after_the_lifetime_and_name_the_label() -> None:
    config = IceConfig(
        servers=("stun:stun.example.org:3478", "turn:turn.example.org:3478?transport=tcp"),
        turn_secret="north",
        turn_ttl_s=3600,
    )
    stun, turn = stun_turn.ice_servers(config, label="room-1234", now_s=NOW_S)
    assert stun == stun_turn.IceServer("stun:stun.example.org:3478")  # STUN needs no credentials
    assert turn.urls == "turn:turn.example.org:3478?transport=tcp"
    assert turn.username == f"{NOW_S + 3600}:room-1234"
    assert (turn.username, turn.credential) == stun_turn.turn_rest_credentials("north", "room-1234", NOW_S + 3600)
    later = stun_turn.ice_servers(config, label="room-1234", now_s=NOW_S + 60)[1]
    assert later.username == f"{NOW_S + 3660}:room-1234" and later.credential != turn.credential
    # A label that is no plain id (a ':' would shift the username's fields) is replaced, never passed on.
    for bad in (None, "", "a:b", "x" * 65, "room 1"):
        assert stun_turn.ice_servers(config, label=bad, now_s=NOW_S)[1].username == f"{NOW_S + 3600}:live-captions"


def test_static_credentials_are_used_as_given_even_with_a_secret() -> None:
    config = IceConfig(
        servers=("turn:alice:s3:cret@turn.example.org", "turn:turn2.example.org:3479"), turn_secret="north"
    )
    static, rest = stun_turn.ice_servers(config, label="r" * 8, now_s=NOW_S)
    assert static == stun_turn.IceServer("turn:turn.example.org", "alice", "s3:cret")
    assert rest.urls == "turn:turn2.example.org:3479" and rest.username == f"{NOW_S + 86400}:{'r' * 8}"


def test_page_config_and_link_headers_come_from_the_same_list() -> None:
    config = IceConfig(
        servers=("stun:stun.example.org", "turn:turn.example.org"),
        turn_secret="north",
        transport_policy=TransportPolicy.RELAY,
    )
    servers = stun_turn.ice_servers(config, label="room-1234", now_s=NOW_S)
    assert stun_turn.page_config(config, label="room-1234", now_s=NOW_S) == {
        "iceServers": [
            {"urls": "stun:stun.example.org"},
            {"urls": "turn:turn.example.org", "username": servers[1].username, "credential": servers[1].credential},
        ],
        "iceTransportPolicy": "relay",
    }
    assert stun_turn.link_headers(servers) == [
        '<stun:stun.example.org>; rel="ice-server"',
        f'<turn:turn.example.org>; rel="ice-server"; username="{servers[1].username}"; '
        f'credential="{servers[1].credential}"; credential-type="password"',
    ]
    assert stun_turn.page_config(IceConfig()) == {"iceServers": [], "iceTransportPolicy": "all"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"servers": ("http://turn.example.org",)}, "bad ICE server URL"),
        ({"servers": ("stun:user:pass@stun.example.org",)}, "bad ICE server URL"),
        ({"servers": ("turn:u:p@[2001:db8::1]:3478",)}, "bad ICE server URL"),
        ({"servers": ("turns:u:p@turn.example.org?transport=udp",)}, "bad ICE server URL"),
        ({"servers": ("turn:turn.example.org:99999",)}, "out of range"),
        ({"servers": ("turn:turn.example.org",)}, "has no credentials: give turn:user:pass@host:port or --turn-secret"),
        ({"servers": ("stun:stun.example.org",), "transport_policy": "relay"}, "relay needs a TURN server"),
        ({"transport_policy": "public"}, "expected 'all' or 'relay'"),
        ({"turn_ttl_s": 0}, "must be positive"),
    ],
)
def test_configurations_that_cannot_work_are_refused(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        IceConfig(**config)  # type: ignore[arg-type]


def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(
        [
            "--ice-server",
            "turn:turn.example.org:3478",
            "--turn-secret",
            "north",
            "--turn-ttl-s",
            "600",
            "--ice-transport-policy",
            "relay",
        ]
    )
    ice = config_from_args(args).ice
    assert (ice.servers, ice.turn_secret, ice.turn_ttl_s, ice.transport_policy) == (
        ("turn:turn.example.org:3478",),
        "north",
        600,
        "relay",
    )
    monkeypatch.setenv("LIVE_CAPTIONS_ICE_SERVERS", "stun:stun.example.org,turn:turn.example.org")
    monkeypatch.setenv("LIVE_CAPTIONS_TURN_SECRET", "north")
    monkeypatch.setenv("LIVE_CAPTIONS_ICE_TRANSPORT_POLICY", "relay")
    ice = config_from_args(build_parser().parse_args([])).ice
    assert ice.servers == ("stun:stun.example.org", "turn:turn.example.org") and ice.transport_policy == "relay"


def test_the_server_refuses_to_start_with_flags_that_cannot_work(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--ice-server", "turn:turn.example.org", "--db", ":memory:"])
    assert exit_info.value.code == 2
    assert "has no credentials" in capsys.readouterr().err


async def test_pages_get_the_servers_configuration_with_fresh_credentials(fake_engine: CaptionEngine) -> None:
    config = IceConfig(hosts=("127.0.0.1",), loopback_only=True, servers=("turn:127.0.0.1:3478",), turn_secret="north")
    async with running_server(fake_engine, ice=config, auth_token="tok") as (url, _), ClientSession() as http:
        async with http.get(f"{url}/ice") as r:
            assert r.status == 401 and (await r.json())["error"]["code"] == "unauthorized"
        async with http.get(f"{url}/ice?room=room-1234", headers={"Authorization": "Bearer tok"}) as r:
            assert r.status == 200 and r.headers["Cache-Control"] == "no-store"
            body = await r.json()
    assert body["iceTransportPolicy"] == "all"
    (turn,) = body["iceServers"]
    expiry, label = turn["username"].split(":")
    assert turn["urls"] == "turn:127.0.0.1:3478" and label == "room-1234"
    assert stun_turn.turn_rest_credentials("north", label, int(expiry)) == (turn["username"], turn["credential"])
