"""The process-wide caption engine: one recognizer, one batched VAD, one speaker model, many sessions.

Model and audio work never runs on the event loop: the VAD batch runs in its own worker thread, speaker
embeddings in another, and the recognizer in vLLM's engine-core process. The loop only moves small arrays and
decides.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from typing import Any

import numpy as np

import engine.protocol as protocol
from engine.asr.transcriber import Transcriber, TranscriberState
from engine.audio.pcm import SAMPLE_RATE
from engine.audio.vad import BatchedVad
from engine.config import EngineConfig, SessionOptions
from engine.errors import EngineNotReady, IllegalTransition
from engine.stream.scheduler import DecodeScheduler
from engine.stream.session import Session

log = logging.getLogger(__name__)

_VAD_WINDOWS_PER_TICK = 32  # per session (~1 s of audio): bounds one tick when a session has a backlog
_FAILURE_POLL_S = 0.25  # how often a READY engine checks that its recognizer is still alive


class EngineState(StrEnum):
    NEW = "new"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


class CaptionEngine:
    """Create once per process, ``await start()``, then ``open_session()`` per caller; ``await close()`` at exit."""

    def __init__(self, config: EngineConfig, transcriber: Transcriber | None = None) -> None:
        self.config = config
        if transcriber is None:
            from engine.asr.vllm_backend import VllmTranscriber

            transcriber = VllmTranscriber(config.transcriber)
        self.transcriber = transcriber
        self.vad = BatchedVad(config.vad.max_sessions)
        max_inflight = config.partial.max_inflight or 2  # raised to 32 once a GPU is detected
        self.scheduler = DecodeScheduler(transcriber, max_inflight)
        self.preroll_samples = config.endpoint.preroll_ms * SAMPLE_RATE // 1000
        self.sessions: dict[str, Session] = {}
        self._state = EngineState.NEW
        self._detail = ""
        self._vad_pool = ThreadPoolExecutor(1, thread_name_prefix="vad")
        self._embed_pool = ThreadPoolExecutor(1, thread_name_prefix="speaker")
        self._wake = asyncio.Event()
        self._vad_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self.failed = asyncio.Event()  # set when the recognizer dies after READY (sessions already ended)
        self._embed_task: asyncio.Task[None] | None = None
        self._embed_queue: list[tuple[np.ndarray, asyncio.Future[np.ndarray | None]]] = []
        self._embed_wake = asyncio.Event()
        self._embedder: Any = None
        self.speaker_config: Any = None  # engine.speakers.tracker.SpeakerConfig when labels are on
        if config.speakers:
            from engine.speakers.tracker import SpeakerConfig

            self.speaker_config = SpeakerConfig()
        self.vad_busy_s = 0.0  # CPU-side wall time spent in VAD batches (for benches)
        self.vad_calls = 0
        self.started_at = time.monotonic()

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

    async def start(self) -> None:
        """Load the speaker model and the recognizer (minutes on CPU); READY when both are up.

        Raises ``EngineNotReady`` (state FAILED) if either cannot load.
        """
        if self._state is not EngineState.NEW:
            raise IllegalTransition("start the engine", self._state)
        self._state = EngineState.LOADING
        self._vad_task = asyncio.create_task(self._vad_loop(), name="vad-tick")
        try:
            if self.config.speakers:
                from engine.speakers.embedder import SpeakerEmbedder

                self._embedder = await asyncio.get_running_loop().run_in_executor(self._embed_pool,
                                                                                  SpeakerEmbedder)
                self._embed_task = asyncio.create_task(self._embed_loop(), name="speaker-embed")
            await self.transcriber.start()
        except asyncio.CancelledError:
            self._state = EngineState.FAILED
            raise
        except Exception as exc:
            self._state = EngineState.FAILED
            self._detail = str(exc)
            raise EngineNotReady("failed", self._detail) from exc
        if self.config.partial.max_inflight == 0 and getattr(self.transcriber, "device", "cpu") == "cuda":
            self.scheduler.max_inflight_partials = 32  # a GPU batches partials almost for free
        self._state = EngineState.READY
        self._watch_task = asyncio.create_task(self._watch_recognizer(), name="engine-watch")
        log.info("engine ready: model %s", self.model_name)

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
        reason = "the speech engine stopped unexpectedly; this session has ended (the server restarts: start again " \
                 "in a minute)"
        await asyncio.gather(*(s.end(protocol.ErrorCode.ENGINE, reason) for s in list(self.sessions.values())),
                             return_exceptions=True)
        self.failed.set()

    def open_session(self, options: SessionOptions | None = None, session_id: str | None = None) -> Session:
        """A new live session. Raises ``EngineNotReady`` unless READY, ``EngineError`` if no VAD row is free."""
        if self.state is not EngineState.READY:
            raise EngineNotReady(self.state.value, self.detail)
        sid = session_id or secrets.token_urlsafe(9)
        session = Session(self, sid, options or SessionOptions(language=self.config.default_language))
        self.sessions[sid] = session
        return session

    def release(self, session: Session) -> None:
        """Called by ``Session.close``: forget the session and free its VAD row."""
        if self.sessions.pop(session.session_id, None) is not None:
            self.vad.release(session.vad_slot)

    async def close(self) -> None:
        """Close every session, stop the workers and the recognizer. Safe to call twice."""
        if self._state is EngineState.CLOSED:
            return
        self._state = EngineState.CLOSED
        for session in list(self.sessions.values()):
            await session.close()
        for task in (self._vad_task, self._embed_task, self._watch_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for fut in (f for _, f in self._embed_queue):
            fut.cancel()
        await self.transcriber.close()
        self._vad_pool.shutdown(wait=False, cancel_futures=True)
        self._embed_pool.shutdown(wait=False, cancel_futures=True)

    def stats(self) -> dict[str, Any]:
        """Numbers for /ready, metrics and benches."""
        load = self.transcriber.load()
        return {
            "state": self.state.value,
            "model": self.model_name,
            "sessions": len(self.sessions),
            "queue_final": load["final"],
            "queue_partial": load["partial"],
            "partials_waiting": self.scheduler.waiting,
            "vad_calls": self.vad_calls,
            "vad_busy_s": round(self.vad_busy_s, 3),
            "recognizer": self.transcriber.stats(),
        }

    # ---- VAD tick -------------------------------------------------------------------------------------------
    def wake_vad(self) -> None:
        self._wake.set()

    async def _vad_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                batch = {s.vad_slot: (s, s.take_windows(_VAD_WINDOWS_PER_TICK))
                         for s in list(self.sessions.values()) if s.has_windows}
                if not batch:
                    for s in self.sessions.values():
                        s.vad_idle.set()
                    break
                work = {slot: w for slot, (_, w) in batch.items()}
                t0 = time.perf_counter()
                try:
                    probs = await loop.run_in_executor(self._vad_pool, self.vad.run, work)
                except RuntimeError as exc:  # pool shut down while closing
                    log.warning("VAD tick stopped: %s", exc)
                    return
                self.vad_busy_s += time.perf_counter() - t0
                self.vad_calls += 1
                for slot, (session, _) in batch.items():
                    if session.session_id in self.sessions:
                        try:
                            session.on_vad(probs[slot])
                        except Exception:
                            log.exception("session %s: VAD result handling failed", session.session_id)

    # ---- speakers -------------------------------------------------------------------------------------------
    def new_speaker_tracker(self) -> Any:
        """A per-session speaker tracker, or None when speaker labels are off."""
        if self.speaker_config is None:
            return None
        from engine.speakers.tracker import SpeakerTracker

        return SpeakerTracker(self.speaker_config)

    def embed(self, audio: np.ndarray, speech_s: float) -> asyncio.Future[np.ndarray | None]:
        """Speaker embedding of one segment, batched with whatever else is waiting; None if too short or off."""
        fut: asyncio.Future[np.ndarray | None] = asyncio.get_running_loop().create_future()
        if self._embedder is None or speech_s < self.speaker_config.min_embed_speech_s:
            fut.set_result(None)
            return fut
        self._embed_queue.append((audio, fut))
        self._embed_wake.set()
        return fut

    async def _embed_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._embed_wake.wait()
            self._embed_wake.clear()
            batch = [(a, f) for a, f in self._embed_queue if not f.done()]
            self._embed_queue.clear()
            if not batch:
                continue
            try:
                vectors = await loop.run_in_executor(self._embed_pool, self._embedder.embed, [a for a, _ in batch])
            except Exception as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), vec in zip(batch, vectors, strict=True):
                if not fut.done():
                    fut.set_result(vec)

    async def recluster(self, tracker: Any) -> dict[int, int]:
        """Global re-clustering of one session's speakers, in the speaker worker thread."""
        loop = asyncio.get_running_loop()
        result: dict[int, int] = await loop.run_in_executor(self._embed_pool, tracker.recluster)
        return result
