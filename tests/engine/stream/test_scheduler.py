"""Decode scheduling with a named fake recognizer (the model is not what is measured here): one partial in flight
per session with the newest audio, cancellation at the endpoint, finals ahead of partials under load."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, replace

import numpy as np
import pytest

from engine.asr.fake import FakeTranscriber, SharedCoreFake
from engine.asr.transcriber import DecodeRequest, Priority, Transcript
from engine.config import EngineConfig, PartialConfig, WindowPolicy
from engine.observe import EngineObserver
from engine.protocol import Caption
from engine.stream.engine import CaptionEngine
from engine.stream.runner import StreamResult, stream_audio
from speechdata.corpus import audio, pad


async def started_engine(fake: FakeTranscriber, **partial: object) -> CaptionEngine:
    engine = CaptionEngine(EngineConfig(speakers=False, partial=PartialConfig(**partial)), transcriber=fake)  # type: ignore[arg-type]
    await engine.start()
    return engine


@dataclass
class CutPartials(FakeTranscriber):
    """The fake recognizer, its partials cut short (``Transcript.truncated``): none stands in for its sentence's
    final, so every final is a decode of its own."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        return replace(result, truncated=True) if request.priority is Priority.PARTIAL else result


async def stream_once(fake: FakeTranscriber, samples: np.ndarray, **partial: object) -> StreamResult:
    """Stream one clip at real time through an engine whose recognizer is ``fake``."""
    engine = await started_engine(fake, **partial)
    try:
        return await stream_audio(engine, samples, realtime=True)
    finally:
        await engine.close()


def per_session_max_concurrency(fake: FakeTranscriber, priority: Priority) -> dict[str, int]:
    """Most requests of ``priority`` running at once, per session (request ids are ``<session>-<p|f><n>``)."""
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    started: set[str] = set()
    for event, rid, prio, _ in fake.log:
        if prio != priority:
            continue
        sid = rid.rsplit("-", 1)[0]
        if event == "start":
            started.add(rid)
            running[sid] = running.get(sid, 0) + 1
            peak[sid] = max(peak.get(sid, 0), running[sid])
        elif event in ("finish", "cancel") and rid in started:
            running[sid] -= 1
    return peak


@pytest.mark.slow
async def test_slow_partials_coalesce_one_in_flight_newest_audio_first() -> None:
    # Partials take 1.2 s but the cadence asks for one every 0.5 s: they must neither pile up nor be aborted. The
    # speaker's pauses inside this clip would restart the partial running then (checked by
    # ``test_a_pause_restarts_the_partial_that_began_before_it``); here the coalescing alone (no closing partials).
    fake = FakeTranscriber(delay_s=1.2, final_delay_s=0.1)
    result = await stream_once(fake, pad(audio("ls_1988-24833-0001"), 0.5, 2.5), closing_after_ms=0)
    partials = [(rid, n) for rid, prio, n in fake.started if prio is Priority.PARTIAL]
    assert len(partials) >= 4
    assert max(per_session_max_concurrency(fake, Priority.PARTIAL).values()) == 1
    sizes = [n for _, n in partials]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)  # each one covers newer audio
    gaps_s = np.diff(sizes) / 16000
    assert gaps_s.min() >= 1.0  # audio that arrived during a 1.2 s decode coalesced into the next request
    assert len([rid for rid in fake.cancelled if "-p" in rid]) <= 1  # only the one running at the endpoint
    shown = [m.partial for m in result.messages if isinstance(m, Caption) and m.partial]
    assert len(shown) >= 3
    assert result.sentences()  # the segment locked


@pytest.mark.slow  # several seconds of real-time audio: full runs only
async def test_endpoint_cancels_the_running_partial_and_the_final_goes_first() -> None:
    # A 5 s partial starts early in a 3 s utterance: at the endpoint it is still running on old audio.
    # A partial restarted at the pause would cover all the speech and be adopted: this is the path without closing
    # partials (that of a segment cut while its speaker goes on).
    fake = FakeTranscriber(delay_s=5.0, final_delay_s=0.2)
    await stream_once(fake, pad(audio("ls_1988-24833-0000"), 0.5, 3.0), closing_after_ms=0)
    kinds = [(e, rid) for e, rid, _, _ in fake.log]
    cancelled_partials = [rid for e, rid in kinds if e == "cancel" and "-p" in rid]
    assert cancelled_partials, "the partial still running at the endpoint should have been cancelled"
    final_start = next(i for i, (e, rid) in enumerate(kinds) if e == "start" and "-f" in rid)
    cancel_at = next(i for i, (e, rid) in enumerate(kinds) if e == "cancel" and "-p" in rid)
    assert cancel_at < final_start
    assert any(e == "finish" and "-f" in rid for e, rid in kinds)


