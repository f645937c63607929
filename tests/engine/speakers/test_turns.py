"""The voice-change detector on synthetic embedding sequences, and the endpointer's split (no models)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from engine.audio.pcm import SAMPLE_RATE
from engine.audio.vad import WINDOW
from engine.config import EndpointConfig, VadConfig
from engine.speakers.turns import TurnConfig, TurnDetector
from engine.stream.endpoint import CloseReason, Endpointer, SegmentClosed, SegmentOpened

THRESHOLD = VadConfig().offset
A, B = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])


def _probs(seconds: float, pauses: Sequence[tuple[float, float]] = ()) -> np.ndarray:
    """Speech everywhere but in ``pauses`` (seconds from the segment's speech start)."""
    n = int(seconds * SAMPLE_RATE) // WINDOW
    probs = np.ones(n, np.float32)
    for a, b in pauses:
        probs[int(a * SAMPLE_RATE) // WINDOW : int(b * SAMPLE_RATE) // WINDOW] = 0.0
    return probs


Voice = Callable[[float, float], np.ndarray]  # (start_s, end_s) of a window -> its embedding


def _drive(
    voice_at: Voice, seconds: float, pauses: Sequence[tuple[float, float]] = (), config: TurnConfig | None = None
) -> tuple[int | None, float]:
    """Grow one segment (speech from sample 0) VAD window by VAD window, embedding each window the detector asks
    for with ``voice_at(start_s, end_s)``. Returns (change sample or None, seconds of audio when it was found)."""
    detector = TurnDetector(config or TurnConfig(), THRESHOLD)
    detector.open(0)
    probs = _probs(seconds, pauses)
    for i in range(1, probs.size + 1):
        position = i * WINDOW
        window = detector.next_window(position, probs[:i], 0)
        if window is None:
            continue
        vector = voice_at(window.start_sample / SAMPLE_RATE, window.end_sample / SAMPLE_RATE)
        at = detector.add(window, vector, probs[:i], 0)
        if at is not None:
            return at, position / SAMPLE_RATE
    return None, seconds


def _two_voices(change_s: float, noise: float = 0.0, seed: int = 0) -> Voice:
    rng = np.random.default_rng(seed)

    def voice_at(start: float, end: float) -> np.ndarray:
        share_b = min(max((end - change_s) / (end - start), 0.0), 1.0)  # a window's embedding mixes its voices
        return (1 - share_b) * A + share_b * B + noise * rng.standard_normal(3)

    return voice_at


def test_one_steady_voice_is_never_split() -> None:
    at, _ = _drive(_two_voices(change_s=99.0, noise=0.15), seconds=30.0)
    assert at is None


def test_a_new_voice_is_found_at_the_pause_where_it_began_within_two_seconds() -> None:
    at, found_s = _drive(_two_voices(change_s=6.0), seconds=12.0, pauses=[(5.6, 6.0)])
    assert at is not None
    assert 5.6 <= at / SAMPLE_RATE <= 6.0, at / SAMPLE_RATE  # inside the pause: between words
    assert found_s - 6.0 <= 2.0, found_s


def test_without_a_pause_the_cut_lands_near_the_change() -> None:
    at, _ = _drive(_two_voices(change_s=6.0), seconds=12.0)
    assert at is not None and abs(at / SAMPLE_RATE - 6.0) <= 0.75, at


def test_one_odd_window_is_not_a_change() -> None:
    def voice_at(start: float, end: float) -> np.ndarray:
        return B if 5.0 <= end < 5.2 else A  # one window in the middle sounds like someone else

    at, _ = _drive(voice_at, seconds=12.0)
    assert at is None


def test_deviating_windows_that_do_not_agree_are_not_a_new_voice() -> None:
    odd = iter([np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])] * 50)

    def voice_at(start: float, end: float) -> np.ndarray:
        return next(odd) if end >= 6.0 else A  # noise: every window unlike the voice and unlike the one before

    at, _ = _drive(voice_at, seconds=12.0)
    assert at is None


def test_a_window_straddling_the_change_does_not_hide_the_new_voice() -> None:
    # Windows that hold the end of A and the start of B sound like neither voice nor like each other; every window
    # after them is B. They must not keep the B windows from confirming for the rest of the segment.
    a, b = np.eye(4)[0], np.eye(4)[1]
    odd = iter([np.eye(4)[2], np.eye(4)[3]] * 20)

    def voice_at(start: float, end: float) -> np.ndarray:
        if end <= 6.0:
            return a
        return next(odd) if start < 6.0 else b

    at, found_s = _drive(voice_at, seconds=14.0, pauses=[(5.8, 6.0)])
    assert at is not None, "the new voice was never confirmed"
    assert 5.8 <= at / SAMPLE_RATE <= 6.0 and found_s <= 8.0, (at / SAMPLE_RATE, found_s)


