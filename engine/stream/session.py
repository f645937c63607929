"""One caption session: audio in, caption messages out.

``feed`` is synchronous and cheap (it buffers audio and pushes it into the session's VAD lane); the VAD tick
hands back speech probabilities (``on_vad``), which the endpointer turns into segments. Messages (docs/protocol.md)
come out of ``next_message``/``messages`` through a coalescing mailbox. ``stop`` finishes the open segment and sends
the final messages; ``close`` drops everything and is safe to call twice.

The session owns its lifecycle and its audio; one part per concern does the rest, each
told what it needs when the session is built:
- ``Partials`` (``partials.py``): the open segment's partial decodes, its stable words and the early end of a
  sentence;
- ``Finals`` (``finals.py``): a closed segment's final decode and speaker embedding, run concurrently, then locking
  in segment order: a sentence locks when its text is final and every earlier segment has locked;
- ``Labels`` (``labels.py``): each locked sentence's speaker label, corrected by a ``speakers`` message when the
  sentence locked before its embedding was in;
- ``Voices`` (``voices.py``): a change of voice inside the open segment, which splits it;
- ``Alignment`` (``alignment.py``): the aligner's word times, after a live sentence's lock;
- ``Arrivals`` (``arrivals.py``): when each piece of audio arrived, for the latencies it reports;
- ``OnScreen`` (``onscreen.py``): the caption the client shows, composed from the parts above and posted.

A session is given its collaborators (``Session.__init__``): the engine config, the decode scheduler, its VAD
lane, the speaker service (or None) and a clock. It owns none of them: whoever opened the VAD lane closes it
(``on_closed``), so a session can be driven in a test with fakes of each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from enum import StrEnum

import numpy as np

import engine.protocol as protocol
from engine.asr.align_service import AlignService
from engine.asr.transcriber import DecodeRequest, Transcript
from engine.audio.pcm import SAMPLE_RATE, AudioBuffer, as_float32, samples_to_ms
from engine.audio.vad import WINDOW
from engine.config import EngineConfig, SessionOptions
from engine.errors import IllegalTransition
from engine.logs import SessionLog
from engine.observe import EngineObserver, SessionStats
from engine.speakers.service import SpeakerService
from engine.stream.alignment import Alignment
from engine.stream.arrivals import Arrivals
from engine.stream.crosstalk import Microphone, OwnVoice
from engine.stream.endpoint import Endpointer, SegmentClosed, SegmentEvent, SegmentOpened
from engine.stream.finals import Finals
from engine.stream.labels import Labels
from engine.stream.mailbox import Mailbox
from engine.stream.onscreen import OnScreen
from engine.stream.originals import Originals
from engine.stream.partials import STEP_WINDOWS, DecodeSettings, Partials
from engine.stream.scheduler import DecodeScheduler
from engine.stream.speech import Heard, SpeechListener, SpeechListeners, SpeechStarted, SpeechStopped
from engine.stream.vad_batch import VadFeed
from engine.stream.voices import Voices

log = logging.getLogger(__name__)


class SessionState(StrEnum):
    LIVE = "live"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CLOSED = "closed"


class Session:
    """Per-session state; created by ``CaptionEngine.open_session``."""

    def __init__(
        self,
        session_id: str,
        options: SessionOptions,
        *,
        config: EngineConfig,
        scheduler: DecodeScheduler,
        vad: VadFeed,
        speakers: SpeakerService | None,
        model_name: str,
        aligner: AlignService | None = None,
        on_closed: Callable[[Session], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        observer: EngineObserver | None = None,
    ) -> None:
        """Normally built by ``CaptionEngine.open_session``. ``vad`` is this session's lane (its probabilities come
        back to ``on_vad``); ``on_closed`` runs once when the session closes (the engine frees the lane there);
        ``clock`` is monotonic seconds (arrival times, partial cadence, latency); ``observer`` hears of the audio
        fed and, for a live session, of each sentence's first text and lock (``engine.observe``); ``aligner`` (if
        any) gives each locked sentence its word times from Whisper's cross-attention."""
        self.session_id = session_id
        self._decoding = DecodeSettings(options)
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
        # ``watch_speech``; a transport's fault never stops the session
        self._speech_listeners = SpeechListeners(lambda: self._log.exception("a speech listener failed"))
        self.audio = AudioBuffer()
        self.endpointer = Endpointer(config.vad, config.file_endpoint if options.background else config.endpoint)
        self._preroll = config.endpoint.preroll_ms * SAMPLE_RATE // 1000
        self._arrivals = Arrivals(clock)
        self._own_voice: OwnVoice | None = None  # its place among a room's microphones (``share_room``)
        self._speaker_service = speakers
        self.speakers = speakers.new_tracker() if speakers is not None else None
        self.turns = speakers.new_turn_detector(config.vad.offset) if speakers is not None else None
        self.configured = False
        self._log = SessionLog(log, session_id)
        self._partials = Partials(
            self,
            self._decoding,
            config=config,
            scheduler=scheduler,
            endpointer=self.endpointer,
            audio=self.audio,
            clock=clock,
            log=self._log,
        )
        self._alignment = Alignment(aligner, scheduler, self.mailbox, config.vad.offset)
        # A translating session's sentences in the language said, after their lock (``engine.stream.originals``).
        self._originals = Originals(session_id, self._decoding, scheduler, self.mailbox, config.guard, self._log)
        # A correction after a lock goes out as a ``speakers`` message (a closed mailbox drops it).
        self._labels = (
            Labels(
                self.speakers,
                lambda relabel: self.mailbox.post(protocol.Speakers(relabel)),
                stats=self.stats,
                log=self._log,
            )
            if self.speakers is not None
            else None
        )
        self._finals = Finals(
            session_id,
            self._decoding,
            config=config,
            scheduler=scheduler,
            speakers=speakers,
            labels=self._labels,
            alignment=self._alignment,
            mailbox=self.mailbox,
            stats=self.stats,
            log=self._log,
            on_done=self._lock_ready,
        )
        self._voices = Voices(
            speakers,
            self.speakers,
            self.turns,
            endpointer=self.endpointer,
            audio=self.audio,
            live=lambda: self.state is SessionState.LIVE,
            on_turn=self._on_turn,
        )
        self._screen = OnScreen(
            self.mailbox,
            finals=self._finals,
            partials=self._partials,
            voices=self._voices,
            arrivals=self._arrivals,
            live=lambda: self.state is SessionState.LIVE,
        )

    @property
    def options(self) -> SessionOptions:
        """What the caller chose for this session (``configure`` replaces it)."""
        return self._decoding.options

    def configure(self, options: SessionOptions) -> None:
        """Set language and hotwords (they apply to every decode from now on) and post ``ready``.

        Audio may flow before this; it is decoded with the engine's defaults until then.
        Raises ``IllegalTransition`` when called twice or after stop.
        """
        if self.state is not SessionState.LIVE or self.configured:
            raise IllegalTransition("configure the session" + (" again" if self.configured else ""), self.state)
        self._decoding.options = options
        self._decoding.context = " ".join([*options.hotwords, options.prompt]).strip()
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
        self._arrivals.add(self.audio.end)
        if self._own_voice is not None:
            self._own_voice.microphone.heard(self.audio.end, audio)
        self.vad.push(audio)
        self._observer.audio_received(audio.size / SAMPLE_RATE, self.options.background)

    def share_room(self, microphone: Microphone) -> None:
        """This session's microphone is one of a room's (``engine.stream.crosstalk``): from now on its audio is heard
        there too, and what the room judges another microphone's voice is silence to this session (its VAD hears
        none, its decodes get its audio silenced). Each VAD window waits until the room can judge it, at most
        ``max_wait_s``. The room takes it out when the session leaves (``Microphone.close``)."""
        self._own_voice = OwnVoice(microphone, WINDOW, self.audio.silence)

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
                await asyncio.wait({self._finals.pending[0].task})
            else:
                return

    @property
    def finals_pending(self) -> int:
        """Closed segments not locked yet (waiting for their final decode or for an earlier one)."""
        return len(self._finals.pending)

    @property
    def vad_backlog_s(self) -> float:
        """Audio received but not yet through the VAD, in seconds (grows when the machine falls behind)."""
        return (self.audio.end - self.endpointer.position_sample) / SAMPLE_RATE

    # ---- VAD results and segments ---------------------------------------------------------------------------
    def on_vad(self, probs: np.ndarray) -> None:
        """Consume speech probabilities of the next windows of this session's audio (the VAD lane calls this)."""
        if self.state is SessionState.CLOSED:
            return
        if self._own_voice is not None:
            probs = self._own_voice.judged(probs, self.endpointer.position_sample)
        self._on_probs(probs)

    def _on_probs(self, probs: np.ndarray) -> None:
        """Speech probabilities of the next windows, judged by the room where it has several microphones."""
        # In steps of what a live push brings, whatever this delivery holds: a delivery of a session ahead of real
        # time (batched ticks, a backlog) carries up to a second of audio, and a pause inside it would otherwise never
        # be seen (``closing``), nor the first words of a segment that opened inside it.
        for i in range(0, len(probs), STEP_WINDOWS):
            self._on_events(self.endpointer.push(probs[i : i + STEP_WINDOWS]))
            self._maybe_end_sentence()
            self._voices.watch()
            self._trim()
            self._want_partial()
            if self._speech_listeners:
                self._speech_listeners.tell(Heard(samples_to_ms(self.endpointer.position_sample)))

    def watch_speech(self, listener: SpeechListener) -> Callable[[], None]:
        """Call ``listener`` with every ``engine.stream.speech`` event of this session from now on, synchronously,
        on the event loop (it must not block: queue the event and handle it elsewhere). Returns the call that stops
        it."""
        return self._speech_listeners.add(listener)

    def _on_events(self, events: list[SegmentEvent], cut: int | None = None) -> None:
        """Segment events in order; ``cut``: they are a split at that sample for a change of voice."""
        for event in events:
            if isinstance(event, SegmentOpened):
                self._on_open(event)
                self._voices.opened(event, cut)
            else:
                self._on_close(event)
                self._voices.closed(cut)

    def _on_open(self, event: SegmentOpened) -> None:
        self.stats.segments += 1
        self._partials.open(event.start_sample)
        if self._speech_listeners:
            start, speech = samples_to_ms(event.start_sample), samples_to_ms(event.speech_start_sample)
            self._speech_listeners.tell(SpeechStarted(event.index, start, speech))
        self._log.debug("segment %d opened at %d ms", event.index, samples_to_ms(event.start_sample))

    def _on_close(self, event: SegmentClosed) -> None:
        if self._speech_listeners:
            self._speech_listeners.tell(SpeechStopped(event.index, samples_to_ms(event.speech_end_sample)))
        handover = self._partials.close(event)
        reason = event.reason.value
        self.stats.closed[reason] = self.stats.closed.get(reason, 0) + 1
        audio = self.audio.slice(event.start_sample, event.end_sample)
        self._finals.start(
            event, audio, handover, voice=self._voices.label, closed_at_sample=self.endpointer.position_sample
        )
        self._log.debug("segment %d closed (%s), %.2f s", event.index, event.reason.value, audio.size / SAMPLE_RATE)

    def _on_turn(self, at: int | None) -> None:
        """The voice watch took a window: another voice began at sample ``at`` (None: no change). The open segment
        ends there; settled words said after ``at`` open the new voice's sentence (``Partials.cut``)."""
        opened = self.endpointer.open_segment
        if at is not None and opened is not None and (events := self.endpointer.split(at)):
            self._log.debug("voice change at %d ms: segment %d split", samples_to_ms(at), opened.index)
            carry = self._partials.cut(at)
            self._on_events(events, cut=at)
            if carry is not None:
                self._partials.resume(carry, at)
            self._trim()
            self._want_partial()
        if self._voices.relabel() and self._partials.text:
            self._screen.post([], covered_end_sample=0)

    def _trim(self) -> None:
        """Keep only the open segment (or the pre-roll) of audio; closed segments were copied out."""
        opened = self.endpointer.open_segment
        # Before a segment opens, its pre-roll reaches back from where its speech began, which may lie a few windows
        # back (the onset must last ``min_speech_ms``), not from the newest window.
        keep = opened.start_sample if opened else self.endpointer.onset_start_sample - self._preroll
        self.audio.trim_before(keep)
        # Arrival times are still needed for the latency of segments waiting for their final decode.
        pending = self._finals.pending
        oldest = min(self.audio.origin, pending[0].closed.start_sample) if pending else self.audio.origin
        self._arrivals.forget_before(oldest)

    # ---- partials (``DecodeScheduler``'s ``PartialClient``) -------------------------------------------------
    @property
    def closing(self) -> bool:
        """The speaker paused after the open segment's speech: its next partial is most likely its final."""
        return self._partials.closing

    @property
    def first_words(self) -> bool:
        """Its open sentence shows no text yet: the next partial brings the first words."""
        return self.endpointer.open_segment is not None and not self._partials.shown

    @property
    def last_partial_started_s(self) -> float:
        """When the newest partial request was made (the session's clock); 0 if never."""
        return self._partials.last_started_s

    def _want_partial(self) -> None:
        if self.state is SessionState.LIVE:
            self._partials.want()

    def partial_request(self) -> DecodeRequest | None:
        if self.state is not SessionState.LIVE or self.endpointer.open_segment is None:
            return None
        self.stats.partials += 1
        return self._partials.request(f"{self.session_id}-p{self.stats.partials}")

    def on_partial(self, request: DecodeRequest, result: Transcript) -> None:
        if self.state is not SessionState.LIVE:
            self._partials.forget(request)
            return
        shown = self._partials.on_result(request, result)
        if shown is None:
            return
        if shown.first_text_at_sample is not None:
            self._observer.first_text(self._arrivals.since(shown.first_text_at_sample))
        if shown.changed:
            self._screen.post([], covered_end_sample=shown.end_sample)
        self._maybe_end_sentence()

    def on_partial_failed(self, request: DecodeRequest, exc: BaseException) -> None:
        self._partials.forget(request)
        self._log.warning("partial %s failed: %s", request.request_id, exc)

    def _maybe_end_sentence(self) -> None:
        """Close the open segment once its text ends a sentence and a short pause followed
        (``Partials.sentence_ended``), or, in a room of several microphones, once another microphone's voice took
        the floor in a short pause (``_floor_taken``)."""
        if self.state is SessionState.LIVE and (self._partials.sentence_ended() or self._floor_taken()):
            closed = self.endpointer.end_sentence()
            if closed is not None:
                self._on_events([closed])

    def _floor_taken(self) -> bool:
        """Another of the room's microphones speaks now and this one has paused for ``floor_pause_ms``: its speaker's
        turn is over, whatever its text says (a meeting's turns end where the next voice starts)."""
        own = self._own_voice
        if own is None or not own.floor_taken or self.endpointer.open_segment is None:
            return False
        pause_ms = own.microphone.config.floor_pause_ms
        return (
            pause_ms > 0
            and samples_to_ms(self.endpointer.position_sample - self.endpointer.speech_end_sample) >= pause_ms
        )

    # ---- locked sentences (the caption: ``OnScreen``) --------------------------------------------------------
    def _lock_ready(self) -> None:
        """Lock every finished segment at the head of the queue, in order, and send them."""
        done = self._finals.lock()
        locked = done.locked
        for item in locked:
            closed = item.pending.closed
            if not self.options.background:  # a file's audio arrives faster than it was said: no latency to report
                if self.options.task == "transcribe":  # a translation's words are not the ones said: not timed
                    self._alignment.after_lock(
                        item.sentence.id,
                        closed,
                        item.pending.audio,
                        item.sentence.text,
                        item.spans,
                        self.options.language,
                    )
                else:  # the words said are kept beside the English
                    self._originals.after_lock(
                        item.sentence.id,
                        item.pending.audio,
                        closed.speech_samples,
                        self.options.language or item.language,
                    )
                if not item.pending.shown:
                    self._observer.first_text(self._arrivals.since(closed.speech_start_sample))
                self._observer.locked(self._arrivals.since(closed.speech_end_sample))
                self._observer.lock_lag(self._arrivals.since(item.pending.closed_at_sample), item.pending.speech_s)
        self.stats.sentences += len(locked)
        if locked or done.covered_end_sample:
            self._screen.post([item.sentence for item in locked], covered_end_sample=done.covered_end_sample)

    # ---- lifecycle ------------------------------------------------------------------------------------------
    def _close_open_segment(self) -> None:
        """Close the segment the VAD has open, if any, as a long enough pause would: its final starts decoding."""
        closed = self.endpointer.flush()
        if closed is not None:
            self._on_events([closed])

    async def finalize(self) -> int:
        """Lock the open sentence now with the audio fed so far, as ``stop`` does, but stay live: audio fed later
        opens the next sentence. Returns once every segment closed up to now has locked (their sentences are in
        the mailbox), with where the flushed audio ends (ms of session audio: every sentence it locked ends there or
        before). For protocols whose clients flush on their own (Deepgram's ``Finalize``, OpenAI Realtime's
        ``input_audio_buffer.commit``). Audio may keep flowing meanwhile; it belongs to what comes after (what
        arrived before the VAD caught up with the call is flushed with it). Raises ``IllegalTransition`` unless
        LIVE."""
        if self.state is not SessionState.LIVE:
            raise IllegalTransition("finalize", self.state)
        self.scheduler.cancel_partial(self)
        await self.vad.drained()
        flushed_ms = samples_to_ms(self.endpointer.position_sample)
        if self.state is not SessionState.LIVE:
            return flushed_ms
        self._close_open_segment()
        pending = [p.task for p in self._finals.pending]
        if pending:
            # Each final locks in its own done callback, which runs before this wait returns.
            await asyncio.wait(pending)
        return flushed_ms

    async def stop(self) -> None:
        """Finish: run the VAD over what was fed, close the open segment, lock everything, re-cluster speakers,
        then post the final caption, any ``speakers`` relabel, and ``stopped``. Raises ``IllegalTransition`` unless
        LIVE."""
        if self.state is not SessionState.LIVE:
            raise IllegalTransition("stop", self.state)
        self.state = SessionState.STOPPING
        self.scheduler.cancel_partial(self)
        await self.vad.drained()
        if self._closed():  # closed meanwhile: its audio is gone, nobody is listening
            return
        if self._own_voice is not None:  # the windows still waiting for the room's judgement: judged now
            self._on_probs(self._own_voice.judged(np.zeros(0, np.float32), self.endpointer.position_sample, True))
        self._close_open_segment()
        while self._finals.pending:
            await asyncio.wait([p.task for p in self._finals.pending])
            self._lock_ready()
        await self._alignment.drained()  # the last sentences' word times
        await self._originals.drained()  # and a translating session's originals
        if self._labels is not None:
            await self._labels.drained()  # the last sentences' speaker labels, before re-clustering reads them
        if self._closed():  # closed while finishing: nobody is listening any more
            return
        self._screen.post([], covered_end_sample=0, is_final=True)
        if self.speakers and self._speaker_service is not None:
            relabel = await self._speaker_service.recluster(self.speakers)
            if relabel:
                self.mailbox.post(protocol.Speakers(relabel))
        if self._closed():
            return
        self.mailbox.post(protocol.Stopped())
        self.state = SessionState.STOPPED
        self.mailbox.close()
        self._log.info(
            "stopped: %.1f s audio, %d sentences, dropped %s, rejoined %d, labels corrected after the lock %d of %d",
            self.audio_s,
            self.stats.sentences,
            self.stats.dropped,
            self.stats.rejoined,
            self.stats.corrected_labels,
            self.stats.provisional_labels,
        )

    def _closed(self) -> bool:
        """The session was closed: ``stop`` asks again after each await, since ``close`` may have run meanwhile."""
        return self.state is SessionState.CLOSED

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
        self._alignment.close()
        self._originals.close()
        self.scheduler.cancel_partial(self)
        tasks = self._finals.cancel()
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

    def post_correction(self, correction: protocol.Correction) -> None:
        """Tell the client that an editor corrected its sentences (``correction``, see docs/protocol.md)."""
        self.mailbox.post(correction)

    def post_storage(self, saving: bool, message: str) -> None:
        """Tell the client whether its captions are being saved (``storage``, see docs/protocol.md)."""
        self.mailbox.post(protocol.Storage(saving, message))

    async def next_message(self) -> protocol.ServerMessage | None:
        """The next outgoing message, or None when the session has nothing more to say."""
        return await self.mailbox.get()

    async def messages(self) -> AsyncIterator[protocol.ServerMessage]:
        while (msg := await self.mailbox.get()) is not None:
            yield msg
