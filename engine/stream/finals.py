"""Closed segments on their way to locked sentences: final decodes, then locking in segment order.

When a segment closes, ``Finals.start`` runs its final decode and its speaker embedding (a partial that already heard
all of its speech stands in for the decode: ``Handover``): concurrently where the sentence waits for its label, the
embedding after the decode where it locks without it (on a CPU the two would share the cores). The decode is made to
start with the segment's settled words, and the sentence locks with exactly them even if the guard rejects the rest:
a stable word is never withdrawn. Settled words that went on to the next voice's sentence at a split are not said again.

A change of voice cuts a segment in two (``CloseReason.TURN``). When neither half passes the guard, the cut is taken
for a mistake (noise that sounded like another voice, two halves too short for Whisper to be sure of) and the two
are decoded again as one segment, which locks if that passes: without it a false cut loses every word of both (it
happens to a reader under loud babble: each half fails the guard, and joined they pass).

``lock`` locks every finished segment at the head of the queue, in order, each once: an id, its speaker label
(``Labels``, in that order) and word times. A live sentence whose client takes speaker corrections locks without
waiting for its embedding (its label may follow in a ``speakers`` message); a file's, or one whose client cannot
take a correction, waits for it. The session sends what it returns; nothing here posts a caption.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import engine.protocol as protocol
from engine.asr.align import AlignedWord
from engine.asr.guard import reject_reason
from engine.asr.timestamps import TimedSpan
from engine.asr.transcriber import DecodeRequest, Priority, Transcript
from engine.audio.pcm import SAMPLE_RATE, rms_dbfs, samples_to_ms
from engine.audio.vad import WINDOW
from engine.config import EngineConfig
from engine.errors import EngineNotReady
from engine.logs import SessionLog
from engine.observe import SessionStats
from engine.speakers.service import SpeakerService
from engine.stream.alignment import Alignment, closed_words, nothing
from engine.stream.endpoint import CloseReason, SegmentClosed
from engine.stream.labels import Labels
from engine.stream.mailbox import Mailbox
from engine.stream.partials import DecodeSettings, Handover, stopped_early
from engine.stream.scheduler import DecodeScheduler
from engine.stream.stable import onto, without_lead


@dataclass(frozen=True, slots=True)
class Joined:
    """A segment joined to the turn's half before it (``joined_segment``), with its audio (16 kHz)."""

    segment: SegmentClosed
    audio: np.ndarray


@dataclass(frozen=True, slots=True)
class Final:
    """A segment's final, what its sentence locks with."""

    text: str | None  # None: nothing to show
    spans: tuple[TimedSpan, ...] = ()  # Whisper's timed stretches of the text
    # Its speaker embedding: a future (a live sentence may lock before it is in); None: none was asked for.
    embed: asyncio.Future[np.ndarray | None] | None = None
    avg_logprob: float = 0.0  # the decode's mean token log-probability
    aligned: list[AlignedWord] | None = None  # its words aligned by Whisper's cross-attention (None: not aligned)
    joined: Joined | None = None  # set when the text is that of the segment joined to the turn's half before it
    # The decoder's probability of each word of the text (empty when it has none, or the text is not the decode's).
    word_probs: tuple[float, ...] = ()
    language: str | None = None  # the language the decode heard (or was told), when it says


_NOTHING = Final(None)
_WHISPER_SAMPLES = 30 * SAMPLE_RATE  # the most audio one decode hears


@dataclass
class Pending:
    """A closed segment on its way to becoming a locked sentence."""

    closed: SegmentClosed
    preview: str  # the last partial text shown for it, kept on screen until it locks
    task: asyncio.Task[Final]
    speech_s: float = 0.0
    shown: bool = False  # some text of it was shown as a partial before it closed
    stable: int = 0  # leading words of ``preview`` that were settled (the sentence locks with them)
    audio: np.ndarray | None = None  # the segment's audio (the aligner reads it once the sentence has locked)
    voice: int | None = None  # the speaker label its voice showed beside its partial text when it closed
    # The session's sample at which it closed (the endpoint decided): its lock lag counts from there.
    closed_at_sample: int = 0


@dataclass(frozen=True)
class Locked:
    """A sentence ``lock`` locked, the segment it came from and Whisper's timed stretches of its text."""

    sentence: protocol.Sentence
    pending: Pending
    spans: tuple[TimedSpan, ...]
    language: str | None = None  # the language its final decode heard (or was told), when it says


@dataclass(frozen=True, slots=True)
class Preview:
    """Text on screen that is not locked yet, and how many of its leading words are settled (they lock as shown)."""

    text: str
    stable: int


