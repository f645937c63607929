"""A stop in the middle of a sentence loses no words (SIGTERM from systemd, a Kubernetes rollout, ``docker stop``).

Real speech, the real engine: a read sentence, a pause, then a second sentence that is 2.5 s under way when the
server stops. Every stream's open sentence must be locked with what was said, stored, sent to its client and its
room's viewers, and every client told the stream ended; the server must then exit 0 well within Kubernetes' default
30 s grace period. One test stops an in-process server (the shared engine) with a WebRTC page client, a WHIP
publisher, a FunASR WebSocket stream and a room viewer at once; one sends SIGTERM to ``python -m app`` as a
supervisor would and reads what it prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from app.drain import DRAIN
from app.rooms.keys import ROOMS
from app.rooms.store import open_store
from app.server import create_app
from app.webrtc import patches
from engine import CaptionEngine
from speechdata.corpus import audio, pad, reference
from speechdata.wer import normalise, word_errors
from tests.support.rtc_client import ArrayAudioTrack, CaptionClient
from tests.support.server_process import server_process, wait_ready
from tests.support.servers import LOOPBACK
from tests.support.sse import SseReader

pytestmark = pytest.mark.heavy

FIRST, SECOND = "ls_1988-24833-0000", "ls_1988-24833-0001"  # 3.3 s, then 7.9 s of the same reader
LEAD_S, PAUSE_S = 0.3, 2.5
INTO_SECOND_S = 2.5  # how far into the second sentence the stop comes
STOP_BUDGET_S = 10.0  # from the stop to the exit, with these sessions open (Kubernetes gives 30 s)


def speech() -> tuple[np.ndarray, float]:
    """Both sentences and 20 s of silence after them (a microphone left open); when the second one starts (s)."""
    first = pad(audio(FIRST), LEAD_S, PAUSE_S)
    return np.concatenate([first, audio(SECOND), np.zeros(20 * 16_000, np.float32)]), first.size / 16_000


def check_open_sentence(texts: list[str], who: str) -> None:
    """``texts``: the stream's locked sentences. The first sentence is there, and after it the words said of the
    second one before the stop: its opening, a few words long, as the reference has it."""
    said = normalise(" ".join(texts))
    first = normalise(reference(FIRST))
    assert said[:3] == first[:3], f"{who}: the first sentence is missing: {texts}"
    rest = said[len(first) :]
    assert len(rest) >= 4, f"{who}: the open sentence was not locked with what was said: {texts}"
    expected = normalise(reference(SECOND))[: len(rest)]
    errors, _ = word_errors(" ".join(expected), " ".join(rest))
    assert errors <= max(2, len(rest) // 3), f"{who}: {rest} against {expected}"


async def stored_texts(db: Path, room_id: str) -> list[str]:
    store = await open_store(str(db))
    try:
        return [s.text for s in (await store.snapshot(room_id)).sentences]
    finally:
        await store.close()


async def whip_publisher(url: str, room_id: str, samples: np.ndarray) -> RTCPeerConnection:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(ArrayAudioTrack(samples))
    await pc.setLocalDescription(await pc.createOffer())
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{url}/whip/{room_id}", data=pc.localDescription.sdp, headers={"Content-Type": "application/sdp"}
        ) as r,
    ):
        assert r.status == 201, await r.text()
        answer = await r.text()
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    return pc


class FunasrStream:
    """FunASR's 2pass protocol over a WebSocket, PCM paced at real time; ``messages`` as they come."""

    def __init__(self, url: str, samples: np.ndarray) -> None:
        self.url = url
        self.pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
        self.messages: list[dict[str, Any]] = []
        self.close_code: int | None = None

    async def run(self) -> None:
        async with aiohttp.ClientSession() as http, http.ws_connect(f"ws{self.url[4:]}/funasr") as ws:
            await ws.send_str(
                json.dumps(
                    {"mode": "2pass", "wav_name": "stop", "wav_format": "pcm", "audio_fs": 16_000, "is_speaking": True}
                )
            )
            reader = asyncio.create_task(self._read(ws))
            step, t0 = 1920, time.monotonic()  # 60 ms
            with contextlib.suppress(ConnectionError, RuntimeError):  # the server goes away part way
                for i in range(0, len(self.pcm), step):
                    if ws.closed:
                        break
                    await ws.send_bytes(self.pcm[i : i + step])
                    await asyncio.sleep(max(0.0, t0 + (i + step) / 32_000 - time.monotonic()))
            await reader
            self.close_code = ws.close_code

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type is aiohttp.WSMsgType.TEXT:
                self.messages.append(json.loads(msg.data))

    def offline_texts(self) -> list[str]:
        return [m["text"] for m in self.messages if m["mode"] == "2pass-offline" and m["text"]]


