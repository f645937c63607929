"""Speaker embeddings, online speaker assignment and re-clustering, on real recorded speech.

Clips come from the shared speech folder beside the repository; they are cut into segments by the project's
own VAD and endpointer (through ``bench.lib.speaker_labels.segment_clip``), as in a live session. The ``low-latency``
endpointer preset is the one the turn-taking clips are judged on: the ``balanced`` preset waits up to 2 s of
silence and so merges most turns of those clips into segments holding two speakers, where one label per
segment cannot be right (see the bench table).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np
import pytest

from bench.lib import speaker_labels as bench
from engine.audio.pcm import SAMPLE_RATE
from engine.speakers.embedder import SpeakerEmbedder
from engine.speakers.tracker import SpeakerConfig, SpeakerTracker
from speechdata import corpus
from speechdata.corpus import SPEECH_DIR, Turn

# Each clip below is one reader; several utterances are joined with 1 s of silence so that a session sees
# several segments of the same voice (including reverberant public-address speech, whisper_jfk).
SINGLE_SPEAKER_SESSIONS: dict[str, tuple[str, ...]] = {
    "ls_1988": ("ls_1988-24833-0000", "ls_1988-24833-0001", "ls_1988-24833-0002", "ls_1988-24833-0003"),
    "ls_2412": ("ls_2412-153948-0000", "ls_2412-153948-0001", "ls_2412-153948-0002"),
    "librivox_sns01": (
        "librivox_sns01_0870",
        "librivox_sns01_0880",
        "librivox_sns01_0890",
        "librivox_sns01_0920",
        "librivox_sns01_0930",
    ),
    "ljspeech": ("ljspeech_LJ002-0020", "ljspeech_LJ002-0035", "ljspeech_LJ050-0131"),
    "jfk": ("whisper_jfk",),
}


@pytest.fixture(scope="module")
def embedder() -> SpeakerEmbedder:
    if not SPEECH_DIR.is_dir():
        pytest.fail(f"shared speech data not found at {SPEECH_DIR}")
    return SpeakerEmbedder()


@cache
def _clip(clip: str) -> np.ndarray:
    return corpus.audio(clip)


@cache
def _session_audio(name: str) -> np.ndarray:
    gap = np.zeros(SAMPLE_RATE, dtype=np.float32)
    return np.concatenate([part for clip in SINGLE_SPEAKER_SESSIONS[name] for part in (_clip(clip), gap)])


_EMBEDDINGS: dict[tuple[str, str], tuple[list, np.ndarray]] = {}


def _segments_and_embeddings(embedder: SpeakerEmbedder, audio_name: str, preset: str) -> tuple[list, np.ndarray]:
    """Segments of a clip (or joined single-speaker session) and one embedding per segment, cached."""
    key = (audio_name, preset)
    if key not in _EMBEDDINGS:
        audio = _session_audio(audio_name) if audio_name in SINGLE_SPEAKER_SESSIONS else _clip(audio_name)
        segments = bench.segment_clip(audio, preset)
        vectors = embedder.embed([audio[s.audio_start : s.audio_end] for s in segments])
        _EMBEDDINGS[key] = (segments, vectors)
    return _EMBEDDINGS[key]


def _run(
    embedder: SpeakerEmbedder, audio_name: str, preset: str, config: SpeakerConfig
) -> tuple[list, list[int], list[int], dict[int, int]]:
    """Assign every segment in order, then re-cluster: (segments, streaming, final labels, relabel message)."""
    segments, vectors = _segments_and_embeddings(embedder, audio_name, preset)
    tracker = SpeakerTracker(config)
    streaming = [
        tracker.assign(i, vectors[i] if s.speech_s >= config.min_embed_speech_s else None, s.speech_s)
        for i, s in enumerate(segments)
    ]
    relabel = tracker.recluster()
    return segments, streaming, [tracker.labels[i] for i in range(len(segments))], relabel


def _scores(clip: str, segments: list, labels: list[int]) -> Any:
    reference = corpus.turns(clip)
    return bench.score_labels(reference, segments, labels, _clip(clip).size / SAMPLE_RATE)


def test_scorer_counts_wrongly_labelled_speech() -> None:
    """The bench's metric itself: one label for two 10 s turns is half wrong; a missed second is a miss."""
    reference = [Turn(0.0, 10.0, "A"), Turn(10.0, 20.0, "B")]
    segments = [bench.Segment(0.0, 10.0, 0, 1), bench.Segment(10.0, 19.0, 0, 1)]
    same = bench.score_labels(reference, segments, [0, 0], 20.0)
    assert same.speaker_error == pytest.approx(9.0 / 19.0, abs=0.01)
    assert same.confusion_s == pytest.approx(9.0, abs=0.02)
    assert same.missed_s == pytest.approx(1.0, abs=0.02)
    assert same.der == pytest.approx(10.0 / 20.0, abs=0.01)
    swapped = bench.score_labels(reference, segments, [5, 3], 20.0)  # label names do not matter
    assert swapped.speaker_error == 0.0
    assert swapped.der == pytest.approx(1.0 / 20.0, abs=0.01)