@dataclass(frozen=True, slots=True)
class LockRound:
    """What one ``Finals.lock`` locked: the new sentences, and the end (sample) of the audio the finished segments
    covered (0 if none finished; a segment with nothing to show locks no sentence but counts)."""

    locked: list[Locked]
    covered_end_sample: int


class Finals:
    """One session's closed segments, oldest first (``pending``), until each has locked."""

    def __init__(
        self,
        session_id: str,
        decoding: DecodeSettings,
        *,
        config: EngineConfig,
        scheduler: DecodeScheduler,
        speakers: SpeakerService | None,
        labels: Labels | None,
        alignment: Alignment,
        mailbox: Mailbox,
        stats: SessionStats,
        log: SessionLog,
        on_done: Callable[[], None],
    ) -> None:
        """``speakers``/``labels``: the speaker service and the session's labels (None: no labels); ``mailbox``:
        where an ``error`` goes when the recognizer is unavailable; ``on_done`` runs as each final finishes (the
        session then locks what it can)."""
        self._session_id = session_id
        self._decoding = decoding
        self._config = config
        self._scheduler = scheduler
        self._speakers = speakers
        self._labels = labels
        self._alignment = alignment
        self._mailbox = mailbox
        self._stats = stats
        self._log = log
        self._on_done = on_done
        self.pending: deque[Pending] = deque()
        self._next_sentence = 0
        # The last segment a change of voice ended whose final the guard dropped, with its audio: the next segment
        # is decoded joined to it if the guard drops that one too.
        self._dropped_half: Joined | None = None

    def start(
        self,
        closed: SegmentClosed,
        audio: np.ndarray,
        handover: Handover,
        voice: int | None = None,
        closed_at_sample: int = 0,
    ) -> None:
        """Start the final of segment ``closed`` (``audio``: its audio, 16 kHz; ``voice``: the speaker label shown
        beside its partial text, if any: it locks with that one if its embedding is not in yet;
        ``closed_at_sample``: the session sample at which it closed)."""
        speech_s = closed.speech_samples / SAMPLE_RATE
        task = asyncio.create_task(
            self._final(closed, audio, speech_s, handover), name=f"{self._session_id}-final-{closed.index}"
        )
        self.pending.append(
            Pending(
                closed,
                handover.preview,
                task,
                speech_s,
                shown=handover.shown,
                stable=len(handover.stable),
                audio=audio,
                voice=voice,
                closed_at_sample=closed_at_sample or closed.end_sample,
            )
        )
        task.add_done_callback(lambda _t: self._on_done())

    def previews(self) -> list[Preview]:
        """The text shown for each segment waiting to lock (oldest first, those that showed some)."""
        return [Preview(p.preview, p.stable) for p in self.pending if p.preview]

    def cancel(self) -> list[asyncio.Task[Final]]:
        """Cancel every final and forget the segments; returns their tasks (to await)."""
        tasks = [p.task for p in self.pending]
        for t in tasks:
            t.cancel()
        self.pending.clear()
        self._dropped_half = None
        return tasks

    async def _final(self, closed: SegmentClosed, audio: np.ndarray, speech_s: float, handover: Handover) -> Final:
        """Final decode and speaker embedding of one closed segment, concurrently. Text None = nothing to show.

        ``handover.prior`` (a finished partial) or ``handover.adopted`` (a running one) that covers all the speech
        stands in for the final decode. The text begins with exactly the settled words (forced as the decode's
        start, or reconciled); carried words are not said again. A file's sentence waits for its aligned word times
        and its speaker embedding; a live one locks without its word times (they follow, ``Alignment.after_lock``)
        and, if its client takes corrections, without its embedding (``Labels``)."""
        stable, stable_end_sample, prior, adopted, carried = (
            handover.stable,
            handover.stable_end_sample,
            handover.prior,
            handover.adopted,
            handover.carried,
        )
        request = self._request(f"{self._session_id}-f{closed.index}", audio, stable)
        # Where the sentence does not wait for its label, its embedding starts once its text is decoded: on a CPU
        # it would otherwise share the cores with that decode, which the lock does wait for.
        after = self._locks_before_label()
        embed = None if after else self._embed(audio, speech_s)
        try:
            result = prior
            if result is None and adopted is not None:
                result = await self._scheduler.final_of(adopted)
                if result is not None and (
                    result.truncated or stopped_early(result, closed.speech_end_sample, stable, stable_end_sample)
                ):
                    result = None  # a partial's text that stops before its audio does: decode it properly
            if result is None:
                result = await self._decode(request)
                if stopped_early(result, closed.speech_end_sample, stable, stable_end_sample):
                    # Decode it whole, unforced; the settled words are then put back in front (``onto``).
                    result = await self._scheduler.final(dataclasses.replace(request, prefix=""))
        except EngineNotReady as exc:
            self._mailbox.post(protocol.Error(protocol.ErrorCode.ENGINE, f"recognizer unavailable: {exc}"))
            if embed is not None:
                embed.cancel()
            if stable:
                return Final(" ".join(stable))
            return _NOTHING
        if prior is None:
            self._stats.final_decode_s.append(result.decode_s)
        if embed is None:
            embed = self._embed(audio, speech_s)
        words = onto(stable, result.text.split())
        text = " ".join(stable + without_lead(words[len(stable) :], carried))
        if carried:
            # Settled words went on to the next sentence, and are on screen right after this one's settled words:
            # anything more this sentence said would land in front of them. Those words are the next sentence's.
            if not stable:
                embed.cancel()
                return _NOTHING
            text = " ".join(stable)
        reason = reject_reason(
            result, rms_dbfs(audio), samples_to_ms(closed.speech_samples), self._decoding.guard(self._config.guard)
        )
        if reason:
            kind = reason.kind.value
            self._stats.dropped[kind] = self._stats.dropped.get(kind, 0) + 1
            self._log.info("segment %d dropped: %s (%r)", closed.index, reason, result.text[:80])
            if not stable:  # (nor carried words: those returned above)
                embed.cancel()
                joined = await self._rejoined(closed, audio)
                if joined is None:
                    self._hold_if_cut(closed, audio)
                return joined or _NOTHING
            text = " ".join(stable)  # already on screen as settled: it locks, whatever the rest was
        if result.language:
            self._stats.languages[result.language] = self._stats.languages.get(result.language, 0) + 1
        aligned = self._file_alignment(audio, text, result.language)
        await self._label_wait(embed)
        same = text == result.text
        return Final(
            text,
            result.spans if same else (),
            embed,
            result.avg_logprob,
            await aligned,
            word_probs=result.word_probs if same else (),
            language=result.language,
        )

    def _request(self, request_id: str, audio: np.ndarray, stable: list[str]) -> DecodeRequest:
        """A final decode of ``audio`` made to start with ``stable``: a file's in the background queue."""
        priority = Priority.BACKGROUND if self._decoding.options.background else Priority.FINAL
        return self._decoding.request(request_id, audio, priority, stable, self._config.transcriber.timestamps)

    async def _decode(self, request: DecodeRequest) -> Transcript:
        """Run a final decode through the scheduler's queue for its priority."""
        if request.priority is Priority.BACKGROUND:
            return await self._scheduler.background(request)
        return await self._scheduler.final(request)

    def _embed(self, audio: np.ndarray, speech_s: float) -> asyncio.Future[np.ndarray | None]:
        """The speaker embedding of ``audio`` (``speech_s`` seconds of speech), started now; None without speakers."""
        return self._speakers.embed(audio, speech_s) if self._speakers is not None else nothing()

    def _file_alignment(
        self, audio: np.ndarray, text: str, language: str | None
    ) -> asyncio.Future[list[AlignedWord] | None]:
        """A file's word times for ``text``, which its sentence waits for; a live sentence locks without them
        (nothing to await: they follow, ``Alignment.after_lock``)."""
        options = self._decoding.options
        if not options.background or options.task != "transcribe":  # a translation's words are not the ones said
            return nothing()
        return self._alignment.align(audio, text, language or options.language, queue=True)

    async def _label_wait(self, embed: asyncio.Future[np.ndarray | None]) -> None:
        """Wait for the speaker embedding ``embed`` (failed or not) where the sentence must lock with its final
        label: a file's, or one whose client cannot take a correction (``SessionOptions.relabels``)."""
        if self._locks_before_label():
            return
        try:
            await asyncio.wait([embed])
        except asyncio.CancelledError:
            embed.cancel()
            raise

    def _locks_before_label(self) -> bool:
        """This session's sentences lock without waiting for their speaker embedding (``Labels``)."""
        options = self._decoding.options
        return options.relabels and not options.background

    def _hold_if_cut(self, closed: SegmentClosed, audio: np.ndarray) -> None:
        """Keep a dropped segment that a change of voice ended, for the segment after it (``_rejoined``)."""
        self._dropped_half = Joined(closed, audio) if closed.reason is CloseReason.TURN else None

    async def _rejoined(self, closed: SegmentClosed, audio: np.ndarray) -> Final | None:
        """The final of ``closed`` (dropped by the guard) decoded joined to the turn's half before it, when that one
        was dropped too (its final began first and has nearly always finished by now; if not, nothing is joined).
        None when there is no such half, the two are too long for one decode, or the guard drops the joined text as
        well (then the joined segment is kept for the next half, if a change of voice ended it)."""
        held, self._dropped_half = self._dropped_half, None
        if held is None or not closed.after_turn or held.segment.index != closed.index - 1:
            return None
        joined = joined_segment(held.segment, held.audio, closed, audio)
        segment, both = joined.segment, joined.audio
        if both.size > _WHISPER_SAMPLES:
            return None
        request = self._request(f"{self._session_id}-f{closed.index}-joined", both, [])
        speech_s = segment.speech_samples / SAMPLE_RATE
        embed = self._embed(both, speech_s)
        try:
            result = await self._decode(request)
        except EngineNotReady:
            embed.cancel()
            return None
        self._stats.final_decode_s.append(result.decode_s)
        reason = reject_reason(
            result, rms_dbfs(both), samples_to_ms(segment.speech_samples), self._decoding.guard(self._config.guard)
        )
        if reason:
            embed.cancel()
            self._log.info("segments %d-%d joined dropped: %s", held.segment.index, closed.index, reason)
            self._hold_if_cut(segment, both)
            return None
        self._stats.rejoined += 1
        self._log.info(
            "segments %d-%d, both dropped, decoded as one (%.2f)", held.segment.index, closed.index, result.avg_logprob
        )
        aligned = self._file_alignment(both, result.text, result.language)
        await self._label_wait(embed)
        return Final(
            result.text,
            result.spans,
            embed,
            result.avg_logprob,
            await aligned,
            joined,
            result.word_probs,
            result.language,
        )

    def lock(self) -> LockRound:
        """Lock every finished segment at the head of the queue, in order."""
        locked: list[Locked] = []
        covered = 0
        while self.pending and self.pending[0].task.done():
            item = self.pending.popleft()
            if item.task.cancelled():
                continue
            exc = item.task.exception()
            if exc is not None:
                self._log.error("final decode of segment %d failed: %r", item.closed.index, exc)
                continue
            final = item.task.result()
            text, spans, probs = final.text, final.spans, final.word_probs
            if final.joined is not None:  # the sentence is this segment joined to the one before it
                item.closed, item.audio = final.joined.segment, final.joined.audio
                item.speech_s = item.closed.speech_samples / SAMPLE_RATE
            covered = max(covered, item.closed.end_sample)
            if text is None:
                continue
            sid = self._next_sentence
            self._next_sentence += 1
            closed = item.closed
            spk = (
                self._labels.label(sid, final.embed or nothing(), item.speech_s, closed.after_turn, item.voice)
                if self._labels
                else None
            )
            words = closed_words(closed, text, self._config.vad.offset, spans, final.aligned)
            speech = closed.probs[: max(1, closed.speech_samples // WINDOW)]
            no_speech = round(1.0 - float(speech.mean()), 4) if speech.size else None
            sentence = protocol.Sentence(
                sid,
                text,
                samples_to_ms(closed.speech_start_sample),
                samples_to_ms(closed.speech_end_sample),
                spk,
                words=tuple(words),
                avg_logprob=round(final.avg_logprob, 4),
                no_speech_prob=no_speech,
                word_probs=tuple(round(p, 4) for p in probs) if len(probs) == len(words) else (),
            )
            locked.append(Locked(sentence, item, spans, final.language))
        return LockRound(locked, covered)


def joined_segment(
    first: SegmentClosed, first_audio: np.ndarray, second: SegmentClosed, second_audio: np.ndarray
) -> Joined:
    """Segment ``second`` joined to ``first``, the one before it, as one (its index, reason and end; ``first``'s start,
    speech start and change of voice), with its audio: silence stands in for any samples between the two, which
    belong to neither (the quiet windows after a cut, before the next segment's pre-roll)."""
    gap = np.zeros(max(0, second.start_sample - first.end_sample), np.float32)
    skip = max(0, (second.speech_start_sample - first.speech_start_sample) // WINDOW - first.probs.size)
    probs = np.concatenate([first.probs, np.zeros(skip, np.float32), second.probs]).astype(np.float32)
    segment = dataclasses.replace(
        second,
        start_sample=first.start_sample,
        speech_start_sample=first.speech_start_sample,
        probs=probs,
        after_turn=first.after_turn,
    )
    return Joined(segment, np.concatenate([first_audio, gap, second_audio]).astype(np.float32))
