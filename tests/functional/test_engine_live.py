"""The real engine (Silero VAD, endpointer, vLLM Whisper, speaker model) on real recorded speech."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time

import numpy as np
import pytest

from engine.__main__ import build_parser, run
from engine.asr.guard import SILENCE_PHRASES, compression_ratio, normalise
from engine.asr.transcriber import DecodeRequest, Priority
from engine.protocol import Caption, Ready, Speakers, Stopped
from engine.stream.engine import CaptionEngine
from engine.stream.runner import StreamResult, stream_audio
from speechdata.corpus import audio, manifest, pad, reference, wav_path
from speechdata.wer import word_errors

pytestmark = pytest.mark.heavy

CLEAN_READ = sorted(
    c for c, e in manifest().items() if e["kind"] == "read" and e["lang"] == "en" and c.startswith(("ls_", "librivox_"))
)


def check_protocol(result: StreamResult) -> None:
    """What every stream must satisfy: seq increases by one, each sentence is sent once, the end is final+stopped."""
    seqs = [m.seq for m in result.messages]
    assert seqs == list(range(1, len(seqs) + 1))
    assert isinstance(result.messages[0], Ready)
    ids = [s.id for m in result.messages if isinstance(m, Caption) for s in m.sentences]
    assert ids == sorted(set(ids)), "a locked sentence was sent twice or out of order"
    tail = [m for m in result.messages if not isinstance(m, Speakers)][-2:]
    assert isinstance(tail[0], Caption) and tail[0].is_final and isinstance(tail[1], Stopped), tail


async def test_locked_text_is_as_accurate_as_offline_decoding(engine: CaptionEngine) -> None:
    """Corpus WER of the streamed, locked captions within 1.5 points of decoding each whole clip offline."""
    assert len(CLEAN_READ) >= 15
    stream_err = offline_err = words = 0
    for clip in CLEAN_READ:
        samples = audio(clip)
        result = await stream_audio(engine, pad(samples, 0.5, 1.0), realtime=False)
        check_protocol(result)
        offline = await engine.transcriber.transcribe(DecodeRequest(f"offline-{clip}", samples, Priority.FINAL))
        e_s, n = word_errors(reference(clip), result.text())
        e_o, _ = word_errors(reference(clip), offline.text)
        stream_err, offline_err, words = stream_err + e_s, offline_err + e_o, words + n
    stream_wer, offline_wer = stream_err / words, offline_err / words
    print(f"\nlocked WER {stream_wer:.3%} vs offline {offline_wer:.3%} over {len(CLEAN_READ)} clips, {words} words")
    assert stream_wer <= offline_wer + 0.015
    assert stream_wer < 0.10


def recorded_noise(noisy: str, clean: str) -> np.ndarray:
    """The real noise recording that was added to a clean LibriSpeech clip: noisy minus clean (they are sample
    aligned, and the residual is uncorrelated with the speech)."""
    mix, speech = audio(noisy), audio(clean)
    return mix - speech


NOISES = {
    "recorded noise A": lambda: recorded_noise("ls_1988-24833-0001_noise0dB", "ls_1988-24833-0001"),
    "recorded noise B": lambda: recorded_noise("ls_2412-153948-0000_noise5dB", "ls_2412-153948-0000"),
    "digital silence": lambda: np.zeros(8 * 16000, np.float32),
    "quiet hiss": lambda: (np.random.default_rng(7).standard_normal(8 * 16000) * 0.003).astype(np.float32),
}


@pytest.mark.parametrize("kind", sorted(NOISES))
async def test_noise_and_silence_never_become_captions(engine: CaptionEngine, kind: str) -> None:
    result = await stream_audio(engine, NOISES[kind](), realtime=False)
    check_protocol(result)
    assert result.sentences() == []
    assert all(m.partial == "" for m in result.messages if isinstance(m, Caption))


async def test_street_recording_gives_no_stock_phrases_or_loops(engine: CaptionEngine) -> None:
    """The street recording has no reference text but a person does read under the traffic (the VAD and Whisper
    both find sentences): whatever is captioned must be real words, never a stock silence phrase or a loop."""
    result = await stream_audio(engine, audio("dns_street_mobile_A1CIM28ZUCA8RX"), realtime=False)
    check_protocol(result)
    for s in result.sentences():
        assert normalise(s.text) not in SILENCE_PHRASES
        assert compression_ratio(s.text) < 2.4


async def test_live_stream_partials_come_first_and_locked_sentences_never_change(engine: CaptionEngine) -> None:
    """Two utterances with a pause, paced like a live microphone."""
    first, second = "ls_2412-153948-0000", "ls_1988-24833-0002"
    samples = np.concatenate([pad(audio(first), 0.5, 2.6), pad(audio(second), 0.0, 2.6)])
    result = await stream_audio(engine, samples, realtime=True)
    check_protocol(result)
    sentences = result.sentences()
    # Each utterance is one sentence, or two where its reader paused at what Whisper heard as a full stop (the first
    # pauses 0.83 s after "antecedents", long enough for the early lock).
    by_clip = [[s for s in sentences if s.end_ms <= 13_000], [s for s in sentences if s.start_ms >= 13_000]]
    assert [len(b) for b in by_clip] in ([1, 1], [2, 1]), [(s.start_ms, s.end_ms, s.text) for s in sentences]
    first_lock = next(i for i, m in enumerate(result.messages) if isinstance(m, Caption) and m.sentences)
    partials_before = [m.partial for m in result.messages[:first_lock] if isinstance(m, Caption) and m.partial]
    assert partials_before, "no partial text was shown before the first sentence locked"
    # The partial shown was on its way to the locked text: most of its words appear in it.
    last_words = set(partials_before[-1].lower().split())
    assert len(last_words & set(sentences[0].text.lower().split())) >= 0.5 * len(last_words)
    for said, clip in zip(by_clip, (first, second), strict=True):
        errors, n = word_errors(reference(clip), " ".join(s.text for s in said))
        assert errors / n < 0.2
        assert all(s.spk is not None for s in said)
    # Times are session milliseconds around the real speech.
    assert 300 <= by_clip[0][0].start_ms <= 1200 and by_clip[0][-1].end_ms <= 12_600
    assert by_clip[1][0].start_ms >= 14_000


async def test_readers_taking_turns_half_a_second_apart_get_their_own_labels(engine: CaptionEngine) -> None:
    """Two readers alternating with 0.5 s gaps (shorter than the endpoint's silence wait), paced like a live
    microphone: two labels, and the locked sentences change label within 1 s of each true change of reader."""
    turns = ["ls_1988-24833-0000", "ls_3752-4944-0001", "ls_1988-24833-0002", "ls_3752-4944-0000", "ls_1988-24833-0003"]
    gap = np.zeros(8000, np.float32)
    pieces, starts_ms, at = [np.zeros(8000, np.float32)], [], 8000
    for i, clip in enumerate(turns):
        if i:
            pieces.append(gap)
            at += gap.size
        starts_ms.append(at // 16)
        pieces.append(audio(clip))
        at += audio(clip).size
    pieces.append(np.zeros(16000, np.float32))
    result = await stream_audio(engine, np.concatenate(pieces), realtime=True)
    check_protocol(result)
    # The labels a viewer saw live: as they locked, with any correction right after a lock (a relabel at stop may
    # correct them later).
    sentences = result.sentences(live=True)
    assert len({s.spk for s in sentences}) == 2, [(s.spk, s.start_ms, s.text) for s in sentences]
    changes = [(a.spk, b.spk, b.start_ms) for a, b in itertools.pairwise(sentences) if a.spk != b.spk]
    for true_start in starts_ms[1:]:
        assert any(abs(start - true_start) <= 1000 for _, _, start in changes), (true_start, changes)
    assert len(changes) == len(starts_ms) - 1, changes
    errors, n = word_errors(" ".join(reference(c) for c in turns), result.text())
    assert errors / n < 0.15, result.text()
    # The new voice's label showed with the partial text before its sentence locked.
    assert any(isinstance(m, Caption) and m.partial_spk is not None for m in result.messages)


async def test_the_event_loop_never_stalls_while_four_sessions_stream(engine: CaptionEngine) -> None:
    stalls: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            stalls.append(time.perf_counter() - t - 0.01)

    clips = ["ls_2412-153948-0001", "ls_1995-1837-0001", "librivox_sns01_0870", "ls_1272-128104-0000"]
    watcher = asyncio.create_task(probe())
    results = await asyncio.gather(
        *(stream_audio(engine, pad(audio(c), 0.2 * i, 2.5), realtime=True) for i, c in enumerate(clips))
    )
    done.set()
    await watcher
    assert all(r.sentences() for r in results)
    worst, p99 = max(stalls), float(np.percentile(stalls, 99))
    print(f"\nloop stalls over {len(stalls)} probes: p99 {p99 * 1000:.1f} ms, worst {worst * 1000:.1f} ms")
    assert p99 < 0.05 and worst < 0.25


async def test_cli_prints_the_wire_messages_then_a_summary(
    engine: CaptionEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args([str(wav_path("ls_1988-24833-0001"))])
    assert isinstance(args, argparse.Namespace)
    assert await run(args, engine=engine) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["type"] == "ready"
    summary = lines[-1]
    assert summary["type"] == "summary" and summary["audio_s"] == pytest.approx(7.9, abs=0.1)
    errors, n = word_errors(reference("ls_1988-24833-0001"), summary["text"])
    assert errors / n < 0.15
    assert all("spk" in s for s in summary["sentences"])
