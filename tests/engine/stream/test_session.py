"""A session driven alone, with fakes of its collaborators: no engine, no VAD model, no recognizer, no clock.

The session gets a scripted VAD lane (speech exactly where the test put a clip), the real decode scheduler over
the named ``FakeTranscriber``, a speaker service over a fake embedder, and a hand-moved clock. The audio is real
speech, fed as the transport feeds it (60 ms chunks), faster than real time: what is checked here is the
session's own logic (segments, order, times, labels, latency, lifecycle), not the models.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np
import pytest

from bench.lib.churn import flicker
from engine import EngineObserver, SessionOptions, SessionState, protocol
from engine.asr.fake import FakeTranscriber
from engine.asr.transcriber import DecodeRequest, Priority, Transcript
from engine.audio.pcm import CHUNK_SAMPLES, SAMPLE_RATE
from engine.audio.vad import WINDOW, VadStream
from engine.config import EngineConfig
from engine.protocol import Caption, Ready, Stopped
from engine.speakers.service import SpeakerService
from engine.speakers.turns import TurnConfig
from engine.stream.runner import StreamResult
from engine.stream.scheduler import DecodeScheduler
from engine.stream.session import Session
from speechdata.corpus import audio
from tests.support.clock import Clock

CLIP_A = "ls_1988-24833-0001"  # 7.9 s, one reader
CLIP_B = "ls_2412-153948-0000"  # 11.7 s, another reader
GAP_S = 2.0  # silence between the clips: longer than any endpoint wait


class ScriptedVad:
    """Fake VAD lane: probability 1.0 for a window whose centre lies in one of ``speech`` (sample ranges), else 0.
    Results arrive on a later loop iteration, as the real VAD tick delivers them."""

    def __init__(self, speech: list[tuple[int, int]]) -> None:
        self.speech = speech
        self.closed = False
        self._framer = VadStream()
        self._next = 0  # index of the next window
        self._consumer: Any = None
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def bind(self, consumer: Any) -> None:
        self._consumer = consumer

    def push(self, samples: np.ndarray) -> None:
        k = len(self._framer.push(samples))
        if not k:
            return
        centres = (np.arange(self._next, self._next + k) * WINDOW + WINDOW // 2)[:, None]
        inside = np.zeros(k, dtype=bool)
        for a, b in self.speech:
            inside |= ((centres >= a) & (centres < b))[:, 0]
        self._next += k
        self._in_flight += 1
        self._idle.clear()
        asyncio.get_running_loop().call_soon(self._deliver, inside.astype(np.float32))

    def _deliver(self, probs: np.ndarray) -> None:
        self._consumer(probs)
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()

    async def drained(self) -> None:
        await self._idle.wait()


@dataclass
class LocatingFake(FakeTranscriber):
    """The named fake recognizer, its text also saying where in ``stream`` the audio it was given began:
    "audio of S seconds from SAMPLE" (-1: not a slice of the stream)."""

    stream: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    ending: str = ""  # appended to every text: "." ends a sentence, " and." does not

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        return replace(result, text=f"{result.text} from {_located(self.stream, request.audio)}{self.ending}")


@dataclass
class StopsAfterForcedWords(LocatingFake):
    """The fake recognizer, but a decode made to start with settled words ends right after them (with a full stop),
    as Whisper sometimes does when the forced words end a sentence and the speaker went on."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        return replace(result, text=request.prefix + ".") if request.prefix else result


@dataclass
class WordPerHalfSecond(LocatingFake):
    """The fake recognizer, its text one word per half second of the stream it heard, named by that half second
    ("h16 h17 ..."): every decode of the same audio says the same words, wherever it starts."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        start = _located(self.stream, request.audio)
        half = SAMPLE_RATE // 2
        words = [f"h{k}" for k in range(-(-start // half), (start + request.audio.size) // half)]
        return replace(result, text=" ".join(words))


@dataclass
class LoopsAfterTheSentence(LocatingFake):
    """The fake recognizer, every partial cut where it began to repeat itself (after its full stop), as Whisper's
    partials loop into the padding of their window; finals are whole."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        partial = request.priority is Priority.PARTIAL
        return replace(result, truncated=partial, looped=partial)


