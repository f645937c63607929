"""The open segment's partial decodes: when a session asks for one, what it decodes, what its result shows.

While a segment is open, the session re-decodes all of it at a cadence (``PartialConfig``) through the shared
``DecodeScheduler``, which picks the audio only when a slot frees (at most one partial in flight per session).
``Partials`` is the session's half of that, for its one open segment:
- scheduling (``want``): once enough new speech is in, at once in a pause (``closing``), while nothing shows or for
  the ``early_partials`` right after the first words show;
- the request (``request``): the segment's audio so far, made to start with its settled words (``forced``);
- the result (``on_result``): the hallucination guard, stable words (``engine.stream.stable``), the last word of
  audio cut inside speech held back, and whether the text ends a sentence;
- the segment's end: a partial that heard all of its speech is its final decode (``close`` hands it over with the
  settled words), and one that ends a sentence lets the segment close after a short pause (``sentence_ended``);
- a change of voice: settled words said after the cut open the next segment (``cut``, then ``resume``).

Positions are session sample indices; the open segment is the endpointer's. The session calls in only while it is
live (it checks its own state): nothing here posts messages or changes the session's lifecycle.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.asr.guard import reject_reason
from engine.asr.transcriber import DecodeRequest, Priority, Transcript
from engine.audio.pcm import SAMPLE_RATE, AudioBuffer, rms_dbfs, samples_to_ms
from engine.audio.vad import WINDOW, WINDOW_MS
from engine.config import EngineConfig, GuardConfig, SessionOptions
from engine.logs import SessionLog
from engine.protocol import Word
from engine.stream.endpoint import CloseReason, Endpointer, SegmentClosed
from engine.stream.scheduler import DecodeScheduler, PartialClient
from engine.stream.sentence_end import ends_sentence
from engine.stream.stable import StableWords
from engine.stream.words import place_words

STEP_WINDOWS = 2  # a session looks at its segment after this many VAD windows (64 ms: one live push's worth)
EARLY_STOP_S = 1.5  # speech after the settled words that a decode adding no word to them must have missed


def forced(stable: list[str]) -> str:
    """The settled words as a decode's forced start, without the sentence-final punctuation of a last word that
    ends a sentence ("Mr." keeps its full stop): after a forced full stop Whisper tends to end the text there,
    though the speaker went on."""
    text = " ".join(stable)
    bare = text.rstrip(".?!。？！")
    return bare if bare and ends_sentence(text) else text


def stopped_early(result: Transcript, speech_end_sample: int, stable: list[str], stable_end_sample: int) -> bool:
    """The decode, made to start with the settled words (they end at sample ``stable_end_sample``), added none
    though the speaker went on for ``EARLY_STOP_S`` after them (to ``speech_end_sample``): Whisper ended the text
    right after the forced words. Its text is not the segment's, whatever it says (it must not lock it, early or as
    the final)."""
    return (
        bool(stable)
        and len(result.text.split()) <= len(stable)
        and speech_end_sample - stable_end_sample > EARLY_STOP_S * SAMPLE_RATE
    )


@dataclass
class DecodeSettings:
    """What every decode of one session follows: the caller's options, and the context text its hotwords and prompt
    make (empty until ``Session.configure``). One object shared by the session's parts; a decode reads it as it
    starts, so a ``configure`` applies to every decode from then on."""

    options: SessionOptions
    context: str = ""

    def request(
        self, request_id: str, audio: np.ndarray, priority: Priority, stable: list[str], timestamps: bool
    ) -> DecodeRequest:
        """A decode of ``audio`` made to start with the settled words ``stable`` (``forced``)."""
        return DecodeRequest(
            request_id,
            audio,
            priority,
            self.options.language,
            self.context,
            prefix=forced(stable),
            timestamps=timestamps,
            temperature=self.options.temperature,
            task=self.options.task,
        )

    def guard(self, config: GuardConfig) -> GuardConfig:
        """The hallucination guard's thresholds for this session's decodes: a translation's confidence floor is
        its own (``GuardConfig.translate_min_avg_logprob``)."""
        if self.options.task == "translate":
            return dataclasses.replace(config, min_avg_logprob=config.translate_min_avg_logprob)
        return config


@dataclass(frozen=True)
class Handover:
    """What a closed segment takes from its partials to its final decode (``Partials.close``)."""

    prior: Transcript | None  # a finished partial that heard all of its speech: it is the final decode
    adopted: asyncio.Task[Transcript | None] | None  # or a running one, taken over from the scheduler
    stable: list[str]  # its settled words: the locked sentence starts with exactly them
    stable_end_sample: int  # where they end, estimated from the VAD
    carried: list[str]  # settled words that went on to the next segment at a change of voice (``Partials.cut``)
    preview: str  # its text on screen, kept there until it locks
    shown: bool  # some text of it was shown before it closed (its first-text latency is taken)


@dataclass(frozen=True)
class Carry:
    """Settled words said after a cut for a change of voice: they open the new voice's segment, in the same place on
    screen and still settled (``Partials.resume``)."""

    words: list[str]
    sent: int  # how many of them the client already has as stable
    tail: list[str]  # the tentative words shown after them


@dataclass(frozen=True)
class Shown:
    """What a partial's result changed on screen (``Partials.on_result``)."""

    first_text_at_sample: int | None  # the segment's first text: its speech start, the first-text latency is due
    changed: bool  # the text or its settled words changed: a caption is due
    end_sample: int  # the end of the audio it heard: the caption's latency is taken from there


