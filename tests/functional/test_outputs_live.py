"""A room's four ways out at once, on real speech: a WebRTC publisher speaks recorded read speech into a room
captioned by the real engine, while the room sends its captions to a YouTube caption ingestion stand-in and an
obs-websocket stand-in (both written from their services' published documents: ``tests/support/youtube_stand_in.py``,
``tests/support/obs_stand_in.py``; the real OBS is driven by ``tests/app/outputs/test_obs.py``'s slow tier), Debian's
ffmpeg follows its HLS playlist, and at the end pycaption reads its SCC file. Every one of them must carry the room's
transcript: what is compared is each output against the room's own locked text, so the test holds whatever the model
writes."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from app.transcripts import hls
from engine import CaptionEngine
from speechdata.corpus import audio, pad
from speechdata.wer import word_errors
from tests.support.caption_readers import follow_hls, pycaption_captions, until_listed, vtt_cues
from tests.support.obs_stand_in import PASSWORD, StandInObs, new_rows
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server
from tests.support.youtube_stand_in import stand_in

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="Debian's ffmpeg is not installed"),
]

TOKEN = "server-token-for-live-outputs"
CLIPS = ["ls_2412-153948-0000", "ls_1988-24833-0001", "ls_3752-4944-0000"]  # 23 s of read speech, 3+ sentences


def speech() -> np.ndarray:
    """The clips one after another, with pauses long enough to end each sentence."""
    return np.concatenate([pad(audio(clip), 0.8, 1.2) for clip in CLIPS])


async def call(http: aiohttp.ClientSession, method: str, url: str, token: str, body: Any = None) -> Any:
    async with http.request(method, url, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
        assert r.status in (200, 201), (method, url, r.status, await r.text())
        return await r.json()


def errors_against(reference: str, text: str) -> float:
    errors, words = word_errors(reference, text)
    return errors / max(1, words)


async def test_real_speech_reaches_youtube_obs_hls_and_scc_at_once(
    engine: CaptionEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short HLS segments and settling, so the playlist lists this short room's segments while it is spoken.
    monkeypatch.setattr(hls, "SEGMENT_MS", 1000)
    monkeypatch.setattr(hls, "SETTLE_MS", 4000)
    monkeypatch.setattr(hls, "END_GRACE_MS", 500)
    obs = StandInObs(PASSWORD)
    await obs.start()
    try:
        async with (
            running_server(engine, auth_token=TOKEN, output_allow=("127.0.0.1",)) as (url, _),
            stand_in() as youtube,
            aiohttp.ClientSession() as http,
        ):
            made = await call(http, "POST", f"{url}/rooms", TOKEN, {"title": "Four outputs"})
            room, editor = made["room"], made["editor_token"]
            await call(
                http, "POST", f"{url}/rooms/{room}/outputs", editor, {"kind": "youtube", "url": youtube.ingestion_url()}
            )
            await call(
                http,
                "POST",
                f"{url}/rooms/{room}/outputs",
                editor,
                {"kind": "obs", "url": obs.url, "password": PASSWORD},
            )
            client = CaptionClient(url, speech())
            await client.connect(offer={"room": room, "token": TOKEN})
            playlist = f"{url}/rooms/{room}/captions.m3u8"
            await until_listed(http, playlist, 1, timeout_s=60)
            out = tmp_path / "hls.vtt"
            ffmpeg = await follow_hls(playlist, out)
            try:
                await client.until_played()
                await client.stop()
                await client.close()
                locked = [s["text"] for s in client.sentences()]
                assert len(locked) >= 3, locked
                deadline = time.monotonic() + 60
                while len(youtube.posts) < len(locked) or not obs.captions:
                    assert time.monotonic() < deadline, (youtube.posts, obs.captions)
                    await asyncio.sleep(0.2)
                await asyncio.sleep(hls.SETTLE_MS / 1000 + 1)  # the last segments are listed before the end
                await call(http, "POST", f"{url}/rooms/{room}/end", editor)
                _, err = await asyncio.wait_for(ffmpeg.communicate(), 60)
            finally:
                if ffmpeg.returncode is None:
                    ffmpeg.kill()
                    await ffmpeg.wait()
            assert ffmpeg.returncode == 0, err.decode(errors="replace")
            async with http.get(f"{url}/rooms/{room}/transcript.txt") as r:
                transcript = " ".join(line for line in (await r.text()).splitlines() if not line.startswith("["))
            async with http.get(f"{url}/rooms/{room}/transcript.scc") as r:
                scc_text = await r.text()
            states = await call(http, "GET", f"{url}/rooms/{room}/outputs", editor)
    finally:
        await obs.stop()
    assert transcript.split() and " ".join(locked).split() == transcript.split(), "the room has what was locked"
    seqs = [p.seq for p in youtube.posts]
    assert seqs == list(range(1, len(seqs) + 1)), "one post per caption, seq strictly increasing"
    carried = {
        "youtube": " ".join(p.text for p in youtube.posts).replace(">> ", ""),
        "obs": " ".join(new_rows(obs.captions)).replace(">> ", ""),
        "hls": " ".join(text for _, _, text in vtt_cues(out.read_text(encoding="utf-8"))),
        "scc": " ".join(text for _, _, text in pycaption_captions(scc_text)),
    }
    for kind, text in carried.items():
        assert errors_against(transcript, text) <= 0.02, (kind, text, transcript)
    assert {o["kind"]: o["sent"] for o in states["outputs"]} == {"youtube": len(locked), "obs": len(locked)}
