"""The shared recognizer: one in-process vLLM ``AsyncLLM`` (its engine core runs as a child process).

The same code runs on vLLM's CPU build (``pip install .[cpu]``) and on NVIDIA GPUs (``.[gpu]``). Everything slow about
starting it (importing vLLM, converting the embedded weights, spawning the engine core: ``engine.asr.vllm_launch``)
runs in worker threads, so the event loop keeps answering while the model loads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from pathlib import Path
from typing import Any

from engine.asr.cpu import detect_device
from engine.asr.guard import strip_nonspeech
from engine.asr.prompts import MAX_CONTEXT_CHARS, decoder_prompt, joined
from engine.asr.timestamps import TimedSpan
from engine.asr.transcriber import DecodeRequest, Priority, TranscriberState, Transcript
from engine.asr.vllm_launch import launch
from engine.asr.vllm_tokens import WhisperTokens
from engine.asr.windows import (
    SAMPLE_RATE,
    WindowStats,
    encoder_positions,
    fall_back,
    loop_reason,
    loop_start,
    max_tokens_for,
    tandem_repeat,
    window_samples,
)
from engine.audio.pcm import warmup_tone
from engine.config import TranscriberConfig
from engine.errors import EngineNotReady, ModelError
from engine.models.resolve import ModelSpec, resolve_model

log = logging.getLogger(__name__)

_WATCH_INTERVAL_S = 1.0
# Timestamp tokens are ordinary added tokens (as in OpenAI's tokenizers), so the decoded text still holds them.
_TIMESTAMP_TOKEN = re.compile(r"<\|\d+\.\d+\|>")
_LOOP_CHECK_EVERY = 4  # generated tokens between checks for a repetition loop while a decode streams
_CONTINUE_S = 1.0  # a timestamped decode whose last stretch ends this long before the audio stopped early
_MAX_CONTINUATIONS = 3  # decodes of the rest after one that stopped early
# Alternatives the decoder reports per generated token with the chosen one: its other spellings are among them
# ("Somehow", " somehow"), so a word's probability is that of the word, not of its case
# (``WhisperTokens.spelling_logprob``).
_TOP_LOGPROBS = 3
# The timed warm-up decode in each window generates this many tokens (a tone decodes to little by itself): about what a
# partial generates after its settled words, or a short sentence's final.
_WARM_TOKENS = 16


class VllmTranscriber:
    """``Transcriber`` on vLLM. States: NEW -> LOADING -> READY (-> FAILED if the engine dies) -> CLOSED."""

    def __init__(self, config: TranscriberConfig) -> None:
        self.config = config
        self.name = config.model or "whisper-base"
        self.device = "unknown"
        self.dtype = ""  # the weights' dtype on the device, once loaded ("bfloat16" on most CPUs)
        self.spec: ModelSpec | None = None
        self._llm: Any = None
        self._state = TranscriberState.NEW
        self._detail = ""
        self._inflight: dict[str, Priority] = {}
        self._tokens = WhisperTokens()  # which ids are special, a token's text (once loaded)
        self._watch: asyncio.Task[None] | None = None
        self.window_policy = config.window_policy()  # (config.window; raises ValueError for an unknown one)
        self.windows = WindowStats()
        self._warm_costs: dict[float, float] = {}
        self.cpu_threads = 0  # the CPU engine core's compute threads now (0: not known, or not a CPU engine)
        self.cpu_decoder_threads = 0  # ...of a step that only generates text (0: not known)

    @property
    def warm_costs(self) -> dict[float, float]:
        """Seconds one decode of ``_WARM_TOKENS`` tokens took alone in each window at warm-up."""
        return dict(self._warm_costs)

    @property
    def state(self) -> TranscriberState:
        return self._state

    @property
    def detail(self) -> str:
        return self._detail

    def load(self) -> dict[str, int]:
        values = list(self._inflight.values())
        return {
            "final": values.count(Priority.FINAL),
            "partial": values.count(Priority.PARTIAL),
            "background": values.count(Priority.BACKGROUND),
        }

    async def start(self) -> None:
        if self._state is not TranscriberState.NEW:
            raise EngineNotReady(self._state.value, "start() may be called once")
        self._state = TranscriberState.LOADING
        t0 = time.monotonic()
        try:
            self.spec = await asyncio.to_thread(resolve_model, self.config.model, self._cache_dir())
            self.name = self.spec.name
            self.device = await asyncio.to_thread(detect_device, self.config.device)
            launched = await asyncio.to_thread(launch, self.config, self.spec, self.device)
            self._llm, self.cpu_threads, self.dtype = launched.llm, launched.cpu_threads, launched.dtype
            self._tokens = await asyncio.to_thread(WhisperTokens.of, getattr(self._llm, "tokenizer", None))
        except asyncio.CancelledError:
            self._state = TranscriberState.FAILED
            self._detail = "start cancelled"
            await self.close()
            raise
        except (ModelError, Exception) as exc:  # any library error becomes a visible FAILED state
            self._state = TranscriberState.FAILED
            self._detail = f"{type(exc).__name__}: {exc}"
            log.exception("recognizer failed to start")
            raise EngineNotReady("failed", self._detail) from exc
        self._state = TranscriberState.READY
        try:
            if self.device == "cpu":  # (the decoder's threads: the engine core starts with one count for all)
                await self.set_cpu_threads(self.cpu_threads)
            await self._warm_up()
        except Exception as exc:
            self._state = TranscriberState.FAILED
            self._detail = f"warm-up decode failed: {exc}"
            raise EngineNotReady("failed", self._detail) from exc
        self._watch = asyncio.create_task(self._watch_engine(), name="vllm-watch")
        log.info("recognizer %s ready on %s in %.1f s", self.name, self.device, time.monotonic() - t0)

    async def _warm_up(self) -> None:
        """Decode a little audio in every window before anyone waits for it: vLLM's first decodes after start,
        and the first in each new encoder shape, are several times slower than the rest, and the first speaker
        should not pay for that. Then time one decode of ``_WARM_TOKENS`` tokens in each window (``warm_costs``), and
        run requests together as sessions do (batches, forced words, timestamps)."""
        request = DecodeRequest("warm-up", warmup_tone(1.0), Priority.FINAL)
        # Every window of the policy (its last is Whisper's full one, where a looping decode falls back to).
        windows = self.window_policy.buckets_s
        for i, window in enumerate((windows[0], *windows)):
            await self._generate(request, f"warm-up-{i}", window, max_tokens=8)
        # Timed twice, the quicker kept: the capacity's first estimate rests on these, and on a shared machine one
        # timing alone was off by half now and then (fresh servers said 2-5 sessions for the same streams).
        for attempt in range(2):
            for window in windows:
                t0 = time.monotonic()
                await self._generate(
                    request,
                    f"warm-up-timed-{window:g}-{attempt}",
                    window,
                    max_tokens=_WARM_TOKENS,
                    min_tokens=_WARM_TOKENS,
                )
                took = time.monotonic() - t0
                self._warm_costs[window] = min(took, self._warm_costs.get(window, took))
        # Then as sessions send them: several at once in one engine step (speakers talking together), of 1, 5 and 9 s
        # (three windows), half with settled words forced in front and Whisper's timestamps (as a closing decode),
        # and as many at once as the engine batches.
        t0 = time.monotonic()
        most = max(2, self.config.max_num_seqs)
        for size in sorted({2, most}):
            await asyncio.gather(
                *(
                    self.transcribe(
                        DecodeRequest(
                            f"warm-up-batch-{size}-{i}",
                            warmup_tone(1.0 + 4 * (i % 3)),
                            Priority.FINAL if i % 2 else Priority.PARTIAL,
                            prefix="hello" if i % 2 else "",
                            timestamps=bool(i % 2),
                        )
                    )
                    for i in range(size)
                )
            )
        log.info("recognizer warm-up: %d requests at once and forced words in %.2f s", most, time.monotonic() - t0)
        self.windows = WindowStats()  # (what the windows served counts from the first session on)
        log.info(
            "recognizer warm-up: one decode of %d tokens alone takes %s",
            _WARM_TOKENS,
            ", ".join(f"{c:.2f} s in {w:g} s" for w, c in sorted(self._warm_costs.items())),
        )

    async def set_cpu_threads(self, threads: int, decoder_threads: int | None = None) -> int:
        """Give the CPU engine core ``threads`` compute threads from its next step on, its steps that only generate
        tokens at most ``decoder_threads`` of them (None: ``TranscriberConfig.cpu_decoder_threads``; 0: all;
        ``engine.asr.vllm_worker``); returns the count of a step that encodes. A no-op (returning 0) on a GPU."""
        if self.device != "cpu" or self._llm is None or self._state is not TranscriberState.READY:
            return 0
        text = self.config.cpu_decoder_threads if decoder_threads is None else decoder_threads
        results = await self._llm.collective_rpc("set_cpu_threads", args=(threads, text))
        self.cpu_threads, self.cpu_decoder_threads = (int(n) for n in results[0]) if results else (threads, text)
        return self.cpu_threads

    def _cache_dir(self) -> Path | None:
        return Path(self.config.cache_dir) if self.config.cache_dir else None

    async def _watch_engine(self) -> None:
        """Notice the death of the engine core process and make it visible as FAILED."""
        while self._state is TranscriberState.READY:
            await asyncio.sleep(_WATCH_INTERVAL_S)
            if self._llm is not None and self._llm.errored:
                self._state = TranscriberState.FAILED
                self._detail = f"engine process died: {self._llm.dead_error}"
                log.error("recognizer %s", self._detail)

    def stats(self) -> dict[str, Any]:
        return {"window_mode": "stock" if self.window_policy.stock else "fit", "windows": self.windows.as_list()}

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        """Decode in the smallest window that fits; a decode that loops is redone in the next larger window,
        up to Whisper's full 30 s, whose output is returned as it is (the session's guard judges it)."""
        return await self._transcribe(request, 0)

    async def _transcribe(self, request: DecodeRequest, continuations: int) -> Transcript:
        if self._state is not TranscriberState.READY or self.spec is None:
            raise EngineNotReady(self._state.value, self._detail)
        policy = self.window_policy
        audio_s = request.audio.size / SAMPLE_RATE
        window = policy.window_for(audio_s)
        if request.task != "transcribe" and request.language is None and self.spec.multilingual:
            # The task token follows the language token: a translation of speech in a language not given is
            # decoded once the model has said which language it hears (one token).
            request = dataclasses.replace(request, language=await self._detected(request, window))
        forced = request.prefix.strip() if request.language is not None or not self.spec.multilingual else ""
        forced_ids = self._tokens.text_ids(forced)
        timestamps = request.timestamps and self._tokens.timed
        # A looping partial is cut where it began to repeat rather than decoded again in a larger window: it is shown
        # for a moment, and on a CPU the larger decodes of a few sessions' loops stalled every session for seconds.
        partial = request.priority is Priority.PARTIAL
        t0 = time.monotonic()
        self._inflight[request.request_id] = request.priority
        fallbacks = 0
        truncated = False
        kept_generated: int | None = None  # of a decode cut at a loop: its generated text tokens kept
        try:
            while True:
                t1 = time.monotonic()
                request_id = request.request_id if not fallbacks else f"{request.request_id}-w{window:g}"
                completion = await self._generate(
                    request,
                    request_id,
                    window,
                    max_tokens_for(audio_s, self.config.max_tokens),
                    stop_on_loop=partial or policy.next_window(window) is not None,
                    forced=forced,
                    forced_ids=forced_ids,
                    timestamps=timestamps,
                )
                ids = [] if completion is None else list(completion.token_ids)
                text_ids = forced_ids + [t for t in ids if self._tokens.is_text(t)]
                generated = "" if completion is None else _TIMESTAMP_TOKEN.sub("", completion.text)
                text = joined(forced, generated)
                reason = loop_reason(text_ids, text, completion is not None and completion.finish_reason == "length")
                larger = policy.next_window(window) if reason else None
                cut = loop_start(text_ids) if reason and (partial or larger is None) else None
                if (reason and partial) or cut is not None:
                    # A partial is cut where it began to repeat; so is any decode that loops in the largest window
                    # too (Whisper said the sentence again into the window's padding): its first copy is the text,
                    # where the whole repetition would lock (the guard passes a sentence said twice).
                    kept = text_ids[: max(cut, len(forced_ids))] if cut is not None else forced_ids
                    kept_generated = len(kept) - len(forced_ids)
                    text = self._tokens.text(kept)
                    truncated = partial
                    log.info(
                        "request %s looped in a %g s window (%s): cut to %d of %d tokens",
                        request.request_id,
                        window,
                        reason,
                        len(kept),
                        len(text_ids),
                    )
                    self.windows.record(window, time.monotonic() - t1, len(ids), fell_back=False)
                    break
                self.windows.record(window, time.monotonic() - t1, len(ids), fell_back=larger is not None)
                if larger is None:
                    break
                window = fall_back(request.request_id, window, reason, larger)
                fallbacks += 1
        finally:
            self._inflight.pop(request.request_id, None)
        decode_s = time.monotonic() - t0
        if completion is None or not ids:
            return Transcript(
                strip_nonspeech(forced),
                request.language,
                0.0,
                0,
                decode_s,
                window,
                encoder_positions(window),
                fallbacks,
            )
        avg = self._tokens.avg_logprob(completion, ids, timestamps)
        language = request.language
        if language is None:
            language = self._tokens.languages.get(ids[0])
        spans = self._tokens.spans(ids, forced, audio_s) if timestamps and kept_generated is None else ()
        text = strip_nonspeech(text)
        probs = self._tokens.word_probs(completion, ids, text, forced, generated, kept_generated)
        result = Transcript(
            text,
            language,
            avg,
            len(ids),
            decode_s,
            window,
            encoder_positions(window),
            fallbacks,
            spans,
            truncated,
            kept_generated is not None,
            probs,
        )
        stopped_early = (
            not truncated
            and bool(spans)
            and completion.finish_reason == "stop"
            and audio_s - spans[-1].end_s >= _CONTINUE_S
        )
        if stopped_early and continuations < _MAX_CONTINUATIONS:
            result = await self._continue(request, result, continuations + 1)
        return result

    async def _detected(self, request: DecodeRequest, window: float) -> str:
        """The language the model hears in ``request``'s audio (its first token after ``<|startoftranscript|>``;
        English where it names none)."""
        probe = dataclasses.replace(request, language=None, task="transcribe", prefix="", timestamps=False)
        completion = await self._generate(probe, f"{request.request_id}-lang", window, 1)
        ids = [] if completion is None else list(completion.token_ids)
        return self._tokens.languages.get(ids[0], "en") if ids else "en"

    async def _continue(self, request: DecodeRequest, head: Transcript, continuations: int) -> Transcript:
        """Decode the audio after a timestamped decode's last stretch and append it.

        In timestamp mode Whisper often ends after its first sentence or two when more speech follows (in its
        training, the rest came in the next 30 s window): measured, it dropped 7 % of the words of multi-sentence
        segments. As OpenAI's ``transcribe`` does, the rest is decoded on its own, with the text so far as context.
        """
        cut_s = head.spans[-1].end_s
        rest = request.audio[int(cut_s * SAMPLE_RATE) :]
        context = " ".join(filter(None, (request.context, head.text)))[-MAX_CONTEXT_CHARS:]
        tail = await self._transcribe(
            DecodeRequest(
                f"{request.request_id}-c{continuations}",
                rest,
                request.priority,
                head.language or request.language,
                context,
                timestamps=True,
                temperature=request.temperature,
                task=request.task,
            ),
            continuations,
        )
        if not tail.text:
            return head
        spans = head.spans + tuple(TimedSpan(s.start_s + cut_s, s.end_s + cut_s, s.text) for s in tail.spans)
        tokens = head.tokens + tail.tokens
        avg = (head.avg_logprob * head.tokens + tail.avg_logprob * tail.tokens) / max(1, tokens)
        probs = head.word_probs + tail.word_probs if head.word_probs and tail.word_probs else ()
        return Transcript(
            f"{head.text} {tail.text}",
            head.language,
            avg,
            tokens,
            head.decode_s + tail.decode_s,
            head.window_s,
            head.encoder_positions,
            head.fallbacks + tail.fallbacks,
            spans,
            word_probs=probs,
        )

    async def _generate(
        self,
        request: DecodeRequest,
        request_id: str,
        window_s: float,
        max_tokens: int,
        stop_on_loop: bool = False,
        forced: str = "",
        forced_ids: list[int] | None = None,
        timestamps: bool = False,
        min_tokens: int = 0,
    ) -> Any:
        """One vLLM request in a ``window_s`` window: its completion (``CompletionOutput``), or None.

        ``stop_on_loop``: end the request as soon as its tokens repeat themselves (there is a larger window to
        decode in); the completion then holds what came until then. ``min_tokens``: generate at least that many
        (the timed warm-up)."""
        from vllm import SamplingParams
        from vllm.v1.engine.exceptions import EngineDeadError

        params = SamplingParams(
            temperature=request.temperature,
            max_tokens=max_tokens,
            logprobs=_TOP_LOGPROBS,
            skip_special_tokens=True,
            min_tokens=min_tokens,
        )
        prompt = {
            "encoder_prompt": {
                "prompt": "",
                "multi_modal_data": {"audio": (request.audio, SAMPLE_RATE)},
                "mm_processor_kwargs": {"max_length": window_samples(window_s)},
            },
            "decoder_prompt": decoder_prompt(
                self.spec,  # type: ignore[arg-type]
                request.language,
                request.context,
                forced,
                timestamps,
                request.task,
            ),
        }
        final = None
        checked = 0
        stream = self._llm.generate(prompt, params, request_id, priority=int(request.priority))
        try:
            async for out in stream:
                final = out
                # A loop is stopped as soon as it shows, not left to run to the token cap: the caller sees the
                # repetition in what came so far and decodes again in a larger window.
                ids = out.outputs[0].token_ids if out.outputs else ()
                if stop_on_loop and len(ids) >= checked + _LOOP_CHECK_EVERY:
                    checked = len(ids)
                    text_ids = [*(forced_ids or ()), *(t for t in ids if self._tokens.is_text(t))]
                    if tandem_repeat(text_ids) is not None:
                        break
        except EngineDeadError as exc:
            self._state = TranscriberState.FAILED
            self._detail = f"engine process died: {exc}"
            raise EngineNotReady("failed", self._detail) from exc
        finally:
            await stream.aclose()  # after a break this aborts the request in the engine
        return final.outputs[0] if final is not None and final.outputs else None

    async def close(self) -> None:
        if self._state is TranscriberState.CLOSED:
            return
        self._state = TranscriberState.CLOSED
        if self._watch is not None:
            self._watch.cancel()
        llm, self._llm = self._llm, None
        if llm is not None:
            # Stop reading outputs first: otherwise the reader reports the engine core's planned exit as a crash.
            handler = getattr(llm, "output_handler", None)
            if handler is not None:
                handler.cancel()
                await asyncio.gather(handler, return_exceptions=True)
            # shutdown() joins the engine core (seconds): keep it off the event loop.
            await asyncio.to_thread(llm.shutdown)
            llm.shutdown = lambda *a, **k: None  # its __del__ would shut down again at interpreter exit
