"""Word alignment (engine/asr/align.py, align_service.py) and how aligned words become word times
(engine/stream/words.py): the warp, the times read off it and the service's bounds on synthetic inputs; the real
checkpoint on real speech in the heavy tier."""

from __future__ import annotations

import asyncio
import itertools
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.asr.align import POSITION_S, AlignedWord, dtw_path, word_times
from engine.asr.align_service import AlignService
from engine.stream.words import place_words
from speechdata.corpus import audio, manifest
from speechdata.wer import normalise

WINDOW_MS = 32.0


def _dtw_reference(cost: np.ndarray) -> float:
    """The textbook recurrence, cell by cell: the cheapest path's total cost."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            acc[i, j] = cost[i - 1, j - 1] + min(acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1])
    return float(acc[n, m])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_the_vectorised_warp_finds_the_cheapest_monotonic_path(n: int, m: int, seed: int) -> None:
    cost = np.random.default_rng(seed).random((n, m))
    rows, cols = dtw_path(cost)
    assert (rows[0], cols[0]) == (0, 0) and (rows[-1], cols[-1]) == (n - 1, m - 1)
    steps = set(zip(np.diff(rows).tolist(), np.diff(cols).tolist(), strict=True))
    assert steps <= {(1, 0), (0, 1), (1, 1)}, steps
    assert cost[rows, cols].sum() == pytest.approx(_dtw_reference(cost))


def test_word_times_follow_the_heads_attention() -> None:
    # Three words of 1, 2 and 1 tokens; each token (and the end of text) attends to its own block of positions.
    blocks = [(5, 20), (20, 30), (30, 45), (45, 60), (60, 70)]  # positions of tokens 0-3 and of the end
    scores = np.full((2, len(blocks), 70), -5.0)
    for row, (a, b) in enumerate(blocks):
        scores[:, row, a:b] = 5.0
    times = word_times(scores, [1, 2, 1])
    # A word runs from where the path enters its first token's row to where it enters the next word's (the first
    # word from the start of the audio; the last to where the end of text takes over).
    want = [(0, 20), (20, 45), (45, 60)]
    assert all(
        abs(a / POSITION_S - wa) <= 2 and abs(b / POSITION_S - wb) <= 2
        for (a, b), (wa, wb) in zip(times, want, strict=True)
    ), times
    assert all(a <= b for a, b in times) and all(x[1] <= y[0] + 1e-9 for x, y in itertools.pairwise(times))


def _probs(pattern: str) -> np.ndarray:
    return np.array([0.9 if c == "#" else 0.05 for c in pattern], np.float32)


@pytest.mark.parametrize("three_start_s", [2.10, 2.22])  # in the pause; 100 ms after the speech resumed
def test_aligned_words_are_snapped_to_the_pauses_around_them(three_start_s: float) -> None:
    # Speech 1000-2280 ms, a pause, speech 2920-4200 ms on the session clock; the audio starts at 800 ms.
    probs = _probs("#" * 40 + "." * 20 + "#" * 40)
    aligned = [
        AlignedWord("one", 0.20, 0.70),
        AlignedWord("two,", 0.70, 1.90),
        AlignedWord("three", three_start_s, 3.0),
        AlignedWord("four", 3.0, 3.3),
    ]
    words = place_words(
        "one two, three four", 1000, 1000 + 100 * 32, probs, 0.35, WINDOW_MS, audio_start_ms=800, aligned=aligned
    )
    assert [(w.w, w.start_ms) for w in words] == [("one", 1000), ("two,", 1500), ("three", 2920), ("four", 3800)]
    assert words[1].end_ms == 2280  # the warp ran on through the pause: back to where the speech stopped
    assert words[2].end_ms == 3800 and words[3].end_ms == 4100  # inside speech the alignment stands


def test_aligned_words_that_are_not_the_text_are_ignored() -> None:
    probs = _probs("#" * 50)
    aligned = [AlignedWord("other", 0.0, 0.5), AlignedWord("words", 0.5, 1.0)]
    words = place_words("one two", 0, 1600, probs, 0.35, WINDOW_MS, aligned=aligned)
    assert [w.w for w in words] == ["one", "two"] and words[0].start_ms == 0 and words[-1].end_ms == 1600


class _FakeAligner:
    """Stands in for the Whisper aligner: blocks until released, so the service's queue can be filled."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def align(self, audio: np.ndarray, text: str, language: str | None) -> list[AlignedWord]:
        self.release.wait(5)
        return [AlignedWord(w, 0.0, 0.1) for w in text.split()]