@dataclass
class UnsureOfNumbers(LocatingFake):
    """The fake recognizer, its decoder unsure of the numbers in its text (probability 0.2, the other words 0.99):
    they change with every decode, as the words a real decoder guesses at do."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        probs = tuple(0.2 if any(c.isdigit() for c in w) else 0.99 for w in result.text.split())
        return replace(result, word_probs=probs)


class UnsureOfItsFirstWord(LocatingFake):
    """The fake recognizer, its decoder unsure of the first word of every text (probability 0.2, the rest 0.99), as
    Whisper often is of a sentence's first word from its first 200 ms. Keeps the seconds of audio of each partial."""

    decoded_s: ClassVar[list[float]] = []

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        if request.priority is Priority.PARTIAL:
            self.decoded_s.append(request.audio.size / SAMPLE_RATE)
        probs = tuple(0.2 if i == 0 else 0.99 for i, _w in enumerate(result.text.split()))
        return replace(result, word_probs=probs)


class KeepsItsPartials(LocatingFake):
    """The fake recognizer, sure of every word; keeps the seconds of audio of each partial."""

    decoded_s: ClassVar[list[float]] = []

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        if request.priority is Priority.PARTIAL:
            self.decoded_s.append(request.audio.size / SAMPLE_RATE)
        return await super().transcribe(request)


def _located(stream: np.ndarray, piece: np.ndarray) -> int:
    """Where ``piece`` lies in ``stream`` (sample index), or -1."""
    nonzero = np.flatnonzero(piece)
    k = int(nonzero[0]) if nonzero.size else 0  # search by a sample that is rarely repeated
    for i in (np.flatnonzero(stream == piece[k]) - k).tolist():
        if i >= 0 and np.array_equal(stream[i : i + piece.size], piece):
            return int(i)
    return -1


class FakeEmbedder:
    """Fake speaker model: the voice is read off the segment's length (the test knows clip A is the shorter)."""

    def embed(self, segments: list[np.ndarray]) -> np.ndarray:
        return np.array([[1.0, 0.0] if s.size < 9.5 * SAMPLE_RATE else [0.0, 1.0] for s in segments], np.float32)


def _reading(session: Session) -> tuple[list[protocol.ServerMessage], asyncio.Task[None]]:
    """Configure the session for English and collect every message its client gets, in a reader task."""
    session.configure(SessionOptions(language="en"))
    messages: list[protocol.ServerMessage] = []

    async def read() -> None:
        async for m in session.messages():
            messages.append(m)

    return messages, asyncio.create_task(read())


def _hiss(seconds: float, seed: int) -> np.ndarray:
    """Quiet noise (-66 dBFS) for the pauses: the scripted VAD ignores it, and every sample of the stream differs, so
    a test can find exactly where a decoded slice of it began (``_located``)."""
    return (np.random.default_rng(seed).standard_normal(int(seconds * SAMPLE_RATE)) * 5e-4).astype(np.float32)


def _layout() -> tuple[np.ndarray, list[tuple[int, int]]]:
    gap = _hiss(GAP_S, 1)
    a, b = audio(CLIP_A), audio(CLIP_B)
    stream = np.concatenate([gap, a, _hiss(GAP_S, 2), b, _hiss(GAP_S, 3)])
    a0 = gap.size
    b0 = a0 + a.size + gap.size
    return stream, [(a0, a0 + a.size), (b0, b0 + b.size)]


async def _settled(session: Session, scheduler: DecodeScheduler) -> None:
    """Wait until the session has no VAD result, partial or final decode outstanding."""
    window_s = WINDOW / SAMPLE_RATE  # the VAD's framer holds back less than one window
    while True:
        await session.caught_up(vad_s=window_s, segments=0)
        await scheduler.idle(session)
        if session.vad_backlog_s <= window_s and not scheduler.is_busy(session) and not session.finals_pending:
            return


async def _run(
    speakers: SpeakerService | None,
    layout: tuple[np.ndarray, list[tuple[int, int]]] | None = None,
    observer: EngineObserver | None = None,
    ending: str = "",
    recognizer: type[LocatingFake] = LocatingFake,
    config: EngineConfig | None = None,
) -> tuple[list[protocol.ServerMessage], dict[str, Any]]:
    stream, speech = layout or _layout()
    vad = ScriptedVad(speech)
    clock = Clock(1000.0)
    closed: list[Session] = []
    scheduler = DecodeScheduler(recognizer(delay_s=0.005, stream=stream, ending=ending), 2, observer=observer)
    config = replace(config or EngineConfig(), speakers=speakers is not None)
    session = Session(
        "s1",
        SessionOptions(),
        config=config,
        scheduler=scheduler,
        vad=vad,
        speakers=speakers,
        model_name="fake",
        on_closed=closed.append,
        clock=clock,
        observer=observer,
    )
    messages, reader = _reading(session)
    for i in range(0, stream.size, CHUNK_SAMPLES):
        session.feed(stream[i : i + CHUNK_SAMPLES])
        clock.now += CHUNK_SAMPLES / SAMPLE_RATE  # the chunk's real-time duration
        # Everything the chunk set off (its VAD results, the decodes they asked for, a final) lands before the next
        # chunk, on the test's clock: a recognizer infinitely fast next to the speech, whatever the machine's load.
        await _settled(session, scheduler)
    await session.stop()
    await asyncio.wait_for(reader, 5)
    assert session.state is SessionState.STOPPED
    await session.close()
    assert closed == [session], "the owner hears about the close exactly once"
    return messages, {"speech": speech}


