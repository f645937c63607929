"""Arithmetic, not a measurement: Whisper encoder and decoder FLOPs per request by encoder window.

    python -m bench.encoder_flops [--d-model 1280 --encoder-layers 32 --decoder-layers 4 --mels 128 --tokens 30]

Defaults are whisper-large-v3-turbo's dimensions (d_model 1280, 32 encoder layers, 4 decoder layers, 128 mel bins,
vocabulary 51866). Per encoder layer over T positions: projections and MLP 24*T*d^2 FLOPs (q, k, v, o: 4 d^2 and
the 4x MLP: 8 d^2 multiply-adds per position), attention scores and values 4*T^2*d; the two input convolutions
2*3*(mels*d*2T + d*d*T). The decoder per generated token: self-attention and MLP 2*(4+2+8) d^2 per layer plus the
vocabulary projection 2*d*V, and once per request the cross-attention keys and values over T positions,
2*2*T*d^2 per layer. Multiply-adds count as two FLOPs; layer norms, softmax and GELU are left out (small).
"""

from __future__ import annotations

import argparse

from engine.asr.windows import WindowPolicy, encoder_positions


def encoder_flops(t: int, d: int, layers: int, mels: int) -> float:
    conv = 2 * 3 * (mels * d * 2 * t + d * d * t)
    return conv + layers * (24 * t * d * d + 4 * t * t * d)


def decoder_flops(t: int, d: int, layers: int, vocab: int, tokens: int) -> float:
    cross_kv = layers * 2 * 2 * t * d * d
    per_token = layers * 2 * 14 * d * d + 2 * d * vocab
    return cross_kv + tokens * per_token


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d-model", type=int, default=1280)
    ap.add_argument("--encoder-layers", type=int, default=32)
    ap.add_argument("--decoder-layers", type=int, default=4)
    ap.add_argument("--mels", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=51866)
    ap.add_argument("--tokens", type=int, default=30, help="tokens generated per request")
    a = ap.parse_args()
    full = encoder_flops(1500, a.d_model, a.encoder_layers, a.mels) + decoder_flops(
        1500, a.d_model, a.decoder_layers, a.vocab, a.tokens
    )
    print("| window s | encoder positions | encoder GFLOPs | decoder GFLOPs | total vs 30 s |")
    print("|---|---|---|---|---|")
    for w in (2.0, *WindowPolicy().buckets_s):
        t = encoder_positions(w)
        enc = encoder_flops(t, a.d_model, a.encoder_layers, a.mels)
        dec = decoder_flops(t, a.d_model, a.decoder_layers, a.vocab, a.tokens)
        print(f"| {w:g} | {t} | {enc / 1e9:.0f} | {dec / 1e9:.1f} | {(enc + dec) / full:.3f} |")


if __name__ == "__main__":
    main()
