"""A stop that loses no words: what the server does between SIGTERM (systemd's stop, a Kubernetes rollout,
``docker stop``) or Ctrl-C and its exit.

aiohttp stops listening first, then runs the application's shutdown handlers, then waits for handlers still
running, then the cleanup. ``drain`` is the first shutdown handler: it refuses new sessions and asks every live
caption stream to finish as a client's ``stop`` would (the open sentence is decoded with what was said, locked,
stored, published to the room's viewers on every front end, and the client gets ``stopped``, or its protocol's
last message), then waits for them. Only then do room viewers' event streams end and the store close.

Streams are WebRTC peers (the page, kiosks, widgets, WHIP publishers: ``app[PEERS]``) and the others
(``app.ops.streams.LiveStreams``: FunASR, Deepgram and OpenAI Realtime WebSocket streams, OpenAI file jobs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from aiohttp import web

from engine import Session

from .ops import Admission, LiveStreams
from .webrtc import PeerSession

log = logging.getLogger(__name__)

# Requests still running after the drain (a download, a stream whose client took no close frame) get this long, then
# are cancelled: aiohttp's shutdown_timeout for every port.
HANDLERS_AFTER_DRAIN_S = 3.0


@dataclass
class DrainReport:
    """What a stop finished (filled in by ``drain``). ``unfinished``: streams still open at the deadline, closed
    without their last sentence (a stuck decode; logged)."""

    done: bool = False  # the stop has run
    sessions: int = 0
    sentences: int = 0  # sentences locked on the way out
    unfinished: int = 0
    seconds: float = 0.0


async def drain(
    peers: dict[str, PeerSession],
    others: LiveStreams,
    admissions: list[Admission],
    timeout_s: float,
    report: DrainReport,
) -> None:
    """Refuse new sessions, ask every live stream to finish, and wait for them up to ``timeout_s`` seconds; close
    the peers still open then; fill in ``report``. Streams that start while this runs (an offer already past
    admission) are stopped too."""
    t0 = time.monotonic()
    for admission in admissions:
        admission.close()
    deadline = t0 + timeout_s
    asked: dict[str, tuple[Session, asyncio.Event, int]] = {}  # id -> (session, done, sentences locked before)
    while True:
        for peer in list(peers.values()):
            if peer.id not in asked:
                asked[peer.id] = (peer.session, peer.closed, peer.session.stats.sentences)
                peer.request_stop()
        for stream in others.streams():
            sid = stream.session.session_id
            if sid not in asked:
                asked[sid] = (stream.session, stream.done, stream.session.stats.sentences)
                stream.stop()
        pending = [done for _, done, _ in asked.values() if not done.is_set()]
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        # Wake at least every 0.2 s for streams that registered meanwhile.
        waits = [asyncio.ensure_future(done.wait()) for done in pending]
        await asyncio.wait(waits, timeout=min(left, 0.2))
        for w in waits:
            w.cancel()
    unfinished = [sid for sid, (_, done, _) in asked.items() if not done.is_set()]
    if unfinished:
        log.warning(
            "%d sessions did not finish within %.0f s; closing them without their last sentence",
            len(unfinished),
            timeout_s,
        )
        for peer in [peers[sid] for sid in unfinished if sid in peers]:
            await peer.close()
    report.sessions, report.unfinished = len(asked), len(unfinished)
    report.sentences = sum(session.stats.sentences - before for session, _, before in asked.values())
    report.seconds = time.monotonic() - t0
    report.done = True


DRAIN = web.AppKey("drain", DrainReport)  # what the stop finished (filled in as the server stops)
