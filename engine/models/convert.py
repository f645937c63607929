"""Write a Hugging Face Whisper folder from a CTranslate2 (faster-whisper) model: ``convert_ct2_whisper``.

The tensors come from ``engine.models.ct2_whisper``; this module adds the JSON side (model, generation,
feature-extractor and tokenizer configs). Everything is derived from the tensor shapes (``WhisperDims``), the
CTranslate2 ``config.json`` (suppressed tokens, language ids, alignment heads) and the tokenizer's own special
tokens, so nothing model-specific is hard-coded. Field names follow what transformers writes for
``openai/whisper-*``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.numpy import save_file

from engine.models import ARCHITECTURE
from engine.models.ct2 import Ct2FormatError, read_ct2_model
from engine.models.ct2_whisper import (
    CHUNK_LENGTH_S,
    CONVERTER_VERSION,
    HOP_LENGTH,
    N_FFT,
    SAMPLE_RATE_HZ,
    WEIGHTS_FILE,
    WhisperDims,
    hf_state_dict,
    whisper_dims,
)

_EOT = "<|endoftext|>"


@dataclass(frozen=True)
class WhisperTokens:
    """Ids of the special tokens, read from ``tokenizer.json`` (they differ by one between model families)."""

    by_content: dict[str, int]
    special: tuple[str, ...]  # every added special token, in id order

    @classmethod
    def from_tokenizer_json(cls, path: Path) -> WhisperTokens:
        """Parse the ``added_tokens`` of a ``tokenizer.json``; ``Ct2FormatError`` if not Whisper's."""
        data = json.loads(path.read_text(encoding="utf-8"))
        added = sorted(data.get("added_tokens", []), key=lambda t: t["id"])
        tokens = cls(
            by_content={t["content"]: int(t["id"]) for t in added},
            special=tuple(t["content"] for t in added if t.get("special")),
        )
        for required in (_EOT, "<|startoftranscript|>", "<|notimestamps|>"):
            if required not in tokens.by_content:
                raise Ct2FormatError(f"{path}: not a Whisper tokenizer (no {required} token)")
        return tokens

    def id(self, content: str) -> int:
        return self.by_content[content]

    def first(self, *contents: str) -> int | None:
        """Id of the first of ``contents`` the tokenizer has (token names changed across releases)."""
        return next((self.by_content[c] for c in contents if c in self.by_content), None)


def model_config(dims: WhisperDims, tokens: WhisperTokens) -> dict[str, Any]:
    """``config.json`` for ``WhisperForConditionalGeneration`` (decoding options: generation config)."""
    eot = tokens.id(_EOT)
    return {
        # The windowed variant (engine/asr/vllm_plugin.py): vLLM then pads each request only to its own window.
        # transformers reads model_type and loads it as plain WhisperForConditionalGeneration.
        "architectures": [ARCHITECTURE],
        "model_type": "whisper",
        "vocab_size": dims.vocab_size,
        "num_mel_bins": dims.n_mels,
        "d_model": dims.d_model,
        "encoder_layers": dims.encoder_layers,
        "encoder_attention_heads": dims.encoder_heads,
        "encoder_ffn_dim": dims.encoder_ffn_dim,
        "decoder_layers": dims.decoder_layers,
        "decoder_attention_heads": dims.decoder_heads,
        "decoder_ffn_dim": dims.decoder_ffn_dim,
        "num_hidden_layers": dims.encoder_layers,
        "max_source_positions": dims.max_source_positions,
        "max_target_positions": dims.max_target_positions,
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "is_encoder_decoder": True,
        "use_cache": True,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "init_std": 0.02,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "decoder_start_token_id": tokens.id("<|startoftranscript|>"),
        "dtype": "float16",
    }


