"""Word times from Whisper itself: the cross-attention of its alignment heads, warped onto the audio.

Whisper's decoder does not say when a word was spoken, but some of its cross-attention heads (the checkpoint's
``alignment_heads``, found by OpenAI) look at the audio frames of the token being written. Feeding the decoded text
back through the decoder (teacher forcing, one pass) and reading those heads gives a token x frame score matrix;
dynamic time warping finds the monotonic path through it, and each word starts where the path enters its first
token. This is the method of OpenAI's ``word_timestamps`` (Radford et al. 2022, ``whisper/timing.py``), written
here for the encoder windows of this project (``engine.asr.windows``).

vLLM does not return attention weights, so ``WhisperAligner`` runs its own small forward pass of the same
converted checkpoint on CPU with PyTorch: the encoder over the window the final decode used (not always 30 s) and
the decoder once over the text. It keeps no state between calls and is meant for one worker thread.

Units: audio float32 mono 16 kHz; times in seconds from the start of the audio handed in. Encoder positions are
20 ms apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.asr.windows import WindowPolicy

SAMPLE_RATE = 16_000
HOP = 160  # samples per mel frame (10 ms)
N_FFT = 400
POSITION_S = 0.02  # one encoder position: two mel frames
MEDIAN_WIDTH = 7  # positions: smooths each head's attention over time before the warp (OpenAI's value)


@dataclass(frozen=True)
class AlignedWord:
    """One whitespace-separated word of the text and where Whisper's attention put it, seconds from the audio's
    start."""

    text: str
    start_s: float
    end_s: float


def dtw_path(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path from ``cost[0, 0]`` to ``cost[-1, -1]`` (steps: down, right, diagonal).

    Returns (row indices, column indices) of the path in order. Each row is filled with one vectorised min-plus
    scan: ``acc[i, j] = cost[i, j] + min(acc[i-1, j-1], acc[i-1, j], acc[i, j-1])`` expands to
    ``S[j] + min_{k<=j}(best_from_above[k] - S[k-1])`` with ``S`` the row's running sum.
    """
    n, m = cost.shape
    acc = np.empty((n, m), dtype=np.float64)
    s = np.cumsum(cost[0])
    acc[0] = s
    for i in range(1, n):
        row = cost[i].astype(np.float64)
        above = acc[i - 1].copy()
        above[1:] = np.minimum(above[1:], acc[i - 1, :-1])  # best of up and diagonal
        s = np.cumsum(row)
        acc[i] = s + np.minimum.accumulate(above - s + row)
    rows, cols = [n - 1], [m - 1]
    i, j = n - 1, m - 1
    while i > 0 or j > 0:
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        else:
            d, u, left = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
            if d <= u and d <= left:
                i, j = i - 1, j - 1
            elif u <= left:
                i -= 1
            else:
                j -= 1
        rows.append(i)
        cols.append(j)
    return np.array(rows[::-1]), np.array(cols[::-1])


