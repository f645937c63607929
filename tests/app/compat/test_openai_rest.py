"""The OpenAI-compatible transcription API, driven by OpenAI's own Python client (``openai``).

Fast tests use the named fake recognizer (real VAD, real segmentation, real HTTP): what is tested is the API
surface, every response format parsed by the client or a third-party parser, errors in OpenAI's shape, and that a
file is fed no faster than it is transcribed. The heavy tests run real speech through the real engine and check
the text by word error rate.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path

import openai
import pytest
import srt
import webvtt

from engine import CaptionEngine
from engine.asr.transcriber import Priority
from speechdata.corpus import wav_path
from tests.support.servers import running_server

CLIP = "whisper_jfk"  # 11 s, one sentence


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-loglevel", "error", *args], check=True)


def leftover_uploads() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("upload-*"))


def client(url: str, key: str = "unused", retries: int = 0) -> openai.AsyncOpenAI:
    """OpenAI's client of the server at ``url``; use it in ``async with`` (it closes its connections there)."""
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=retries, timeout=120)


async def test_every_response_format_through_the_official_client(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    async with running_server(fake_engine) as (url, _app), client(url) as api:
        with wav_path(CLIP).open("rb") as f:
            plain = await api.audio.transcriptions.create(model="whisper-1", file=f)
        assert plain.text.startswith("audio of ") and plain.usage is not None
        assert plain.usage.type == "duration" and plain.usage.seconds == 11

        with wav_path(CLIP).open("rb") as f:
            verbose = await api.audio.transcriptions.create(
                model="whisper-1",
                file=f,
                response_format="verbose_json",
                timestamp_granularities=["word", "segment"],
                language="en",
                temperature=0.2,
            )
        assert verbose.language == "english" and abs(verbose.duration - 11.0) < 0.05
        assert verbose.segments and verbose.text == " ".join(s.text.strip() for s in verbose.segments)
        seg = verbose.segments[0]
        assert 0 <= seg.start < seg.end <= 11.0 and seg.temperature == 0.2 and seg.avg_logprob == -0.1
        assert 0 <= seg.no_speech_prob <= 1 and seg.compression_ratio > 0
        assert verbose.words and all(w.start <= w.end for w in verbose.words)
        assert [w.word for w in verbose.words] == verbose.text.split()

        for fmt in ("text", "srt", "vtt"):
            with wav_path(CLIP).open("rb") as f:
                body = await api.audio.transcriptions.create(model="whisper-1", file=f, response_format=fmt)
            assert isinstance(body, str), fmt
            if fmt == "text":
                assert body.strip() == plain.text
            elif fmt == "srt":
                cues = list(srt.parse(body))
                assert cues and " ".join(c.content.replace("\n", " ") for c in cues) == plain.text
            else:
                (tmp_path / "t.vtt").write_text(body)
                captions = webvtt.read(str(tmp_path / "t.vtt"))
                assert " ".join(c.text.replace("\n", " ") for c in captions.captions) == plain.text

        with wav_path(CLIP).open("rb") as f:
            diarized = await api.audio.transcriptions.create(
                model="gpt-4o-transcribe-diarize", file=f, response_format="diarized_json"
            )
        assert diarized.segments and {s.speaker for s in diarized.segments} == {"A"}  # labels off: one voice

        models = await api.models.list()
        assert [m.id for m in models.data] == [fake_engine.model_name]
        assert (await api.models.retrieve("whisper-1")).id == fake_engine.model_name


async def test_stream_gives_a_delta_per_sentence_then_the_whole_text(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    two = tmp_path / "two.ogg"  # two clips with a pause: two sentences; Ogg Opus shows any FFmpeg format works
    await asyncio.to_thread(
        ffmpeg,
        "-i",
        str(wav_path(CLIP)),
        "-i",
        str(wav_path(CLIP)),
        "-filter_complex",
        "[0]apad=pad_dur=3[a];[a][1]concat=n=2:v=0:a=1",
        "-c:a",
        "libopus",
        str(two),
    )
    async with running_server(fake_engine) as (url, _app), client(url) as api:
        with two.open("rb") as f:
            stream = await api.audio.transcriptions.create(model="whisper-1", file=f, stream=True)
            events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and kinds.count("transcript.text.delta") >= 2, kinds
    deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
    assert deltas == events[-1].text  # type: ignore[union-attr]


async def test_errors_in_openais_shape(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    big = tmp_path / "big.wav"
    big.write_bytes(b"RIFF" + bytes(2 * 1024 * 1024))
    text = tmp_path / "notes.mp3"
    text.write_text("this is not audio at all\n" * 50)
    before = leftover_uploads()
    async with (
        running_server(fake_engine, max_upload_mb=1, auth_token="sekrit") as (url, _app),
        client(url, key="wrong") as stranger,
        client(url, key="sekrit") as api,
    ):
        with pytest.raises(openai.AuthenticationError) as denied:
            await stranger.audio.transcriptions.create(model="m", file=wav_path(CLIP))
        assert denied.value.status_code == 401 and denied.value.code == "invalid_api_key"
        with pytest.raises(openai.APIStatusError) as too_big:
            await api.audio.transcriptions.create(model="m", file=big)
        assert too_big.value.status_code == 413 and too_big.value.body["param"] == "file"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as not_audio:
            await api.audio.transcriptions.create(model="m", file=text)
        assert not_audio.value.body["param"] == "file" and "decoded" in not_audio.value.message  # type: ignore[index]
        for field, value in (("response_format", "docx"), ("language", "xx"), ("temperature", 3)):
            with pytest.raises(openai.BadRequestError) as bad:
                await api.audio.transcriptions.create(model="m", file=wav_path(CLIP), **{field: value})  # type: ignore[call-overload]
            assert bad.value.body["param"] == field, field  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as bad_stream:
            await api.audio.transcriptions.create(model="m", file=wav_path(CLIP), response_format="srt", stream=True)
        assert bad_stream.value.body["param"] == "stream"  # type: ignore[index]

        import aiohttp

        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{url}/v1/audio/transcriptions",
                data=b"{}",
                headers={"Authorization": "Bearer sekrit", "Content-Type": "application/json"},
            ) as r:
                assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request_error"
            async with http.get(f"{url}/v1/models") as r:
                assert r.status == 401
    async with running_server(fake_engine, max_file_jobs=0) as (url, _app), client(url) as api:
        with pytest.raises(openai.RateLimitError):
            await api.audio.transcriptions.create(model="m", file=wav_path(CLIP))
    assert leftover_uploads() <= before, "every refused or finished upload's temporary file is removed"


async def test_a_long_file_decodes_at_background_priority_one_segment_at_a_time(
    fake_engine: CaptionEngine, tmp_path: Path
) -> None:
    """Every segment of a 66 s file decodes at background priority, one at a time (max_background)."""
    long = tmp_path / "long.flac"
    await asyncio.to_thread(ffmpeg, "-stream_loop", "5", "-i", str(wav_path(CLIP)), str(long))
    fake = fake_engine.transcriber
    async with running_server(fake_engine) as (url, _app), client(url) as api:
        with long.open("rb") as f:
            result = await api.audio.transcriptions.create(model="m", file=f, response_format="verbose_json")
    assert result.duration > 60 and result.segments
    priorities = {p for _rid, p, _n in fake.started}  # type: ignore[attr-defined]
    assert priorities == {Priority.BACKGROUND}
    overlapping = 0
    running = 0
    for event, _rid, _p, _t in fake.log:  # type: ignore[attr-defined]
        running += {"start": 1, "finish": -1, "cancel": -1}.get(event, 0) if event != "submit" else 0
        overlapping = max(overlapping, running)
    assert overlapping == 1, "file segments decode one at a time"
    assert json.dumps(result.model_dump())  # the client's model serialises: every field present


@pytest.mark.heavy
async def test_real_speech_in_every_format(engine: CaptionEngine) -> None:
    from speechdata.corpus import reference
    from speechdata.wer import wer

    async with running_server(engine) as (url, _app), client(url) as api:
        for fmt in ("json", "text", "verbose_json"):
            with wav_path(CLIP).open("rb") as f:
                out = await api.audio.transcriptions.create(model="whisper-1", file=f, response_format=fmt)
            text = out if isinstance(out, str) else out.text
            assert wer(reference(CLIP), text) <= 0.1, (fmt, text)
        with wav_path(CLIP).open("rb") as f:
            stream = await api.audio.transcriptions.create(model="whisper-1", file=f, stream=True)
            events = [e async for e in stream]
        assert wer(reference(CLIP), events[-1].text) <= 0.1  # type: ignore[union-attr]
    await asyncio.sleep(0)


async def test_a_client_that_hangs_up_abandons_its_file(tmp_path: Path) -> None:
    """The decodes of a file whose client went away stop at once, streamed or not (aiohttp does not cancel the
    handler itself), and its place is free for the next upload."""
    from app.ops.keys import FILE_JOBS
    from engine.asr.fake import FakeTranscriber
    from engine.config import EngineConfig

    slow = FakeTranscriber(delay_s=0.5)  # the client's timeout below is two and a half decodes
    engine = CaptionEngine(EngineConfig(speakers=False), transcriber=slow)
    await engine.start()
    long = tmp_path / "long.flac"
    await asyncio.to_thread(ffmpeg, "-stream_loop", "5", "-i", str(wav_path(CLIP)), str(long))
    try:
        async with running_server(engine) as (url, app):
            for stream in (False, True):
                slow.finished.clear()
                slow.cancelled.clear()
                started = len(slow.started)
                async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=1.25) as api:
                    with long.open("rb") as f:
                        if stream:
                            events = await api.audio.transcriptions.create(model="m", file=f, stream=True)
                            # Mid-stream: one segment decoded and sent, the next one decoding.
                            deadline = time.monotonic() + 10
                            while not (slow.finished and len(slow.started) - started > len(slow.finished)):
                                assert time.monotonic() < deadline, "the file's decodes never got going"
                                await asyncio.sleep(0.05)
                            await events.close()  # hang up mid-stream
                        else:
                            with pytest.raises(openai.APITimeoutError):
                                await api.audio.transcriptions.create(model="m", file=f)
                for _ in range(30):
                    if not engine.sessions and app[FILE_JOBS].in_use == 0:
                        break
                    await asyncio.sleep(0.1)
                assert not engine.sessions and app[FILE_JOBS].in_use == 0, f"stream={stream}: the job ended"
                assert len(slow.finished) <= 3 and slow.cancelled, (stream, slow.finished, slow.cancelled)
    finally:
        await engine.close()