def _sentences(messages: list[protocol.ServerMessage]) -> list[protocol.Sentence]:
    return [s for m in messages if isinstance(m, Caption) for s in m.sentences]


@pytest.mark.asyncio
async def test_session_locks_each_voice_as_a_sentence_with_its_times_and_partials_first() -> None:
    messages, info = await _run(speakers=None)
    assert isinstance(messages[0], Ready) and isinstance(messages[-1], Stopped), messages
    sentences = _sentences(messages)
    assert [s.id for s in sentences] == [0, 1], sentences
    for s, (a, b) in zip(sentences, info["speech"], strict=True):
        # Times are the scripted speech, to the VAD's window (32 ms) at each end.
        assert abs(s.start_ms - a * 1000 / SAMPLE_RATE) <= 64 and abs(s.end_ms - b * 1000 / SAMPLE_RATE) <= 64, s
        # The fake recognizer says which audio it decoded. All of the pre-roll: the audio before the onset was kept
        # while the onset's windows came in (it reaches back from the onset's window, not from the newest window).
        # And all of the speech, to its last window.
        words = s.text.split()
        seconds, start = float(words[2]), int(words[5])
        preroll = EngineConfig().endpoint.preroll_ms * SAMPLE_RATE // 1000
        onset = a // WINDOW * WINDOW  # the start of the window whose centre is the first in speech, or the one before
        assert onset - WINDOW - preroll <= start <= onset - preroll + WINDOW, (s, start, a)
        assert start + seconds * SAMPLE_RATE >= b - WINDOW, (s, start, b)
        assert s.spk is None  # speaker labels off
    first_lock = next(i for i, m in enumerate(messages) if isinstance(m, Caption) and m.sentences)
    assert any(isinstance(m, Caption) and m.partial.startswith("audio of") for m in messages[:first_lock]), (
        "partials show the open sentence before it locks"
    )
    last = messages[-2]
    assert isinstance(last, Caption) and last.is_final


@pytest.mark.asyncio
async def test_session_latency_is_measured_on_its_clock() -> None:
    messages, _ = await _run(speakers=None)
    latencies = [m.latency_ms for m in messages if isinstance(m, Caption) and m.latency_ms is not None]
    assert latencies, "captions carry the latency of the audio they cover"
    # The test's clock moves in whole chunks (60 ms) and nothing else: a latency read off the wall clock would not
    # be a multiple of 60 ms. The largest is a sentence locked after the endpoint's silence wait.
    assert all(abs(lat - 60 * round(lat / 60)) <= 1 for lat in latencies), latencies
    assert 0 < min(latencies) and max(latencies) <= 2000, latencies


class Recorder(EngineObserver):
    def __init__(self) -> None:
        self.audio_s = 0.0
        self.decodes: list[tuple[str, float]] = []  # (kind, window_s)
        self.first_text_s: list[float] = []
        self.lock_s: list[float] = []

    def audio_received(self, seconds: float, background: bool) -> None:
        self.audio_s += seconds

    def decoded(self, kind: str, window_s: float, decode_s: float, fallbacks: int) -> None:
        self.decodes.append((kind, window_s))

    def first_text(self, latency_s: float) -> None:
        self.first_text_s.append(latency_s)

    def locked(self, latency_s: float) -> None:
        self.lock_s.append(latency_s)