class Partials:
    """The partial decodes of one session's open segment: see the module docstring for each part."""

    def __init__(
        self,
        client: PartialClient,
        decoding: DecodeSettings,
        *,
        config: EngineConfig,
        scheduler: DecodeScheduler,
        endpointer: Endpointer,
        audio: AudioBuffer,
        clock: Callable[[], float],
        log: SessionLog,
    ) -> None:
        """``client``: the session, as the scheduler knows it; ``audio``: the session's buffer (it holds the open
        segment); ``clock``: monotonic seconds (the cadence)."""
        self._client = client
        self._decoding = decoding
        self._config = config
        self._cfg = config.partial
        self._scheduler = scheduler
        self._endpointer = endpointer
        self._audio = audio
        self._clock = clock
        self._log = log
        self.last_started_s = 0.0  # clock time of the newest request (the scheduler serves the longest unserved first)
        self.text = ""  # what shows of the open segment, its settled words first
        self.shown = False  # the open segment has shown some text (its first-text latency is taken)
        self.stable = self._new_stable()  # the open segment's settled words
        self.stable_end_sample = 0  # where they end, estimated (sample)
        self._audio_end = 0  # end sample of the audio the newest request covers
        # request id -> (segment index, audio end sample, the audio ended inside speech)
        self._meta: dict[str, tuple[int, int, bool]] = {}
        self._last: tuple[int, int, Transcript] | None = None  # the open segment's newest finished partial
        self._decoded: list[tuple[int, int]] = []  # the open segment's partials: (audio end sample, words decoded)
        self._segment_start = 0  # the open segment's first sample
        self._carried: list[str] = []  # settled words moving on to the next segment at a split (``cut``)
        self._ends_sentence = False  # the newest partial's text ends a sentence (``engine.stream.sentence_end``)
        self._unsure_first = 0  # the open segment's partials that showed nothing for an unsure first word
        self._after_shown = 0  # the open segment's partials asked for since its first text showed

    def _new_stable(self, words: list[str] | None = None, sent: int = 0) -> StableWords:
        return StableWords(
            list(words or ()),
            sent,
            min_age_s=self._cfg.stable_min_age_s,
            min_prob=self._cfg.stable_min_prob,
            sure_prob=self._cfg.stable_sure_prob,
            sure_after=self._cfg.stable_sure_after,
        )

    # ---- the open segment's bounds --------------------------------------------------------------------------
    def open(self, start: int) -> None:
        """A segment opened, its audio from sample ``start``: nothing of it is decoded or shown yet."""
        self.stable = self._new_stable()
        self.stable_end_sample = 0
        self._decoded = []
        self._ends_sentence = False
        self._unsure_first = 0
        self._after_shown = 0
        self.text = ""
        self.shown = False
        self._audio_end = start
        self._segment_start = start

    def close(self, event: SegmentClosed) -> Handover:
        """The open segment closed: its partial is cancelled unless it is the final decode (``_reusable``); returns
        what the final needs. Its text leaves the open segment (``text`` is empty)."""
        prior, adopted = self._reusable(event)
        self._scheduler.cancel_partial(self._client)
        self._last = None
        self._ends_sentence = False
        handover = Handover(
            prior, adopted, list(self.stable.words), self.stable_end_sample, self._carried, self.text, self.shown
        )
        self._carried = []
        self.text = ""
        return handover

    def _reusable(self, event: SegmentClosed) -> tuple[Transcript | None, asyncio.Task[Transcript | None] | None]:
        """A partial decode of this segment that already covers all of its speech is its final decode: only
        trailing silence is missing, which does not change Whisper's text. Returns a finished result or a running
        decode to adopt (else both None): on CPU this saves one whole decode per sentence."""
        # A segment cut while speech goes on (a cap or a change of voice) must not take a decode that heard the
        # words after the cut; after a pause, a decode that ran on into the silence is as good.
        limit = event.end_sample if event.reason in (CloseReason.CAP, CloseReason.TURN) else None

        def covers(end: int) -> bool:
            return end >= event.speech_end_sample and (limit is None or end <= limit)

        last = self._last
        if last is not None and last[0] == event.index and covers(last[1]) and not last[2].truncated:
            return last[2], None
        running = self._scheduler.running_partial(self._client)
        meta = self._meta.get(running.request_id) if running else None
        if meta is not None and meta[0] == event.index and covers(meta[1]):
            return None, self._scheduler.adopt_partial(self._client)
        return None, None

    # ---- scheduling and requests ----------------------------------------------------------------------------
    @property
    def closing(self) -> bool:
        """True in a pause of ``PartialConfig.closing_after_ms`` or more after the open segment's speech
        (``closing_after_alone_ms`` while the session is alone, ``DecodeScheduler.alone``): the next partial covers
        all of it and will most likely be reused as the final (the scheduler runs it first)."""
        after_ms = self._cfg.closing_after_ms
        alone_ms = self._cfg.closing_after_alone_ms
        if 0 < alone_ms < after_ms and self._scheduler.alone(self._client):
            after_ms = alone_ms
        return 0 < after_ms <= samples_to_ms(self._endpointer.position_sample - self._endpointer.speech_end_sample)

    def want(self) -> None:
        """Ask the scheduler for a partial if one is due: the segment holds ``first_after_ms`` of speech, new speech
        came since the last request (``min_new_audio_ms`` of audio at least) and the cadence's interval has passed:
        ``interval_s``, or longer where the decode would take more than the session's share of the recognizer
        (``PartialConfig.recognizer_share``). In a pause (``closing``), or while nothing shows yet, there is no
        interval, and a partial still running on less of the speech is restarted (once per pause: the decode that
        becomes the final must not wait for one started before the pause on less of the speech)."""
        opened = self._endpointer.open_segment
        options = self._decoding.options
        if opened is None or options.background or not options.partials:
            return
        cfg = self._cfg
        speech_ms = samples_to_ms(self._endpointer.position_sample - opened.speech_start_sample)
        new_ms = samples_to_ms(self._endpointer.position_sample - self._audio_end)
        interval = max(cfg.interval_s, cfg.load_factor * self._scheduler.partial_decode_ema_s)
        share = self._scheduler.partial_share(cfg.recognizer_share, cfg.session_share)
        if share > 0:
            # Paced by what its decode will cost: a session's partials take at most its share of the recognizer, so
            # long sentences (larger windows) and a full server (smaller shares) space them out, fairly.
            audio_s = (self._endpointer.position_sample - opened.start_sample) / SAMPLE_RATE
            interval = max(interval, self._scheduler.partial_cost_s(audio_s) / share)
        closing = self.closing
        early = self.shown and self._after_shown < cfg.early_partials
        if closing or early or (not self.text and self._unsure_first <= 1):
            # No waiting for the interval when the speaker has paused (a decode of everything up to now is most
            # likely the sentence's final: run it during the endpoint's silence wait, not after it), or when nothing
            # is on screen yet for this segment (the first words were too short or only a non-speech tag came
            # back: the first words should show as soon as there is more speech). Once only for a first word the
            # decoder is unsure of (``_sure_part``): on noisy speech it may stay unsure for several partials, and
            # each one without the interval costs the recognizer a decode. Nor for the ``early_partials`` right
            # after the first words show: the one that corrects a wrong first word should not wait.
            interval = 0.0
        # Only new *speech* is worth a decode: re-decoding the same words plus trailing silence changes nothing.
        new_speech = self._endpointer.speech_end_sample > self._audio_end
        if new_speech:
            self._scheduler.note_speaking(self._client)  # (it speaks, however seldom its partials are due)
        if (
            speech_ms >= cfg.first_after_ms
            and new_ms >= cfg.min_new_audio_ms
            and new_speech
            and self._clock() - self.last_started_s >= interval
        ):
            running = self._scheduler.running_partial(self._client)
            if running is not None and closing:
                # It stopped short of the speech (``new_speech``): the decode of all of it must not wait for it, else
                # the sentence locks as much later (up to a whole partial's decode, long for a long sentence on one
                # CPU thread). Once per pause: the new partial hears all the speech. A running partial is
                # otherwise never cancelled for newer audio.
                self.forget(running)
                self._log.debug("partial %s restarted: the speaker paused after it began", running.request_id)
                self._scheduler.restart_partial(self._client)
            else:
                self._scheduler.want_partial(self._client)

    def request(self, request_id: str) -> DecodeRequest | None:
        """The decode of the open segment's audio up to now (None if no segment is open); it becomes the newest
        request (``last_started_s``)."""
        opened = self._endpointer.open_segment
        if opened is None:
            return None
        end = self._endpointer.position_sample
        self._audio_end = end
        self.last_started_s = self._clock()
        if self.shown:
            self._after_shown += 1
        # The audio ends inside speech when its last windows were speech: its last word may be cut short.
        in_speech = self._endpointer.speech_end_sample >= end - STEP_WINDOWS * WINDOW
        self._meta[request_id] = (opened.index, end, in_speech)
        return self._decoding.request(
            request_id,
            self._audio.slice(opened.start_sample, end),
            Priority.PARTIAL,
            self.stable.words,
            self._config.transcriber.timestamps,
        )

    def forget(self, request: DecodeRequest) -> None:
        """A request whose result will not be taken (it failed, or the session is no longer live)."""
        self._meta.pop(request.request_id, None)

    # ---- results --------------------------------------------------------------------------------------------
    def on_result(self, request: DecodeRequest, result: Transcript) -> Shown | None:
        """Take a partial's result: returns what changed, or None if its segment has closed meanwhile (an adopted
        partial reports through its final instead)."""
        index, end, in_speech = self._meta.pop(request.request_id, (-1, 0, True))
        opened = self._endpointer.open_segment
        if opened is None or opened.index != index:
            return None
        if stopped_early(
            result, min(end, self._endpointer.speech_end_sample), self.stable.words, self.stable_end_sample
        ):
            result = dataclasses.replace(result, truncated=True, looped=False)
        self._last = (index, end, result)
        level = rms_dbfs(request.audio)
        speech_ms = samples_to_ms(end - opened.speech_start_sample)
        text = "" if reject_reason(result, level, speech_ms, self._decoding.guard(self._config.guard)) else result.text
        probs = result.word_probs if text == result.text else ()
        decoded = len(text.split())
        settled = len(self.stable.words)
        # A decode cut at a loop ends before its audio does: its last word settles no sooner than one cut by it.
        text = " ".join(self.stable.update(text.split(), in_speech or result.truncated, end / SAMPLE_RATE, probs))
        if len(self.stable.words) > settled:
            self._log.debug("segment %d: %d words stable", index, len(self.stable.words))
            self.stable_end_sample = self._settled_until(text)
        # The decode's words end the text (``onto`` put the settled words in front): text word k is decoded word
        # k + shift.
        shift = decoded - len(text.split())
        self._decoded.append((end, len(text.split())))
        # Only a decode of everything said so far can end the sentence (``sentence_ended``): one cut short cannot,
        # unless it was cut where it began to repeat itself right after the sentence's end (the final is then decoded
        # afresh: a cut decode is never the final, ``_reusable``). A partial that is forced to start with few settled
        # words loops into its window's padding more often, and the sentence would wait for the long silence.
        whole = not result.truncated or result.looped
        self._ends_sentence = end >= self._endpointer.speech_end_sample and whole and ends_sentence(text)
        if in_speech:
            text = self._held_back(text)
        text = self._sure_part(text, probs, shift)
        first = bool(text) and not self.shown
        self.shown = self.shown or first
        changed = text != self.text or self.stable.sent < len(self.stable.words)
        if changed:
            self.text = text
        return Shown(opened.speech_start_sample if first else None, changed, end)

    def sentence_ended(self) -> bool:
        """May the open segment close now? Yes once its newest partial, a decode of all of its speech, ends a
        sentence and the speaker has been silent for ``EndpointConfig.sentence_pause_ms``: a short pause, where the
        silence schedule waits long for text that stops mid-clause. That partial becomes the final (``close``)."""
        pause_ms = self._endpointer.cfg.sentence_pause_ms
        last = self._last
        opened = self._endpointer.open_segment
        if pause_ms <= 0 or not self._ends_sentence or opened is None or last is None or last[0] != opened.index:
            return False
        if last[1] < self._endpointer.speech_end_sample:  # the speaker went on after that decode's audio
            self._ends_sentence = False
            return False
        return samples_to_ms(self._endpointer.position_sample - self._endpointer.speech_end_sample) >= pause_ms

    def _held_back(self, text: str) -> str:
        """What to show of a decode whose audio ended while the speaker was talking: its last word may be cut
        mid-syllable and its final punctuation is a guess about where the audio ends, so the last word is held back
        (the next decode shows it, whole), unless it is the only word: then it shows at once (the first words of a
        sentence should not wait), without that punctuation. Settled words always show. Fewer words on screen
        change (docs/benchmarks.md)."""
        words = text.split()
        if not words:
            return text
        if len(words) > max(1, len(self.stable.words)):
            return " ".join(words[:-1])
        if len(words) > len(self.stable.words):
            words[-1] = words[-1].rstrip(".,?!;:") or words[-1]
        return " ".join(words)

    def _sure_part(self, text: str, probs: tuple[float, ...], shift: int) -> str:
        """``text`` up to its first tentative word that the decoder gave less than ``show_min_prob`` and the previous
        partial did not say too (``probs``: per word of the decode; text word k is its word k + ``shift``): that word
        and the ones after it wait for the next partial. The settled words always show, and the first word of a
        segment if the decoder gave it at least ``first_show_min_prob``."""
        threshold = self._cfg.show_min_prob
        words = text.split()
        if threshold <= 0 or not probs:
            return text
        settled = len(self.stable.words)
        agreed = self.stable.agreed
        # The first word of a segment shows at once, unless the decoder was less sure of it than
        # ``first_show_min_prob`` and no partial before said it: then nothing shows yet, and the next partial comes
        # without the interval (``want``: nothing on screen), on more speech.
        unsure = settled == agreed == 0 and 0 <= shift < len(probs) and probs[shift] < self._cfg.first_show_min_prob
        floor = 0 if unsure else 1
        for k in range(settled, len(words)):
            if k >= agreed and 0 <= k + shift < len(probs) and probs[k + shift] < threshold:
                shown = words[: max(k, settled, floor)]
                if not shown:
                    self._unsure_first += 1
                return " ".join(shown)
        return text

    # ---- settled words --------------------------------------------------------------------------------------
    def _placed(self, text: str) -> list[Word]:
        """The words of ``text``, a decode of the open segment, laid along its speech by the VAD (estimated times)."""
        opened = self._endpointer.open_segment
        if opened is None:
            return []
        return place_words(
            text,
            samples_to_ms(opened.speech_start_sample),
            samples_to_ms(max(self._endpointer.speech_end_sample, opened.speech_start_sample + WINDOW)),
            self._endpointer.open_probs,
            self._config.vad.offset,
            WINDOW_MS,
            (),
            samples_to_ms(opened.start_sample),
            (),
        )

    def _settled_until(self, text: str) -> int:
        """Where the settled words of the open segment end, estimated from the VAD (a session sample index)."""
        n = len(self.stable.words)
        if not n:
            return 0
        placed = self._placed(text)
        return placed[n - 1].end_ms * SAMPLE_RATE // 1000 if len(placed) >= n else self._endpointer.speech_end_sample

    def new_stable_words(self) -> list[Word]:
        """The open segment's words that settled since they were last sent (from now on they count as sent), with
        times estimated from the VAD."""
        new = self.stable.take_new()
        if not new:
            return []
        first = len(self.stable.words) - len(new)
        placed = self._placed(self.text)
        return placed[first : first + len(new)] if len(placed) >= first + len(new) else []

    # ---- a change of voice ----------------------------------------------------------------------------------
    def _settled_before(self, at: int) -> int:
        """How many settled words of the open segment were said before sample ``at``.

        The newest partial decode of audio that ended there or earlier heard all of its words before ``at``; the
        first one that heard past it, its words up to its count somewhere between the two ends. Those are shared out
        in proportion to the time on either side of ``at`` (a speaker's words come at a fairly even pace). The
        earlier decode's count alone gave the new voice every settled word said between that decode and the change,
        a second or more of the old voice where partials are sparse (a loaded recognizer): those words then showed
        under the wrong label, the old voice's words after them were in neither half, and the new voice's decode,
        made to start with words its audio does not hold, dropped some of its own first words (docs/benchmarks.md,
        "Where a turn is cut")."""
        n = len(self.stable.words)
        low_end, low = self._segment_start, 0
        for end, words in sorted(self._decoded):
            if end <= at:
                low_end, low = end, words
                continue
            share = (at - low_end) / max(1, end - low_end)
            return min(n, low + max(0, round(share * (words - low))))
        return n

    def cut(self, at: int) -> Carry | None:
        """The open segment is being split at sample ``at`` for a change of voice: its settled words said after
        ``at`` (as far as the partials tell) are the new voice's. They leave it (its final does not say them again)
        and are returned, to ``resume`` the next segment with; None if there are none."""
        shown, settled, sent = self.text.split(), self.stable.words, self.stable.sent
        keep = self._settled_before(at)
        carried = settled[keep:]
        if not carried:
            return None
        self.stable = self._new_stable(settled[:keep], sent=min(sent, keep))
        self.text = " ".join(shown[:keep])
        self._carried = carried
        return Carry(carried, max(0, sent - keep), shown[len(settled) :])

    def resume(self, carry: Carry, at: int) -> None:
        """The new voice's segment, opened at sample ``at``, starts with the carried words: shown, still settled."""
        self.stable = self._new_stable(list(carry.words), sent=carry.sent)
        self.stable_end_sample = at
        self.text = " ".join(carry.words + carry.tail)
        self.shown = True