@pytest.mark.slow  # several seconds of real-time audio: full runs only
async def test_a_pause_restarts_the_partial_that_began_before_it() -> None:
    """Partials take 1.5 s, so one is always running when the speaker pauses, on audio that stops before the last
    words. The decode of all the speech (it becomes the final) must start in the pause, not after that one: the
    running partial is cancelled ~0.3 s into the pause (``Partials.want``), long before the endpoint's 2 s."""
    fake = FakeTranscriber(delay_s=1.5, final_delay_s=0.2)
    engine = await started_engine(fake)
    try:
        began = time.monotonic()
        result = await stream_audio(engine, pad(audio("ls_1988-24833-0000"), 0.5, 3.0), realtime=True)
    finally:
        await engine.close()
    [sentence] = result.sentences()
    speech_end = began + sentence.end_ms / 1000
    restarted = [t for event, rid, _, t in fake.log if event == "cancel" and "-p" in rid and t > speech_end]
    assert restarted and restarted[0] < speech_end + 1.0, (restarted, speech_end)
    whole = [t for event, rid, _, t in fake.log if event == "start" and "-p" in rid and t > speech_end]
    assert whole and whole[0] < speech_end + 1.0  # it started at once: nothing else was running
    assert not [rid for rid, _, _ in fake.started if "-f" in rid]  # and it was the final
    lock_at = next(
        t for m, t in zip(result.messages, result.arrivals_s, strict=True) if isinstance(m, Caption) and m.sentences
    )
    assert lock_at < sentence.end_ms / 1000 + 2.0 + 0.5  # the balanced preset's 2 s pause, then at once


@pytest.mark.slow
async def test_finals_outrank_partials_under_load() -> None:
    # One decode slot for four talking sessions: every final must start before any partial submitted after it.
    fake = CutPartials(delay_s=0.4, final_delay_s=0.3, capacity=1)  # every final a decode of its own
    engine = await started_engine(fake, max_inflight=1)
    clips = ["ls_1988-24833-0002", "ls_1988-24833-0003", "ls_2412-153948-0000", "ls_3752-4944-0000"]
    try:
        results = await asyncio.gather(
            *(stream_audio(engine, pad(audio(c), 0.3 * i, 2.5), realtime=True) for i, c in enumerate(clips))
        )
    finally:
        await engine.close()
    assert all(r.sentences() for r in results)
    submit = {rid: t for e, rid, _, t in fake.log if e == "submit"}
    start = {rid: t for e, rid, _, t in fake.log if e == "start"}
    finals = [rid for rid in start if "-f" in rid]
    partials = [rid for rid in start if "-p" in rid]
    assert finals and partials
    for f in finals:
        overtaking = [p for p in partials if submit[p] > submit[f] and start[p] < start[f]]
        assert not overtaking, f"partials {overtaking} started before the waiting final {f}"


@pytest.mark.slow  # several seconds of real-time audio: full runs only
async def test_a_partial_covering_all_the_speech_becomes_the_final() -> None:
    # Partials are quick, finals would be slow: the sentence must lock from the partial decode of its whole
    # speech, without a second decode of the same audio.
    fake = FakeTranscriber(delay_s=0.4, final_delay_s=4.0)
    result = await stream_once(fake, pad(audio("ls_1988-24833-0000"), 0.5, 3.0))
    assert [s.text for s in result.sentences()] and not [r for r, _, _ in fake.started if "-f" in r]
    lock_at = next(
        t for m, t in zip(result.messages, result.arrivals_s, strict=True) if isinstance(m, Caption) and m.sentences
    )
    speech_end_s = result.sentences()[0].end_ms / 1000
    assert lock_at < speech_end_s + 2.0 + 1.0  # the balanced preset's 2 s pause, and no 4 s final decode


