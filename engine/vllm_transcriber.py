"""The shared recognizer: one in-process vLLM ``AsyncLLM`` (its engine core runs as a child process).

The same code runs on vLLM's CPU build (``pip install .[cpu]``) and on NVIDIA GPUs (``.[gpu]``). Everything slow
about starting it (importing vLLM, converting the embedded weights, spawning the engine core) runs in worker
threads, so the event loop keeps answering while the model loads.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from .config import TranscriberConfig
from .errors import EngineNotReady, ModelError
from .transcriber import DecodeRequest, Priority, TranscriberState, Transcript
from .weights import ModelSpec, resolve_model

log = logging.getLogger(__name__)

_MAX_CONTEXT_CHARS = 400  # keeps <|startofprev|> context well inside Whisper's 448-token decoder window
_WATCH_INTERVAL_S = 1.0


def detect_device(requested: str) -> str:
    """``"auto"`` -> ``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_dtype(cpuinfo: str | None = None) -> str:
    """bfloat16 where the CPU computes it natively (AVX-512 BF16 or AMX), else float32.

    Measured: float16 is ~6x slower than bfloat16 on an AVX-512 BF16 CPU, but on an AVX2-only CPU bfloat16 is
    emulated and float32 decoded Whisper base 3.4x faster (3.1 s vs 10.6 s for a 7.9 s clip).
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    flags = set(cpuinfo.split())
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def decoder_prompt(spec: ModelSpec, language: str | None, context: str) -> str:
    """Whisper's decoder prompt: optional previous-text context, then the task tokens.

    English-only checkpoints take no language or task token. With ``language=None`` a multilingual model writes
    the language token itself (detection), then the task token.
    """
    prefix = ""
    context = " ".join(context.split())[:_MAX_CONTEXT_CHARS]
    if context:
        prefix = "<|startofprev|> " + context
    if not spec.multilingual:
        return prefix + "<|startoftranscript|><|notimestamps|>"
    if language is None:
        return prefix + "<|startoftranscript|>"
    return prefix + f"<|startoftranscript|><|{language}|><|transcribe|><|notimestamps|>"


class VllmTranscriber:
    """``Transcriber`` on vLLM. States: NEW -> LOADING -> READY (-> FAILED if the engine dies) -> CLOSED."""

    def __init__(self, config: TranscriberConfig) -> None:
        self.config = config
        self.name = config.model or "whisper-base"
        self.device = "unknown"
        self.spec: ModelSpec | None = None
        self._llm: Any = None
        self._state = TranscriberState.NEW
        self._detail = ""
        self._inflight: dict[str, Priority] = {}
        self._lang_tokens: dict[int, str] = {}
        self._watch: asyncio.Task[None] | None = None

    @property
    def state(self) -> TranscriberState:
        return self._state

    @property
    def detail(self) -> str:
        return self._detail

    def load(self) -> dict[str, int]:
        values = list(self._inflight.values())
        return {"final": values.count(Priority.FINAL), "partial": values.count(Priority.PARTIAL)}

    async def start(self) -> None:
        if self._state is not TranscriberState.NEW:
            raise EngineNotReady(self._state.value, "start() may be called once")
        self._state = TranscriberState.LOADING
        t0 = time.monotonic()
        try:
            self.spec = await asyncio.to_thread(resolve_model, self.config.model, self._cache_dir())
            self.name = self.spec.name
            self.device = await asyncio.to_thread(detect_device, self.config.device)
            self._llm = await asyncio.to_thread(self._build_engine, self.spec, self.device)
            self._lang_tokens = await asyncio.to_thread(self._language_tokens)
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
            await self._warm_up()
        except Exception as exc:
            self._state = TranscriberState.FAILED
            self._detail = f"warm-up decode failed: {exc}"
            raise EngineNotReady("failed", self._detail) from exc
        self._watch = asyncio.create_task(self._watch_engine(), name="vllm-watch")
        log.info("recognizer %s ready on %s in %.1f s", self.name, self.device, time.monotonic() - t0)

    async def _warm_up(self) -> None:
        """Decode a little audio twice before anyone waits for it: vLLM's first decodes after start are several
        times slower than the rest, and the first speaker should not pay for that."""
        import numpy as np

        tone = (0.05 * np.sin(np.arange(16_000) * 2 * np.pi * 220 / 16_000)).astype(np.float32)
        for i in range(2):
            await self.transcribe(DecodeRequest(f"warm-up-{i}", tone, Priority.FINAL))

    def _cache_dir(self) -> Path | None:
        return Path(self.config.cache_dir) if self.config.cache_dir else None

    def _build_engine(self, spec: ModelSpec, device: str) -> Any:
        """Runs in a worker thread: import vLLM and spawn its engine core (a minute or more on CPU)."""
        # vLLM logs to stdout by default, where `python -m engine` prints its JSON lines; its INFO/WARNING output
        # (hundreds of lines per start, e.g. one per float16 tensor cast to bfloat16) buries ours.
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        if device == "cpu":
            # Measured on 2-core machines: 1 GiB KV cache is plenty for Whisper; one process for engine core and
            # worker saves ~0.8 GB.
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        importlib.import_module("vllm")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        kwargs: dict[str, Any] = dict(
            model=spec.path,
            max_model_len=448,
            max_num_seqs=self.config.max_num_seqs,
            limit_mm_per_prompt={"audio": 1},
            scheduling_policy="priority",
            disable_log_stats=True,
        )
        dtype = self.config.dtype
        if device == "cpu":
            kwargs.update(dtype=cpu_dtype() if dtype == "auto" else dtype, enforce_eager=True)
        else:
            kwargs.update(dtype=dtype, gpu_memory_utilization=self.config.gpu_memory_utilization)
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

    def _language_tokens(self) -> dict[int, str]:
        """Token id -> language code, to report what a multilingual model detected."""
        tok = getattr(self._llm, "tokenizer", None)
        if tok is None:
            return {}
        out: dict[int, str] = {}
        for token, token_id in tok.get_vocab().items():
            code = token[2:-2]
            if token.startswith("<|") and token.endswith("|>") and 2 <= len(code) <= 3 and code.isalpha() \
                    and code.islower():
                out[token_id] = code
        return out

    async def _watch_engine(self) -> None:
        """Notice the death of the engine core process and make it visible as FAILED."""
        while self._state is TranscriberState.READY:
            await asyncio.sleep(_WATCH_INTERVAL_S)
            if self._llm is not None and self._llm.errored:
                self._state = TranscriberState.FAILED
                self._detail = f"engine process died: {self._llm.dead_error}"
                log.error("recognizer %s", self._detail)

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        if self._state is not TranscriberState.READY or self.spec is None:
            raise EngineNotReady(self._state.value, self._detail)
        from vllm import SamplingParams
        from vllm.v1.engine.exceptions import EngineDeadError

        params = SamplingParams(temperature=0.0, max_tokens=self.config.max_tokens, logprobs=0,
                                skip_special_tokens=True)
        prompt = {
            "encoder_prompt": {"prompt": "", "multi_modal_data": {"audio": (request.audio, 16_000)}},
            "decoder_prompt": decoder_prompt(self.spec, request.language, request.context),
        }
        t0 = time.monotonic()
        self._inflight[request.request_id] = request.priority
        final = None
        try:
            async for out in self._llm.generate(prompt, params, request.request_id, priority=int(request.priority)):
                final = out
        except EngineDeadError as exc:
            self._state = TranscriberState.FAILED
            self._detail = f"engine process died: {exc}"
            raise EngineNotReady("failed", self._detail) from exc
        finally:
            self._inflight.pop(request.request_id, None)
        if final is None or not final.outputs:
            return Transcript("", request.language, 0.0, 0, time.monotonic() - t0)
        completion = final.outputs[0]
        n = len(completion.token_ids)
        avg = (completion.cumulative_logprob or 0.0) / n if n else 0.0
        language = request.language
        if language is None and n:
            language = self._lang_tokens.get(completion.token_ids[0])
        return Transcript(completion.text.strip(), language, avg, n, time.monotonic() - t0)

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
            # shutdown() joins the engine core (about 5 s): keep it off the event loop.
            await asyncio.to_thread(llm.shutdown)
            llm.shutdown = lambda *a, **k: None  # its __del__ would shut down again at interpreter exit