@pytest.mark.asyncio
async def test_session_reports_audio_decodes_first_text_and_lock_to_its_observer() -> None:
    seen = Recorder()
    messages, _ = await _run(speakers=None, observer=seen)
    stream, _ = _layout()
    assert seen.audio_s == pytest.approx(stream.size / SAMPLE_RATE)
    assert {kind for kind, _ in seen.decodes} == {"partial"}, "each final reused a partial covering its speech"
    # One first text and one lock per sentence, on the session's clock (it moves in whole 60 ms chunks).
    sentences = _sentences(messages)
    assert len(seen.first_text_s) == len(seen.lock_s) == len(sentences) == 2
    assert all(abs(t - 0.06 * round(t / 0.06)) < 1e-6 for t in seen.first_text_s + seen.lock_s)
    # The first partial is asked for ``first_after_ms`` into speech (as the VAD and the endpointer see it) and comes
    # back within a few chunks (the fake takes 5 ms).
    first = EngineConfig().partial.first_after_ms / 1000
    assert all(first <= t <= first + 0.5 for t in seen.first_text_s), seen.first_text_s
    # A sentence locks once the endpoint's pause for its length has passed (its final decode reused a partial).
    for s, lock in zip(sentences, seen.lock_s, strict=True):
        pause = EngineConfig().endpoint.silence_for(s.end_ms - s.start_ms) / 1000
        assert pause - 0.1 <= lock <= pause + 0.3, (lock, pause)


@pytest.mark.asyncio
async def test_a_sentence_whose_text_ends_one_locks_after_a_short_pause_and_one_left_open_waits() -> None:
    endpoint = EngineConfig().endpoint
    for ending, waits in ((".", lambda speech_ms: endpoint.sentence_pause_ms), (" and.", endpoint.silence_for)):
        seen = Recorder()
        messages, info = await _run(speakers=None, observer=seen, ending=ending)
        sentences = _sentences(messages)
        assert [s.text.endswith(ending) for s in sentences] == [True, True], sentences
        for s, (_a, b), lock in zip(sentences, info["speech"], seen.lock_s, strict=True):
            # All of the speech is in the sentence however early it locks.
            assert int(s.text.split()[5].rstrip(".")) + float(s.text.split()[2]) * SAMPLE_RATE >= b - WINDOW, s
            pause = waits(s.end_ms - s.start_ms) / 1000
            assert pause - 0.1 <= lock <= pause + 0.3, (ending, lock, pause)


@pytest.mark.asyncio
async def test_a_partial_cut_at_a_loop_right_after_the_sentence_s_end_still_locks_it_early() -> None:
    seen = Recorder()
    messages, info = await _run(speakers=None, observer=seen, ending=".", recognizer=LoopsAfterTheSentence)
    sentences = _sentences(messages)
    assert len(sentences) == 2, sentences
    pause = EngineConfig().endpoint.sentence_pause_ms / 1000
    assert all(pause - 0.1 <= lock <= pause + 0.3 for lock in seen.lock_s), seen.lock_s
    # A cut decode is never the final: each sentence is decoded again, whole, and has all of its speech.
    assert [kind for kind, _ in seen.decodes].count("final") == 2, seen.decodes
    for s, (_a, b) in zip(sentences, info["speech"], strict=True):
        assert int(s.text.split()[5].rstrip(".")) + float(s.text.split()[2]) * SAMPLE_RATE >= b - WINDOW, s


@pytest.mark.asyncio
async def test_stable_words_are_sent_once_and_every_later_text_keeps_them() -> None:
    messages, _ = await _run(speakers=None)
    settled: list[str] = []  # the open sentence's stable words so far
    seen_stable = 0
    for m in messages:
        if not isinstance(m, Caption):
            continue
        for s in m.sentences:
            assert s.text.split()[: len(settled)] == settled, (s.text, settled)
            settled = []
        settled += [w.w for w in m.stable_words]
        seen_stable += len(m.stable_words)
        words = m.partial.split()
        assert m.stable <= len(words)
        assert words[: m.stable] == settled[: m.stable], (m, settled)
        if m.partial:
            assert words[: len(settled)] == settled, (m.partial, settled)
    # The fake recognizer's texts agree on "audio of" while a sentence grows; the numbers after change every time.
    assert seen_stable == 4, seen_stable