async def test_file_segments_wait_for_live_finals_and_go_one_at_a_time() -> None:
    """``DecodeScheduler.background``: no file segment starts while a live final is in flight, at most
    ``max_background`` run at once, and they are served in the order they came."""
    from engine.asr.transcriber import DecodeRequest
    from engine.stream.scheduler import DecodeScheduler

    fake = FakeTranscriber(delay_s=0.05)
    await fake.start()
    scheduler = DecodeScheduler(fake, max_inflight_partials=2, max_background=1)
    silence = np.zeros(1600, np.float32)
    live = asyncio.create_task(scheduler.final(DecodeRequest("live-f0", silence, Priority.FINAL)))
    await asyncio.sleep(0)
    files = [
        asyncio.create_task(scheduler.background(DecodeRequest(f"file-f{i}", silence, Priority.BACKGROUND)))
        for i in range(3)
    ]
    await asyncio.gather(live, *files)
    order = [(event, rid) for event, rid, _p, _t in fake.log if event in ("start", "finish")]
    assert order == [
        ("start", "live-f0"),
        ("finish", "live-f0"),
        ("start", "file-f0"),
        ("finish", "file-f0"),
        ("start", "file-f1"),
        ("finish", "file-f1"),
        ("start", "file-f2"),
        ("finish", "file-f2"),
    ]
    # A waiting file segment that is cancelled gives its turn to the next.
    blocker = asyncio.create_task(scheduler.background(DecodeRequest("file-a", silence, Priority.BACKGROUND)))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(scheduler.background(DecodeRequest("file-b", silence, Priority.BACKGROUND)))
    last = asyncio.create_task(scheduler.background(DecodeRequest("file-c", silence, Priority.BACKGROUND)))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(blocker, last, waiting, return_exceptions=True)
    assert "file-c" in fake.finished and "file-b" not in fake.started and scheduler.background_inflight == 0


class _Speaker:
    """A scheduler client that asks for a new partial as soon as its last one is done (a busy live session)."""

    def __init__(self, name: str, scheduler: object, keep_asking: bool) -> None:
        self.session_id = name
        self.last_partial_started_s = 0.0
        self.closing = False
        self.first_words = False
        self.scheduler = scheduler
        self.keep_asking = keep_asking
        self.n = 0

    def partial_request(self) -> object:
        from engine.asr.transcriber import DecodeRequest

        self.n += 1
        return DecodeRequest(f"{self.session_id}-p{self.n}", np.zeros(1600, np.float32), Priority.PARTIAL)

    def on_partial(self, request: object, result: object) -> None:
        if self.keep_asking:
            # Like a session, on its next VAD tick (the scheduler still counts this partial as running now).
            asyncio.get_running_loop().call_later(0.01, self.scheduler.want_partial, self)  # type: ignore[attr-defined]

    def on_partial_failed(self, request: object, exc: BaseException) -> None:
        pass


