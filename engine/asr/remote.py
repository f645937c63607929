"""The recognizer on other machines: ``vllm serve`` instances reached over HTTP (``--asr-url``).

Each decode is one ``POST /v1/audio/transcriptions`` (vLLM's OpenAI-compatible endpoint) carrying the segment as a
16 kHz 16-bit WAV, streamed back as server-sent events. Everything above the ``Transcriber`` protocol (the decode
scheduler: finals first, one partial in flight per session, latest audio wins, load-adaptive cadence) works as with
the in-process engine. What crosses HTTP, and what does not:

- windows: an instance that serves a checkpoint converted by ``python -m engine.models prepare`` runs this
  project's windowed Whisper (the plugin loads in ``vllm serve``) and picks the window from the audio length.
  A decode that loops is redone in the next larger window by sending the audio padded with silence to that
  window (the features are the same as the in-process engine's padding to it);
- ``context`` goes as ``prompt`` (previous text), ``language`` and ``temperature`` as themselves, the token cap as
  ``max_completion_tokens``; ``timestamps`` asks for ``verbose_json`` (Whisper's timestamp tokens, segments);
- not expressible: ``prefix`` (forcing the words earlier partials agreed on; the whole segment is decoded),
  ``priority`` (vLLM's transcription endpoint takes none, so a final does not overtake partials queued on the
  instance, only those still waiting here), and the mean log-probability of a streamed decode (the hallucination
  guard's confidence check is skipped; ``verbose_json`` decodes carry it).

Cancelling the awaiting task closes the HTTP connection, and vLLM aborts the request when its client goes away.
The request's body and the instance's answers are ``engine.asr.remote_wire``'s. Requests go to the instance with
the fewest in flight (``engine.asr.instances``). An instance that fails (refused connection, 5xx, timeout, a failed
``GET /health``) is taken out at once, its requests in flight are sent again to another instance, and it is probed
every ``health_interval_s`` until it answers again (then warmed up and taken back). With no instance up for
``down_grace_s`` the recognizer is FAILED (the engine ends its sessions with the reason); it becomes READY again
when an instance comes back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx
import numpy as np

from engine.asr.guard import strip_nonspeech
from engine.asr.instances import Instance, InstancePool, InstanceState
from engine.asr.remote_wire import (
    InstanceFailed,
    Reply,
    error_message,
    padded_samples,
    stream_reply,
    verbose_reply,
    wav_bytes,
    word_ids,
)
from engine.asr.timestamps import TimedSpan
from engine.asr.transcriber import DecodeRequest, Priority, TranscriberState, Transcript
from engine.asr.windows import (
    SAMPLE_RATE,
    WindowStats,
    encoder_positions,
    fall_back,
    loop_reason,
    max_tokens_for,
)
from engine.config import TranscriberConfig
from engine.errors import EngineError, EngineNotReady

log = logging.getLogger(__name__)

TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
TRANSLATIONS_PATH = "/v1/audio/translations"  # a request whose task is "translate": vLLM's translation endpoint
_MAX_CONTEXT_CHARS = 400  # as in process: keeps the context well inside Whisper's 448-token decoder window
# Attempts one decode may make per instance: an instance whose /health passes while every decode fails (a broken
# model) would otherwise take the request back after each probe, forever.
_ATTEMPTS_PER_INSTANCE = 2


class RemoteTranscriber:
    """``Transcriber`` on ``vllm serve`` instances. States: NEW -> LOADING -> READY <-> FAILED (no instance up for
    ``down_grace_s``) -> CLOSED."""

    device = "remote"

    def __init__(self, config: TranscriberConfig) -> None:
        self.config = config
        self.remote = config.remote
        self.pool = InstancePool(config.asr_urls)  # raises ValueError for a malformed URL
        self.name = config.model or "remote"
        self.window_policy = config.window_policy()
        self.windows = WindowStats()
        self.resent = 0  # requests sent again to another instance after theirs failed
        self._state = TranscriberState.NEW
        self._detail = ""
        self._client: httpx.AsyncClient | None = None
        self._probes: list[asyncio.Task[None]] = []
        self._inflight: dict[str, Priority] = {}
        self._warm_costs: dict[float, float] = {}

    # ---- lifecycle ------------------------------------------------------------------------------------------
    @property
    def warm_costs(self) -> dict[float, float]:
        """The fastest instance's warm-up decode in each window (s). Those are each instance's first decodes in
        their shapes, slower than the rest: a cautious start, until the engine has measured live decodes."""
        return dict(self._warm_costs)

    @property
    def state(self) -> TranscriberState:
        if self._state is TranscriberState.READY and self.pool.all_down_s() >= self.remote.down_grace_s:
            return TranscriberState.FAILED
        return self._state

    @property
    def detail(self) -> str:
        state = self.state
        if state is TranscriberState.FAILED and self._state is TranscriberState.READY:
            return f"no speech recognizer instance is reachable: {self.pool.describe()}"
        if state is TranscriberState.LOADING:
            return f"waiting for a speech recognizer instance: {self.pool.describe()}"
        return self._detail

    def load(self) -> dict[str, int]:
        values = list(self._inflight.values())
        return {
            "final": values.count(Priority.FINAL),
            "partial": values.count(Priority.PARTIAL),
            "background": values.count(Priority.BACKGROUND),
        }

    def stats(self) -> dict[str, Any]:
        return {
            "window_mode": "stock" if self.window_policy.stock else "fit",
            "windows": self.windows.as_list(),
            "instances": [i.as_dict() for i in self.pool.instances],
            "resent": self.resent,
        }

    async def start(self) -> None:
        """Probe every instance; READY once one is up (and warmed up). Raises ``EngineNotReady`` when none is up
        within ``start_timeout_s``."""
        if self._state is not TranscriberState.NEW:
            raise EngineNotReady(self._state.value, "start() may be called once")
        self._state = TranscriberState.LOADING
        r = self.remote
        # trust_env=False: no proxy from the environment between this server and its recognizers.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(r.request_timeout_s, connect=r.connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            trust_env=False,
        )
        self._probes = [
            asyncio.create_task(self._probe_loop(i), name=f"asr-probe {i.url}") for i in self.pool.instances
        ]
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(r.start_timeout_s):
                while not self.pool.up:
                    await self.pool.changed.wait()
        except TimeoutError:
            self._state = TranscriberState.FAILED
            self._detail = (
                f"no speech recognizer instance came up within {r.start_timeout_s:g} s: {self.pool.describe()}"
            )
            await self._stop_probes()
            raise EngineNotReady("failed", self._detail) from None
        except asyncio.CancelledError:
            self._state = TranscriberState.FAILED
            self._detail = "start cancelled"
            await self.close()
            raise
        first = self.pool.up[0]
        self.name = self.config.model or first.model or first.url
        self._state = TranscriberState.READY
        log.info("recognizer %s ready on %s in %.1f s", self.name, first.url, time.monotonic() - t0)

    async def close(self) -> None:
        if self._state is TranscriberState.CLOSED:
            return
        self._state = TranscriberState.CLOSED
        await self._stop_probes()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _stop_probes(self) -> None:
        for task in self._probes:
            task.cancel()
        await asyncio.gather(*self._probes, return_exceptions=True)
        self._probes = []

    # ---- health ---------------------------------------------------------------------------------------------
    async def _probe_loop(self, instance: Instance) -> None:
        """``GET /health`` every ``health_interval_s``: an UP instance that fails goes DOWN; one that answers again
        is asked for its model, warmed up, and goes UP."""
        while True:
            try:
                await self._probe(instance)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a probe never dies: the instance just stays (or goes) DOWN
                self._take_out(instance, _describe(exc))
            await asyncio.sleep(self.remote.health_interval_s)

    async def _probe(self, instance: Instance) -> None:
        client = self._require_client()
        try:
            reply = await client.get(instance.url + "/health", timeout=self.remote.health_timeout_s)
        except httpx.HTTPError as exc:
            self._take_out(instance, _describe(exc))
            return
        if reply.status_code != 200:
            self._take_out(instance, f"GET /health answered {reply.status_code}")
            return
        if instance.state is InstanceState.UP:
            return
        models = await client.get(instance.url + "/v1/models", timeout=self.remote.health_timeout_s)
        models.raise_for_status()
        data = models.json().get("data") or []
        if not data:
            raise InstanceFailed("GET /v1/models lists no model")
        instance.model = str(data[0].get("id", ""))
        if self.remote.warm_up:
            await self._warm_up(instance)
        self.pool.mark_up(instance)
        log.info("recognizer instance %s up (model %s)", instance.url, instance.model)

    async def _warm_up(self, instance: Instance) -> None:
        """One short decode in each window before the instance takes requests: vLLM's first decode in a new
        encoder shape is several times slower than the rest, and a speaker should not pay for it. Only the windows
        of this recognizer's policy: the stock one decodes in Whisper's full window alone."""
        tone = (0.05 * np.sin(np.arange(SAMPLE_RATE) * 2 * np.pi * 220 / SAMPLE_RATE)).astype(np.float32)
        request = DecodeRequest("warm-up", tone, Priority.FINAL)
        for window in self.window_policy.buckets_s:
            t0 = time.monotonic()
            await self._post(instance, request, window, max_tokens=8, stop_on_loop=False)
            took = time.monotonic() - t0
            self._warm_costs[window] = min(took, self._warm_costs.get(window, took))

    def _take_out(self, instance: Instance, error: str) -> None:
        if self.pool.mark_down(instance, error):
            log.warning(
                "recognizer instance %s down: %s (%d in flight go elsewhere)", instance.url, error, instance.inflight
            )

    def _require_client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise EngineNotReady(self._state.value, "not started")
        return self._client

    # ---- decoding -------------------------------------------------------------------------------------------
    async def transcribe(self, request: DecodeRequest) -> Transcript:
        """Decode in the smallest window that fits; a decode that loops is redone in the next larger window, up to
        Whisper's 30 s, whose output is returned as it is (the session's guard judges it)."""
        state = self.state
        if state is not TranscriberState.READY:
            raise EngineNotReady(state.value, self.detail)
        policy = self.window_policy
        audio_s = request.audio.size / SAMPLE_RATE
        window = policy.window_for(audio_s)
        t0 = time.monotonic()
        fallbacks = 0
        self._inflight[request.request_id] = request.priority
        try:
            while True:
                t1 = time.monotonic()
                larger = policy.next_window(window)
                reply = await self._decode(
                    request, window, max_tokens_for(audio_s, self.config.max_tokens), stop_on_loop=larger is not None
                )
                words = word_ids(reply.text)
                reason = loop_reason(words, reply.text, reply.finish_reason == "length")
                self.windows.record(
                    window, time.monotonic() - t1, reply.tokens, fell_back=reason is not None and larger is not None
                )
                if reason is None or larger is None:
                    break
                window = fall_back(request.request_id, window, reason, larger)
                fallbacks += 1
        finally:
            self._inflight.pop(request.request_id, None)
        avg = 0.0 if reply.avg_logprob is None else reply.avg_logprob
        spans = tuple(s for s in reply.spans if s.start_s < audio_s)
        spans = tuple(TimedSpan(s.start_s, min(s.end_s, audio_s), s.text) for s in spans)
        return Transcript(
            strip_nonspeech(reply.text),
            reply.language or request.language,
            avg,
            reply.tokens,
            time.monotonic() - t0,
            window,
            encoder_positions(window),
            fallbacks,
            spans,
        )

    async def _decode(self, request: DecodeRequest, window_s: float, max_tokens: int, stop_on_loop: bool) -> Reply:
        """One decode on the least loaded instance; sent again to another when its instance fails, until none is
        left for ``down_grace_s``, or until it failed ``_ATTEMPTS_PER_INSTANCE`` times per instance (then
        ``EngineNotReady``)."""
        errors: list[str] = []
        while True:
            instance = await self._instance()
            instance.inflight += 1
            attempt = asyncio.create_task(
                self._post(instance, request, window_s, max_tokens, stop_on_loop),
                name=f"{request.request_id}@{instance.url}",
            )
            down = asyncio.create_task(instance.went_down.wait())
            try:
                await asyncio.wait((attempt, down), return_when=asyncio.FIRST_COMPLETED)
                if attempt.done():
                    reply = attempt.result()  # InstanceFailed, EngineError or the reply
                    instance.decodes += 1
                    return reply
                error = instance.error or "went down"
            except InstanceFailed as exc:
                error = str(exc)
                self._take_out(instance, error)
            finally:
                instance.inflight -= 1
                for task in (attempt, down):
                    task.cancel()  # closing the connection makes vLLM abort the request
                await asyncio.gather(attempt, down, return_exceptions=True)
            errors.append(f"{instance.url}: {error}")
            if len(errors) >= _ATTEMPTS_PER_INSTANCE * len(self.pool.instances):
                # Not a bad request: the recognizer cannot serve (the session tells its client so).
                raise EngineNotReady(
                    "unavailable",
                    f"request {request.request_id} failed on every recognizer "
                    f"instance: {'; '.join(errors[-len(self.pool.instances) :])}",
                )
            self.resent += 1
            log.info("request %s failed on %s (%s): sending it again", request.request_id, instance.url, error)

    async def _instance(self) -> Instance:
        """The least loaded UP instance, waiting for one to come back while the grace period lasts."""
        while True:
            instance = self.pool.pick()
            if instance is not None:
                return instance
            left = self.remote.down_grace_s - self.pool.all_down_s()
            if left <= 0 or self._state is not TranscriberState.READY:
                raise EngineNotReady("failed", f"no speech recognizer instance is reachable: {self.pool.describe()}")
            try:
                async with asyncio.timeout(left):
                    await self.pool.changed.wait()
            except TimeoutError:
                pass

    async def _post(
        self, instance: Instance, request: DecodeRequest, window_s: float, max_tokens: int, stop_on_loop: bool
    ) -> Reply:
        """One ``POST /v1/audio/transcriptions`` to ``instance``. Raises ``InstanceFailed`` for what is the
        instance's fault (network, 5xx, 404, timeout, an error in the stream), ``EngineError`` for a request the
        instance refuses (4xx)."""
        client = self._require_client()
        context = " ".join(request.context.split())[-_MAX_CONTEXT_CHARS:]
        form: dict[str, str] = {
            "model": instance.model,
            "temperature": f"{request.temperature:g}",
            "max_completion_tokens": str(max_tokens),
        }
        if request.language:
            form["language"] = request.language
        if context:
            form["prompt"] = context
        timed = request.timestamps
        if timed:
            form["response_format"] = "verbose_json"  # timestamp tokens; cannot stream
        else:
            form.update(response_format="json", stream="true", stream_include_usage="true")
        audio = wav_bytes(request.audio, padded_samples(window_s))
        files = {"file": ("segment.wav", audio, "audio/wav")}
        try:
            path = TRANSLATIONS_PATH if request.task == "translate" else TRANSCRIPTIONS_PATH
            async with client.stream("POST", instance.url + path, data=form, files=files) as reply:
                if reply.status_code != 200:
                    body = (await reply.aread()).decode("utf-8", "replace")
                    message = error_message(body)
                    if reply.status_code >= 500 or reply.status_code == 404:
                        raise InstanceFailed(f"{reply.status_code} {message}")
                    raise EngineError(
                        f"recognizer at {instance.url} refused the request: {reply.status_code} {message}"
                    )
                if timed:
                    return verbose_reply(json.loads(await reply.aread()), request.language)
                return await stream_reply(reply.aiter_lines(), stop_on_loop)
        except httpx.HTTPError as exc:
            raise InstanceFailed(_describe(exc)) from exc
        except (ValueError, KeyError, TypeError) as exc:  # a body that is not what vLLM sends
            raise InstanceFailed(f"unreadable answer: {exc}") from exc


def _describe(exc: BaseException) -> str:
    """A short reason for logs and error details: ``ConnectError: [Errno 111] Connection refused``."""
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text
