"""The server modes the benches compare, and the serialized baseline's recognizer.

Four modes, each a configuration the bench server (``python -m bench.serve --mode M``) takes at start:

- ``engine``: the server as shipped.
- ``engine-stock``: the same with Whisper's stock 30 s encoder window for every request (``--window stock``).
- ``baseline``: the decoding pattern of FunASR's realtime service and the per-session streaming servers built on
  Qwen3-ASR, on the same model, VAD and endpointer, in the stock window:

  - **One decode at a time in the whole server.** ``SerializedTranscriber`` wraps the recognizer in a
    first-come-first-served lock: no two requests run together, so nothing is batched across sessions, and a final
    waits behind whatever partials were queued before it (no priority).
  - **Partials on a fixed timer.** Each session asks for a partial every ``PARTIAL_INTERVAL_S`` (0.48 s, FunASR's
    chunk cadence) of speech whatever the load: the interval does not stretch with the decode time
    (``load_factor=0``), there is no server-wide cap on partials waiting (``max_inflight`` large), and no partial
    jumps the queue in a pause (``closing_after_ms=0``), so the audio of a queued partial is the audio at the time it
    was asked for, not the newest audio at the time it runs.
  - **No early lock.** A sentence locks after the endpoint's silence schedule whatever its text
    (``sentence_pause_ms=0``).

- ``engine-unbounded``: the server as it was before it knew its capacity: every session admitted
  (``UNBOUNDED_SESSIONS``), partials paced by their own decode time alone (``PartialConfig.recognizer_share`` 0), and
  a CPU recognizer on every core however many sessions speak (``--cpu-threads`` fixed at the core count).

Everything else (Silero VAD batch, endpointing, guard, speakers, WebRTC, the data channel) is the real code, so the
difference measured is the decode policy alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import replace
from typing import Any

from engine.asr.cpu import available_cores
from engine.asr.transcriber import DecodeRequest, Transcriber, TranscriberState, Transcript
from engine.asr.windows import WindowPolicy
from engine.config import EngineConfig, WindowMode

MODES = ("engine", "engine-stock", "baseline", "engine-unbounded")
PARTIAL_INTERVAL_S = 0.48
UNBOUNDED_SESSIONS = 256  # what "every session" means for ``engine-unbounded``
# How each mode's partial policy differs from the engine's own.
_PARTIAL_CHANGES: dict[str, dict[str, Any]] = {
    "baseline": {"interval_s": PARTIAL_INTERVAL_S, "load_factor": 0.0, "max_inflight": 1024, "closing_after_ms": 0},
    "engine-unbounded": {"recognizer_share": 0.0},
}


def check_mode(mode: str) -> str:
    """``mode`` if it is one of ``MODES``; raises ``ValueError`` otherwise."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def mode_config(mode: str, base: EngineConfig) -> EngineConfig:
    """The engine configuration of ``mode``: ``base`` (the server's own, from its flags) with the mode's window,
    partial policy, endpoint and CPU threads. Raises ``ValueError`` for an unknown mode."""
    check_mode(mode)
    transcriber = base.transcriber
    if mode in ("engine-stock", "baseline"):
        transcriber = replace(transcriber, window=WindowMode.STOCK)
    if mode == "engine-unbounded" and not transcriber.cpu_threads:
        transcriber = replace(transcriber, cpu_threads=available_cores())
    endpoint = replace(base.endpoint, sentence_pause_ms=0) if mode == "baseline" else base.endpoint
    return replace(
        base,
        transcriber=transcriber,
        endpoint=endpoint,
        partial=replace(base.partial, **_PARTIAL_CHANGES.get(mode, {})),
    )