async def test_the_service_skips_sentences_when_it_falls_behind_and_never_raises() -> None:
    from concurrent.futures import ThreadPoolExecutor

    service = AlignService(max_waiting=2)
    fake = _FakeAligner()
    service._aligner = fake  # type: ignore[assignment]
    service._pool = ThreadPoolExecutor(max_workers=1)
    a = np.zeros(16_000, np.float32)
    first, second, third = (service.align(a, f"word {k}", "en") for k in range(3))
    assert third.done() and third.result() is None and service.skipped == 1
    assert service.align(a, "busy", "en", busy=True).result() is None and service.skipped == 2
    queued = service.align(a, "a file's sentence", "en", queue=True)  # nobody waits for a file: it queues
    assert not queued.done()
    fake.release.set()
    assert [w.text for w in (await first) or []] == ["word", "0"]
    assert [w.text for w in (await second) or []] == ["word", "1"]
    assert [w.text for w in (await queued) or []] == ["a", "file's", "sentence"]
    fourth = service.align(a, "word 3", "en")
    assert (await fourth) is not None and service.stats()["align_calls"] == 4

    def broken(audio: np.ndarray, text: str, language: str | None) -> list[AlignedWord]:
        raise ValueError("no")

    fake.align = broken  # type: ignore[method-assign]
    assert (await service.align(a, "x", "en")) is None and service.failed == 1
    await service.close()
    assert (await service.align(a, "after close", "en")) is None


@pytest.mark.heavy
async def test_whisper_puts_each_word_on_its_readers_side_of_a_change() -> None:
    """Two readers one after the other with a 0.3 s pause, decoded as one sentence: with the real aligner and the
    real VAD, every word of the first reader lies before the change and every word of the second after it. (The
    text is punctuated as Whisper writes it: the references are bare.)"""
    from engine.asr.align import WhisperAligner
    from engine.audio.vad import WINDOW, BatchedVad
    from engine.config import VadConfig
    from engine.models.resolve import resolve_model

    first, second = "ls_1988-24833-0002", "ls_2412-153948-0000"
    a, b = audio(first), audio(second)
    change_ms = (a.size / 16_000 + 0.15) * 1000
    both = np.concatenate([a, np.zeros(4_800, np.float32), b])
    text = " ".join(manifest()[c]["text"].lower() + "." for c in (first, second))
    spec = await asyncio.to_thread(resolve_model, None)
    aligner = await asyncio.to_thread(WhisperAligner, spec.path)
    aligned = await asyncio.to_thread(aligner.align, both, text, "en")
    assert [w.text for w in aligned] == text.split()
    vad = BatchedVad(1)
    slot = vad.acquire()
    n = both.size // WINDOW
    probs = vad.run({slot: both[: n * WINDOW].reshape(n, WINDOW)})[slot]
    words = place_words(text, 0, both.size / 16, probs, VadConfig().offset, WINDOW * 1000 / 16_000, aligned=aligned)
    n_first = len(normalise(manifest()[first]["text"]))
    assert all(w.end_ms <= change_ms for w in words[:n_first]), words[n_first - 2 : n_first]
    assert all(w.start_ms >= change_ms for w in words[n_first:]), words[n_first : n_first + 2]
    assert all(x.end_ms <= y.start_ms for x, y in itertools.pairwise(words))


@pytest.mark.parametrize(
    ("text", "side"), [("asthma. if the", "after"), ("asthma if. the", "before"), ("asthma if the", "after")]
)
def test_a_word_across_a_pause_goes_to_one_side(text: str, side: str) -> None:
    # Speech 0-1280 ms, pause to 1920 ms, speech on; the warp gave the middle word 1100-2100 ms (180 ms before the
    # pause, 180 ms after it: a tie goes after, unless punctuation says otherwise).
    probs = _probs("#" * 40 + "." * 20 + "#" * 40)
    a, b, c = text.split()
    aligned = [AlignedWord(a, 0.3, 1.1), AlignedWord(b, 1.1, 2.1), AlignedWord(c, 2.1, 2.6)]
    words = place_words(text, 0, 3200, probs, 0.35, WINDOW_MS, aligned=aligned)
    if side == "after":
        assert words[0].end_ms == 1280 and words[1].start_ms == 1920, words
    else:
        assert words[1].end_ms == 1280 and words[2].start_ms == 1920, words
    assert all(x.end_ms <= y.start_ms for x, y in itertools.pairwise(words))