def generation_config(dims: WhisperDims, tokens: WhisperTokens, ct2_config: dict[str, Any]) -> dict[str, Any]:
    """``generation_config.json``: what Whisper's ``generate()`` needs for language, task and timestamps."""
    eot = tokens.id(_EOT)
    config: dict[str, Any] = {
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "decoder_start_token_id": tokens.id("<|startoftranscript|>"),
        "max_length": dims.max_target_positions,
        "is_multilingual": dims.multilingual,
        "no_timestamps_token_id": tokens.id("<|notimestamps|>"),
        "max_initial_timestamp_index": 50,
        "return_timestamps": False,
        "suppress_tokens": list(ct2_config.get("suppress_ids", [])),
        "begin_suppress_tokens": list(ct2_config.get("suppress_ids_begin", [])),
    }
    if "alignment_heads" in ct2_config:
        config["alignment_heads"] = [list(pair) for pair in ct2_config["alignment_heads"]]
    prev = tokens.first("<|startofprev|>")
    if prev is not None:
        config["prev_sot_token_id"] = prev
    if dims.multilingual:
        by_id = {v: k for k, v in tokens.by_content.items()}
        missing = [i for i in ct2_config.get("lang_ids", []) if i not in by_id]
        if missing or not ct2_config.get("lang_ids"):
            raise Ct2FormatError(f"language ids {missing[:3] or '(none)'} are not in the tokenizer")
        config["lang_to_id"] = {by_id[i]: i for i in ct2_config["lang_ids"]}
        config["task_to_id"] = {task: tokens.id(f"<|{task}|>") for task in ("transcribe", "translate")}
    return config


def preprocessor_config(dims: WhisperDims) -> dict[str, Any]:
    """``preprocessor_config.json`` for ``WhisperFeatureExtractor`` (log-mel, 30 s window)."""
    n_samples = CHUNK_LENGTH_S * SAMPLE_RATE_HZ
    return {
        "feature_extractor_type": "WhisperFeatureExtractor",
        "processor_class": "WhisperProcessor",
        "feature_size": dims.n_mels,
        "sampling_rate": SAMPLE_RATE_HZ,
        "n_fft": N_FFT,
        "hop_length": HOP_LENGTH,
        "chunk_length": CHUNK_LENGTH_S,
        "n_samples": n_samples,
        "nb_max_frames": n_samples // HOP_LENGTH,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": False,
    }


def tokenizer_configs(dims: WhisperDims, tokens: WhisperTokens) -> dict[str, dict[str, Any]]:
    """``tokenizer_config.json`` and ``special_tokens_map.json`` beside the packaged ``tokenizer.json``."""
    extra = [t for t in tokens.special if t != _EOT]
    special_map: dict[str, Any] = {
        "bos_token": _EOT,
        "eos_token": _EOT,
        "pad_token": _EOT,
        "unk_token": _EOT,
        "additional_special_tokens": extra,
    }
    tokenizer_config: dict[str, Any] = {
        **special_map,
        "tokenizer_class": "WhisperTokenizer",
        "processor_class": "WhisperProcessor",
        "model_max_length": dims.max_target_positions,
        "add_prefix_space": False,
        "add_bos_token": False,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "return_attention_mask": False,
    }
    return {"tokenizer_config.json": tokenizer_config, "special_tokens_map.json": special_map}


def missing_merges(model: dict[str, Any]) -> list[tuple[int, list[str]]]:
    """The merges a byte-level BPE ``model`` (``tokenizer.json``'s ``model``) lacks, as (rank, pair), in rank order.

    In a byte-level BPE vocabulary the 256 byte symbols come first and then one token per merge, in merge order:
    token id ``256 + r`` is what merge ``r`` makes. A token past the bytes that no merge makes is one the tokenizer
    can never produce from text, though the model writes it. Its merge is the one split of it into two tokens
    made before it (a split that is not unique is left alone)."""
    vocab: dict[str, int] = model.get("vocab") or {}
    pairs = [m.split(" ") if isinstance(m, str) else list(m) for m in model.get("merges") or ()]
    made = {a + b for a, b in pairs}
    last = 256 + len(pairs)  # with every merge missing below it found, the highest id merges make
    found: list[tuple[int, list[str]]] = []
    for token, token_id in sorted(vocab.items(), key=lambda item: item[1]):
        if token_id < 256 or token in made:
            continue
        if token_id > last:
            break
        splits = [
            [token[:k], token[k:]]
            for k in range(1, len(token))
            if vocab.get(token[:k], token_id) < token_id and vocab.get(token[k:], token_id) < token_id
        ]
        if len(splits) == 1:
            found.append((token_id - 256, splits[0]))
            last += 1
    return found


