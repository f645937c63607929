"""The process-wide caption engine: one recognizer, one batched VAD, one speaker model, many sessions.

Model and audio work never runs on the event loop: the VAD batch runs in its own worker thread, speaker
embeddings in another, and the recognizer in vLLM's engine-core process. The loop only moves small arrays and
decides.

The engine knows what it can hold: every decode is charged to the recognizer's load (``engine.stream.load``), and
``capacity`` estimates how many live sessions it holds on time (``engine.stream.capacity``), from the recognizer's
warm-up, then from the measured load (a sampler looks once a second). The same sampler gives a CPU recognizer all
cores while one session speaks and half of them while several do (``VllmTranscriber.set_cpu_threads``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

import engine.protocol as protocol
from engine.asr.align_service import AlignService
from engine.asr.transcriber import Transcriber, TranscriberState
from engine.audio.vad import BatchedVad
from engine.config import EngineConfig, SessionOptions
from engine.errors import EngineNotReady, IllegalTransition
from engine.observe import Observers
from engine.speakers.models import speaker_service
from engine.speakers.service import SpeakerService
from engine.stream.capacity import Capacity, CapacityEstimate
from engine.stream.load import RecognizerLoad
from engine.stream.scheduler import BACKGROUND_FLOOR_S, DecodeScheduler
from engine.stream.session import Session
from engine.stream.vad_batch import VadBatcher, VadLane, VadModel

log = logging.getLogger(__name__)

_FAILURE_POLL_S = 0.25  # how often a READY engine checks that its recognizer is still alive
_SAMPLE_S = 1.0  # how often the load sampler looks (capacity, threads)
# A CPU recognizer runs on half the cores once several sessions speak and it is busy this share of the time (less CPU
# per session, slower decodes: docs/benchmarks.md, "A full server stays on time"),
# and on all of them again once it has been much lighter than that (or one session alone has spoken) for a while
# without a break: a conversation's turns, or the slower decodes of one thread, do not flip the threads back and forth.
_SHARED_BUSY = 0.6
_ALONE_BUSY = 0.3
_THREADS_SHARED_AFTER_S = 5.0
_THREADS_BACK_AFTER_S = 10.0


def _leading_int(text: str) -> int:
    """The first number of a setting such as ``OMP_NUM_THREADS`` ("4", or "4,2" for nested levels); 0 if none."""
    digits = ""
    for ch in text.strip():
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


class EngineState(StrEnum):
    NEW = "new"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


class CaptionEngine:
    """Create once per process, ``await start()``, then ``open_session()`` per caller; ``await close()`` at exit."""

    def __init__(
        self,
        config: EngineConfig,
        transcriber: Transcriber | None = None,
        vad: VadModel | None = None,
        speakers: SpeakerService | None = None,
        background_floor_s: float = BACKGROUND_FLOOR_S,
        aligner: AlignService | None = None,
    ) -> None:
        """``transcriber`` defaults to vLLM in this process (or the ``vllm serve`` instances at
        ``config.transcriber.asr_urls``), ``vad`` to Silero, ``speakers`` to ``config.speaker_model`` when
        ``config.speakers`` is on (tests pass fakes; the engine starts and closes whatever it is given).
        ``background_floor_s``: how long a file's segment waits for live speech to pause before it decodes
        regardless (``DecodeScheduler``; 0: it never waits for live partials). ``aligner``: the word aligner where
        ``config.word_align`` is on (default: a new ``AlignService``). Raises ``ValueError`` for a malformed
        recognizer URL or an unknown ``config.speaker_model``."""
        self.config = config
        if transcriber is None and config.transcriber.asr_urls:
            from engine.asr.remote import RemoteTranscriber

            transcriber = RemoteTranscriber(config.transcriber)
        elif transcriber is None:
            from engine.asr.vllm_backend import VllmTranscriber

            transcriber = VllmTranscriber(config.transcriber)
        self.transcriber = transcriber
        self.vad = VadBatcher(
            vad if vad is not None else BatchedVad(config.vad.max_sessions),
            min_interval_s=config.vad.batch_interval_ms / 1000,
        )
        # Whoever counts what the engine does (metrics): add an ``engine.observe.EngineObserver`` here.
        self.observers = Observers()
        max_inflight = config.partial.max_inflight or 2  # raised to 32 once a GPU is detected
        # ``vllm serve`` instances decode side by side, each as fast as one engine.
        self.recognizer_load = RecognizerLoad(parallel=max(1, len(config.transcriber.asr_urls)))
        self.scheduler = DecodeScheduler(
            transcriber,
            max_inflight,
            background_floor_s=background_floor_s,
            observer=self.observers,
            load=self.recognizer_load,
            window_for=self._window_for,
        )
        # (its front_cores are set in ``start``, once the recognizer's device is known)
        self.capacity = Capacity(
            config.capacity,
            self.recognizer_load,
            front_cores=1.0,
            most=config.vad.max_sessions,
            window_for=self._window_for,
        )
        self.observers.add(self.capacity)
        self._sampler_task: asyncio.Task[None] | None = None
        # A CPU recognizer's threads while one session speaks, and while several do (0: left as they are).
        self.threads_alone = 0
        self.threads_shared = 0
        self._light_since = float("inf")  # since when the recognizer has been light (one speaker, or idle enough)
        self._loaded_since = float("inf")  # since when several sessions have kept it busy
        self._sampler_failed = False
        self.speakers = (
            speakers if speakers is not None else speaker_service(config.speaker_model) if config.speakers else None
        )
        # Word alignment needs the checkpoint on this machine: started in ``start`` once the recognizer has it.
        self.aligner = (aligner or AlignService()) if config.word_align else None
        self.sessions: dict[str, Session] = {}
        self._lanes: dict[str, VadLane] = {}  # each session's VAD lane: opened and closed here
        self._state = EngineState.NEW
        self._detail = ""
        self._watch_task: asyncio.Task[None] | None = None
        self.failed = asyncio.Event()  # set when the recognizer dies after READY (sessions already ended)
        self.load_s = 0.0  # seconds ``start`` took to load the models (set when READY)

    # ---- lifecycle ------------------------------------------------------------------------------------------
    @property
    def state(self) -> EngineState:
        if self._state is EngineState.READY and self.transcriber.state is TranscriberState.FAILED:
            return EngineState.FAILED
        return self._state

    @property
    def detail(self) -> str:
        return self._detail or self.transcriber.detail

    @property
    def model_name(self) -> str:
        return self.transcriber.name

    @property
    def english_only(self) -> bool:
        """The recognizer writes English only (an ``.en`` checkpoint such as whisper-tiny.en): no other language, no
        translate task. From the loaded checkpoint's vocabulary, else (not loaded yet, ``vllm serve`` instances)
        from its name."""
        spec = getattr(self.transcriber, "spec", None)
        multilingual = getattr(spec, "multilingual", None)
        if isinstance(multilingual, bool):
            return not multilingual
        return self.model_name.lower().endswith(".en")

    def cannot_caption(self, language: str | None, task: str = "transcribe") -> str:
        """Why this recognizer cannot caption speech in ``language`` (a Whisper code; None: detected) with Whisper's
        ``task``, for the client ("" when it can)."""
        if not self.english_only:
            return ""
        if task == "translate":
            return (
                f"this server's model ({self.model_name}) is English-only: it has no translate task (a "
                "multilingual model such as whisper-base has)"
            )
        if language not in (None, "en"):
            return (
                f"this server's model ({self.model_name}) is English-only: it cannot caption speech in "
                f"{language!r} (a multilingual model such as whisper-base can)"
            )
        return ""

    @property
    def model_dtype(self) -> str:
        """The recognizer's weights' dtype (e.g. ``bfloat16``); ``remote`` for ``vllm serve`` instances, empty
        before READY or where the recognizer does not say."""
        device = getattr(self.transcriber, "device", "")
        return "remote" if device == "remote" else str(getattr(self.transcriber, "dtype", ""))

    async def start(self) -> None:
        """Load the speaker model and the recognizer (minutes on CPU); READY when both are up.

        Raises ``EngineNotReady`` (state FAILED) if either cannot load.
        """
        if self._state is not EngineState.NEW:
            raise IllegalTransition("start the engine", self._state)
        self._state = EngineState.LOADING
        t0 = time.monotonic()
        self.vad.start()
        try:
            if self.speakers is not None:
                await self.speakers.start()
            await self.transcriber.start()
            await self._start_aligner()
            device = getattr(self.transcriber, "device", "cpu")
            self._plan_capacity(device)
        except asyncio.CancelledError:
            self._state = EngineState.FAILED
            raise
        except Exception as exc:
            self._state = EngineState.FAILED
            self._detail = str(exc)
            raise EngineNotReady("failed", self._detail) from exc
        if self.config.partial.max_inflight == 0 and device == "cuda":
            self.scheduler.max_inflight_partials = 32  # a GPU batches partials almost for free
        elif self.config.partial.max_inflight == 0 and device == "remote":
            # Each instance as many as one CPU engine takes; GPU instances take more (PartialConfig.max_inflight).
            self.scheduler.max_inflight_partials = 2 * len(self.config.transcriber.asr_urls)
        self.load_s = time.monotonic() - t0
        self._state = EngineState.READY
        self._watch_task = asyncio.create_task(self._watch_recognizer(), name="engine-watch")
        self._sampler_task = asyncio.create_task(self._sample(), name="engine-load-sampler")
        estimate = self.capacity.estimate()
        log.info(
            "engine ready: model %s; holds about %d live sessions on time (%s)",
            self.model_name,
            estimate.sessions,
            estimate.source,
        )

    def _window_for(self, audio_s: float) -> float:
        """The encoder window a request of ``audio_s`` seconds decodes in (Whisper's full 30 s for a recognizer
        without windows)."""
        policy = getattr(self.transcriber, "window_policy", None)
        return float(policy.window_for(audio_s)) if policy is not None else 30.0

    def _plan_capacity(self, device: str) -> None:
        """Seed the load with the recognizer's warm-up timing, say how many cores the front end (this process) has
        (on a CPU machine, those the recognizer leaves it under load), and whether a CPU recognizer's threads follow
        the load (``_adapt_threads``)."""
        from engine.asr.cpu import available_cores, shared_cpu_threads

        self.recognizer_load.seed(getattr(self.transcriber, "warm_costs", {}))  # (a recognizer may time none)
        cores = available_cores()
        if device == "cpu":
            # (Only a recognizer that says how many threads it runs can be given more or fewer: vLLM's CPU engine;
            # and not when the operator fixed them, by flag or with OMP_NUM_THREADS.)
            if (
                self.config.transcriber.cpu_threads == 0
                and getattr(self.transcriber, "cpu_threads", 0) > 0
                and cores > 1
                and "OMP_NUM_THREADS" not in os.environ
            ):
                self.threads_alone, self.threads_shared = cores, shared_cpu_threads(cores)
            fixed = self.config.transcriber.cpu_threads or _leading_int(os.environ.get("OMP_NUM_THREADS", ""))
            engine_threads = self.threads_shared or fixed or cores
            self.capacity.front_cores = max(1, cores - engine_threads) if cores > 1 else 0.5
        else:
            self.capacity.front_cores = cores

    async def _sample(self) -> None:
        """Once a second: the load for the capacity estimate, and a CPU recognizer's threads. Nothing here may end the
        loop but the engine's own end: a failure is logged and the next second tries again."""
        while self._state is EngineState.READY:
            await asyncio.sleep(_SAMPLE_S)
            try:
                speaking, live = self.scheduler.speaking(), self.live_sessions
                self.capacity.sample(live, speaking, files=max(0, len(self.sessions) - live))
                await asyncio.wait_for(self._adapt_threads(speaking), _SAMPLE_S * 2)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # (a recognizer on its way out: its watch reports that)
                if not self._sampler_failed:
                    self._sampler_failed = True
                    log.warning("load sampler failed (later failures are logged at debug): %r", exc)
                else:
                    log.debug("load sampler: %r", exc)

    async def _adapt_threads(self, speaking: int) -> None:
        """A CPU recognizer's threads (``engine.asr.cpu``): all cores while it has time to spare; half of them once
        several sessions speak and have kept it busy (``_SHARED_BUSY``) for ``_THREADS_SHARED_AFTER_S``: the second
        thread then speeds a decode up less than it costs, and the server process's VAD, speaker and WebRTC work needs
        the cores. Back to all cores once one session alone has spoken, or the recognizer has stayed idle enough
        (``_ALONE_BUSY``), for ``_THREADS_BACK_AFTER_S``, each without a break."""
        if not self.threads_alone:
            return
        now = time.monotonic()
        busy = self.recognizer_load.busy()
        current = getattr(self.transcriber, "cpu_threads", 0)
        if speaking > 1 and busy >= _SHARED_BUSY:
            self._loaded_since = min(self._loaded_since, now)
        else:
            self._loaded_since = float("inf")
        if speaking <= 1 or busy < _ALONE_BUSY:
            self._light_since = min(self._light_since, now)
        else:
            self._light_since = float("inf")
        if current != self.threads_shared:
            want = self.threads_shared if now - self._loaded_since >= _THREADS_SHARED_AFTER_S else current
        else:
            want = self.threads_alone if now - self._light_since >= _THREADS_BACK_AFTER_S else current
        if want and want != current:
            got = await self.transcriber.set_cpu_threads(want)  # type: ignore[attr-defined]
            if got:
                log.info(
                    "recognizer threads %d -> %d (%d sessions speaking, recognizer %.0f %% busy)",
                    current,
                    got,
                    speaking,
                    100 * busy,
                )

    @property
    def live_sessions(self) -> int:
        """Sessions open now that are live (a stream), not files."""
        return sum(1 for s in list(self.sessions.values()) if not s.options.background)

    @property
    def voices_active(self) -> int:
        """Live sessions talking now (their partials share the recognizer: ``DecodeScheduler.speaking``); the others
        are connected and silent, costing their VAD and transport only."""
        return min(self.live_sessions, self.scheduler.speaking())

    def speaking_sessions(self) -> set[str]:
        """The ids of the live sessions talking now (``voices_active``)."""
        return self.scheduler.speaking_sessions()

    def capacity_estimate(self) -> CapacityEstimate:
        """How many live sessions the engine holds on time now (``engine.stream.capacity``)."""
        return self.capacity.estimate()

    async def _start_aligner(self) -> None:
        """Load the word aligner from the recognizer's local checkpoint. Without one (``vllm serve`` instances, a
        fake) word times come from the VAD: said once in the log, not an error."""
        if self.aligner is None:
            return
        spec = getattr(self.transcriber, "spec", None)
        folder = getattr(spec, "path", None)
        if not folder or not await asyncio.to_thread(Path(folder, "generation_config.json").is_file):
            log.info("word times from the VAD: no local checkpoint to align with (%s)", self.transcriber.name)
            self.aligner = None
            return
        from engine.asr.cpu import cpu_dtype

        self.aligner.dtype = cpu_dtype()  # the aligner runs on this process's CPU, beside a GPU recognizer too
        await self.aligner.start(folder)

    async def _watch_recognizer(self) -> None:
        """A recognizer that dies (vLLM's engine-core process killed, out of memory) cannot come back in this
        process: end every session with the reason, then set ``failed`` for the owner (the server exits so its
        supervisor starts a fresh process)."""
        while self._state is EngineState.READY:
            await asyncio.sleep(_FAILURE_POLL_S)
            if self._state is EngineState.READY and self.transcriber.state is TranscriberState.FAILED:
                await self._fail(self.transcriber.detail or "the recognizer stopped")

    async def _fail(self, detail: str) -> None:
        self._state = EngineState.FAILED
        self._detail = detail
        log.error("speech engine failed: %s; ending %d sessions", detail, len(self.sessions))
        reason = (
            "the speech engine stopped unexpectedly; this session has ended (the server restarts: start again "
            "in a minute)"
        )
        await asyncio.gather(
            *(s.end(protocol.ErrorCode.ENGINE, reason) for s in list(self.sessions.values())), return_exceptions=True
        )
        self.failed.set()

    def open_session(self, options: SessionOptions | None = None, session_id: str | None = None) -> Session:
        """A new live session. Raises ``EngineNotReady`` unless READY, ``EngineError`` if no VAD row is free.

        The engine owns the session's VAD lane: it opens it here and closes it when the session closes."""
        if self.state is not EngineState.READY:
            raise EngineNotReady(self.state.value, self.detail)
        sid = session_id or secrets.token_urlsafe(9)
        lane = self.vad.open()
        try:
            session = Session(
                sid,
                options or SessionOptions(language=self.config.default_language),
                config=self.config,
                scheduler=self.scheduler,
                vad=lane,
                speakers=self.speakers,
                aligner=self.aligner,
                model_name=self.model_name,
                on_closed=self._forget,
                observer=self.observers,
            )
        except BaseException:
            lane.close()
            raise
        self.sessions[sid] = session
        self._lanes[sid] = lane
        return session

    def _forget(self, session: Session) -> None:
        """``Session.close`` calls this: forget the session and free its VAD lane."""
        self.sessions.pop(session.session_id, None)
        lane = self._lanes.pop(session.session_id, None)
        if lane is not None:
            lane.close()

    async def close(self) -> None:
        """Close every session, stop the workers and the recognizer. Safe to call twice."""
        if self._state is EngineState.CLOSED:
            return
        self._state = EngineState.CLOSED
        for session in list(self.sessions.values()):
            await session.close()
        for task in (self._watch_task, self._sampler_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.vad.close()
        if self.speakers is not None:
            await self.speakers.close()
        if self.aligner is not None:
            await self.aligner.close()
        await self.transcriber.close()

    def load(self) -> dict[str, int]:
        """Requests in the recognizer now, by priority: ``{"final": n, "partial": m, "background": b}`` (its queue
        depth; counting only, no call into the model)."""
        load = self.transcriber.load()
        return {
            "final": load.get("final", 0),
            "partial": load.get("partial", 0),
            "background": load.get("background", 0),
        }

    def stats(self) -> dict[str, Any]:
        """Numbers for /ready, metrics and benches."""
        load = self.load()
        return {
            "state": self.state.value,
            "model": self.model_name,
            "sessions": len(self.sessions),
            "queue_final": load["final"],
            "queue_partial": load["partial"],
            "queue_background": load["background"],
            "partials_waiting": self.scheduler.waiting,
            "vad_calls": self.vad.calls,
            "vad_busy_s": round(self.vad.busy_s, 3),
            **(self.speakers.stats() if self.speakers is not None else {}),
            **(self.aligner.stats() if self.aligner is not None else {}),
            "recognizer": self.transcriber.stats(),
        }