async def test_a_client_is_alone_while_no_other_client_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``DecodeScheduler.alone`` (a pause closes sooner then, ``closing_after_alone_ms``): another client's running
    or waiting partial, any final decoding, or another client that asked for a partial in the last
    ``ALONE_AFTER_S``, means the client is not alone."""
    from engine.asr.transcriber import DecodeRequest
    from engine.stream import scheduler as scheduler_module
    from engine.stream.scheduler import DecodeScheduler

    # 1.5 s, not the shipped 3 s: the rule is the same, and the test waits it out once. It stays well above the
    # 0.6 s the two partials take, so that "b asked a moment ago" still holds on a loaded machine.
    monkeypatch.setattr(scheduler_module, "ALONE_AFTER_S", 1.5)
    fake = FakeTranscriber(delay_s=0.3)
    await fake.start()
    scheduler = DecodeScheduler(fake, max_inflight_partials=1)
    a, b = _Speaker("a", scheduler, False), _Speaker("b", scheduler, False)
    assert scheduler.alone(a) and scheduler.alone(b)  # type: ignore[arg-type]
    scheduler.want_partial(a)  # type: ignore[arg-type]  # runs: its own partial does not count
    assert scheduler.alone(a) and not scheduler.alone(b)  # type: ignore[arg-type]
    scheduler.want_partial(b)  # type: ignore[arg-type]  # waits for the one slot
    assert not scheduler.alone(a)  # type: ignore[arg-type]
    await scheduler.idle(a)  # type: ignore[arg-type]
    await scheduler.idle(b)  # type: ignore[arg-type]
    assert not scheduler.alone(a)  # type: ignore[arg-type]  # b spoke a moment ago: between its partials
    await asyncio.sleep(scheduler_module.ALONE_AFTER_S)  # b went quiet
    assert scheduler.alone(a)  # type: ignore[arg-type]
    final = asyncio.create_task(scheduler.final(DecodeRequest("c-f0", np.zeros(1600, np.float32), Priority.FINAL)))
    await asyncio.sleep(0.05)
    assert not scheduler.alone(a)  # type: ignore[arg-type]
    await final
    assert scheduler.alone(a)  # type: ignore[arg-type]


async def test_file_segments_wait_for_live_partials_but_never_starve() -> None:
    """A file segment waits while live partials run and until live speech has paused (``LIVE_QUIET_S``); under
    partials without a pause (two sessions taking turns) it starts once it has waited ``background_floor_s``."""
    from engine.asr.transcriber import DecodeRequest
    from engine.stream.scheduler import LIVE_QUIET_S, DecodeScheduler

    silence = np.zeros(1600, np.float32)
    for busy in (False, True):
        fake = FakeTranscriber(delay_s=0.2)
        await fake.start()
        scheduler = DecodeScheduler(fake, max_inflight_partials=2, background_floor_s=0.7 if busy else 5.0)
        speakers = [_Speaker(name, scheduler, busy) for name in ("a", "b")]
        t_live = time.monotonic()
        scheduler.want_partial(speakers[0])  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        if busy:
            scheduler.want_partial(speakers[1])  # type: ignore[arg-type]  # half a decode later: never both idle
        t_asked = time.monotonic()
        await asyncio.wait_for(scheduler.background(DecodeRequest("file-f0", silence, Priority.BACKGROUND)), 5)
        start = next(t for event, rid, _p, t in fake.log if event == "start" and rid == "file-f0")
        if not busy:  # one partial: the file segment starts once it is done and the speaker has been quiet
            assert start >= next(t for event, rid, _p, t in fake.log if event == "finish" and rid == "a-p1")
            assert start - t_live >= LIVE_QUIET_S - 0.05
        else:
            assert 0.65 <= start - t_asked <= 1.2, fake.log
            assert speakers[0].n + speakers[1].n >= 5
        for speaker in speakers:
            speaker.keep_asking = False
        await asyncio.sleep(0.3)


class _LockLags(EngineObserver):
    """Records each live sentence's lock lag (segment close to lock) and first-text latency."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.first: list[float] = []

    def lock_lag(self, seconds: float, speech_s: float) -> None:
        self.lags.append(seconds)

    def first_text(self, latency_s: float) -> None:
        self.first.append(latency_s)


async def five_speakers_on_one_core(**partial: object) -> tuple[SharedCoreFake, _LockLags, list[StreamResult]]:
    """Five sessions start speaking together (3-4 s read sentences, then a pause) on a recognizer that models one CPU
    core: a decode needs 0.12 s plus 0.05 s per second of audio alone, and decodes in flight share the core."""
    fake = SharedCoreFake(lambda r: 0.15 + 0.08 * r.audio.size / 16_000)
    engine = CaptionEngine(EngineConfig(speakers=False, partial=PartialConfig(**partial)), transcriber=fake)  # type: ignore[arg-type]
    await engine.start()
    lags = _LockLags()
    engine.observers.add(lags)
    clips = [
        "ls_1988-24833-0000",
        "ls_3752-4944-0000",
        "ls_6930-75918-0000",
        "ls_3752-4944-0002",
        "ls_2412-153948-0002",
    ]
    try:
        results = await asyncio.gather(
            *(stream_audio(engine, pad(audio(c)[: int(3.4 * 16_000)], 0.2, 2.3), realtime=True) for c in clips)
        )
    finally:
        await engine.close()
    return fake, lags, results


@pytest.mark.slow  # five sessions of real-time audio, with bounds in real seconds: full runs only
async def test_five_speakers_on_one_core_share_it_evenly_and_lock_on_time() -> None:
    """Five sessions speaking at once on a recognizer that models one CPU core: partials come less often than the
    0.5 s cadence (each session's part of the core, and the core shared), about as often for every session, first
    words show for every sentence within 2 s, and each sentence locks within 1.5 s of its segment's close (its
    closing decode runs in the pause, ahead of every partial: ``DecodeScheduler``)."""
    fake, lags, results = await five_speakers_on_one_core()
    assert all(r.sentences() for r in results)
    starts: dict[str, list[float]] = {}
    for event, rid, priority, t in fake.log:
        if event == "start" and priority is Priority.PARTIAL:
            starts.setdefault(rid.rsplit("-", 1)[0], []).append(t)
    counts = sorted(len(v) for v in starts.values())
    assert len(counts) == 5 and counts[0] >= 2 and counts[-1] <= 2 * counts[0], starts
    gaps = [b - a for times in starts.values() for a, b in itertools.pairwise(times)]
    assert float(np.median(gaps)) >= 0.75, gaps
    assert len(lags.lags) == 5 and max(lags.lags) <= 1.5, lags.lags
    assert max(lags.first) <= 2.0, lags.first


