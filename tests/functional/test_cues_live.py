"""Caption files from real speech through the real engine: word times, subtitle cues, and the cut-and-decode check.

Several LibriSpeech readers, one after another with pauses shorter than the endpoint's silence wait (so some
readers share a segment), stream through a live session. The locked sentences' word times must be monotonic,
inside their sentence, and put the words of each reader on that reader's side of the change; the SRT built from
them must keep every limit, load in third-party parsers and convert with ffmpeg, and the audio cut at each cue's
start and end, decoded alone, must give back the cue's text.
"""

from __future__ import annotations

import asyncio
import html
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import srt as srt_lib
import webvtt

from app.rooms.store import SentenceRecord
from app.transcripts import exports
from app.transcripts.cues import CueRules, build_cues
from engine.asr.transcriber import DecodeRequest, Priority
from engine.stream.engine import CaptionEngine
from engine.stream.runner import stream_audio
from speechdata.corpus import audio, manifest
from speechdata.wer import normalise, word_errors

pytestmark = pytest.mark.heavy

SR = 16_000
# Six readers (LibriSpeech speaker ids differ), each clip said once.
READERS = [
    "ls_2412-153948-0000",
    "ls_1988-24833-0001",
    "ls_1995-1837-0001",
    "librivox_sns01_0870",
    "ls_1272-128104-0000",
    "whisper_jfk",
]
GAPS_S = [0.4, 0.9, 0.5, 1.2, 0.6]


def recording() -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    parts, spans, t = [np.zeros(SR // 2, np.float32)], [], 0.5
    for k, clip in enumerate(READERS):
        a = audio(clip)
        spans.append((clip, t, t + a.size / SR))
        gap = GAPS_S[k] if k < len(GAPS_S) else 1.5
        parts += [a, np.zeros(int(gap * SR), np.float32)]
        t += a.size / SR + int(gap * SR) / SR
    return np.concatenate(parts), spans


async def test_word_times_and_subtitle_cues_of_real_speech(engine: CaptionEngine, tmp_path: Path) -> None:
    assert all(c in manifest() for c in READERS)
    samples, spans = recording()
    # Streamed faster than real time, the recognizer is always busy, and a live session would then keep the VAD's
    # word times for most sentences (the aligner's skip rule, tested in tests/engine/asr/test_align.py): what is checked
    # here is where the aligner puts the words.
    assert engine.aligner is not None, "the engine should align words with its local checkpoint"
    engine.aligner.skip_when_behind = False
    try:
        result = await stream_audio(engine, samples, realtime=False)
    finally:
        engine.aligner.skip_when_behind = True
    sentences = result.sentences()
    assert sentences and all(s.words for s in sentences)
    for s in sentences:
        assert [w.w for w in s.words] == s.text.split()
        last = s.start_ms
        for w in s.words:
            assert last <= w.start_ms <= w.end_ms <= s.end_ms
            last = w.end_ms

    # Each word on its reader's side of every change: words matched to a clip's reference words lie inside that
    # clip, give or take half the pause around it.
    inside = total = 0
    for clip, start, end in spans:
        ref = set(normalise(manifest()[clip]["text"]))
        others = set().union(*(normalise(manifest()[c]["text"]) for c in READERS if c != clip))
        for s in sentences:
            for w in s.words:
                word = " ".join(normalise(w.w))
                if word in ref and word not in others:  # a word only this reader says
                    mid = (w.start_ms + w.end_ms) / 2000
                    total += 1
                    inside += start - 0.25 <= mid <= end + 0.25
    assert total >= 40 and inside / total >= 0.9, (inside, total)

    records = [SentenceRecord(s.id, "live", s.text, s.start_ms, s.end_ms, s.spk, s.words) for s in sentences]
    rules = CueRules()
    cues = build_cues(records, rules)
    assert [w.w for c in cues for w in c.words] == [w.w for s in sentences for w in s.words]
    for c in cues:
        assert len(c.lines) <= 2 and all(len(line) <= 42 for line in c.lines), c.lines
        assert rules.min_ms <= c.end_ms - c.start_ms <= rules.max_ms

    # The times hold the words: each cue's audio, decoded alone, gives back the cue's text. The goal is 8 %; with
    # word times from Whisper's cross-attention bench.cues measures 6-7 % on read speech (VAD times alone: 19 %,
    # 17 % on this recording, which this bound fails).
    errors = words = 0
    for k, c in enumerate(cues):
        cut = samples[int(c.start_ms * SR / 1000) : int(c.end_ms * SR / 1000)]
        decoded = await engine.transcriber.transcribe(DecodeRequest(f"cue-{k}", cut, Priority.FINAL))
        e, n = word_errors(" ".join(w.w for w in c.words), decoded.text)
        errors, words = errors + e, words + n
    print(f"cut-and-decode WER {errors / words:.1%} over {len(cues)} cues")
    assert errors / words <= 0.10, f"cut-and-decode WER {errors / words:.1%} over {len(cues)} cues"

    # Third-party parsers read the same cues from both files; ffmpeg converts them.
    srt_cues = list(srt_lib.parse(exports.to_srt(records)))
    (tmp_path / "c.vtt").write_text(exports.to_vtt(records), encoding="utf-8")
    vtt_cues = webvtt.read(str(tmp_path / "c.vtt")).captions
    assert len(srt_cues) == len(vtt_cues) == len(cues)
    assert [c.content for c in srt_cues] == [html.unescape(c.text) for c in vtt_cues]
    assert [round(c.start.total_seconds() * 1000) for c in srt_cues] == [c.start_ms for c in cues]
    if shutil.which("ffmpeg"):
        await asyncio.to_thread(
            subprocess.run,
            ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(tmp_path / "c.vtt"), str(tmp_path / "c.ass")],
            check=True,
            timeout=30,
        )
        assert (tmp_path / "c.ass").read_text(encoding="utf-8").count("Dialogue:") == len(cues)