def with_settings(base: EngineConfig, settings: list[str]) -> EngineConfig:
    """``base`` with each ``SECTION.FIELD=VALUE`` of ``settings`` applied (e.g. ``partial.interval_s=0.6``), for a
    bench that compares one engine setting side by side without a server flag for it. ``VALUE`` is read as the
    field's present type (bool: ``true``/``false``/``1``/``0``). Raises ``ValueError`` for a malformed setting, an
    unknown section or field, or a value of the wrong type."""
    for item in settings:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ValueError(f"a setting is SECTION.FIELD=VALUE, not {item!r}")
        part = getattr(base, section, None)
        if part is None or not dataclasses.is_dataclass(part) or isinstance(part, type):
            raise ValueError(f"no engine config section {section!r}")
        if name not in {f.name for f in dataclasses.fields(part)}:
            raise ValueError(f"{section} has no field {name!r}")
        changed: dict[str, Any] = {section: replace(part, **{name: _typed(getattr(part, name), value.strip())})}
        base = replace(base, **changed)
    return base


def _typed(present: Any, value: str) -> Any:
    """``value`` read as the type of ``present`` (a setting's present value)."""
    if isinstance(present, bool):
        if value.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"not a bool: {value!r}")
        return value.lower() in ("true", "1")
    if isinstance(present, (int, float)):
        return type(present)(value)
    if isinstance(present, str):
        return value
    raise ValueError(f"a setting now {present!r} cannot be set from the command line")


def mode_max_sessions(mode: str, configured: int | None) -> int | None:
    """The session cap of ``mode`` given the one asked for (None: the server's capacity estimate)."""
    return UNBOUNDED_SESSIONS if check_mode(mode) == "engine-unbounded" and configured is None else configured


class SerializedTranscriber:
    """A ``Transcriber`` around another that times each request (``completed``, for the bench's stats) and, with
    ``serialized`` (the ``baseline`` mode), runs the wrapped one's requests one at a time, in arrival order.

    The engine takes it as its recognizer (``CaptionEngine(config, transcriber=...)``); what the engine asks of a
    recognizer beyond the ``Transcriber`` protocol (window policy, warm-up costs, CPU threads, the checkpoint for word
    alignment) is passed through to the wrapped one.
    """

    def __init__(self, inner: Transcriber, serialized: bool = False) -> None:
        """``serialized``: one request at a time (FIFO); else every call goes straight through."""
        self.inner = inner
        self.name = inner.name
        self.serialized = serialized
        self._lock = asyncio.Lock()  # asyncio.Lock wakes waiters in FIFO order
        self.waited_s = 0.0  # total time requests spent waiting for the lock
        self.completed: list[tuple[int, float]] = []  # (priority, seconds from submit to result), for benches

    @property
    def state(self) -> TranscriberState:
        return self.inner.state

    @property
    def detail(self) -> str:
        return self.inner.detail

    @property
    def device(self) -> str:
        return str(getattr(self.inner, "device", "cpu"))

    @property
    def warm_costs(self) -> dict[float, float]:
        return dict(getattr(self.inner, "warm_costs", {}))

    @property
    def window_policy(self) -> WindowPolicy | None:
        """The wrapped recognizer's window policy (None: it has none): the engine's partial costs follow it."""
        return getattr(self.inner, "window_policy", None)

    @property
    def cpu_threads(self) -> int:
        return int(getattr(self.inner, "cpu_threads", 0))

    async def set_cpu_threads(self, threads: int) -> int:
        setter = getattr(self.inner, "set_cpu_threads", None)
        return int(await setter(threads)) if setter is not None else 0

    @property
    def spec(self) -> Any:
        """The wrapped recognizer's model (the engine aligns words with its local checkpoint)."""
        return getattr(self.inner, "spec", None)

    async def start(self) -> None:
        await self.inner.start()
        self.name = self.inner.name

    async def transcribe(self, request: DecodeRequest) -> Transcript:
        if not self.serialized:
            result = await self.inner.transcribe(request)
        else:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            async with self._lock:
                self.waited_s += loop.time() - t0
                result = await self.inner.transcribe(request)
            # Report the wall time from submit, lock wait included, like the unwrapped recognizer does.
            result = replace(result, decode_s=loop.time() - t0)
        self.completed.append((int(request.priority), result.decode_s))
        return result

    def load(self) -> dict[str, int]:
        return self.inner.load()

    def stats(self) -> dict[str, Any]:
        return self.inner.stats()

    async def close(self) -> None:
        await self.inner.close()
