"""The server's stop, with the named fake recognizer (real VAD, WebRTC and HTTP; what is tested is the order of the
stop, not the model): open sentences are locked and delivered before anything closes, an upload cut short says so,
and no new session starts once the stop has begun. ``tests/functional/test_drain_live.py`` does the same with real
speech."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import aiohttp
from aiohttp import web

from app.drain import DRAIN
from app.ops.admission import Admission
from app.rooms.store import open_store
from app.server import create_app
from app.webrtc.keys import PEERS
from engine import CaptionEngine
from speechdata.corpus import audio, pad, wav_path
from tests.support.rtc_client import CaptionClient
from tests.support.servers import LOOPBACK


async def serve(engine: CaptionEngine, db: Path) -> tuple[web.AppRunner, web.Application, str]:
    app = create_app(replace(LOOPBACK, db_path=str(db)), engine=engine)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, app, f"http://127.0.0.1:{runner.addresses[0][1]}"


def test_a_closed_admission_refuses_and_says_why() -> None:
    admission = Admission(2)
    slot, other = admission.try_acquire(), admission.try_acquire()
    refusal = admission.check()
    assert slot is not None and other is not None and refusal is not None
    assert refusal.reason == "limit" and refusal.message.startswith("all 2 caption sessions")
    other.release()
    admission.close()
    refusal = admission.check()
    assert admission.try_acquire() is None and refusal is not None and "shutting down" in refusal.message
    assert refusal.reason == "shutting_down" and (refusal.retry_after_s or 0) > 0
    slot.release()
    assert admission.in_use == 0


async def test_a_stop_mid_sentence_locks_it_stores_it_and_tells_the_client(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    runner, app, url = await serve(fake_engine, tmp_path / "c.db")
    client = CaptionClient(url, pad(audio("ls_1988-24833-0001"), 0.3, 20.0))  # 7.9 s of speech
    try:
        await client.connect()
        while not any(m["type"] == "caption" and m.get("partial") for m in client.messages):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # well inside the sentence
        assert not client.sentences(), "the sentence locked before the stop: the test needs it open"
        await runner.cleanup()
    finally:
        await runner.cleanup()
        await client.close()
    assert client.stopped.is_set(), client.messages[-3:]
    (sentence,) = client.sentences()
    assert sentence["text"].startswith("audio of "), sentence
    assert client.messages[-1]["type"] == "stopped", "nothing may follow stopped"
    assert app[DRAIN].done and app[DRAIN].sessions == 1 and app[DRAIN].sentences == 1, app[DRAIN]
    assert not app[PEERS]
    store = await open_store(str(tmp_path / "c.db"))
    try:
        assert [s.text for s in (await store.snapshot(client.room)).sentences] == [sentence["text"]]
    finally:
        await store.close()


async def test_an_upload_cut_short_by_a_stop_says_so_after_its_sentences(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    long = tmp_path / "long.wav"  # 66 s: far more than is read before the stop
    await asyncio.to_thread(
        subprocess.run,
        ["ffmpeg", "-loglevel", "error", "-stream_loop", "5", "-i", str(wav_path("whisper_jfk")), str(long)],
        check=True,
    )
    runner, app, url = await serve(fake_engine, tmp_path / "c.db")
    events: list[dict[str, object]] = []
    try:
        form = aiohttp.FormData()
        form.add_field("model", "whisper-1")
        form.add_field("stream", "true")
        form.add_field("file", io.BytesIO(long.read_bytes()), filename="long.wav", content_type="audio/wav")
        async with aiohttp.ClientSession() as http, http.post(f"{url}/v1/audio/transcriptions", data=form) as r:
            assert r.status == 200
            stop: asyncio.Task[None] | None = None
            async for raw in r.content:
                line = raw.decode().strip()
                if line.startswith("data:"):
                    events.append(json.loads(line[5:]))
                    if stop is None:  # the first sentence is out: stop the server while the file is read
                        stop = asyncio.create_task(runner.cleanup())
            assert stop is not None
            await stop
    finally:
        await runner.cleanup()
    deltas = [e for e in events if e.get("type") == "transcript.text.delta"]
    assert deltas, events
    last = events[-1]
    assert "error" in last and last["error"]["code"] == "server_shutting_down", last  # type: ignore[index]
    assert not any(e.get("type") == "transcript.text.done" for e in events), "a cut transcript claimed to be done"
    assert app[DRAIN].sessions == 1 and app[DRAIN].unfinished == 0
