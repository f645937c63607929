"""The event loop is watched: a quick-tier test fails when the server's or the engine's code (``app/``, ``engine/``)
makes a blocking call on the thread that runs the event loop: file or socket I/O, ``time.sleep``, a lock wait,
SQLite (blockbuster wraps each of them; a call is caught when any frame of its stack is in ``app/`` or
``engine/``, so a blocking callback a test hands the server is caught too). What a blocked loop costs: every
session's audio, every viewer's captions and ``/health`` wait for it.

``LOOP_MAY_BLOCK`` lists the calls let through, each with why it may block: none runs while sessions are live.
A test that blocks the loop on purpose (to measure what the server does about it) is marked ``blocks_loop``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from blockbuster import blockbuster_ctx


@dataclass(frozen=True)
class MayBlock:
    """Blocking calls ``calls`` (empty: every call blockbuster watches) are let through inside ``function`` of
    ``file`` (a path suffix) and everything it calls, because ``why``."""

    calls: tuple[str, ...]
    file: str
    function: str
    why: str


LOOP_MAY_BLOCK = (
    MayBlock(
        ("os.stat",),
        "engine/audio/vad.py",
        "silero_model_path",
        "finds the VAD model's file once, as the engine is built at start-up (before the server listens)",
    ),
    MayBlock(
        ("os.stat", "os.listdir", "io.BufferedReader.read", "io.TextIOWrapper.read"),
        "app/webrtc/patches.py",
        "installed_version",
        "reads aiortc's installed version once, as the patches are installed at start-up",
    ),
    MayBlock(
        ("os.stat", "os.readlink"),
        "app/resources.py",
        "_folder",
        "finds the pages' folders once per process, as the app is made (then cached)",
    ),
    MayBlock(
        (),
        "app/server.py",
        "create_app",
        "the app is made once, before the server listens: aiohttp's static route resolves its folder, the WebRTC "
        "patches read aiortc's version and load libopus",
    ),
    MayBlock(
        (),
        "app/rooms/store/__init__.py",
        "open_store",
        "the store is opened once, at start-up, importing its driver (psycopg) on first use",
    ),
    MayBlock(
        (),
        "app/webrtc/opus.py",
        "load_libopus",
        "finds and loads libopus once per process (cached), as the patches are installed at start-up",
    ),
    MayBlock(
        ("threading.Lock.acquire", "threading.Lock.acquire_lock"),
        "aiortc/rtcrtpreceiver.py",
        "__stop_decoder",
        "aiortc joins its decoder thread as a connection closes, having told it to stop (its design; the "
        "thread ends at once)",
    ),
    MayBlock(
        ("io.BufferedReader.read",),
        "engine/audio/pcm.py",
        "load_wav",
        "the command line's and the tests' WAV reader: the server never reads a WAV file on its loop",
    ),
)


@contextlib.contextmanager
def watched_loop() -> Iterator[None]:
    """Within it, a blocking call on a running event loop's thread from ``app/`` or ``engine/`` raises
    ``blockbuster.BlockingError`` (``LOOP_MAY_BLOCK`` excepted)."""
    with blockbuster_ctx(["app", "engine"]) as watch:
        for allowed in LOOP_MAY_BLOCK:
            for call in allowed.calls or tuple(watch.functions):
                watch.functions[call].can_block_in(allowed.file, allowed.function)
        yield
