"""The translation engines behind one async front, shared by every room of a server.

Callers on the event loop ``await translate(request)``. One worker task hands the engines' calls to one worker
thread (so translation never takes both cores of a small machine from the recognizer, and the loop never blocks on
an engine), taking what is queued in arrival order and merging the requests of one (engine, source, target) that
wait together into one engine call (sentences of several rooms locked at the same moment), each caller getting its
own texts back. Requests are merged only where the engine ignores context (``Translator.uses_context``): each room's
context is its own. The first engine that can make a pair makes it (a chat endpoint given before Apertium is asked
first).

Failures: a failed call is made again ``retries`` times, after ``retry_backoff_s`` and then twice as long each time,
on the loop (the thread is free meanwhile); then every caller of it gets ``TranslationError``. A pair no engine makes
is ``UnsupportedPair`` at once. More than ``queue_max_sentences`` waiting: a new request is refused at once
(``TranslationError``; the room keeps its source text), so a stalled engine never grows memory without bound.
``close()`` fails every waiting caller with ``TranslationError`` and closes the engines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from engine.translate.base import TranslationError, TranslationRequest, Translator, UnsupportedPair
from engine.translate.languages import normalise_language, primary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceConfig:
    """How the service queues, batches and retries."""

    queue_max_sentences: int = 1000  # sentences waiting for the engines (all rooms); past it requests are refused
    batch_max_sentences: int = 32  # sentences in one merged engine call (one request alone may have more)
    retries: int = 1  # a failed engine call is made again this many times
    retry_backoff_s: float = 0.25  # before the first retry; doubled before each further one


@dataclass
class TranslationStats:
    """What the service did since it started (``/metrics``). Counts are sentences into one language each."""

    sentences: int = 0  # translated and handed back
    calls: int = 0  # engine calls made, retries included
    failures: int = 0  # engine calls that failed, retries included
    failed: int = 0  # sentences whose callers got TranslationError after the retries
    refused: int = 0  # sentences refused at once: the queue was full
    busy_s: float = 0.0  # wall seconds the worker thread spent in engine calls
    waiting: int = 0  # sentences queued now, not yet in an engine call (a gauge)


@dataclass
class _Waiting:
    request: TranslationRequest
    engine: Translator
    future: asyncio.Future[list[str]]
    key: tuple[object, ...] = field(init=False)

    def __post_init__(self) -> None:
        # Requests with the same key may share one engine call.
        context = self.request.context if self.engine.uses_context else ()
        self.key = (id(self.engine), self.request.source, self.request.target, context)


class TranslationService:
    """``translators`` in order of preference. ``start()`` on the loop that will call it; ``await close()`` when
    done (safe twice)."""

    def __init__(self, translators: Sequence[Translator], config: ServiceConfig | None = None) -> None:
        self.translators = list(translators)
        self.config = config or ServiceConfig()
        self.stats = TranslationStats()
        self._queue: list[_Waiting] = []
        self._in_call: list[_Waiting] = []  # the batch in the engine call now (failed too if close() comes)
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    def names(self) -> list[str]:
        """The engines' names, in order of preference."""
        return [t.name for t in self.translators]

    def targets(self, source: str) -> frozenset[str]:
        """Every language (primary subtag) some engine translates ``source`` into."""
        out: set[str] = set()
        for engine in self.translators:
            out |= engine.targets(source)
        return frozenset(out)

    @property
    def waiting(self) -> int:
        """Sentences queued, not yet in an engine call."""
        return self.stats.waiting

    def start(self) -> None:
        """Start the worker (on the running loop). Idempotent; does nothing after ``close()``."""
        if self._worker is None and not self._closed:
            self._wake = asyncio.Event()
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="translate")
            self._worker = asyncio.create_task(self._work(), name="translate")

    async def translate(self, request: TranslationRequest) -> list[str]:
        """``request.texts`` translated, one per text, in order. Raises ``UnsupportedPair`` for a pair no engine
        makes (or a tag that is not one), and ``TranslationError`` when the engine failed after its retries, the
        queue is full, or the service is not running."""
        if not request.texts:
            return []
        if self._closed or self._wake is None:
            raise TranslationError("the translation service is not running")
        engine = self._engine_for(request)
        size = len(request.texts)
        if self.stats.waiting + size > self.config.queue_max_sentences:
            self.stats.refused += size
            raise TranslationError(f"{self.stats.waiting} sentences are waiting for translation already")
        future: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(request, engine, future))
        self.stats.waiting += size
        self._wake.set()
        return await future

    def _engine_for(self, request: TranslationRequest) -> Translator:
        try:
            source, target = normalise_language(request.source), primary(normalise_language(request.target))
        except ValueError as exc:
            raise UnsupportedPair(str(exc)) from None
        for engine in self.translators:
            if target in engine.targets(source):
                return engine
        raise UnsupportedPair(f"no engine here translates {request.source} into {request.target}")

    async def close(self) -> None:
        """Stop the worker, fail every waiting caller with ``TranslationError``, close the engines (after the call in
        flight, if any: in the worker thread). Safe twice."""
        if self._closed:
            return
        self._closed = True
        worker, self._worker = self._worker, None
        try:
            if worker is not None:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
        finally:
            self._fail([*self._in_call, *self._queue], TranslationError("the translation service closed"))
            self._queue.clear()
            self._in_call = []
            self.stats.waiting = 0
            executor, self._executor = self._executor, None
        if executor is None:
            self._close_engines()
            return
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._close_engines)
        finally:
            executor.shutdown(wait=False)

    def _close_engines(self) -> None:
        for engine in self.translators:
            try:
                engine.close()
            except Exception:  # one engine's failure to close must not keep the others' processes alive
                log.exception("translation engine %s did not close", engine.name)

    async def _work(self) -> None:
        assert self._wake is not None
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._take()
            if batch:
                self._in_call = batch
                try:
                    await self._run(batch)
                except Exception:  # a bug here must not stop the worker: every later caller would wait forever
                    log.exception("the translation worker failed a batch")
                    self._fail(batch, TranslationError("the translation service failed"))
                finally:
                    self._in_call = []

    def _take(self) -> list[_Waiting]:
        """The oldest request, and those after it with its key, up to ``batch_max_sentences`` in all; requests
        whose callers gave up are dropped."""
        queue = [w for w in self._queue if not w.future.done()]
        batch: list[_Waiting] = []
        rest: list[_Waiting] = []
        size = 0
        for waiting in queue:
            fits = size + len(waiting.request.texts) <= self.config.batch_max_sentences
            if not batch or (waiting.key == batch[0].key and fits):
                batch.append(waiting)
                size += len(waiting.request.texts)
            else:
                rest.append(waiting)
        self._queue = rest
        self.stats.waiting = sum(len(w.request.texts) for w in rest)
        return batch

    async def _run(self, batch: list[_Waiting]) -> None:
        """One engine call for ``batch`` (retried), each caller's texts back to it."""
        first = batch[0]
        merged = TranslationRequest(
            first.request.source,
            first.request.target,
            tuple(t for w in batch for t in w.request.texts),
            first.request.context if first.engine.uses_context else (),
        )
        loop = asyncio.get_running_loop()
        error = TranslationError("no attempt made")
        for attempt in range(self.config.retries + 1):
            if attempt:
                await asyncio.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
            if all(w.future.done() for w in batch):
                return  # every caller gave up
            self.stats.calls += 1
            started = time.monotonic()
            try:
                out = await loop.run_in_executor(self._executor, first.engine.translate, merged)
                if len(out) != len(merged.texts):
                    raise TranslationError(f"{first.engine.name} gave {len(out)} texts for {len(merged.texts)}")
            except UnsupportedPair as exc:  # asking again will not help
                self.stats.failures += 1
                error = exc
                break
            except TranslationError as exc:
                self.stats.failures += 1
                error = exc
                log.warning(
                    "translation %s -> %s by %s failed (attempt %d of %d): %s",
                    merged.source,
                    merged.target,
                    first.engine.name,
                    attempt + 1,
                    self.config.retries + 1,
                    exc,
                )
                continue
            except Exception as exc:  # an engine's bug: its callers get an error, the worker goes on
                self.stats.failures += 1
                error = TranslationError(f"{first.engine.name} failed: {type(exc).__name__}: {exc}")
                log.exception("translation %s -> %s by %s failed", merged.source, merged.target, first.engine.name)
                continue
            finally:
                self.stats.busy_s += time.monotonic() - started
            at = 0
            for waiting in batch:
                size = len(waiting.request.texts)
                if not waiting.future.done():
                    waiting.future.set_result(out[at : at + size])
                at += size
            self.stats.sentences += len(out)
            return
        self.stats.failed += sum(len(w.request.texts) for w in batch if not w.future.done())
        self._fail(batch, error)

    @staticmethod
    def _fail(waiting: Sequence[_Waiting], error: TranslationError) -> None:
        for w in waiting:
            if not w.future.done():
                # Each caller its own exception object: one raised in several tasks would pile up tracebacks.
                w.future.set_exception(type(error)(str(error)))

    def warm(self, source: str, targets: Sequence[str]) -> None:
        """Start each engine's processes for ``source`` into each of ``targets`` with one sentence (blocking: call
        it in a thread, before rooms need them), so that a room's first sentence does not pay their start. The
        calls run in the service's worker thread, never beside an engine call. Failures are logged."""
        for target in targets:
            request = TranslationRequest(source, target, ("Good morning.",))
            executor = self._executor
            if self._closed or executor is None:
                return
            try:
                executor.submit(self._engine_for(request).translate, request).result()
            except RuntimeError:  # the executor shut down: the service closed meanwhile
                return
            except Exception as exc:  # TranslationError, or an engine's bug: the server goes on without the warm-up
                log.warning("translation %s -> %s did not warm up: %s", source, target, exc)
