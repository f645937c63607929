"""What a browser app sends Deepgram: its microphone through ``MediaRecorder`` (WebM/Opus, 250 ms chunks), streamed
to ``/v1/listen`` with no ``encoding``, from real Chromium, through the real engine; and an Ogg/Opus recording of
the same speech. Both are judged against the same speech sent as linear16 PCM: the recorder's codec may cost a
little, the server's decoding of its container nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine import CaptionEngine
from speechdata.wer import wer
from tests.support.browser import chromium, write_wav
from tests.support.live_clients import pcm16, speech, stream_deepgram
from tests.support.servers import running_server

CLIPS = ["ls_7902-96591-0000", "librivox_sns01_0890", "ls_3752-4944-0002"]

RECORD = """async ({url, seconds}) => {
  const stream = await navigator.mediaDevices.getUserMedia({audio: true});
  const ws = new WebSocket(url);
  const finals = [];
  const closed = new Promise(resolve => { ws.onclose = e => resolve(e.code); });
  ws.onmessage = e => {
    const m = JSON.parse(e.data);
    if (m.type === "Results" && m.is_final) finals.push(m.channel.alternatives[0].transcript);
  };
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  const recorder = new MediaRecorder(stream, {mimeType: "audio/webm;codecs=opus"});
  let sending = Promise.resolve();  // chunks go out in the order they were recorded
  recorder.ondataavailable = e => {
    if (e.data.size) sending = sending.then(async () => ws.send(await e.data.arrayBuffer()));
  };
  const stopped = new Promise(resolve => { recorder.onstop = resolve; });
  recorder.start(250);
  await new Promise(resolve => setTimeout(resolve, seconds * 1000));
  recorder.stop();
  await stopped;
  await sending;
  ws.send(JSON.stringify({type: "CloseStream"}));
  return {finals, code: await closed, mime: recorder.mimeType};
}"""


@pytest.mark.heavy
async def test_a_mediarecorder_stream_from_chromium_gets_captions_as_pcm_does(
    engine: CaptionEngine, tmp_path: Path
) -> None:
    samples, ref = speech(CLIPS)
    mic = write_wav(tmp_path / "mic.wav", samples)
    async with running_server(engine) as (url, _app):
        pcm = await stream_deepgram(
            url, pcm16(samples), speed=2.0, encoding="linear16", sample_rate=16000, punctuate="true"
        )
        async with chromium(mic) as browser:
            page = await browser.new_page()
            await page.goto(url)
            got: dict[str, Any] = await page.evaluate(
                RECORD, {"url": "ws" + url[4:] + "/v1/listen?punctuate=true", "seconds": len(samples) / 16000 + 1.0}
            )
        ogg = await stream_deepgram(url, encode(samples, "ogg"), speed=2.0, chunk=4000, punctuate="true")
    recorded = " ".join(got["finals"])
    base = wer(ref, pcm.text)
    print(
        json.dumps(
            {"mime": got["mime"], "wer_pcm": base, "wer_webm": wer(ref, recorded), "wer_ogg": wer(ref, ogg.text)}
        )
    )
    assert got["mime"].startswith("audio/webm") and got["code"] == 1000, got
    assert wer(ref, recorded) <= max(0.10, base + 0.05), (recorded, pcm.text)
    assert wer(ref, ogg.text) <= max(0.10, base + 0.05), (ogg.text, pcm.text)


def encode(samples: np.ndarray, container: str) -> bytes:
    """``samples`` as Opus in ``container``, at the 32 kb/s a recorder uses for speech, by FFmpeg."""
    return subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-f",
            "s16le",
            "-ar",
            "16000",
            "-ac",
            "1",
            "-i",
            "-",
            "-c:a",
            "libopus",
            "-b:a",
            "32k",
            "-ar",
            "48000",
            "-f",
            container,
            "-",
        ],
        input=pcm16(samples),
        capture_output=True,
        check=True,
    ).stdout
