"""The serialized baseline: the decoding pattern of FunASR's realtime service and the per-session streaming
servers built on Qwen3-ASR, run through the same model, VAD and endpointer as the real engine.

What it models, exactly:

- **One decode at a time in the whole server.** ``SerializedTranscriber`` wraps the shared recognizer in a
  first-come-first-served lock: no two requests run together, so nothing is batched across sessions, and a
  final waits behind whatever partials were queued before it (no priority).
- **Partials on a fixed timer.** Each session asks for a partial every ``PARTIAL_INTERVAL_S`` (0.48 s, FunASR's
  chunk cadence) of speech whatever the load: the interval does not stretch with the decode time
  (``load_factor=0``), and there is no server-wide cap on partials waiting (``max_inflight`` large), so the
  audio of a queued partial is the audio at the time it was asked for, not the newest audio at the time it runs.
- **Each session's requests one at a time, and every sentence decoded once more at its end.** A session never
  has two partials outstanding (the engine's scheduler keeps that rule for both modes); a segment's final
  replaces its running partial and is always a fresh decode (``reuse_for_final=False``: the real engine instead
  takes a partial that already covered all the speech as the final).

Everything else (Silero VAD batch, endpointing, guard, speakers, WebRTC, the data channel) is the real code, so
the difference measured is the decode policy alone. ``bench/serve.py --mode`` switches between the two at run
time on one loaded model (``apply_mode``).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from engine.asr.transcriber import DecodeRequest, Transcriber, TranscriberState, Transcript
from engine.asr.windows import STOCK_WINDOW, WindowPolicy, WindowStats
from engine.config import EndpointConfig, PartialConfig

if TYPE_CHECKING:
    from engine.asr.align_service import AlignService
    from engine.speakers.turns import TurnConfig
    from engine.stream.engine import CaptionEngine

PARTIAL_INTERVAL_S = 0.48
# engine: the shipped policy (per-request encoder windows); engine-stock: the same with Whisper's 30 s window for
# every request; baseline: serialized, 30 s window; engine-noreuse: the engine without partials reused as finals;
# engine-nostable: the engine without stable words (nothing settles before the lock, nothing is forced into decodes);
# engine-noearly: the engine without the early lock (a sentence waits for the silence schedule whatever its text);
# engine-before: the engine as captions were before they settled: no stable words, no early lock, no partial word
#   held back (its word alignment, then in front of the lock, is not restored: compare with engine-noalign for that);
# engine-p1: the engine with at most one partial in flight across sessions (CPU default: 2);
# engine-noclose: the engine without the closing partial (a pause does not jump the partial queue);
# engine-noalign: the engine with word times from the VAD alone (no cross-attention alignment per locked sentence);
# engine-noconf: the engine without the decoder's word probabilities: any word two partials agree on (and that held)
#   settles, and a partial shows every word it decoded (the held-back word aside).
# engine-nosure: the engine without settling words one decode is sure of (every word waits for two decodes to agree).
# engine-nojoin: the engine with every window not unlike a turn's voice joining it (join_margin 0), as before the
#   windows where two voices overlap were kept out of it.
# engine-close200 / engine-close150 / engine-close300: the closing partial (the one that decodes all of a pause's
#   speech and can lock it) starts 200 / 150 / 300 ms into the pause, whatever the other sessions do (the engine:
#   150 ms while no other session decodes, else 300).
# engine-first240: a segment's first partial once 240 ms of speech is in (the engine: 200 ms; 240 before 2026-11-27).
# engine-jitter4 / engine-nofec: the engine, receiving through aiortc's jitter buffer / without decoding in-band FEC.
# engine-unbounded: the engine with admission, pacing and threads as before it knew its capacity (2026-11-28): every
#   session admitted (the bench server's cap of 256), partials paced by their own decode time alone
#   (``PartialConfig.recognizer_share`` 0), and a CPU recognizer on every core however many sessions speak (the order
#   partials decode in, closing decodes and first words first, is the new one in every mode).
# engine-nopace / engine-threads2: the engine without one of those: partials not paced by their cost and the sessions'
#   shares / the CPU recognizer on every core always (admission by capacity stays).
MODES = ("engine", "engine-stock", "baseline", "engine-noearly",
         "engine-p1", "engine-noclose", "engine-noalign", "engine-noconf", "engine-nosure", "engine-nojoin",
         "engine-close200", "engine-close150", "engine-close300", "engine-first240",
         "engine-jitter4", "engine-nofec", "engine-unbounded", "engine-nopace", "engine-threads2")
# Modes that let every session in (the bench server's fixed cap) rather than as many as the server holds on time.
ADMIT_ALL = ("engine-unbounded",)
# How each mode's partial policy differs from the engine's own.
_PARTIAL_CHANGES: dict[str, dict[str, object]] = {
    "baseline": {"interval_s": PARTIAL_INTERVAL_S, "load_factor": 0.0, "max_inflight": 1024,
                 "closing_after_ms": 0},
    "engine-noclose": {"closing_after_ms": 0},
    "engine-noconf": {"stable_min_prob": 0.0, "show_min_prob": 0.0, "stable_sure_prob": 0.0},
    "engine-nosure": {"stable_sure_prob": 0.0},
    "engine-close200": {"closing_after_ms": 200, "closing_after_alone_ms": 0},
    "engine-close150": {"closing_after_ms": 150, "closing_after_alone_ms": 0},
    "engine-close300": {"closing_after_alone_ms": 0},
    "engine-first240": {"first_after_ms": 240},
    "engine-unbounded": {"recognizer_share": 0.0},
    "engine-nopace": {"recognizer_share": 0.0},
}
# How each mode's endpoint differs from the engine's own (the baseline has no early lock either).
_ENDPOINT_CHANGES: dict[str, dict[str, object]] = {
    "baseline": {"sentence_pause_ms": 0},
    "engine-noearly": {"sentence_pause_ms": 0},
}


class SerializedTranscriber:
    """A ``Transcriber`` that runs the wrapped one's requests one at a time, in arrival order, when ``serialized``.

    With ``serialized`` False it passes every call straight through (the real engine's behaviour).
    """

    def __init__(self, inner: Transcriber) -> None:
        self.inner = inner
        self.name = inner.name
        self.serialized = False
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


def apply_mode(engine: CaptionEngine, transcriber: SerializedTranscriber, mode: str,
               real_partial: PartialConfig, real_max_inflight: int, real_window: WindowPolicy,
               real_aligner: AlignService | None = None, real_endpoint: EndpointConfig | None = None,
               real_turns: TurnConfig | None = None, real_threads: tuple[int, int] | None = None) -> None:
    """Switch the engine between the real decode policy and the serialized baseline. Call with no session live.

    ``real_partial``, ``real_max_inflight``, ``real_window``, ``real_aligner`` and ``real_endpoint`` are the engine's
    own settings,
    read once after ``start``. The baseline and ``engine-stock`` decode every request in Whisper's stock 30 s
    window; ``engine-noalign`` takes word times from the VAD alone (the server's ``--no-word-align``);
    ``engine-nojoin`` lets every window that is not unlike a turn's voice join it (``TurnConfig.join_margin`` 0;
    ``real_turns``: the speaker service's own, which new sessions take their detector from); ``engine-norestart``
    lets a partial that began before a pause run on while the decode of all the speech waits for it
    (``PartialConfig.closing_restarts`` off); ``engine-labelwait`` locks each sentence only once its speaker embedding
    is in (``EngineConfig.lock_before_label`` off);
    ``engine-embedbeside`` starts each sentence's embedding beside its final decode (``embed_after_decode`` off);
    ``engine-unbounded``, ``engine-nopace`` and ``engine-threads2`` undo what made the engine hold its capacity
    (``real_threads``: the engine's own thread counts for one speaker and several; the admission of every session in
    ``engine-unbounded`` is the bench server's, ``ADMIT_ALL``);
    ``engine-jitter4`` is the engine as shipped: the bench server receives its audio through aiortc's jitter buffer
    (four packets held) instead (``app.webrtc.patches.install_audio_receiver``, in ``bench/serve.py``);
    ``engine-nofec``, the same, with lost packets only concealed, never recovered from the next packet's in-band FEC
    copy.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if engine.sessions:
        raise RuntimeError(f"cannot switch the decode mode with {len(engine.sessions)} sessions live")
    baseline = mode == "baseline"
    transcriber.serialized = baseline
    partial = replace(real_partial, **_PARTIAL_CHANGES.get(mode, {}))  # type: ignore[arg-type]
    endpoint = replace(real_endpoint or engine.config.endpoint, **_ENDPOINT_CHANGES.get(mode, {}))  # type: ignore[arg-type]
    engine.config = replace(engine.config, partial=partial, endpoint=endpoint)
    engine.scheduler.max_inflight_partials = {"baseline": partial.max_inflight, "engine-p1": 1}.get(
        mode, real_max_inflight)
    engine.scheduler.partial_decode_ema_s = 0.0
    engine.scheduler.partials_done = 0
    engine.aligner = None if mode == "engine-noalign" else real_aligner
    if real_threads is not None:  # (alone, shared): a CPU recognizer's threads for one speaker and for several
        alone, shared = real_threads
        engine.threads_alone = alone
        engine.threads_shared = alone if mode in ("engine-unbounded", "engine-threads2") else shared
    if engine.speakers is not None and real_turns is not None:
        engine.speakers.turns = replace(real_turns, join_margin=0.0) if mode == "engine-nojoin" else real_turns
    inner: Any = transcriber.inner
    if hasattr(inner, "window_policy"):  # the vLLM recognizer (the fake has no windows)
        inner.window_policy = STOCK_WINDOW if mode in ("baseline", "engine-stock") else real_window
        inner.windows = WindowStats()