async def test_a_closing_partial_waits_for_no_slot_and_first_words_go_first() -> None:
    """The closing partial (its speaker paused: it becomes the sentence's final) starts at once even while every
    partial slot is taken and a final decodes, as a final would; among the partials that wait, a sentence that
    shows nothing yet goes before one already on screen, whoever asked first."""
    from engine.stream.scheduler import DecodeScheduler

    fake = FakeTranscriber(delay_s=0.3)
    await fake.start()
    scheduler = DecodeScheduler(fake, max_inflight_partials=1)
    a, b, c, d = (_Speaker(name, scheduler, False) for name in "abcd")
    scheduler.want_partial(a)  # type: ignore[arg-type]  # takes the one slot
    scheduler.want_partial(b)  # type: ignore[arg-type]  # waits: on screen already
    c.first_words = True
    scheduler.want_partial(c)  # type: ignore[arg-type]  # waits: its first words
    d.closing = True
    scheduler.want_partial(d)  # type: ignore[arg-type]  # its final: starts now, beside a
    await asyncio.sleep(0.05)
    assert [rid for rid, _, _ in fake.started] == ["a-p1", "d-p1"]
    await scheduler.idle(b)  # type: ignore[arg-type]
    assert [rid for rid, _, _ in fake.started] == ["a-p1", "d-p1", "c-p1", "b-p1"]


async def test_a_session_speaking_counts_though_no_partial_of_it_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paced partials come seldom under load: a session counts as speaking while it has new speech
    (``note_speaking``), not only when it asks for a partial, so the shares stay even."""
    from engine.stream import scheduler as scheduler_module
    from engine.stream.scheduler import DecodeScheduler

    monkeypatch.setattr(scheduler_module, "ALONE_AFTER_S", 0.5)  # the shipped 3 s, shortened: the test waits it out
    fake = FakeTranscriber(delay_s=0.05)
    await fake.start()
    scheduler = DecodeScheduler(fake, 2)
    a, b = _Speaker("a", scheduler, False), _Speaker("b", scheduler, False)
    scheduler.note_speaking(a)  # type: ignore[arg-type]
    scheduler.note_speaking(b)  # type: ignore[arg-type]
    assert scheduler.speaking() == 2 and not scheduler.alone(a)  # type: ignore[arg-type]
    assert scheduler.partial_share(0.8, 0.5) == pytest.approx(0.4)
    assert fake.started == []  # nothing was decoded for it
    await asyncio.sleep(scheduler_module.ALONE_AFTER_S + 0.1)
    assert scheduler.speaking() == 0


async def test_an_adopted_partial_holds_the_others_back_as_a_final_does() -> None:
    """The moment a running partial is adopted as its sentence's final it counts as a final in flight: another
    session's partial waits for it to end (``adopt_partial``)."""
    from engine.stream.scheduler import DecodeScheduler

    fake = FakeTranscriber(delay_s=0.3)
    await fake.start()
    scheduler = DecodeScheduler(fake, max_inflight_partials=2)
    a, b = _Speaker("a", scheduler, False), _Speaker("b", scheduler, False)
    scheduler.want_partial(a)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    adopted = scheduler.adopt_partial(a)  # type: ignore[arg-type]
    assert adopted is not None and scheduler.finals_inflight == 1
    scheduler.want_partial(b)  # type: ignore[arg-type]  # a slot is free, but a final is decoding
    await asyncio.sleep(0.05)
    assert [rid for rid, _, _ in fake.started] == ["a-p1"]
    assert await scheduler.final_of(adopted) is not None
    await asyncio.sleep(0.01)
    assert scheduler.finals_inflight == 0 and [rid for rid, _, _ in fake.started] == ["a-p1", "b-p1"]
    await scheduler.idle(b)  # type: ignore[arg-type]


