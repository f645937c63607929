"""A throwaway PostgreSQL server for tests and benches (rooms shared by several front ends): Debian's
``postgresql`` binaries, ``initdb`` into a temporary folder, listening on 127.0.0.1 at a free port (and a Unix socket
in that folder), trust authentication (loopback only), stopped and deleted afterwards. Run as root, the server runs
as the ``postgres`` user (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

SUPERUSER = "postgres"


def binaries() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` that has ``initdb`` and ``pg_ctl``, or None."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    found = [b for b in found if (b / "pg_ctl").exists()]
    return max(found, key=lambda b: int(b.parent.name)) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(bin_dir: Path) -> Iterator[str]:
    """Start a server; yields the URL of its ``postgres`` database."""
    root = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(prefix="live-captions-pg-"))
    run_as: list[str] = []
    if root:
        user = pwd.getpwnam(SUPERUSER)
        os.chown(folder, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", SUPERUSER, "--"]
    data, logfile = folder / "data", folder / "server.log"
    port = _free_port()
    subprocess.run(
        [
            *run_as,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={folder} -c fsync=off"
    started = subprocess.run(
        [
            *run_as,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(logfile),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        ],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        log = logfile.read_text() if logfile.exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"pg_ctl start failed: {started.stdout}{started.stderr}{log}")
    try:
        yield f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True
        )
        shutil.rmtree(folder, ignore_errors=True)


def new_database(server_url: str) -> str:
    """A fresh, empty database on the server; returns its URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + f"/{name}"