@pytest.mark.parametrize("n", [1, 3, 8, 16, 17, 40])
def test_the_encoder_sees_few_batch_shapes_and_every_window_once(n: int) -> None:
    """Each new LSTM batch shape costs memory that stays (oneDNN kernels): batches are padded to a few sizes."""
    from engine.speakers.embedder import _BATCH_SIZES, _fixed_shape_chunks

    batch = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3) + 1
    chunks = _fixed_shape_chunks(batch)
    assert all(len(c) in _BATCH_SIZES and 0 < real <= len(c) for c, real in chunks)
    np.testing.assert_array_equal(np.concatenate([c[:real] for c, real in chunks]), batch)
    assert all(not c[real:].any() for c, real in chunks), "padding is zeros"


@pytest.mark.slow  # loads the speaker model: not in the quick tier
def test_embeddings_are_unit_vectors_and_separate_voices(embedder: SpeakerEmbedder) -> None:
    a1, a2 = _clip("ls_1988-24833-0001"), _clip("ls_1988-24833-0002")
    b1 = _clip("ls_2412-153948-0001")
    together = embedder.embed([a1, a2, b1, a1[: SAMPLE_RATE // 2]])
    assert together.shape == (4, embedder.dim) and together.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    alone = np.concatenate([embedder.embed([x]) for x in (a1, a2, b1)])
    np.testing.assert_allclose(together[:3], alone, atol=1e-4)  # batching does not change the result
    same, different = float(together[0] @ together[1]), float(together[0] @ together[2])
    assert same >= 0.75, same
    assert different <= 0.70, different
    assert embedder.embed([]).shape == (0, embedder.dim)


@pytest.mark.slow  # loads the speaker model: not in the quick tier
def test_three_speaker_turns_get_three_labels(embedder: SpeakerEmbedder) -> None:
    """libri_3spk_turns: the bench measures 0 % streaming speaker error; 10 % allows one ~3 s segment wrong."""
    segments, streaming, final, _ = _run(embedder, "libri_3spk_turns", "low-latency", SpeakerConfig())
    assert len(segments) >= 6
    assert len(set(streaming)) == 3
    assert _scores("libri_3spk_turns", segments, streaming).speaker_error <= 0.10
    assert len(set(final)) == 3
    assert _scores("libri_3spk_turns", segments, final).speaker_error <= 0.10


@pytest.mark.slow  # loads the speaker model: not in the quick tier
@pytest.mark.parametrize("preset", ["low-latency", "balanced"])
@pytest.mark.parametrize("session", sorted(SINGLE_SPEAKER_SESSIONS))
def test_single_speaker_never_gets_a_second_label(embedder: SpeakerEmbedder, session: str, preset: str) -> None:
    segments, streaming, final, relabel = _run(embedder, session, preset, SpeakerConfig())
    assert segments, "the VAD found no speech in a read-speech clip"
    assert set(streaming) == {0}
    assert set(final) == {0}
    assert relabel == {}


@pytest.mark.slow  # loads the speaker model: not in the quick tier
@pytest.mark.parametrize("preset", ["low-latency", "balanced"])
@pytest.mark.parametrize("clip", ["libri_3spk_turns", "libri_2spk_overlap_dialogue"])
def test_reclustering_never_makes_labels_worse(embedder: SpeakerEmbedder, clip: str, preset: str) -> None:
    segments, streaming, final, _ = _run(embedder, clip, preset, SpeakerConfig())
    before, after = _scores(clip, segments, streaming), _scores(clip, segments, final)
    assert after.speaker_error <= before.speaker_error + 1e-9
    assert after.der <= before.der + 1e-9


@pytest.mark.slow  # loads the speaker model: not in the quick tier
def test_reclustering_repairs_an_over_split_session(embedder: SpeakerEmbedder) -> None:
    """A streaming threshold far too strict gives nearly every segment its own label; the stop fixes that."""
    config = replace(SpeakerConfig(), similarity_threshold=0.95)
    segments, streaming, final, relabel = _run(embedder, "libri_3spk_turns", "low-latency", config)
    assert len(set(streaming)) > 3
    assert len(set(final)) == 3
    assert _scores("libri_3spk_turns", segments, final).speaker_error <= 0.10
    assert _scores("libri_3spk_turns", segments, streaming).speaker_error >= 0.2
    # The relabel message names exactly the segments whose label changed, with their new label.
    assert relabel == {i: final[i] for i in range(len(segments)) if final[i] != streaming[i]}


@pytest.mark.slow  # loads the speaker model: not in the quick tier
def test_speaker_cap_is_respected(embedder: SpeakerEmbedder) -> None:
    config = replace(SpeakerConfig(), max_speakers=2)
    _, streaming, final, _ = _run(embedder, "libri_3spk_turns", "low-latency", config)
    assert set(streaming) == {0, 1}
    assert set(final) <= {0, 1}


@pytest.mark.slow  # loads the speaker model: not in the quick tier
def test_short_segments_take_the_previous_label(embedder: SpeakerEmbedder) -> None:
    a = embedder.embed([_clip("ls_2412-153948-0000")])[0]
    b = embedder.embed([_clip("ls_1988-24833-0001")])[0]
    c = embedder.embed([_clip("ls_3752-4944-0001")])[0]
    tracker = SpeakerTracker(SpeakerConfig())
    assert tracker.assign(10, None, 0.4) == 0  # nothing known yet: provisional speaker 0
    assert tracker.assign(11, a, 11.0) == 0  # the first voice becomes that speaker 0
    assert tracker.assign(12, b, 7.8) == 1
    assert tracker.assign(13, None, 0.5) == 1  # too short to embed: context
    assert tracker.assign(14, a, 0.6) == 1  # an embedding of a short segment is not trusted either
    assert tracker.assign(15, c, 1.5) == 1  # a new voice, but too little speech to open a speaker
    assert tracker.assign(16, a, 1.5) == 0  # enough to match a known voice
    assert tracker.assign(17, c, 4.4) == 2  # the new voice with enough speech does open one
    assert tracker.num_speakers == 3
    with pytest.raises(ValueError, match="already"):
        tracker.assign(12, b, 7.8)


def test_a_voice_split_off_at_a_change_opens_a_speaker_sooner() -> None:
    """After the turn detector heard another voice begin, 1 s of unlike speech opens a speaker (2 s otherwise); a
    known voice is still recognised, and a short unembedded segment still takes the context label."""
    a, b, c = np.eye(3)[0], np.eye(3)[1], np.eye(3)[2]
    tracker = SpeakerTracker(SpeakerConfig())
    assert tracker.assign(0, a, 5.0) == 0
    assert tracker.peek(b, 1.5) == 0  # too little speech to open a speaker on its own
    assert tracker.peek(b, 1.5, new_voice=True) == 1  # the split says it is someone else
    assert tracker.assign(1, b, 1.5, new_voice=True) == 1
    assert tracker.assign(2, a, 1.2, new_voice=True) == 0  # a known voice stays known
    assert tracker.assign(3, c, 0.6, new_voice=True) == 0  # not embedded: context, as ever
    assert tracker.assign(4, c, 1.5) == 0  # without a detected change, 1.5 s opens nothing


def test_per_segment_work_stays_bounded() -> None:
    """2000 unrelated voices: each assignment compares against at most max_speakers centroids."""
    config = SpeakerConfig()
    rng = np.random.default_rng(7)
    tracker = SpeakerTracker(config)
    comparisons = []
    for segment_id in range(2000):
        label = tracker.assign(segment_id, rng.standard_normal(256).astype(np.float32), 3.0)
        assert 0 <= label < config.max_speakers
        comparisons.append(tracker.last_comparisons)
    assert max(comparisons) == config.max_speakers  # the cap was reached, and never exceeded
    assert comparisons[0] == 0
    assert len(set(tracker.labels.values())) == config.max_speakers
    relabel = tracker.recluster()
    assert set(tracker.labels.values()) <= set(range(config.max_speakers))
    assert all(tracker.labels[i] == label for i, label in relabel.items())