def test_two_voices_at_once_do_not_become_the_turns_voice() -> None:
    # CAM++'s scale (change at 0.28): windows where the second speaker starts over the first sound like neither
    # (cosine about 0.4 to the first). Averaged into the turn's voice they drag it towards the second speaker, who
    # then never deviates from it; kept out of it, the second speaker is found.
    mixed = 0.4 * A + np.sqrt(1 - 0.4**2) * B

    def voice_at(start: float, end: float) -> np.ndarray:
        middle = (start + end) / 2
        return A if middle < 6.0 else mixed if middle < 9.0 else B

    campplus = TurnConfig(change_similarity=0.28, join_margin=0.2)
    at, found_s = _drive(voice_at, seconds=16.0, config=campplus)
    assert at is not None, "the second voice was never found"
    assert 6.0 <= at / SAMPLE_RATE <= 9.5 and found_s <= 11.0, (at / SAMPLE_RATE, found_s)
    # Without the margin every window that is not unlike the voice joins it, and the change is lost.
    assert _drive(voice_at, seconds=16.0, config=TurnConfig(change_similarity=0.28, join_margin=0.0))[0] is None


def test_after_a_cut_the_new_voice_is_known_at_once() -> None:
    # The deviating windows mostly after the cut seed the new turn's voice: its label can show straight away.
    detector = TurnDetector(TurnConfig(), THRESHOLD)
    detector.open(0)
    probs = _probs(10.0, pauses=[(5.7, 6.0)])
    voice_at = _two_voices(change_s=6.0)
    for i in range(1, probs.size + 1):
        window = detector.next_window(i * WINDOW, probs[:i], 0)
        if window is not None and (
            at := detector.add(
                window, voice_at(window.start_sample / SAMPLE_RATE, window.end_sample / SAMPLE_RATE), probs[:i], 0
            )
        ):
            detector.cut(at)
            break
    voice = detector.voice
    assert voice is not None, "no voice for the new turn right after the cut"
    vector, seconds = voice
    assert float(vector @ B) > 0.9 and seconds >= 1.7  # both deviating windows, not only the last


def test_pauses_are_not_embedded_and_late_results_are_ignored() -> None:
    detector = TurnDetector(TurnConfig(), THRESHOLD)
    detector.open(0)
    probs = _probs(4.0, pauses=[(0.0, 4.0)])
    assert detector.next_window(probs.size * WINDOW, probs, 0) is None, "a window of silence embeds nothing useful"
    speech = _probs(5.0)  # a hop later, and speech
    window = detector.next_window(speech.size * WINDOW, speech, 0)
    assert window is not None and window.end_sample - window.start_sample == TurnConfig().window
    detector.close()
    assert detector.add(window, B, speech, 0) is None  # its segment ended meanwhile


def test_after_a_cut_the_new_turn_keeps_the_new_voice() -> None:
    # A, then B from 6 s, then A again from 12 s: two changes, each found after the previous cut.
    def voice_at(start: float, end: float) -> np.ndarray:
        mid = (start + end) / 2
        return B if 6.0 <= mid < 12.0 else A

    detector = TurnDetector(TurnConfig(), THRESHOLD)
    detector.open(0)
    probs = _probs(18.0, pauses=[(5.7, 6.0), (11.7, 12.0)])
    cuts = []
    for i in range(1, probs.size + 1):
        window = detector.next_window(i * WINDOW, probs[:i], 0)
        if window is not None and (
            at := detector.add(
                window, voice_at(window.start_sample / SAMPLE_RATE, window.end_sample / SAMPLE_RATE), probs[:i], 0
            )
        ):
            cuts.append(at / SAMPLE_RATE)
            detector.cut(at)
    assert len(cuts) == 2 and 5.7 <= cuts[0] <= 6.0 and 11.7 <= cuts[1] <= 12.0, cuts


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="hop_s"):
        TurnConfig(hop_s=3.0, window_s=1.5)
    with pytest.raises(ValueError, match="confirm_windows"):
        TurnConfig(confirm_windows=0)
    with pytest.raises(ValueError, match="join_margin"):
        TurnConfig(join_margin=-0.1)


def test_endpointer_split_closes_at_the_cut_and_carries_the_rest_on() -> None:
    endpointer = Endpointer(VadConfig(), EndpointConfig())
    probs = np.concatenate([np.zeros(20), np.ones(100), np.zeros(10), np.ones(60)]).astype(np.float32)
    events = endpointer.push(probs)
    opened = next(e for e in events if isinstance(e, SegmentOpened))
    cut = (20 + 100 + 5) * WINDOW  # the middle of the short pause
    closed, reopened = endpointer.split(cut)
    assert isinstance(closed, SegmentClosed) and closed.reason is CloseReason.TURN
    assert closed.start_sample == opened.start_sample and closed.end_sample == cut
    assert closed.speech_end_sample == 120 * WINDOW
    assert closed.probs.size == (cut - opened.speech_start_sample) // WINDOW
    assert isinstance(reopened, SegmentOpened) and reopened.index == opened.index + 1
    assert reopened.start_sample == cut and reopened.speech_start_sample == 130 * WINDOW
    assert endpointer.open_probs.size == 60 and endpointer.speech_end_sample == 190 * WINDOW
    assert endpointer.split(10 * WINDOW) == [], "a cut outside the open segment's speech does nothing"
    rest = endpointer.flush()
    assert rest is not None and rest.start_sample == cut and rest.speech_start_sample == 130 * WINDOW
