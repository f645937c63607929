"""Whisper's own translate task, for real: the Chinese clips of ``shared/data/translations/en.jsonl`` through
``POST /v1/audio/translations`` (OpenAI's multipart form) on the real engine (the embedded multilingual
whisper-base), scored with chrF (sacrebleu's) against the reference English, beside the same clips transcribed."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
import sacrebleu

from engine import CaptionEngine
from speechdata.corpus import wav_path
from speechdata.translations import references
from tests.servers import running_server

pytestmark = pytest.mark.heavy


async def speech_to_text(http: aiohttp.ClientSession, url: str, clip: str) -> dict[str, Any]:
    """``POST url`` with the clip's WAV as an OpenAI client sends it; the verbose JSON answer."""
    form = aiohttp.FormData()
    form.add_field("model", "whisper-1")
    form.add_field("response_format", "verbose_json")
    form.add_field("file", wav_path(clip).read_bytes(), filename=f"{clip}.wav", content_type="audio/wav")
    async with http.post(url, data=form) as r:
        assert r.status == 200, await r.text()
        body: dict[str, Any] = await r.json()
        return body


async def test_speech_in_chinese_is_captioned_in_english(engine: CaptionEngine) -> None:
    pairs = references("en")
    assert len(pairs) >= 2
    translated, transcribed = [], []
    async with running_server(engine) as (url, _app), aiohttp.ClientSession() as http:
        for clip, _ in pairs:
            out = await speech_to_text(http, f"{url}/v1/audio/translations", clip)
            assert out["task"] == "translate" and out["language"] == "english", out
            translated.append(out["text"])
            transcribed.append((await speech_to_text(http, f"{url}/v1/audio/transcriptions", clip))["text"])
    english = [text for _, text in pairs]
    chrf = sacrebleu.corpus_chrf(translated, [english]).score
    baseline = sacrebleu.corpus_chrf(transcribed, [english]).score
    print(f"whisper translate zh->en chrF {chrf:.1f} (transcribed: {baseline:.1f}) over {len(pairs)} clips:",
          translated)
    assert all(text.isascii() and len(text.split()) >= 3 for text in translated), translated
    assert not any(t.isascii() for t in transcribed), f"the transcripts are Chinese: {transcribed}"
    assert chrf >= baseline + 10, (chrf, baseline, translated)  # 23.0 against 0.0 here: whisper-base is modest