def _median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over a sliding window of ``width`` (odd) along the last axis, edges reflected."""
    if width <= 1 or x.shape[-1] < width:
        return x
    pad = width // 2
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    filtered: np.ndarray = np.median(windows, axis=-1)
    return filtered


def word_times(scores: np.ndarray, word_tokens: list[int]) -> list[tuple[float, float]]:
    """Start and end (seconds) of each word from the alignment heads' scores.

    ``scores``: ``[heads, rows, positions]`` raw attention logits, rows = the decoder inputs from the one that
    predicts the first text token to the one that predicts end of text (so row k belongs to text token k, and the
    last row to the end); positions cover the audio only. ``word_tokens``: how many text tokens each word has.
    """
    weights = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(weights)
    weights /= weights.sum(axis=-1, keepdims=True)
    mean = weights.mean(axis=-2, keepdims=True)
    std = weights.std(axis=-2, keepdims=True) + 1e-8
    weights = _median_filter((weights - mean) / std, MEDIAN_WIDTH)
    matrix = weights.mean(axis=0)
    rows, cols = dtw_path(-matrix)
    enter = np.zeros(matrix.shape[0], dtype=np.int64)  # first position of each row on the path
    seen = np.zeros(matrix.shape[0], dtype=bool)
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        if not seen[r]:
            seen[r] = True
            enter[r] = c
    bounds = np.concatenate([[0], np.cumsum(word_tokens)])
    out = []
    for k in range(len(word_tokens)):
        start = enter[bounds[k]] * POSITION_S
        end = enter[min(bounds[k + 1], matrix.shape[0] - 1)] * POSITION_S
        out.append((float(start), float(max(end, start))))
    return out


class WhisperAligner:
    """Aligns text to audio with a converted Whisper checkpoint folder (``engine.models.resolve_model(...).path``).

    ``align`` is blocking (tens to a few hundred ms on one CPU thread): call it from a worker thread.
    """

    def __init__(self, model_dir: str | Path, dtype: str = "float32", threads: int = 1) -> None:
        """``dtype``: ``float32`` or ``bfloat16`` (half the time where the CPU has native bfloat16, with word
        times within one encoder position of float32's; see ``engine.asr.cpu.cpu_dtype``)."""
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        folder = Path(model_dir)
        self._torch = torch
        torch.set_num_threads(threads)
        config = json.loads((folder / "config.json").read_text())
        generation = json.loads((folder / "generation_config.json").read_text())
        self.heads_by_layer: dict[int, list[int]] = {}
        for layer, head in generation["alignment_heads"]:
            self.heads_by_layer.setdefault(int(layer), []).append(int(head))
        self.n_heads = int(config["decoder_attention_heads"])
        self.n_mels = int(config["num_mel_bins"])
        self.multilingual = bool(generation.get("is_multilingual", config["vocab_size"] >= 51865))
        raw = load_file(str(folder / "model.safetensors"))
        self._dtype = getattr(torch, dtype)
        self.w = {k.removeprefix("model."): v.to(self._dtype) for k, v in raw.items()}
        self.enc_layers = int(config["encoder_layers"])
        self.dec_layers = max(self.heads_by_layer) + 1  # layers after the last alignment head are not needed
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._mel = torch.from_numpy(_mel_filters(self.n_mels))
        self._window = torch.hann_window(N_FFT)

    def _id(self, token: str) -> int:
        i = self.tokenizer.token_to_id(token)
        if i is None:
            raise ValueError(f"tokenizer has no {token}")
        return int(i)

    def prompt(self, language: str | None) -> list[int]:
        ids = [self._id("<|startoftranscript|>")]
        if self.multilingual:
            ids += [self._id(f"<|{language or 'en'}|>"), self._id("<|transcribe|>")]
        return [*ids, self._id("<|notimestamps|>")]

    def align(self, audio: np.ndarray, text: str, language: str | None = "en") -> list[AlignedWord]:
        """Where each whitespace-separated word of ``text`` is said in ``audio``. Empty text: empty list."""
        words = text.split()
        if not words or audio.size < HOP * 4:
            return []
        torch = self._torch
        word_ids = [self.tokenizer.encode(" " + w, add_special_tokens=False).ids for w in words]
        counts = [len(ids) for ids in word_ids]
        prompt = self.prompt(language)
        tokens = prompt + [i for ids in word_ids for i in ids] + [self._id("<|endoftext|>")]
        audio_s = audio.size / SAMPLE_RATE
        # The window the final decode ran in (the audio plus 1 s, rounded up to 4/8/15/30 s): the heads attend as
        # they did when they wrote the text. Against a window of exactly the audio + 1 s the cues' cut-and-decode
        # WER was lower, for half as much time again (docs/benchmarks.md, "Word times").
        window_s = WindowPolicy().window_for(audio_s)
        with torch.inference_mode():
            x = torch.zeros(int(window_s * SAMPLE_RATE))
            clip = torch.from_numpy(np.ascontiguousarray(audio[: x.numel()], dtype=np.float32))
            x[: clip.numel()] = clip
            enc = self._encode(self._log_mel(x))
            scores = self._cross_scores(enc, tokens)  # [heads, tokens, positions]
        positions = min(enc.shape[0], max(1, round(audio_s / POSITION_S)))
        rows = scores[:, len(prompt) - 1 : len(tokens) - 1, :positions]  # inputs predicting text tokens + end
        times = word_times(rows.float().numpy().astype(np.float64), counts)
        return [AlignedWord(w, min(a, audio_s), min(b, audio_s)) for w, (a, b) in zip(words, times, strict=True)]

    # ---- the model, written out (PyTorch, in the dtype chosen at load, batch of one) -----------------------
    def _log_mel(self, x: Any) -> Any:
        torch = self._torch
        stft = torch.stft(x, N_FFT, HOP, window=self._window, return_complex=True)
        power = stft[..., :-1].abs() ** 2
        mel = self._mel @ power
        log = torch.clamp(mel, min=1e-10).log10()
        log = torch.maximum(log, log.max() - 8.0)
        return ((log + 4.0) / 4.0).to(self._dtype)  # [mels, frames]

    def _linear(self, x: Any, name: str) -> Any:
        bias = self.w.get(f"{name}.bias")
        return self._torch.nn.functional.linear(x, self.w[f"{name}.weight"], bias)

    def _norm(self, x: Any, name: str) -> Any:
        return self._torch.nn.functional.layer_norm(x, x.shape[-1:], self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def _attend(self, x: Any, kv: Any, name: str, causal: bool) -> tuple[Any, Any]:
        """Multi-head attention of ``x`` [t, d] over ``kv`` [s, d]: (output [t, d], logits [heads, t, s])."""
        torch = self._torch
        t, d = x.shape
        h = self.n_heads
        hd = d // h
        q = (self._linear(x, f"{name}.q_proj") * hd**-0.5).view(t, h, hd).transpose(0, 1)
        k = self._linear(kv, f"{name}.k_proj").view(-1, h, hd).transpose(0, 1)
        v = self._linear(kv, f"{name}.v_proj").view(-1, h, hd).transpose(0, 1)
        logits = q @ k.transpose(1, 2)
        if causal:
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            logits = logits.masked_fill(mask, float("-inf"))
        out = torch.softmax(logits, dim=-1) @ v
        return self._linear(out.transpose(0, 1).reshape(t, d), f"{name}.out_proj"), logits

    def _mlp(self, x: Any, name: str) -> Any:
        gelu = self._torch.nn.functional.gelu
        return self._linear(gelu(self._linear(self._norm(x, f"{name}.final_layer_norm"), f"{name}.fc1")), f"{name}.fc2")

    def _encode(self, mel: Any) -> Any:
        torch = self._torch
        f = torch.nn.functional
        x = f.gelu(f.conv1d(mel[None], self.w["encoder.conv1.weight"], self.w["encoder.conv1.bias"], padding=1))
        x = f.gelu(f.conv1d(x, self.w["encoder.conv2.weight"], self.w["encoder.conv2.bias"], stride=2, padding=1))
        x = x[0].T
        x = x + self.w["encoder.embed_positions.weight"][: x.shape[0]]
        for i in range(self.enc_layers):
            name = f"encoder.layers.{i}"
            x = x + self._self(x, name)
            x = x + self._mlp(x, name)
        return self._norm(x, "encoder.layer_norm")

    def _self(self, x: Any, name: str, causal: bool = False) -> Any:
        y = self._norm(x, f"{name}.self_attn_layer_norm")
        return self._attend(y, y, f"{name}.self_attn", causal)[0]

    def _cross_scores(self, enc: Any, tokens: list[int]) -> Any:
        """The decoder over ``tokens`` (teacher forcing): the alignment heads' cross-attention logits
        ``[heads, tokens, positions]``."""
        torch = self._torch
        ids = torch.tensor(tokens)
        x = self.w["decoder.embed_tokens.weight"][ids] + self.w["decoder.embed_positions.weight"][: len(tokens)]
        picked = []
        for i in range(self.dec_layers):
            name = f"decoder.layers.{i}"
            x = x + self._self(x, name, causal=True)
            out, logits = self._attend(
                self._norm(x, f"{name}.encoder_attn_layer_norm"), enc, f"{name}.encoder_attn", causal=False
            )
            x = x + out
            x = x + self._mlp(x, name)
            for head in self.heads_by_layer.get(i, []):
                picked.append(logits[head])
        return torch.stack(picked)


def _mel_filters(n_mels: int) -> np.ndarray:
    """Whisper's mel filterbank (Slaney scale and area normalisation, as librosa and Whisper use): [mels, 201]."""
    from transformers.audio_utils import mel_filter_bank

    bank = mel_filter_bank(
        num_frequency_bins=1 + N_FFT // 2,
        num_mel_filters=n_mels,
        min_frequency=0.0,
        max_frequency=8000.0,
        sampling_rate=SAMPLE_RATE,
        norm="slaney",
        mel_scale="slaney",
    )
    return np.asarray(bank.T, dtype=np.float32)
