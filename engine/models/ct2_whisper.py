"""Map a CTranslate2 (faster-whisper) Whisper model onto Hugging Face ``WhisperForConditionalGeneration``.

The output folder is what vLLM and transformers load offline: ``model.safetensors`` (weights in their stored
dtype), ``config.json``, ``generation_config.json``, ``preprocessor_config.json`` and the tokenizer files.

Weight mapping (CTranslate2 name -> Hugging Face name), per layer ``i``:

- ``*/self_attention/linear_0`` holds q, k and v stacked along the output axis; it is split into
  ``self_attn.{q,k,v}_proj``. Hugging Face's ``k_proj`` has no bias: the stored k bias must be all zeros.
- ``decoder/layer_i/attention/linear_0`` is the cross-attention query, ``linear_1`` holds k and v stacked
  (split likewise), ``linear_2`` is its output projection.
- ``layer_norm/{gamma,beta}`` become ``weight``/``bias``; ``ffn/linear_{0,1}`` become ``fc1``/``fc2``.
- ``decoder/projection`` is tied to the token embedding, as in Hugging Face (``proj_out`` is not stored).

The conversion is exact: tensors are sliced and renamed, never recomputed. ``whisper_convert`` writes
the folder.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.models.ct2 import Ct2FormatError, Ct2Model

# Bump whenever the files written here change, so cached conversions are rebuilt.
# 2: config names the windowed vLLM architecture; 3: tokenizer has timestamp tokens; 4: tokenizer has every BPE merge
CONVERTER_VERSION = 4

WEIGHTS_FILE = "model.safetensors"
OUTPUT_FILES = (
    WEIGHTS_FILE,
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)

# English-only Whisper checkpoints have 51864 tokens; multilingual ones 51865 (v1/v2) or 51866 (v3).
ENGLISH_ONLY_VOCAB_SIZE = 51864

# Audio front end shared by every Whisper size (16 kHz, 25 ms window, 10 ms hop, 30 s window).
SAMPLE_RATE_HZ = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH_S = 30

# Rank-0 options CTranslate2 stores beside the weights, with the value a standard Whisper has
# (None: any value is accepted and not needed by Hugging Face).
_OPTIONS: dict[str, int | None] = {
    "encoder/num_heads": None,
    "decoder/num_heads": None,
    "decoder/activation": 3,  # GELU
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/alibi": 0,
    "decoder/start_from_zero_embedding": 0,
    "decoder/alignment_heads": None,
    "decoder/alignment_layer": None,
}


@dataclass(frozen=True)
class WhisperDims:
    """Architecture sizes read off the stored tensors (heads come from the stored options)."""

    n_mels: int
    d_model: int
    vocab_size: int
    encoder_layers: int
    decoder_layers: int
    encoder_heads: int
    decoder_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    max_source_positions: int
    max_target_positions: int

    @property
    def multilingual(self) -> bool:
        """True for multilingual checkpoints (their decoder prompt carries language and task tokens)."""
        return self.vocab_size > ENGLISH_ONLY_VOCAB_SIZE


def _count_layers(model: Ct2Model, stack: str) -> int:
    pattern = re.compile(rf"^{stack}/layer_(\d+)/")
    indices = {int(m.group(1)) for name in model.variables if (m := pattern.match(name))}
    if indices != set(range(len(indices))) or not indices:
        raise Ct2FormatError(f"{stack} layers are not numbered 0..n-1: {sorted(indices)}")
    return len(indices)


def whisper_dims(model: Ct2Model) -> WhisperDims:
    """Read the architecture of a CTranslate2 Whisper model; ``Ct2FormatError`` if it is not one."""
    if model.spec_name != "WhisperSpec":
        raise Ct2FormatError(f"not a Whisper checkpoint (model spec {model.spec_name!r})")
    try:
        conv1 = model.get("encoder/conv1/weight")
        embeddings = model.get("decoder/embeddings/weight")
        return WhisperDims(
            n_mels=int(conv1.shape[1]),
            d_model=int(conv1.shape[0]),
            vocab_size=int(embeddings.shape[0]),
            encoder_layers=_count_layers(model, "encoder"),
            decoder_layers=_count_layers(model, "decoder"),
            encoder_heads=model.scalar("encoder/num_heads"),
            decoder_heads=model.scalar("decoder/num_heads"),
            encoder_ffn_dim=int(model.get("encoder/layer_0/ffn/linear_0/weight").shape[0]),
            decoder_ffn_dim=int(model.get("decoder/layer_0/ffn/linear_0/weight").shape[0]),
            max_source_positions=int(model.get("encoder/position_encodings/encodings").shape[0]),
            max_target_positions=int(model.get("decoder/position_encodings/encodings").shape[0]),
        )
    except KeyError as exc:
        raise Ct2FormatError(f"Whisper checkpoint lacks variable {exc.args[0]}") from None


def expected_hf_shapes(dims: WhisperDims) -> dict[str, tuple[int, ...]]:
    """Every parameter of ``WhisperForConditionalGeneration`` with its shape (tied ``proj_out`` excluded)."""
    d, shapes = dims.d_model, {}
    linear = {"weight": (d, d), "bias": (d,)}

    def add_attention(prefix: str) -> None:
        for proj in ("q_proj", "v_proj", "out_proj"):
            for kind, shape in linear.items():
                shapes[f"{prefix}.{proj}.{kind}"] = shape
        shapes[f"{prefix}.k_proj.weight"] = (d, d)

    def add_norm(prefix: str) -> None:
        shapes[f"{prefix}.weight"] = (d,)
        shapes[f"{prefix}.bias"] = (d,)

    def add_ffn(prefix: str, ffn: int) -> None:
        shapes.update({f"{prefix}.fc1.weight": (ffn, d), f"{prefix}.fc1.bias": (ffn,)})
        shapes.update({f"{prefix}.fc2.weight": (d, ffn), f"{prefix}.fc2.bias": (d,)})
        add_norm(f"{prefix}.final_layer_norm")

    shapes["model.encoder.conv1.weight"] = (d, dims.n_mels, 3)
    shapes["model.encoder.conv1.bias"] = (d,)
    shapes["model.encoder.conv2.weight"] = (d, d, 3)
    shapes["model.encoder.conv2.bias"] = (d,)
    shapes["model.encoder.embed_positions.weight"] = (dims.max_source_positions, d)
    for i in range(dims.encoder_layers):
        layer = f"model.encoder.layers.{i}"
        add_attention(f"{layer}.self_attn")
        add_norm(f"{layer}.self_attn_layer_norm")
        add_ffn(layer, dims.encoder_ffn_dim)
    add_norm("model.encoder.layer_norm")
    shapes["model.decoder.embed_tokens.weight"] = (dims.vocab_size, d)
    shapes["model.decoder.embed_positions.weight"] = (dims.max_target_positions, d)
    for i in range(dims.decoder_layers):
        layer = f"model.decoder.layers.{i}"
        add_attention(f"{layer}.self_attn")
        add_norm(f"{layer}.self_attn_layer_norm")
        add_attention(f"{layer}.encoder_attn")
        add_norm(f"{layer}.encoder_attn_layer_norm")
        add_ffn(layer, dims.decoder_ffn_dim)
    add_norm("model.decoder.layer_norm")
    return shapes


class _Mapper:
    """Moves CTranslate2 variables to Hugging Face names, remembering which sources were consumed."""

    def __init__(self, model: Ct2Model) -> None:
        self.model = model
        self.used: set[str] = set()
        self.out: dict[str, np.ndarray] = {}

    def take(self, name: str) -> np.ndarray:
        try:
            array = self.model.variables[name]
        except KeyError:
            raise Ct2FormatError(f"Whisper checkpoint lacks variable {name}") from None
        self.used.add(name)
        return array

    def copy(self, src: str, dst: str) -> None:
        self.out[dst] = np.ascontiguousarray(self.take(src))

    def norm(self, src: str, dst: str) -> None:
        self.copy(f"{src}/gamma", f"{dst}.weight")
        self.copy(f"{src}/beta", f"{dst}.bias")

    def linear(self, src: str, dst: str) -> None:
        self.copy(f"{src}/weight", f"{dst}.weight")
        self.copy(f"{src}/bias", f"{dst}.bias")

    def fused(self, src: str, dst_prefix: str, projections: Sequence[str]) -> None:
        """Split a linear layer whose output rows stack several projections (in ``projections`` order)."""
        weight, bias = self.take(f"{src}/weight"), self.take(f"{src}/bias")
        parts = len(projections)
        if weight.shape[0] % parts or bias.shape != (weight.shape[0],):
            raise Ct2FormatError(f"{src}: shape {weight.shape} does not split into {parts} projections")
        for proj, w, b in zip(projections, np.split(weight, parts), np.split(bias, parts), strict=True):
            self.out[f"{dst_prefix}.{proj}.weight"] = np.ascontiguousarray(w)
            if proj == "k_proj":
                # Whisper's key projection has no bias; CTranslate2 stores zeros to fuse the layer.
                if np.any(b != 0):
                    raise Ct2FormatError(f"{src}: non-zero key bias, not a Whisper attention layer")
            else:
                self.out[f"{dst_prefix}.{proj}.bias"] = np.ascontiguousarray(b)

    def self_attention(self, src: str, dst: str) -> None:
        """A layer's self-attention block (encoder and decoder alike): its norm, fused Q/K/V and output."""
        self.norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
        self.fused(f"{src}/self_attention/linear_0", f"{dst}.self_attn", ("q_proj", "k_proj", "v_proj"))
        self.linear(f"{src}/self_attention/linear_1", f"{dst}.self_attn.out_proj")

    def ffn(self, src: str, dst: str) -> None:
        """A layer's feed-forward block (encoder and decoder alike): its norm and two linear layers."""
        self.norm(f"{src}/ffn/layer_norm", f"{dst}.final_layer_norm")
        self.linear(f"{src}/ffn/linear_0", f"{dst}.fc1")
        self.linear(f"{src}/ffn/linear_1", f"{dst}.fc2")