def with_complete_merges(data: dict[str, Any]) -> dict[str, Any]:
    """``tokenizer.json`` ``data`` with the merges its BPE model lacks put back in their places (``missing_merges``).

    The embedded whisper-base's ``tokenizer.json`` lacks Whisper's first merge, "Ġ t": every word that begins with
    "t" after a space (" the", " to") was encoded as a lone space and the rest, which the model never writes.
    Text the decoder is made to start with (settled words) then read to it as odd tokens, and a loop that repeated
    that text was not seen as one (its copies were different tokens)."""
    model = data.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("merges"), list):
        return data
    merges = model["merges"]
    for rank, pair in missing_merges(model):
        merges.insert(rank, " ".join(pair) if not merges or isinstance(merges[0], str) else pair)
    return data


def with_timestamp_tokens(tokenizer: Path, dims: WhisperDims, tokens: WhisperTokens) -> dict[str, Any]:
    """The packaged ``tokenizer.json``, its BPE merges completed (``with_complete_merges``), with Whisper's timestamp
    tokens added where the model has them.

    faster-whisper's tokenizer stops at ``<|notimestamps|>``; the model's vocabulary goes on with ``<|0.00|>``,
    ``<|0.02|>``, ... (one per 20 ms, up to ``<|30.00|>``) to ``vocab_size``. They are added as OpenAI's Hugging
    Face tokenizers have them (not special), so prompts can hold ``<|0.00|>`` and decodes can write them."""
    data: dict[str, Any] = with_complete_merges(json.loads(tokenizer.read_text(encoding="utf-8")))
    first = max(tokens.by_content.values()) + 1
    if "<|0.00|>" in tokens.by_content:
        return data
    data.setdefault("added_tokens", []).extend(
        {
            "id": first + i,
            "content": f"<|{i * 0.02:.2f}|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": False,
        }
        for i in range(dims.vocab_size - first)
    )
    return data


def convert_ct2_whisper(
    model_bin: Path | Sequence[Path], ct2_config: Path, tokenizer: Path, out_dir: Path
) -> dict[str, tuple[int, ...]]:
    """Convert a CTranslate2 Whisper checkpoint into a Hugging Face folder ``out_dir`` (created if needed).

    ``model_bin`` is the ``model.bin`` or its ordered parts; ``ct2_config`` and ``tokenizer`` are the
    checkpoint's ``config.json`` and ``tokenizer.json``. Files of the same names in ``out_dir`` are
    overwritten; callers that need atomicity write into a fresh folder and rename it. Returns the name and
    shape of every tensor written to ``model.safetensors``. Raises ``Ct2FormatError`` (a ``ValueError``)
    for anything that is not a standard Whisper checkpoint, and ``OSError`` for unreadable files.
    """
    model = read_ct2_model(model_bin)
    dims = whisper_dims(model)
    tensors = hf_state_dict(model, dims)
    ct2 = json.loads(ct2_config.read_text(encoding="utf-8"))
    tokens = WhisperTokens.from_tokenizer_json(tokenizer)
    top_id = max(tokens.by_content.values())
    if top_id >= dims.vocab_size:
        raise Ct2FormatError(f"{tokenizer}: token id {top_id} exceeds the model's {dims.vocab_size} tokens")

    out_dir.mkdir(parents=True, exist_ok=True)
    metadata = {"format": "pt", "converted_from": "ctranslate2", "converter_version": str(CONVERTER_VERSION)}
    save_file(tensors, str(out_dir / WEIGHTS_FILE), metadata=metadata)
    documents: dict[str, dict[str, Any]] = {
        "config.json": model_config(dims, tokens),
        "generation_config.json": generation_config(dims, tokens, ct2),
        "preprocessor_config.json": preprocessor_config(dims),
        **tokenizer_configs(dims, tokens),
    }
    for name, document in documents.items():
        (out_dir / name).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    (out_dir / "tokenizer.json").write_text(
        json.dumps(with_timestamp_tokens(tokenizer, dims, tokens), ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return {name: tuple(array.shape) for name, array in tensors.items()}
