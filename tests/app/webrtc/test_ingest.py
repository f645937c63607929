"""Shedding audio only when this server falls behind: a sender's stall and catch-up is not the server's lag.

The first tests drive ``pump_track`` with aiortc's own receive track, fed from a thread as aiortc's decoder
thread feeds it; the last one streams real WebRTC sessions into the server."""

from __future__ import annotations

import asyncio
import fractions
import threading
import time
from collections.abc import Callable, Sequence

import av
import numpy as np
import pytest
from aiortc.rtcrtpreceiver import RemoteStreamTrack

from app.webrtc.ingest import IngestStats, pump_track, queued_frames
from app.webrtc.keys import PEERS
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.rtc_client import ArrayAudioTrack, CaptionClient
from tests.support.servers import running_server

FRAME_S = 0.02


def frame(index: int) -> av.AudioFrame:
    out = av.AudioFrame.from_ndarray(np.zeros((1, 960), np.int16), format="s16", layout="mono")
    out.sample_rate = 48_000
    out.pts = index * 960
    out.time_base = fractions.Fraction(1, 48_000)
    return out


def produce(
    track: RemoteStreamTrack,
    loop: asyncio.AbstractEventLoop,
    seconds: float,
    stall_at_s: float | None = None,
    stall_s: float = 0.0,
) -> threading.Thread:
    """Put ``seconds`` of 20 ms frames into ``track`` at real time from a thread (as aiortc's decoder thread
    does); at ``stall_at_s`` stop for ``stall_s``, then deliver the overdue frames at once (a sender catching up
    after a stall), then real time again. Ends the track."""

    def put(frames: Sequence[av.AudioFrame | None]) -> None:
        for f in frames:
            track._queue.put_nowait(f)

    def run() -> None:
        start = time.monotonic()
        count = int(seconds / FRAME_S)
        i = 0
        while i < count:
            if stall_at_s is not None and i == int(stall_at_s / FRAME_S):
                time.sleep(stall_s)
                # The overdue frames land together, in one turn of the loop: put one by one, a busy machine could
                # let the reader take each as it comes, and the burst would never wait (what the test checks).
                due = min(count, int((time.monotonic() - start) / FRAME_S) + 1)
                loop.call_soon_threadsafe(put, [frame(k) for k in range(i, due)])
                i = due
                continue
            time.sleep(max(0.0, start + i * FRAME_S - time.monotonic()))
            loop.call_soon_threadsafe(put, [frame(i)])
            i += 1
        loop.call_soon_threadsafe(put, [None])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def pump(
    seconds: float,
    feed_s: float,
    stall_at_s: float | None = None,
    stall_s: float = 0.0,
    on_shed: Callable[[float], None] | None = None,
) -> tuple[IngestStats, list[float]]:
    track = RemoteStreamTrack("audio")
    overloads: list[float] = []
    stats = IngestStats()
    thread = produce(track, asyncio.get_running_loop(), seconds, stall_at_s, stall_s)

    def feed(_: np.ndarray) -> None:
        time.sleep(feed_s)  # the server's work per 60 ms chunk (blocking, as CPU-bound work does)

    await asyncio.wait_for(pump_track(track, feed, stats, 1.0, overloads.append, on_shed), seconds + 30)
    thread.join()
    return stats, overloads


@pytest.mark.blocks_loop  # its feed stands for the server's CPU-bound work per chunk, blocking the loop as that does
async def test_a_sender_that_stalls_and_catches_up_is_not_shed() -> None:
    stats, overloads = await pump(3.0, feed_s=0.001, stall_at_s=0.5, stall_s=2.5)  # 3 s late, then all at once
    assert not overloads and stats.skipped_s == 0.0
    assert stats.max_waiting_s > 1.0, "the burst did wait in the queue (else this test tests nothing)"


@pytest.mark.slow  # several seconds of real-time audio: full runs only
async def test_a_server_slower_than_real_time_sheds_and_says_so() -> None:
    shed: list[float] = []  # what the server's metrics count (``on_shed``)
    stats, overloads = await pump(4.0, feed_s=0.15, on_shed=shed.append)  # 150 ms of work per 60 ms: falls behind
    assert overloads and stats.skipped_s > 0.5
    assert sum(shed) == pytest.approx(stats.skipped_s)


def test_the_receive_queue_is_where_aiortc_keeps_frames() -> None:
    track = RemoteStreamTrack("audio")
    track._queue.put_nowait(frame(0))
    assert queued_frames(track) == 1


class StallingTrack(ArrayAudioTrack):
    """A sender that stops sending for ``stall_s`` at ``at_s`` (a busy client process), then catches up."""

    def __init__(self, samples: np.ndarray, at_s: float, stall_s: float) -> None:
        super().__init__(samples)
        self.at_s, self.stall_s, self.stalled = at_s, stall_s, False

    async def recv(self) -> av.AudioFrame:
        if not self.stalled and self.played_s >= self.at_s:
            self.stalled = True
            await asyncio.sleep(self.stall_s)
        return await super().recv()


@pytest.mark.slow
async def test_concurrent_paced_streams_are_never_shed_even_when_a_sender_stalls(fake_engine: CaptionEngine) -> None:
    clip = pad(audio("ls_1988-24833-0000"), 0.3, 2.0)
    async with running_server(fake_engine) as (url, app):
        clients = [CaptionClient(url, clip) for _ in range(4)]
        clients[0].track = StallingTrack(clip, at_s=2.0, stall_s=3.0)
        for client in clients:
            await client.connect()
        ingests = [p.ingest for p in app[PEERS].values()]
        await asyncio.sleep(clip.size / 16000 + 3.5)
        for client in clients:
            await client.stop()
            await client.close()
    assert all(i.skipped_s == 0.0 for i in ingests), [i.skipped_s for i in ingests]
    assert not [m for c in clients for m in c.messages if m.get("code") == "overloaded"]
    assert all(c.sentences() for c in clients)
