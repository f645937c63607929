"""The endpointer on real speech and on generated probability sequences."""

from __future__ import annotations

import numpy as np

from engine.audio.vad import WINDOW, BatchedVad, VadStream
from engine.config import BALANCED_SCHEDULE, ENDPOINT_PRESETS, EndpointConfig, EndpointPreset, VadConfig
from engine.stream.endpoint import CloseReason, Endpointer, SegmentClosed, SegmentOpened
from speechdata.corpus import audio, pad

W_MS = WINDOW * 1000 / 16000


def windows(ms: float) -> int:
    return round(ms / W_MS)


def run(probs: list[float], cfg: EndpointConfig | None = None) -> list[SegmentOpened | SegmentClosed]:
    ep = Endpointer(VadConfig(), cfg or EndpointConfig())
    events = ep.push(np.asarray(probs, dtype=np.float32))
    last = ep.flush()
    return events + ([last] if last else [])


def closes(events: list[SegmentOpened | SegmentClosed]) -> list[SegmentClosed]:
    return [e for e in events if isinstance(e, SegmentClosed)]


def test_silence_schedule_shrinks_as_speech_grows() -> None:
    cfg = EndpointConfig()
    assert cfg.silence_for(1_000) == 2_000
    assert cfg.silence_for(12_000) == 1_000
    assert cfg.silence_for(50_000) == 100
    assert cfg.silence_for(10**7) == cfg.tail_silence_ms
    assert [s for _, s in BALANCED_SCHEDULE] == sorted((s for _, s in BALANCED_SCHEDULE), reverse=True)


def test_short_pause_does_not_close_but_schedule_silence_does() -> None:
    speech, pause = [0.9] * windows(2_000), [0.05] * windows(1_000)
    events = run([0.0] * 10 + speech + pause + speech + [0.05] * windows(2_100))
    c = closes(events)
    assert len(c) == 1 and c[0].reason is CloseReason.SILENCE


def test_long_segments_close_on_shorter_pauses() -> None:
    cfg = ENDPOINT_PRESETS[EndpointPreset.BALANCED]
    long_speech = [0.9] * windows(16_000)
    events = run(long_speech + [0.05] * windows(900) + [0.9] * windows(1_000), cfg)
    c = closes(events)
    assert c[0].reason is CloseReason.SILENCE and len(c) == 2  # 800 ms closes a 16 s segment


def test_preroll_keeps_audio_before_onset_and_clicks_are_ignored() -> None:
    lead = windows(1_000)
    events = run([0.0] * lead + [0.9] + [0.0] * 20 + [0.9] * windows(1_000) + [0.0] * windows(2_100))
    opened = [e for e in events if isinstance(e, SegmentOpened)]
    assert len(opened) == 1  # the single-window click did not open a segment
    onset = (lead + 21) * WINDOW
    assert opened[0].speech_start_sample == onset
    assert opened[0].start_sample == onset - 300 * 16


def test_hard_cap_cuts_at_the_quietest_window_and_carries_on() -> None:
    cfg = EndpointConfig(max_segment_ms=5_000)
    probs = [0.9] * windows(3_900) + [0.36] + [0.9] * windows(3_000) + [0.0] * windows(2_100)
    c = closes(run(probs, cfg))
    assert c[0].reason is CloseReason.CAP
    assert abs(c[0].end_sample - windows(3_900) * WINDOW) <= WINDOW
    assert c[1].start_sample == c[0].end_sample  # no audio lost or duplicated at the cut
    assert all((x.end_sample - x.start_sample) <= 5_000 * 16 for x in c)


def test_real_speech_between_silences_is_one_segment_covering_the_words() -> None:
    clip = pad(audio("ls_1988-24833-0001"), before_s=2.0, after_s=3.0)
    vad = BatchedVad(1)
    p = vad.run({vad.acquire(): VadStream().push(clip)})[0]
    c = closes(run(list(p)))
    assert len(c) == 1
    assert 1.6 <= c[0].start_sample / 16000 <= 2.3
    assert 9.4 <= c[0].end_sample / 16000 <= 10.3  # speech ends ~9.9 s; post-roll and no long tail