async def test_a_sessions_partials_take_its_share_of_the_recognizer() -> None:
    """``partial_share``: what finals leave of ``recognizer_share``, split among the sessions speaking, at most
    ``session_share`` for one; ``partial_cost_s``: the measured cost of the request's encoder window."""
    from engine.asr.transcriber import DecodeRequest
    from engine.stream.load import FINAL, RecognizerLoad
    from engine.stream.scheduler import DecodeScheduler

    fake = FakeTranscriber(delay_s=0.2, final_delay_s=3.5)
    await fake.start()
    load = RecognizerLoad()
    load.seed({4.0: 0.1, 8.0: 0.2})
    scheduler = DecodeScheduler(fake, 2, load=load, window_for=lambda s: 4.0 if s <= 3 else 8.0)
    assert scheduler.partial_cost_s(2.0) == pytest.approx(0.1)
    assert scheduler.partial_cost_s(6.0) == pytest.approx(0.2)
    speakers = [_Speaker(f"s{i}", scheduler, False) for i in range(4)]
    scheduler.want_partial(speakers[0])  # type: ignore[arg-type]
    assert scheduler.partial_share(0.8, 0.5) == pytest.approx(0.5)  # alone: at most its own cap
    for speaker in speakers[1:]:
        scheduler.want_partial(speaker)  # type: ignore[arg-type]
    assert scheduler.speaking() == 4 and scheduler.partial_share(0.8, 0.5) == pytest.approx(0.2)
    finals = [
        asyncio.create_task(scheduler.final(DecodeRequest(f"f{i}", np.zeros(1600, np.float32), Priority.FINAL)))
        for i in range(2)
    ]
    await asyncio.sleep(3.0)  # two finals keep the recognizer busy: partials get what they leave
    for speaker in speakers:
        scheduler.want_partial(speaker)  # type: ignore[arg-type]  # (they still speak)
    assert load.busy(FINAL) > 0.2
    assert scheduler.partial_share(0.8, 0.5) < 0.2 * 0.8
    assert scheduler.partial_share(0.8, 0.5) >= 0.25 * 0.8 / 4  # but never less than a quarter of it
    assert scheduler.partial_share(0.0, 0.5) == 0.0  # no pacing
    await asyncio.gather(*finals)
    for speaker in speakers:
        await scheduler.idle(speaker)  # type: ignore[arg-type]


@pytest.mark.slow  # 12 s of real-time audio
async def test_a_long_sentences_partials_space_out_as_they_cost_more() -> None:
    """One speaker alone, a 12 s sentence, on a recognizer whose decodes cost more the more audio they hold (as
    Whisper's encoder windows do): while the sentence is short its partials come every 0.5 s; once a partial costs
    more than the session's share of the recognizer allows (``PartialConfig.session_share``: 0.35 of it) they
    space out to 1/0.35 times their cost, so a long sentence does not take a whole core (with ``recognizer_share`` 0,
    as before, they keep coming every 0.5 s)."""
    windows = WindowPolicy()  # Whisper's as the engine uses them: 4, 8, 15 and 30 s
    fake = SharedCoreFake(lambda r: 0.03 * windows.window_for(r.audio.size / 16_000), window_policy=windows)
    engine = CaptionEngine(EngineConfig(speakers=False), transcriber=fake)
    await engine.start()
    try:
        await stream_audio(engine, pad(audio("ls_2412-153948-0000"), 0.3, 2.5), realtime=True)
    finally:
        await engine.close()
    starts = [
        (t, n)
        for (event, rid, priority, t), n in zip(fake.log, _sizes(fake), strict=True)
        if event == "start" and priority is Priority.PARTIAL
    ]
    early = [b[0] - a[0] for a, b in itertools.pairwise(starts) if b[1] < 4 * 16_000]
    late = [b[0] - a[0] for a, b in itertools.pairwise(starts) if b[1] > 8 * 16_000]
    assert early and late, starts
    assert float(np.median(early)) < 0.75, early
    assert float(np.median(late)) >= 1.1, late  # 0.45 s decodes (15 s window): 1.29 s apart at a share of 0.35


def _sizes(fake: SharedCoreFake) -> list[int]:
    """The audio samples of each logged request, in log order (0 for events other than a start)."""
    return [fake.sizes.get(rid, 0) if event == "start" else 0 for event, rid, _, _ in fake.log]