async def test_a_stop_mid_sentence_locks_stores_and_delivers_every_streams_open_sentence(
    engine: CaptionEngine, tmp_path: Path
) -> None:
    db = tmp_path / "captions.db"
    app = create_app(replace(LOOPBACK, db_path=str(db)), engine=engine)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    samples, second_at = speech()
    page = CaptionClient(url, samples)
    funasr = FunasrStream(url, samples)
    whip: RTCPeerConnection | None = None
    try:
        whip_room = (await app[ROOMS].create()).room
        await page.connect()
        async with SseReader(f"{url}/rooms/{page.room}/events") as viewer:
            whip = await whip_publisher(url, whip_room.id, samples)
            funasr_task = asyncio.create_task(funasr.run())
            await asyncio.sleep(second_at + INTO_SECOND_S)
            t0 = time.monotonic()
            await runner.cleanup()  # what SIGTERM starts in aiohttp's run_app
            stop_s = time.monotonic() - t0
            await asyncio.wait_for(funasr_task, 10)
            await asyncio.wait_for(viewer.ended.wait(), 5)
    finally:
        await runner.cleanup()
        await page.close()
        if whip is not None:
            await whip.close()

    print(f"\nstop with a page, a WHIP publisher, a FunASR stream and a viewer open: {stop_s:.1f} s")
    assert stop_s < STOP_BUDGET_S, f"the stop took {stop_s:.1f} s"
    report = app[DRAIN]
    assert report.done and report.sessions == 3 and report.unfinished == 0 and report.sentences >= 3, report

    assert page.stopped.is_set(), f"the page was not told its stream stopped: {page.messages[-3:]}"
    page_texts = [s["text"] for s in page.sentences()]
    check_open_sentence(page_texts, "page")
    assert [s["text"] for s in viewer.sentences().values()] == page_texts, "the viewer saw another transcript"
    assert await stored_texts(db, page.room) == page_texts, "the page's room did not store what the page showed"

    check_open_sentence(await stored_texts(db, whip_room.id), "WHIP room")

    check_open_sentence(funasr.offline_texts(), "FunASR")
    assert funasr.messages[-1]["is_final"], funasr.messages[-3:]
    assert funasr.close_code == aiohttp.WSCloseCode.GOING_AWAY


async def test_sigterm_exits_0_promptly_with_the_open_sentence_kept_and_says_so(tmp_path: Path) -> None:
    with server_process(tmp_path) as (proc, url):
        await wait_ready(url, proc)
        patches.install_ice(LOOPBACK.ice)  # this process's client offers loopback candidates, as the server expects
        samples, second_at = speech()
        client = CaptionClient(url, samples)
        await client.connect()
        await asyncio.sleep(second_at + INTO_SECOND_S)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None and time.monotonic() - t0 < 30:  # noqa: ASYNC110 (a process, not a task)
            await asyncio.sleep(0.05)
        exit_s = time.monotonic() - t0
        await client.close()
    log = (tmp_path / "server.log").read_text(errors="replace")
    print(f"\nSIGTERM 2.5 s into a sentence: exit {proc.returncode} after {exit_s:.1f} s")
    assert proc.returncode == 0, log[-3000:]
    assert exit_s < STOP_BUDGET_S, f"exit {exit_s:.1f} s after SIGTERM\n{log[-3000:]}"
    assert client.stopped.is_set(), f"the client was not told its stream stopped: {client.messages[-3:]}"
    texts = [s["text"] for s in client.sentences()]
    check_open_sentence(texts, "client")
    db = tmp_path / "captions.db"  # where server_process keeps the transcripts
    assert await stored_texts(db, client.room) == texts

    lines = log.splitlines()
    ready = [line for line in lines if line.startswith("live captions: model ")]
    assert ready and " ready in " in ready[0], "no line says the model is ready, which one and how fast"
    stopped = [line for line in lines if line.startswith("live captions: stopped")]
    assert stopped and "1 session ended" in stopped[0] and str(db) in stopped[0], stopped
    noise = [line for line in lines if "leaked" in line or "nanobind" in line or "Traceback" in line]
    assert not noise, f"library noise on a normal stop: {noise[:5]}"