@pytest.mark.asyncio
async def test_tentative_words_the_decoder_is_unsure_of_wait_for_a_partial_that_says_them_again() -> None:
    def shown(messages: list[protocol.ServerMessage]) -> list[str]:
        return [m.partial for m in messages if isinstance(m, Caption) and m.partial]

    messages, _ = await _run(speakers=None, recognizer=UnsureOfNumbers)
    # No partial says the same numbers twice: none is shown, and nothing shown changes before the lock.
    assert shown(messages) and not any(c.isdigit() for p in shown(messages) for c in p), shown(messages)
    assert flicker(m.wire() for m in messages if isinstance(m, Caption))[0] == 0
    # The locked sentences have every word: the gate is on what partials show, never on what locks.
    assert [len(s.text.split()) for s in _sentences(messages)] == [6, 6], _sentences(messages)
    # Without the gate the numbers show, and change.
    config = EngineConfig()
    messages, _ = await _run(
        speakers=None,
        recognizer=UnsureOfNumbers,
        config=replace(config, partial=replace(config.partial, show_min_prob=0.0)),
    )
    assert any(c.isdigit() for p in shown(messages) for c in p)
    assert flicker(m.wire() for m in messages if isinstance(m, Caption))[0] > 0


@pytest.mark.asyncio
async def test_a_first_word_the_decoder_is_unsure_of_waits_for_a_partial_that_says_it_again() -> None:
    def first_partials(messages: list[protocol.ServerMessage]) -> list[str]:
        """The first partial text shown of each sentence."""
        out, showing = [], False
        for m in messages:
            if isinstance(m, Caption):
                if m.partial and not showing:
                    out.append(m.partial)
                showing = bool(m.partial) and not m.sentences
        return out

    decoded = UnsureOfItsFirstWord.decoded_s
    decoded.clear()
    messages, _ = await _run(speakers=None, recognizer=UnsureOfItsFirstWord)
    shown = first_partials(messages)
    # Nothing shows from a sentence's first partial (its first word is a guess); the next one says it again, and it
    # comes on the next 180 ms of speech, not after the partials' 0.5 s interval: nothing is on screen yet.
    assert len(shown) == 2, shown
    first_s = float(shown[0].split()[2])  # (the fake's "audio of S seconds")
    assert decoded[0] < first_s <= decoded[0] + 0.3, (shown, decoded[:3])
    assert [len(s.text.split()) for s in _sentences(messages)] == [6, 6]  # what locks is never gated
    # Without the floor the first word of the first partial shows at once; the next partial waits for the interval.
    decoded.clear()
    config = EngineConfig()
    messages, _ = await _run(
        speakers=None,
        recognizer=UnsureOfItsFirstWord,
        config=replace(config, partial=replace(config.partial, first_show_min_prob=0.0)),
    )
    assert first_partials(messages)[0] == "audio" and decoded[1] - decoded[0] >= 0.5, (messages[:3], decoded[:3])


@pytest.mark.parametrize("early", [0, 1, 2])
@pytest.mark.asyncio
async def test_the_partials_right_after_the_first_words_show_do_not_wait_the_interval(early: int) -> None:
    decoded = KeepsItsPartials.decoded_s
    decoded.clear()
    config = EngineConfig()
    config = replace(config, partial=replace(config.partial, early_partials=early))
    await _run(speakers=None, recognizer=KeepsItsPartials, config=config)
    steps = [round(b - a, 2) for a, b in pairwise(decoded)][: early + 1]
    # The first words show from the first partial; the next ``early`` come on the next 180 ms of speech (a 60 ms
    # chunk rounds it up to 240 ms), the one after them waits the interval.
    interval = config.partial.interval_s
    assert all(step <= 0.25 for step in steps[:early]) and steps[early] >= interval, (steps, decoded[:5])


@pytest.mark.asyncio
async def test_a_decode_that_ends_right_after_the_forced_words_neither_locks_nor_loses_the_rest() -> None:
    messages, info = await _run(speakers=None, recognizer=StopsAfterForcedWords)
    sentences = _sentences(messages)
    assert len(sentences) == 2, sentences
    for s, (_a, b) in zip(sentences, info["speech"], strict=True):
        # The final was decoded whole, without forcing, and begins with the settled words all the same.
        words = s.text.split()
        assert words[:2] == ["audio", "of"] and words[3:5] == ["seconds", "from"], s
        assert int(words[5]) + float(words[2]) * SAMPLE_RATE >= b - WINDOW, s


def _labelled(messages: list[protocol.ServerMessage]) -> list[protocol.Sentence]:
    """The locked sentences as a client ends up showing them: with every ``speakers`` correction applied."""
    sent: set[int] = set()
    for m in messages:
        if isinstance(m, Caption):
            sent.update(s.id for s in m.sentences)
        elif isinstance(m, protocol.Speakers):
            assert set(m.relabel) <= sent, "a correction names only sentences the client already has"
    return StreamResult(messages=list(messages)).sentences()


