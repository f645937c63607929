"""One caption session: audio in, caption messages out.

``feed`` is synchronous and cheap (it buffers audio and pushes it into the session's VAD lane); the VAD tick
hands back speech probabilities (``on_vad``); segment ends start final decodes; partials are requested from the
shared scheduler. Messages (docs/protocol.md) come out of ``next_message``/``messages`` through a coalescing
mailbox. ``stop`` finishes the open segment and sends the final messages; ``close`` drops everything and is safe
to call twice.

Locked sentences go out in segment order, each once, with its speaker label: a segment's final decode and its
speaker embedding run concurrently, and the sentence locks when both are done and every earlier segment has
locked.

A session is given its collaborators (``Session.__init__``): the engine config, the decode scheduler, its VAD
lane, the speaker service (or None) and a clock. It owns none of them: whoever opened the VAD lane closes it
(``on_closed``), so a session can be driven in a test with fakes of each.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

import engine.protocol as protocol
from engine.asr.align import AlignedWord
from engine.asr.align_service import AlignService
from engine.asr.guard import reject_reason
from engine.asr.timestamps import TimedSpan
from engine.asr.transcriber import DecodeRequest, Priority, Transcript
from engine.audio.pcm import SAMPLE_RATE, AudioBuffer, as_float32, rms_dbfs, samples_to_ms
from engine.audio.vad import WINDOW
from engine.config import EngineConfig, SessionOptions
from engine.errors import EngineNotReady, IllegalTransition
from engine.logs import SessionLog
from engine.observe import EngineObserver
from engine.speakers.service import SpeakerService
from engine.speakers.turns import Window
from engine.stream.endpoint import CloseReason, Endpointer, SegmentClosed, SegmentEvent, SegmentOpened
from engine.stream.mailbox import Mailbox
from engine.stream.scheduler import DecodeScheduler
from engine.stream.sentence_end import ends_sentence
from engine.stream.stable import StableWords, onto, without_lead
from engine.stream.vad_batch import VadFeed
from engine.stream.words import place_words

log = logging.getLogger(__name__)

WINDOW_MS = WINDOW * 1000 / SAMPLE_RATE  # one VAD probability per this many ms
STEP_WINDOWS = 2  # a session looks at its segment after this many VAD windows (64 ms: one live push's worth)


class SessionState(StrEnum):
    LIVE = "live"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CLOSED = "closed"


# A segment's final: its text (None = nothing to show), Whisper's timed stretches of it, its speaker embedding, the
# decode's mean token log-probability, its words aligned by Whisper's cross-attention (None: not aligned).
_Final = tuple[str | None, tuple[TimedSpan, ...], np.ndarray | None, float, list[AlignedWord] | None]


EARLY_STOP_S = 1.5  # speech after the settled words that a decode adding no word to them must have missed


def _forced(stable: list[str]) -> str:
    """The settled words as a decode's forced start, without the sentence-final punctuation of a last word that
    ends a sentence ("Mr." keeps its full stop): after a forced full stop Whisper tends to end the text there,
    though the speaker went on."""
    text = " ".join(stable)
    bare = text.rstrip(".?!。？！")
    return bare if bare and ends_sentence(text) else text


def _nothing() -> asyncio.Future[Any]:
    """A future that already holds None: what a missing service (speakers, aligner) answers."""
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    return fut


@dataclass
class _Pending:
    """A closed segment on its way to becoming a locked sentence."""

    closed: SegmentClosed
    preview: str  # the last partial text shown for it, kept on screen until it locks
    task: asyncio.Task[_Final]
    speech_s: float = 0.0
    shown: bool = False  # some text of it was shown as a partial before it closed
    stable: int = 0  # leading words of ``preview`` that were settled (the sentence locks with them)
    audio: np.ndarray | None = None  # the segment's audio (the aligner reads it once the sentence has locked)


@dataclass
class SessionStats:
    """Counters for benches and logs."""

    segments: int = 0
    sentences: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    partials: int = 0
    reused: int = 0  # finals that took a partial decode covering all the speech instead of decoding again
    final_decode_s: list[float] = field(default_factory=list)
    languages: dict[str, int] = field(default_factory=dict)  # sentences kept, by the language they were decoded in


class Session:
    """Per-session state; created by ``CaptionEngine.open_session``."""

    def __init__(self, session_id: str, options: SessionOptions, *, config: EngineConfig,
                 scheduler: DecodeScheduler, vad: VadFeed, speakers: SpeakerService | None, model_name: str,
                 aligner: AlignService | None = None, on_closed: Callable[[Session], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, observer: EngineObserver | None = None) -> None:
        """Normally built by ``CaptionEngine.open_session``. ``vad`` is this session's lane (its probabilities come
        back to ``on_vad``); ``on_closed`` runs once when the session closes (the engine frees the lane there);
        ``clock`` is monotonic seconds (arrival times, partial cadence, latency); ``observer`` hears of the audio
        fed and, for a live session, of each sentence's first text and lock (``engine.observe``); ``aligner`` (if
        any) gives each locked sentence its word times from Whisper's cross-attention."""
        self.session_id = session_id
        self._aligner = aligner
        self.options = options
        self.config = config
        self.scheduler = scheduler
        self.vad = vad
        vad.bind(self.on_vad)
        self.model_name = model_name
        self._on_closed = on_closed
        self._clock = clock
        self._observer = observer if observer is not None else EngineObserver()
        self.state = SessionState.LIVE
        self.stats = SessionStats()
        self.mailbox = Mailbox()
        self.audio = AudioBuffer()
        self.endpointer = Endpointer(config.vad, config.file_endpoint if options.background else config.endpoint)
        self._preroll = config.endpoint.preroll_ms * SAMPLE_RATE // 1000
        self._arrivals: deque[tuple[int, float]] = deque()  # (audio end sample, clock time of arrival)
        self.last_partial_started = 0.0
        self._partial_audio_end = 0  # end sample of the audio the newest partial request covers
        self._partial_text = ""
        self._text_shown = False  # the open segment has shown some partial text (its first-text latency is taken)
        self._partial_spk: int | None = None  # provisional speaker label of the open segment (``partial_spk``)
        # request id -> (segment index, audio end sample, the audio ended inside speech)
        self._partial_meta: dict[str, tuple[int, int, bool]] = {}
        self._last_partial: tuple[int, int, Transcript] | None = None  # newest finished partial of the open segment
        self._stable = self._new_stable()  # the open segment's settled words (``engine.stream.stable``)
        self._stable_end = 0  # where they end, estimated (session sample index)
        self._decoded: list[tuple[int, int]] = []  # the open segment's partials: (audio end sample, words decoded)
        self._carried: list[str] = []  # settled words moving to the next segment at a split (``_on_window``)
        self._ends_sentence = False  # the newest partial's text ends a sentence (``engine.stream.sentence_end``)
        self._aligning: set[asyncio.Future[None]] = set()  # locked sentences whose aligned word times are on the way
        self._pending: deque[_Pending] = deque()
        self._next_sentence = 0
        self._speaker_service = speakers
        self.speakers = speakers.new_tracker() if speakers is not None else None
        self.turns = speakers.new_turn_detector(config.vad.offset) if speakers is not None else None
        self._context = ""
        self.configured = False
        self._log = SessionLog(log, session_id)

    def configure(self, options: SessionOptions) -> None:
        """Set language and hotwords (they apply to every decode from now on) and post ``ready``.

        Audio may flow before this; it is decoded with the engine's defaults until then.
        Raises ``IllegalTransition`` when called twice or after stop.
        """
        if self.state is not SessionState.LIVE or self.configured:
            raise IllegalTransition("configure the session" + (" again" if self.configured else ""), self.state)
        self.options = options
        self._context = " ".join([*options.hotwords, options.prompt]).strip()
        self.configured = True
        self.mailbox.post(protocol.Ready(self.session_id, self.model_name, options.language))

    # ---- audio in -------------------------------------------------------------------------------------------
    def feed(self, pcm: np.ndarray) -> None:
        """Append 16 kHz mono audio (int16 or float32, any length; the transport sends 60 ms chunks).

        Never blocks: the VAD runs on the engine's next tick, off the event loop.
        Raises ``IllegalTransition`` once the session is stopping or closed.
        """
        if self.state is not SessionState.LIVE:
            raise IllegalTransition("feed audio", self.state)
        audio = as_float32(pcm)
        if audio.size == 0:
            return
        self.audio.append(audio)
        self._arrivals.append((self.audio.end, self._clock()))
        self.vad.push(audio)
        self._observer.audio_received(audio.size / SAMPLE_RATE, self.options.background)

    @property
    def audio_s(self) -> float:
        """Seconds of audio received so far."""
        return self.audio.end / SAMPLE_RATE

    async def caught_up(self, vad_s: float, segments: int) -> None:
        """Return once less than ``vad_s`` seconds of audio wait for the VAD and at most ``segments`` closed segments
        wait for their final decode, or once the session is no longer live. A file's reader awaits this between
        blocks, so a file is fed no faster than it is transcribed."""
        while self.state is SessionState.LIVE:
            if self.vad_backlog_s > vad_s:
                await self.vad.drained()
            elif self.finals_pending > segments:
                await asyncio.wait({self._pending[0].task})
            else:
                return

    @property
    def finals_pending(self) -> int:
        """Closed segments not locked yet (waiting for their final decode or for an earlier one)."""
        return len(self._pending)

    @property
    def vad_backlog_s(self) -> float:
        """Audio received but not yet through the VAD, in seconds (grows when the machine falls behind)."""
        return (self.audio.end - self.endpointer.position) / SAMPLE_RATE

    # ---- VAD results ----------------------------------------------------------------------------------------
    def on_vad(self, probs: np.ndarray) -> None:
        """Consume speech probabilities of the next windows of this session's audio (the VAD lane calls this)."""
        if self.state is SessionState.CLOSED:
            return
        # In steps of what a live push brings, whatever this delivery holds: a delivery of a session ahead of real
        # time (batched ticks, a backlog) carries up to a second of audio, and a pause inside it would otherwise never
        # be seen (``closing``), nor the first words of a segment that opened inside it.
        for i in range(0, len(probs), STEP_WINDOWS):
            self._on_events(self.endpointer.push(probs[i : i + STEP_WINDOWS]))
            self._maybe_end_sentence()
            self._watch_turns()
            self._trim()
            self._maybe_want_partial()

    def _on_events(self, events: list[SegmentEvent], cut: int | None = None) -> None:
        """Segment events in order; ``cut``: they are a split at that sample for a change of voice."""
        for event in events:
            if isinstance(event, SegmentOpened):
                self._on_open(event)
                if self.turns is not None and cut is not None:
                    self.turns.cut(cut)
                elif self.turns is not None:
                    self.turns.open(event.speech_start)
            else:
                self._on_close(event)
                if self.turns is not None and cut is None:
                    self.turns.close()

    # ---- voice changes inside a segment ---------------------------------------------------------------------
    def _watch_turns(self) -> None:
        """Ask for the embedding of the open segment's next window when the turn detector wants one."""
        opened = self.endpointer.open_segment
        if (self.turns is None or self._speaker_service is None or opened is None
                or self.state is not SessionState.LIVE or not self.turns.due(self.endpointer.position)):
            return
        window = self.turns.next_window(self.endpointer.position, self.endpointer.open_probs, opened.speech_start)
        if window is None:
            return
        fut = self._speaker_service.embed_window(self.audio.slice(window.start, window.end))
        fut.add_done_callback(lambda f: self._on_window(window, f))

    def _on_window(self, window: Window, fut: asyncio.Future[np.ndarray | None]) -> None:
        """A window's embedding came back: a confirmed change of voice ends the open segment where it began."""
        opened = self.endpointer.open_segment
        if (fut.cancelled() or fut.exception() is not None or self.turns is None or opened is None
                or self.state is not SessionState.LIVE):
            return
        vector = fut.result()
        if vector is None:
            return
        at = self.turns.add(window, vector, self.endpointer.open_probs, opened.speech_start)
        if at is None:
            self._update_partial_speaker()
            return
        shown, settled, sent = self._partial_text.split(), self._stable.words, self._stable.sent
        keep = self._settled_before(at)
        if events := self.endpointer.split(at):
            self._log.debug("voice change at %d ms: segment %d split", samples_to_ms(at), opened.index)
            # Words that settled after the cut were the new voice's: they open its sentence (in the same place on
            # screen, still settled) instead of ending the last one.
            carried = settled[keep:]
            if carried:
                self._stable = self._new_stable(settled[:keep], sent=min(sent, keep))
                self._partial_text = " ".join(shown[:keep])
                self._carried = carried
            self._on_events(events, cut=at)
            if carried:
                self._stable = self._new_stable(list(carried), sent=max(0, sent - keep))
                self._stable_end = at
                self._partial_text = " ".join(carried + shown[len(settled):])
                self._text_shown = True
            self._trim()
            self._maybe_want_partial()
        self._update_partial_speaker()

    def _new_stable(self, words: list[str] | None = None, sent: int = 0) -> StableWords:
        return StableWords(list(words or ()), sent, min_age_s=self.config.partial.stable_min_age_s)

    def _settled_before(self, at: int) -> int:
        """How many settled words of the open segment were said before sample ``at``: as many as the newest partial
        decode of audio that ended there or earlier held (it heard nothing after), all of them if none did."""
        n = len(self._stable.words)
        before = [words for end, words in self._decoded if end <= at]
        return min(n, before[-1]) if before else n

    def _update_partial_speaker(self) -> None:
        """The label the open segment's voice would lock with now, shown with its partial text (``partial_spk``)."""
        voice = self.turns.voice if self.turns is not None else None
        opened = self.endpointer.open_segment
        new_voice = opened is not None and opened.after_turn
        label = (self.speakers.peek(*voice, new_voice=new_voice)
                 if voice is not None and self.speakers is not None else None)
        if label != self._partial_spk:
            self._partial_spk = label
            if self._partial_text:
                self._post([], covered_end=0)

    def _on_open(self, event: SegmentOpened) -> None:
        self.stats.segments += 1
        self._stable = self._new_stable()
        self._stable_end = 0
        self._decoded = []
        self._ends_sentence = False
        self._partial_text = ""
        self._text_shown = False
        self._partial_spk = None
        self._partial_audio_end = event.start
        self._log.debug("segment %d opened at %d ms", event.index, samples_to_ms(event.start))

    def _on_close(self, event: SegmentClosed) -> None:
        prior, adopted = self._reusable_decode(event)
        self.scheduler.cancel_partial(self)
        self._last_partial = None
        self._ends_sentence = False
        stable, carried, self._carried = list(self._stable.words), self._carried, []
        audio = self.audio.slice(event.start, event.end)
        speech_s = (event.speech_end - event.speech_start) / SAMPLE_RATE
        task = asyncio.create_task(self._finalize(event, audio, speech_s, stable, self._stable_end, prior, adopted,
                                                  carried),
                                   name=f"{self.session_id}-final-{event.index}")
        self._pending.append(_Pending(event, self._partial_text, task, speech_s, shown=self._text_shown,
                                      stable=len(stable), audio=audio))
        task.add_done_callback(lambda _t: self._lock_ready())
        self._partial_text = ""
        self._log.debug("segment %d closed (%s), %.2f s", event.index, event.reason.value, audio.size / SAMPLE_RATE)

    def _reusable_decode(self, event: SegmentClosed) -> tuple[Transcript | None,
                                                              asyncio.Task[Transcript | None] | None]:
        """A partial decode of this segment that already covers all of its speech is its final decode: only
        trailing silence is missing, which does not change Whisper's text. Returns a finished result or a running
        decode to adopt (else both None): on CPU this saves one whole decode per sentence."""
        if not self.config.partial.reuse_for_final:
            return None, None
        # A segment cut while speech goes on (a cap or a change of voice) must not take a decode that heard the
        # words after the cut; after a pause, a decode that ran on into the silence is as good.
        limit = event.end if event.reason in (CloseReason.CAP, CloseReason.TURN) else None

        def covers(end: int) -> bool:
            return end >= event.speech_end and (limit is None or end <= limit)

        last = self._last_partial
        if last is not None and last[0] == event.index and covers(last[1]) and not last[2].truncated:
            return last[2], None
        running = self.scheduler.running_partial(self)
        meta = self._partial_meta.get(running.request_id) if running else None
        if meta is not None and meta[0] == event.index and covers(meta[1]):
            return None, self.scheduler.adopt_partial(self)
        return None, None

    def _trim(self) -> None:
        """Keep only the open segment (or the pre-roll) of audio; closed segments were copied out."""
        opened = self.endpointer.open_segment
        # Before a segment opens, its pre-roll reaches back from where its speech began, which may lie a few windows
        # back (the onset must last ``min_speech_ms``), not from the newest window.
        keep = opened.start if opened else self.endpointer.onset_start - self._preroll
        self.audio.trim_before(keep)
        # Arrival times are still needed for the latency of segments waiting for their final decode.
        oldest = min(self.audio.origin, self._pending[0].closed.start) if self._pending else self.audio.origin
        while len(self._arrivals) > 1 and self._arrivals[1][0] <= oldest:
            self._arrivals.popleft()

    # ---- partials -------------------------------------------------------------------------------------------
    @property
    def closing(self) -> bool:
        """True in a pause of ``PartialConfig.closing_after_ms`` or more after the open segment's speech: the next
        partial covers all of it and will most likely be reused as the final (the scheduler runs it first)."""
        after_ms = self.config.partial.closing_after_ms
        return 0 < after_ms <= samples_to_ms(self.endpointer.position - self.endpointer.speech_end)

    def _maybe_want_partial(self) -> None:
        opened = self.endpointer.open_segment
        if opened is None or self.state is not SessionState.LIVE or self.options.background \
                or not self.options.partials:
            return
        cfg = self.config.partial
        speech_ms = samples_to_ms(self.endpointer.position - opened.speech_start)
        new_ms = samples_to_ms(self.endpointer.position - self._partial_audio_end)
        interval = max(cfg.interval_s, cfg.load_factor * self.scheduler.partial_decode_ema_s)
        if self.closing or not self._partial_text:
            # No waiting for the interval when the speaker has paused (a decode of everything up to now is most
            # likely the sentence's final: run it during the endpoint's silence wait, not after it), or when nothing
            # is on screen yet for this segment (the first words were too short or only a non-speech tag came
            # back: the first words should show as soon as there is more speech).
            interval = 0.0
        # Only new *speech* is worth a decode: re-decoding the same words plus trailing silence changes nothing.
        new_speech = self.endpointer.speech_end > self._partial_audio_end
        if (speech_ms >= cfg.first_after_ms and new_ms >= cfg.min_new_audio_ms and new_speech
                and self._clock() - self.last_partial_started >= interval):
            self.scheduler.want_partial(self)

    def partial_request(self) -> DecodeRequest | None:
        opened = self.endpointer.open_segment
        if opened is None or self.state is not SessionState.LIVE:
            return None
        end = self.endpointer.position
        self._partial_audio_end = end
        self.last_partial_started = self._clock()
        self.stats.partials += 1
        request_id = f"{self.session_id}-p{self.stats.partials}"
        # The audio ends inside speech when its last windows were speech: its last word may be cut short.
        in_speech = self.endpointer.speech_end >= end - STEP_WINDOWS * WINDOW
        self._partial_meta[request_id] = (opened.index, end, in_speech)
        return DecodeRequest(request_id, self.audio.slice(opened.start, end), Priority.PARTIAL,
                             self.options.language, self._context, prefix=_forced(self._stable.words),
                             timestamps=self.config.transcriber.timestamps, temperature=self.options.temperature)

    def on_partial(self, request: DecodeRequest, result: Transcript) -> None:
        index, end, in_speech = self._partial_meta.pop(request.request_id, (-1, 0, True))
        opened = self.endpointer.open_segment
        if opened is None or opened.index != index or self.state is not SessionState.LIVE:
            return  # its segment has closed meanwhile (an adopted partial reports through its final instead)
        if self._stopped_early(result, min(end, self.endpointer.speech_end), self._stable.words, self._stable_end):
            result = dataclasses.replace(result, truncated=True)
        self._last_partial = (index, end, result)
        level = rms_dbfs(request.audio)
        speech_ms = samples_to_ms(end - opened.speech_start)
        text = "" if reject_reason(result, level, speech_ms, self.config.guard) else result.text
        if self.config.partial.stable_words:
            settled = len(self._stable.words)
            # A decode cut at a loop ends before its audio does: its last word settles no sooner than one cut by it.
            text = " ".join(self._stable.update(text.split(), in_speech or result.truncated, end / SAMPLE_RATE))
            if len(self._stable.words) > settled:
                self._log.debug("segment %d: %d words stable", index, len(self._stable.words))
                self._stable_end = self._settled_until(text)
        self._decoded.append((end, len(text.split())))
        # Only a decode of everything said so far can end the sentence (``_maybe_end_sentence``).
        self._ends_sentence = end >= self.endpointer.speech_end and not result.truncated and ends_sentence(text)
        if in_speech and self.config.partial.hold_back_cut_word:
            text = self._held_back(text)
        if text and not self._text_shown:
            self._text_shown = True
            self._observer.first_text(self._since_arrival(opened.speech_start))
        if text != self._partial_text or self._stable.sent < len(self._stable.words):
            self._partial_text = text
            self._post([], covered_end=end)
        self._maybe_end_sentence()

    @staticmethod
    def _stopped_early(result: Transcript, speech_end: int, stable: list[str], stable_end: int) -> bool:
        """The decode, made to start with the settled words, added none though the speaker went on for
        ``EARLY_STOP_S`` after them: Whisper ended the text right after the forced words. Its text is not the
        segment's, whatever it says (it must not lock it, early or as the final)."""
        return (bool(stable) and len(result.text.split()) <= len(stable)
                and speech_end - stable_end > EARLY_STOP_S * SAMPLE_RATE)

    def _placed_open(self, text: str) -> list[protocol.Word]:
        """The words of ``text``, a decode of the open segment, laid along its speech by the VAD (estimated times)."""
        opened = self.endpointer.open_segment
        if opened is None:
            return []
        return place_words(text, samples_to_ms(opened.speech_start),
                           samples_to_ms(max(self.endpointer.speech_end, opened.speech_start + WINDOW)),
                           self.endpointer.open_probs, self.config.vad.offset, WINDOW_MS, (),
                           samples_to_ms(opened.start), ())

    def _settled_until(self, text: str) -> int:
        """Where the settled words of the open segment end, estimated from the VAD (a session sample index)."""
        n = len(self._stable.words)
        if not n:
            return 0
        placed = self._placed_open(text)
        return placed[n - 1].end_ms * SAMPLE_RATE // 1000 if len(placed) >= n else self.endpointer.speech_end

    def _held_back(self, text: str) -> str:
        """What to show of a decode whose audio ended while the speaker was talking: its last word may be cut
        mid-syllable and its final punctuation is a guess about where the audio ends, so the last word is held back
        (the next decode shows it, whole), unless it is the only word: then it shows at once (the first words of a
        sentence should not wait), without that punctuation. Settled words always show."""
        words = text.split()
        if not words:
            return text
        if len(words) > max(1, len(self._stable.words)):
            return " ".join(words[:-1])
        if len(words) > len(self._stable.words):
            words[-1] = words[-1].rstrip(".,?!;:") or words[-1]
        return " ".join(words)

    def _maybe_end_sentence(self) -> None:
        """Close the open segment once its newest partial, a decode of all of its speech, ends a sentence and the
        speaker has been silent for ``EndpointConfig.sentence_pause_ms``: a short pause, where the silence schedule
        waits long for text that stops mid-clause. That partial becomes the final (``_reusable_decode``)."""
        pause_ms = self.endpointer.cfg.sentence_pause_ms
        last = self._last_partial
        opened = self.endpointer.open_segment
        if (pause_ms <= 0 or not self._ends_sentence or opened is None or last is None or last[0] != opened.index
                or self.state is not SessionState.LIVE):
            return
        if last[1] < self.endpointer.speech_end:  # the speaker went on after that decode's audio
            self._ends_sentence = False
            return
        if samples_to_ms(self.endpointer.position - self.endpointer.speech_end) >= pause_ms:
            closed = self.endpointer.end_sentence()
            if closed is not None:
                self._on_events([closed])

    def on_partial_failed(self, request: DecodeRequest, exc: BaseException) -> None:
        self._partial_meta.pop(request.request_id, None)
        self._log.warning("partial %s failed: %s", request.request_id, exc)

    # ---- finals ---------------------------------------------------------------------------------------------
    async def _finalize(self, closed: SegmentClosed, audio: np.ndarray, speech_s: float, stable: list[str],
                        stable_end: int = 0, prior: Transcript | None = None,
                        adopted: asyncio.Task[Transcript | None] | None = None,
                        carried: list[str] | None = None) -> _Final:
        """Final decode and speaker embedding of one closed segment, concurrently. Text None = nothing to show.

        ``prior`` (a finished partial) or ``adopted`` (a running one) that covers all the speech stands in for the
        final decode. ``stable``: the segment's settled words; the text begins with exactly them (forced as the
        decode's start, or reconciled), and they lock even if the guard rejects the rest: a stable word is never
        withdrawn. ``carried``: settled words that went on to the next sentence at a change of voice (they were said
        after the cut, as far as the partials tell): the text does not say them again. A file's sentence waits for
        its aligned word times; a live one locks without them (they follow, ``_align_locked``)."""
        background = self.options.background
        request = DecodeRequest(f"{self.session_id}-f{closed.index}", audio,
                                Priority.BACKGROUND if background else Priority.FINAL,
                                self.options.language, self._context, prefix=_forced(stable),
                                timestamps=self.config.transcriber.timestamps, temperature=self.options.temperature)
        embed = self._embed(audio, speech_s)
        try:
            result = prior
            if result is None and adopted is not None:
                result = await self.scheduler.final_of(adopted)
                if result is not None and (result.truncated or self._stopped_early(result, closed.speech_end, stable,
                                                                                   stable_end)):
                    result = None  # a partial's text that stops before its audio does: decode it properly
                else:
                    self.stats.reused += 1
            elif result is not None:
                self.stats.reused += 1
            if result is None:
                result = await (self.scheduler.background(request) if background else self.scheduler.final(request))
                if self._stopped_early(result, closed.speech_end, stable, stable_end):
                    # Decode it whole, unforced; the settled words are then put back in front (``onto``).
                    result = await self.scheduler.final(dataclasses.replace(request, prefix=""))
        except EngineNotReady as exc:
            self.mailbox.post(protocol.Error(protocol.ErrorCode.ENGINE, f"recognizer unavailable: {exc}"))
            embed.cancel()
            if stable:
                return " ".join(stable), (), None, 0.0, None
            return None, (), None, 0.0, None
        if prior is None:
            self.stats.final_decode_s.append(result.decode_s)
        words = onto(stable, result.text.split())
        text = " ".join(stable + without_lead(words[len(stable):], carried or []))
        if carried:
            # Settled words went on to the next sentence, and are on screen right after this one's settled words:
            # anything more this sentence said would land in front of them. Those words are the next sentence's.
            if not stable:
                embed.cancel()
                return None, (), None, 0.0, None
            text = " ".join(stable)
        reason = reject_reason(result, rms_dbfs(audio), samples_to_ms(closed.speech_end - closed.speech_start),
                               self.config.guard)
        if reason:
            self.stats.dropped[reason.split(" (")[0]] = self.stats.dropped.get(reason.split(" (")[0], 0) + 1
            self._log.info("segment %d dropped: %s (%r)", closed.index, reason, result.text[:80])
            if not stable:
                embed.cancel()
                return None, (), None, 0.0, None
            text = " ".join(stable)  # already on screen as settled: it locks, whatever the rest was
        if result.language:
            self.stats.languages[result.language] = self.stats.languages.get(result.language, 0) + 1
        aligned = self._align(audio, text, result.language or self.options.language) if background else _nothing()
        try:
            embedding = await embed
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed embedding costs the label, never the text
            self._log.warning("speaker embedding failed: %s", exc)
            embedding = None
        return text, result.spans if text == result.text else (), embedding, result.avg_logprob, await aligned

    def _align(self, audio: np.ndarray, text: str, language: str | None) -> asyncio.Future[list[AlignedWord] | None]:
        if self._aligner is not None:
            # A live sentence waits for its words, so they are only aligned while the recognizer has no other
            # sentence's final queued and no partial waiting: on a saturated CPU the aligner's pass would come out of
            # the decodes' time and lock later (bench.sessions at 4 sessions on 2 cores: lock p95 +0.8 s).
            load = self.scheduler.transcriber.load()
            busy = load.get("final", 0) > 0 or self.scheduler.waiting > 0
            return self._aligner.align(audio, text, language, queue=self.options.background, busy=busy)
        return _nothing()

    def _embed(self, audio: np.ndarray, speech_s: float) -> asyncio.Future[np.ndarray | None]:
        if self._speaker_service is not None:
            return self._speaker_service.embed(audio, speech_s)
        return _nothing()

    def _lock_ready(self) -> None:
        """Lock every finished segment at the head of the queue, in order, and send them."""
        sentences: list[protocol.Sentence] = []
        covered = 0
        while self._pending and self._pending[0].task.done():
            item = self._pending.popleft()
            if item.task.cancelled():
                continue
            exc = item.task.exception()
            if exc is not None:
                self._log.error("final decode of segment %d failed: %r", item.closed.index, exc)
                continue
            text, spans, embedding, avg_logprob, aligned = item.task.result()
            covered = max(covered, item.closed.end)
            if text is None:
                continue
            sid = self._next_sentence
            self._next_sentence += 1
            spk = (self.speakers.assign(sid, embedding, item.speech_s, item.closed.after_turn)
                   if self.speakers else None)
            closed = item.closed
            start_ms, end_ms = samples_to_ms(closed.speech_start), samples_to_ms(closed.speech_end)
            words = place_words(text, start_ms, end_ms, closed.probs, self.config.vad.offset, WINDOW_MS, spans,
                                samples_to_ms(closed.start), aligned or ())
            if not self.options.background:
                self._align_locked(sid, item, text, spans)
            speech = closed.probs[: max(1, (closed.speech_end - closed.speech_start) // WINDOW)]
            no_speech = round(1.0 - float(speech.mean()), 4) if speech.size else None
            sentences.append(protocol.Sentence(sid, text, start_ms, end_ms, spk, words=tuple(words),
                                               avg_logprob=round(avg_logprob, 4), no_speech_prob=no_speech))
            if not self.options.background:  # a file's audio arrives faster than it was said: no latency to report
                if not item.shown:
                    self._observer.first_text(self._since_arrival(closed.speech_start))
                self._observer.locked(self._since_arrival(closed.speech_end))
        self.stats.sentences += len(sentences)
        if sentences or covered:
            self._post(sentences, covered_end=covered)

    def _align_locked(self, sid: int, item: _Pending, text: str, spans: tuple[TimedSpan, ...]) -> None:
        """Align locked live sentence ``sid`` and send its better word times (``WordTimes``) when they come: the
        aligner runs after the lock, never before it (it cost locks 0.1-1.5 s when it ran before)."""
        if self._aligner is None or not text:
            return
        closed = item.closed
        if item.audio is None:
            return
        aligned = self._align(item.audio, text, self.options.language)

        def done(fut: asyncio.Future[list[AlignedWord] | None]) -> None:
            if fut.cancelled() or fut.exception() is not None or not fut.result() or self.state is SessionState.CLOSED:
                return
            start_ms, end_ms = samples_to_ms(closed.speech_start), samples_to_ms(closed.speech_end)
            words = place_words(text, start_ms, end_ms, closed.probs, self.config.vad.offset, WINDOW_MS, spans,
                                samples_to_ms(closed.start), fut.result() or ())
            self.mailbox.post(protocol.WordTimes(sid, tuple(words)))

        marker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._aligning.add(marker)

        def finished(fut: asyncio.Future[list[AlignedWord] | None]) -> None:
            try:
                done(fut)
            finally:
                self._aligning.discard(marker)
                if not marker.done():
                    marker.set_result(None)

        aligned.add_done_callback(finished)

    def _shown_partial(self) -> str:
        """Text not locked yet: closed segments awaiting their final, then the open segment."""
        parts = [p.preview for p in self._pending if p.preview] + ([self._partial_text] if self._partial_text else [])
        return " ".join(parts)

    def _shown_stable(self) -> int:
        """How many leading words of ``_shown_partial`` are settled (they lock exactly as shown)."""
        count = 0
        parts = [(p.preview, p.stable) for p in self._pending if p.preview]
        if self._partial_text:
            parts.append((self._partial_text, len(self._stable.words)))
        for text, stable in parts:
            count += stable
            if stable < len(text.split()):
                break
        return count

    def _new_stable_words(self) -> list[protocol.Word]:
        """The open segment's words that settled since they were last sent, with times estimated from the VAD."""
        new = self._stable.take_new()
        if not new:
            return []
        first = len(self._stable.words) - len(new)
        placed = self._placed_open(self._partial_text)
        return placed[first : first + len(new)] if len(placed) >= first + len(new) else []

    def _since_arrival(self, sample: int) -> float:
        """Seconds since the audio holding ``sample`` (a session sample index) was fed; 0 if that is not known."""
        if not self._arrivals:
            return 0.0
        i = min(bisect.bisect_left(self._arrivals, sample, key=lambda a: a[0]), len(self._arrivals) - 1)
        return max(0.0, self._clock() - self._arrivals[i][1])

    def _post(self, sentences: list[protocol.Sentence], covered_end: int, is_final: bool = False) -> None:
        latency = None
        if covered_end and self._arrivals and self.state is SessionState.LIVE:
            latency = int(self._since_arrival(covered_end) * 1000)
        self.mailbox.post_caption(sentences, "" if is_final else self._shown_partial(), is_final=is_final,
                                  latency_ms=latency,
                                  partial_spk=self._partial_spk if self._partial_text and not is_final else None,
                                  stable=0 if is_final else self._shown_stable(),
                                  stable_words=() if is_final else self._new_stable_words())

    # ---- lifecycle ------------------------------------------------------------------------------------------
    async def stop(self) -> None:
        """Finish: run the VAD over what was fed, close the open segment, lock everything, re-cluster speakers,
        then post the final caption, any ``speakers`` relabel, and ``stopped``. Raises ``IllegalTransition`` unless
        LIVE."""
        if self.state is not SessionState.LIVE:
            raise IllegalTransition("stop", self.state)
        self.state = SessionState.STOPPING
        self.scheduler.cancel_partial(self)
        await self.vad.drained()
        if self.state is SessionState.CLOSED:  # closed meanwhile: its audio is gone, nobody is listening
            return
        closed = self.endpointer.flush()
        if closed is not None:
            self._on_events([closed])
        while self._pending:
            await asyncio.wait([p.task for p in self._pending])
            self._lock_ready()
        if self._aligning:  # the last sentences' word times (the aligner skips what it cannot do soon)
            await asyncio.wait(set(self._aligning))
        if self.state is SessionState.CLOSED:  # closed while finishing: nobody is listening any more
            return
        self._post([], covered_end=0, is_final=True)
        if self.speakers and self._speaker_service is not None:
            relabel = await self._speaker_service.recluster(self.speakers)
            if relabel:
                self.mailbox.post(protocol.Speakers(relabel))
        if self.state is SessionState.CLOSED:
            return
        self.mailbox.post(protocol.Stopped())
        self.state = SessionState.STOPPED
        self.mailbox.close()
        self._log.info("stopped: %.1f s audio, %d sentences, dropped %s", self.audio_s, self.stats.sentences,
                       self.stats.dropped)

    async def end(self, code: protocol.ErrorCode, reason: str) -> None:
        """End at once (the engine cannot finish it): the client gets an ``error`` with ``reason``, then
        ``stopped``; sentences already locked were sent before. Then as ``close``."""
        if self.state is SessionState.CLOSED:
            return
        self._log.warning("ended: %s", reason)
        self.mailbox.post(protocol.Error(code, reason))
        self.mailbox.post(protocol.Stopped())
        await self.close()

    async def close(self) -> None:
        """Drop the session: cancel its decodes, free its VAD row. Safe to call twice, from any state."""
        if self.state is SessionState.CLOSED:
            return
        self.state = SessionState.CLOSED
        self.scheduler.cancel_partial(self)
        tasks = [p.task for p in self._pending]
        for t in tasks:
            t.cancel()
        self._pending.clear()
        self.mailbox.close()
        # A closed session may wait for the cyclic garbage collector (its peer's callbacks refer back to it): free
        # the audio now rather than then.
        self.audio.release()
        self._arrivals.clear()
        if self._on_closed is not None:
            self._on_closed(self)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def post_error(self, code: protocol.ErrorCode, message: str) -> None:
        """Send the client an ``error`` (the transport's own faults, e.g. a bad message); the session goes on."""
        self.mailbox.post(protocol.Error(code, message))

    def post_storage(self, saving: bool, message: str) -> None:
        """Tell the client whether its captions are being saved (``storage``, see docs/protocol.md)."""
        self.mailbox.post(protocol.Storage(saving, message))

    async def next_message(self) -> protocol.ServerMessage | None:
        """The next outgoing message, or None when the session has nothing more to say."""
        return await self.mailbox.get()

    async def messages(self) -> AsyncIterator[protocol.ServerMessage]:
        while (msg := await self.mailbox.get()) is not None:
            yield msg
