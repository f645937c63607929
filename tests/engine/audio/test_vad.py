"""Silero VAD batched across sessions: same decisions as one stream at a time, speech found in real speech."""

from __future__ import annotations

import numpy as np
import pytest

from engine.audio.vad import WINDOW, BatchedVad, VadStream
from speechdata.corpus import audio, pad


def probs(vad: BatchedVad, slot: int, samples: np.ndarray) -> np.ndarray:
    return vad.run({slot: VadStream().push(samples)})[slot]


def test_batched_rows_match_one_stream_at_a_time() -> None:
    clips = [audio("ls_1988-24833-0001"), audio("whisper_jfk"), audio("dns_street_mobile_A1CIM28ZUCA8RX")]
    batched = BatchedVad(8)
    slots = [batched.acquire() for _ in clips]
    together = batched.run({s: VadStream().push(c) for s, c in zip(slots, clips, strict=True)})
    for s, c in zip(slots, clips, strict=True):
        alone = BatchedVad(1)
        np.testing.assert_allclose(together[s], probs(alone, alone.acquire(), c), atol=1e-5)


def test_speech_is_speech_and_silence_is_not() -> None:
    vad = BatchedVad(2)
    clip = pad(audio("ls_1988-24833-0001"), before_s=2.0, after_s=2.0)
    p = probs(vad, vad.acquire(), clip)
    lead = p[: int(1.8 * 16000) // WINDOW]
    body = p[int(2.5 * 16000) // WINDOW : int(9.0 * 16000) // WINDOW]
    assert lead.max() < 0.2
    assert (body > 0.5).mean() > 0.6


def test_reframing_any_chunk_size_gives_the_same_windows() -> None:
    clip = audio("ls_1988-24833-0000")
    whole = VadStream().push(clip)
    stream = VadStream()
    parts = [stream.push(clip[i : i + 960]) for i in range(0, clip.size, 960)]
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_released_rows_start_from_zero_state() -> None:
    vad = BatchedVad(1)
    clip = audio("ls_1988-24833-0000")
    first = probs(vad, vad.acquire(), clip)
    vad.release(0)
    vad.run({})  # the next tick recycles the row
    again = probs(vad, vad.acquire(), clip)
    np.testing.assert_allclose(first, again, atol=1e-6)


def test_all_rows_taken_is_a_clear_error() -> None:
    vad = BatchedVad(1)
    vad.acquire()
    with pytest.raises(Exception, match="VAD rows"):
        vad.acquire()