@pytest.mark.asyncio
async def test_session_labels_each_voice_through_the_speaker_service() -> None:
    """Each voice ends up with its own label. A sentence may lock before its embedding is in (started after its
    decode), with the label its voice showed (the fake's turn windows all sound like the first voice), and be
    corrected after."""
    service = SpeakerService(load=FakeEmbedder)
    await service.start()
    try:
        messages, _ = await _run(speakers=service)
    finally:
        await service.close()
    assert [s.spk for s in _labelled(messages)] == [0, 1]


class DcEmbedder:
    """Fake speaker model: the voice is read off the audio's DC offset (the test adds one to the second reader), so
    that any window of it, however short, tells the voices apart."""

    def embed(self, segments: list[np.ndarray]) -> np.ndarray:
        return np.array([[0.0, 1.0] if float(s.mean()) > 0.02 else [1.0, 0.0] for s in segments], np.float32)


def _two_voices(gap_s: float = 0.5) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray, np.ndarray]:
    """Two readers ``gap_s`` apart, the second with a DC offset (``DcEmbedder`` tells them apart): the stream, the
    speech ranges and each reader's audio."""
    lead, turn_gap = np.zeros(SAMPLE_RATE, np.float32), np.zeros(round(gap_s * SAMPLE_RATE), np.float32)
    a, b = audio(CLIP_A), audio(CLIP_B) + np.float32(0.04)
    stream = np.concatenate([lead, a, turn_gap, b, lead])
    speech = [(lead.size, lead.size + a.size), (lead.size + a.size + turn_gap.size, stream.size - lead.size)]
    return stream, speech, a, b


@pytest.mark.asyncio
async def test_a_change_of_voice_without_a_pause_long_enough_to_end_the_segment_splits_it() -> None:
    # Two readers 0.5 s apart: the endpoint's silence wait is longer, so the endpointer alone makes one segment.
    stream, speech, a, b = _two_voices()
    service = SpeakerService(load=DcEmbedder)
    await service.start()
    try:
        messages, _ = await _run(speakers=service, layout=(stream, speech))
        unsplit, _ = await _run(
            speakers=SpeakerService(load=DcEmbedder, turns=TurnConfig(enabled=False)), layout=(stream, speech)
        )
    finally:
        await service.close()
    assert len(_sentences(unsplit)) == 1, "without turn detection both voices are one sentence"
    sentences = _labelled(messages)
    assert [s.spk for s in sentences] == [0, 1], sentences
    a_end_ms, b_start_ms = speech[0][1] * 1000 // SAMPLE_RATE, speech[1][0] * 1000 // SAMPLE_RATE
    assert abs(sentences[0].end_ms - a_end_ms) <= 64 and abs(sentences[1].start_ms - b_start_ms) <= 64, sentences
    # Each side was decoded on its own audio (the fake recognizer says how much it heard: its speech, the pre- and
    # post-roll and its half of the pause), none of the other's: no word twice.
    heard = [float(s.text.split()[2]) for s in sentences]
    assert heard[0] <= a.size / SAMPLE_RATE + 1.0 and heard[1] <= b.size / SAMPLE_RATE + 1.0, heard


