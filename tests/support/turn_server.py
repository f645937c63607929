"""A real TURN server for tests: Debian's coturn (``turnserver``) on 127.0.0.1 with a free port, relaying on
127.0.0.1 only, its configuration, database and log in a temporary folder. Nothing else is listened on or
contacted (no CLI, no TLS/DTLS listeners, no NAT-discovery port, the system's /etc/turnserver.conf is not read).

Its log tells what went through the relay: when an allocation ends, coturn writes ``peer usage`` with the packets
and bytes the allocation relayed to and from its peers, per username (TURN REST usernames are
``<expiry>:<label>``).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

TURNSERVER = shutil.which("turnserver")
REALM = "live-captions.test"
_USAGE = re.compile(r"peer usage: realm=<[^>]*>, username=<([^>]*)>, rp=(\d+), rb=(\d+), sp=(\d+), sb=(\d+)")


@dataclass(frozen=True)
class PeerUsage:
    """What one allocation relayed: packets and bytes received from (``rp``/``rb``) and sent to (``sp``/``sb``)
    its peers."""

    username: str
    rp: int
    rb: int
    sp: int
    sb: int


@dataclass(frozen=True)
class TurnServer:
    port: int
    log: Path
    process: asyncio.subprocess.Process

    @property
    def url(self) -> str:
        return f"turn:127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def peer_usage(self) -> list[PeerUsage]:
        """Every ended allocation's relayed traffic, in the order coturn logged them."""
        return [PeerUsage(m[1], *(int(g) for g in m.groups()[1:])) for m in _USAGE.finditer(self.log_text())]


def _free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (coturn listens on both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port on 127.0.0.1")


def _stun_answers(port: int, timeout_s: float) -> bool:
    """Whether a STUN Binding request to 127.0.0.1:port is answered (coturn is up)."""
    request = struct.pack("!HHI12s", 0x0001, 0, 0x2112A442, secrets.token_bytes(12))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout_s)
        sock.sendto(request, ("127.0.0.1", port))
        try:
            data = sock.recv(2048)
        except (TimeoutError, ConnectionRefusedError):
            return False
    return data[:2] == b"\x01\x01" and data[8:20] == request[8:20]


def _empty_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")


@asynccontextmanager
async def coturn(
    folder: Path, *, secret: str | None = None, user: tuple[str, str] | None = None, start_timeout_s: float = 15.0
) -> AsyncIterator[TurnServer]:
    """Run coturn until the block ends. ``secret``: TURN REST credentials (``use-auth-secret``); ``user``: one
    static long-term user. Exactly one of the two."""
    if TURNSERVER is None:
        raise RuntimeError("turnserver (Debian package coturn) is not installed")
    if (secret is None) == (user is None):
        raise ValueError("give either secret or user")
    config = folder / "turnserver.conf"
    await asyncio.to_thread(_empty_file, config)  # read instead of /etc/turnserver.conf
    if secret is not None:
        auth = ["--use-auth-secret", f"--static-auth-secret={secret}"]
    else:
        assert user is not None  # (one of the two, as checked above)
        auth = ["--lt-cred-mech", f"--user={user[0]}:{user[1]}"]
    port = _free_port()
    log = folder / "turn.log"
    process = await asyncio.create_subprocess_exec(
        TURNSERVER,
        "-c",
        str(config),
        "-n",
        "--no-cli",
        f"--listening-port={port}",
        "--listening-ip=127.0.0.1",
        "--relay-ip=127.0.0.1",
        "--allow-loopback-peers",
        f"--realm={REALM}",
        *auth,
        "--fingerprint",
        "--no-tls",
        "--no-dtls",
        "--no-rfc5780",
        "--no-tcp-relay",
        "--no-multicast-peers",
        f"--userdb={folder / 'turndb'}",
        f"--pidfile={folder / 'turnserver.pid'}",
        f"--log-file={log}",
        "--simple-log",
        "--no-stdout-log",
        "--verbose",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    server = TurnServer(port, log, process)
    try:
        deadline = asyncio.get_running_loop().time() + start_timeout_s
        while not await asyncio.to_thread(_stun_answers, port, 0.2):
            if process.returncode is not None or asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"coturn did not start on 127.0.0.1:{port}:\n{server.log_text()[-2000:]}")
        yield server
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def wait_for_usage(
    server: TurnServer, done: Callable[[list[PeerUsage]], bool], timeout_s: float = 20.0
) -> list[PeerUsage]:
    """The ``peer usage`` records once ``done(records)`` holds, or whatever is there at the timeout. An allocation
    is logged when its client releases it (about a second after its peer connection closed) or when it expires."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    # Polled: another process writes the log.
    while not done(usage := server.peer_usage()) and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    return usage