def hf_state_dict(model: Ct2Model, dims: WhisperDims) -> dict[str, np.ndarray]:
    """Hugging Face tensors for a CTranslate2 Whisper model, validated against ``expected_hf_shapes``.

    Raises ``Ct2FormatError`` if an option differs from standard Whisper, a variable is missing or left
    unused, or a produced tensor has an unexpected name or shape.
    """
    m = _Mapper(model)
    for name, required in _OPTIONS.items():
        if name in model.variables:
            m.take(name)
            value = model.scalar(name)
            if required is not None and value != required:
                raise Ct2FormatError(f"{name} = {value}, standard Whisper has {required}")
    for conv in ("conv1", "conv2"):
        m.linear(f"encoder/{conv}", f"model.encoder.{conv}")
    m.copy("encoder/position_encodings/encodings", "model.encoder.embed_positions.weight")
    for i in range(dims.encoder_layers):
        src, dst = f"encoder/layer_{i}", f"model.encoder.layers.{i}"
        m.self_attention(src, dst)
        m.ffn(src, dst)
    m.norm("encoder/layer_norm", "model.encoder.layer_norm")
    m.copy("decoder/embeddings/weight", "model.decoder.embed_tokens.weight")
    m.copy("decoder/position_encodings/encodings", "model.decoder.embed_positions.weight")
    for i in range(dims.decoder_layers):
        src, dst = f"decoder/layer_{i}", f"model.decoder.layers.{i}"
        m.self_attention(src, dst)
        m.norm(f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm")
        m.linear(f"{src}/attention/linear_0", f"{dst}.encoder_attn.q_proj")
        m.fused(f"{src}/attention/linear_1", f"{dst}.encoder_attn", ("k_proj", "v_proj"))
        m.linear(f"{src}/attention/linear_2", f"{dst}.encoder_attn.out_proj")
        m.ffn(src, dst)
    m.norm("decoder/layer_norm", "model.decoder.layer_norm")
    projection = "decoder/projection/weight"
    if model.aliases.get(projection) != "decoder/embeddings/weight":
        # An untied output projection would be lost: Hugging Face Whisper ties it to the embedding.
        if not np.array_equal(m.take(projection), model.get("decoder/embeddings/weight")):
            raise Ct2FormatError(f"{projection} differs from the token embedding (Whisper ties them)")

    leftover = sorted(set(model.variables) - m.used)
    if leftover:
        raise Ct2FormatError(f"unexpected variables (quantized or non-Whisper checkpoint?): {leftover[:5]}")
    expected = expected_hf_shapes(dims)
    produced = {name: tuple(a.shape) for name, a in m.out.items()}
    if produced != expected:
        missing = sorted(set(expected) - set(produced))
        extra = sorted(set(produced) - set(expected))
        wrong = sorted(n for n in set(expected) & set(produced) if expected[n] != produced[n])
        raise Ct2FormatError(f"converted tensors mismatch: missing {missing[:3]} extra {extra[:3]} shape {wrong[:3]}")
    dtypes = {a.dtype for a in m.out.values()}
    if len(dtypes) != 1 or next(iter(dtypes)).kind != "f":
        raise Ct2FormatError(f"expected one floating-point dtype for all weights, found {sorted(map(str, dtypes))}")
    return m.out