@pytest.mark.asyncio
async def test_words_settled_after_a_change_of_voice_open_the_new_voice_s_sentence() -> None:
    stream, speech, _a, _b = _two_voices()
    # A slow turn detector (five deviating windows half a second apart), as with voices that sound alike: words of
    # the new voice settle before the change is confirmed.
    service = SpeakerService(load=DcEmbedder, turns=TurnConfig(hop_s=0.5, confirm_hop_s=0.5, confirm_windows=5))
    await service.start()
    try:
        messages, _ = await _run(speakers=service, layout=(stream, speech), recognizer=WordPerHalfSecond)
    finally:
        await service.close()
    sentences = _labelled(messages)
    assert [s.spk for s in sentences] == [0, 1], sentences
    first, second = ([int(w[1:]) for w in s.text.split()] for s in sentences)
    turn = speech[1][0] / (SAMPLE_RATE // 2)  # the second voice's first half second
    # Each voice's words in its own sentence (give or take the half second at the cut), none twice.
    assert max(first) <= turn + 1 and min(second) >= turn - 2, (first, second)
    assert not set(first) & set(second)
    # Words had settled past the change before it was heard (the turn detector needs a second or more of the new
    # voice), and none of them changed or went back to tentative on screen.
    settled = [int(w.w[1:]) for m in messages if isinstance(m, Caption) for w in m.stable_words]
    assert max(settled) > turn + 1, settled
    assert flicker([m.wire() for m in messages if isinstance(m, Caption)])[2] == 0


@pytest.mark.parametrize("interval_s", [0.5, 1.1])
@pytest.mark.asyncio
async def test_at_a_change_of_voice_with_no_pause_each_settled_word_stays_with_the_voice_that_said_it(
    interval_s: float,
) -> None:
    # The second reader starts the moment the first stops, so no partial comes at a pause just before the change;
    # with a long interval (a loaded recognizer) the last partial before it may be a second or more earlier.
    stream, speech, _a, _b = _two_voices(gap_s=0.0)
    service = SpeakerService(load=DcEmbedder, turns=TurnConfig(hop_s=0.5, confirm_hop_s=0.5, confirm_windows=5))
    base = EngineConfig()
    config = replace(base, partial=replace(base.partial, interval_s=interval_s))
    await service.start()
    try:
        messages, _ = await _run(speakers=service, layout=(stream, speech), recognizer=WordPerHalfSecond, config=config)
    finally:
        await service.close()
    first, second = _labelled(messages)
    assert (first.spk, second.spk) == (0, 1)
    words = [[int(w[1:]) for w in s.text.split()] for s in (first, second)]
    # Word hK was said in the stream's K-th half second. The sentences meet where the segment was cut: the words on
    # either side of the cut are the ones said on that side of it, give or take the word the cut falls in.
    boundary_ms = (words[0][-1] + 1) * 500
    assert abs(boundary_ms - first.end_ms) <= 500 and words[1][0] == words[0][-1] + 1, (first.end_ms, words)


@dataclass
class UnsureOfHalves(LocatingFake):
    """The fake recognizer, unsure (mean log-probability -1.5, under the guard's -1.0) of any audio shorter than
    15 s: of either voice of ``_two_voices`` alone, as Whisper is of two halves of one noisy sentence that a false
    change of voice cut apart; sure (-0.3) of the two heard together."""

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        result = await super().transcribe(request)
        return replace(result, avg_logprob=-0.3 if request.audio.size > 15 * SAMPLE_RATE else -1.5)


@pytest.mark.asyncio
async def test_two_halves_of_a_cut_that_the_guard_drops_are_decoded_again_as_one() -> None:
    stream, speech, a, b = _two_voices()
    service = SpeakerService(load=DcEmbedder)
    await service.start()
    try:
        messages, _ = await _run(speakers=service, layout=(stream, speech), recognizer=UnsureOfHalves)
    finally:
        await service.close()
    [sentence] = _sentences(messages)
    # One sentence over both voices' speech, decoded from all of it (both clips and the pause between them).
    start_ms, end_ms = (speech[0][0] * 1000 // SAMPLE_RATE, speech[1][1] * 1000 // SAMPLE_RATE)
    assert abs(sentence.start_ms - start_ms) <= 64 and abs(sentence.end_ms - end_ms) <= 400, sentence
    heard = float(sentence.text.split()[2])
    assert heard >= (a.size + b.size) / SAMPLE_RATE, sentence.text
    assert sentence.words and sentence.words[0].start_ms >= sentence.start_ms - 64, sentence.words[:2]


@pytest.mark.asyncio
async def test_session_errors_from_the_transport_reach_the_client_and_the_session_goes_on() -> None:
    stream, speech = _layout()
    session = Session(
        "s2",
        SessionOptions(),
        config=EngineConfig(speakers=False),
        scheduler=DecodeScheduler(FakeTranscriber(delay_s=0.005), 2),
        vad=ScriptedVad(speech),
        speakers=None,
        model_name="fake",
    )
    from engine import ErrorCode

    session.post_error(ErrorCode.BAD_MESSAGE, "not JSON")
    session.post_storage(False, "not saved")
    assert await session.next_message() == protocol.Error(ErrorCode.BAD_MESSAGE, "not JSON", seq=1)
    assert await session.next_message() == protocol.Storage(False, "not saved", seq=2)
    session.feed(stream[:CHUNK_SAMPLES])
    assert session.state is SessionState.LIVE
    await session.close()


class TickedVad(ScriptedVad):
    """Fake VAD lane that delivers as batched ticks do for a sender ahead of real time: whatever was pushed since
    the last ``tick`` arrives in one call (up to seconds of audio), not one call per push."""

    def __init__(self, speech: list[tuple[int, int]]) -> None:
        super().__init__(speech)
        self._held: list[np.ndarray] = []

    def push(self, samples: np.ndarray) -> None:
        k = len(self._framer.push(samples))
        if not k:
            return
        centres = np.arange(self._next, self._next + k) * WINDOW + WINDOW // 2
        inside = np.zeros(k, dtype=bool)
        for a, b in self.speech:
            inside |= (centres >= a) & (centres < b)
        self._next += k
        self._held.append(inside.astype(np.float32))

    def tick(self) -> None:
        if self._held:
            probs, self._held = np.concatenate(self._held), []
            self._consumer(probs)

    async def drained(self) -> None:
        self.tick()


def _s(seconds: float) -> int:
    return round(seconds * SAMPLE_RATE)


async def _fast_sender(
    speech_s: list[tuple[float, float]], steps: list[tuple[float, float]]
) -> list[protocol.ServerMessage]:
    """A session whose audio (real speech where ``speech_s`` says, silence elsewhere) comes faster than real time:
    the session's clock does not move. For each step ``(until_s, wait_s)`` the audio up to ``until_s`` is fed in
    60 ms chunks and delivered by the VAD in one tick, then the fake recognizer (50 ms a decode) gets ``wait_s`` of
    time. Then the session stops (the sender is done). Returns every message the client got."""
    speech = [(_s(a), _s(b)) for a, b in speech_s]
    end = _s(steps[-1][0])
    stream = np.zeros(end, np.float32)
    voice = audio(CLIP_A)
    for a, b in speech:
        stream[a:b] = voice[: b - a]
    vad = TickedVad(speech)
    session = Session(
        "s3",
        SessionOptions(),
        config=EngineConfig(speakers=False),
        scheduler=DecodeScheduler(FakeTranscriber(delay_s=0.05), 2),
        vad=vad,
        speakers=None,
        model_name="fake",
        clock=Clock(1000.0),
    )
    messages, reader = _reading(session)
    fed = 0
    for until_s, wait_s in steps:
        for i in range(fed, _s(until_s), CHUNK_SAMPLES):
            session.feed(stream[i : min(i + CHUNK_SAMPLES, _s(until_s))])
        fed = _s(until_s)
        vad.tick()
        await asyncio.sleep(wait_s)
    await session.stop()
    await asyncio.wait_for(reader, 5)
    await session.close()
    return messages


def _heard_before_lock(messages: list[protocol.ServerMessage]) -> list[float]:
    """Seconds of audio behind each partial text the client saw before the first sentence locked (the fake
    recognizer says how much it heard; the segment's audio starts 0.3 s, its pre-roll, before its speech)."""
    heard: list[float] = []
    for m in messages:
        if isinstance(m, Caption) and m.sentences:
            break
        if isinstance(m, Caption) and m.partial:
            heard.append(float(m.partial.split()[2]))
    return heard


@pytest.mark.asyncio
async def test_a_partial_asked_for_while_the_last_one_decodes_follows_it() -> None:
    # The second tick brings more speech while the sentence's first partial decodes. Once that is done the next
    # partial must start with the newest audio: the next VAD delivery may come after the sender has stopped (no
    # partial starts then), and without a pause nothing else asks for one.
    heard = _heard_before_lock(await _fast_sender([(0.5, 5.0)], steps=[(1.5, 0.0), (2.5, 0.2), (5.0, 0.0)]))
    # The first tick's audio is 1.3 s of the segment (it starts at 0.2 s, its pre-roll), the second's 2.3 s.
    assert heard and max(heard) >= 2.3 - 0.07, f"the second tick's speech never showed before the lock: {heard}"


@pytest.mark.asyncio
async def test_a_pause_inside_one_vad_delivery_still_gets_its_partial() -> None:
    # A 0.5 s pause in the middle of one tick's audio: the words before it go out during the pause (that decode is
    # the one that becomes the final when the pause turns out to end the sentence), as with one delivery per push.
    heard = _heard_before_lock(await _fast_sender([(0.5, 2.5), (3.0, 4.5)], steps=[(1.5, 0.2), (4.5, 0.2)]))
    # The only session here: its closing partial starts ``closing_after_alone_ms`` into the pause, sooner than
    # ``closing_after_ms`` (with other sessions decoding).
    partial = EngineConfig().partial
    pause, shared = partial.closing_after_alone_ms / 1000, partial.closing_after_ms / 1000
    assert any(2.5 + pause - 0.07 <= 0.2 + h < 2.5 + shared - 0.07 for h in heard), f"the pause went unseen: {heard}"
