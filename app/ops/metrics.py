"""Prometheus metrics: ``GET /metrics`` in the text exposition format.

Each app has its own ``CollectorRegistry`` (``ServerMetrics.registry``, under ``keys.METRICS``), never the
process-wide default one: several apps may live in one process (tests), and each counts only its own work.

Two kinds of numbers, collected two ways:

- **Now** (gauges: live sessions, room viewers, rooms in memory, recognizer requests by priority, the engine's
  state, unsaved room events, the rooms' outputs by state) are read from the live objects when scraped
  (``_LiveState``), so nothing has to keep them up to date. Counts the objects keep themselves (store errors,
  viewers cut off) are exposed the same way.
- **Events** (counters and histograms: audio received and shed, packets lost or late and the audio concealed for
  them, decodes by kind and encoder window, window fallbacks, first-text and lock latency) are recorded at the one
  place where each happens: the engine reports its own through ``engine.EngineObserver`` (``ServerMetrics`` is one,
  added to ``CaptionEngine.observers``); the WebRTC ingest reports the audio it sheds, and each stream's receiver
  what it loses (``app.webrtc.jitter.LossObserver``); the rooms' outputs each caption they deliver and each
  failed send (``output_sent``, ``output_send_error``).

A scrape only reads counters and walks a few dicts on the event loop (no model call, no I/O): measured with six
sessions streaming on a busy 2-core machine, 2 ms median per request, HTTP included.

Access (``--metrics``): "token" (the default) asks for the server's ``--auth-token`` as ``Authorization: Bearer``
when one is set (the numbers say how busy the server is and how many rooms it holds) and is open otherwise; "open"
is always open; "off" answers 404.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from engine import DECODE_KINDS, CaptionEngine, EngineObserver, EngineState

from ..rooms import RoomRegistry, TranscriptStore
from .admission import Admission, RefusalReason

PREFIX = "live_captions"

# Decode wall time (submit to result): a fraction of a second for a short window on a calm CPU, many seconds when the
# machine is loaded (docs/benchmarks.md); the buckets span both.
DECODE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
# First text of a sentence: the first partial is asked for once ``PartialConfig.first_after_ms`` of speech is in,
# and takes a decode.
FIRST_TEXT_BUCKETS_S = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0)
# Lock: the endpoint's silence wait (0.1-2 s by sentence length, presets) plus the final decode, if not reused.
LOCK_BUCKETS_S = (0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0, 20.0, 30.0)
# Lock lag: from a segment's close to its lock; ~0 when the closing partial became the final, a decode's time when not.
LOCK_LAG_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class ServerMetrics(EngineObserver):
    """The app's registry and the event metrics. ``create_app`` makes one per app and points it at the app's
    objects as they come up: the rooms and the store (``rooms``, ``store``), the engine (``watch_engine``: its
    sessions and queue are read at scrape time, its events heard until ``unwatch_engine``)."""

    def __init__(self) -> None:
        self.engine: CaptionEngine | None = None
        self.admission: Admission | None = None  # live sessions' admission: its limit and refusals
        self.rooms: RoomRegistry | None = None
        self.store: TranscriptStore | None = None
        # The rooms' outputs now: (kind, state) -> how many (``app.outputs``' registry, via ``watch_outputs``).
        self.outputs: Callable[[], Mapping[tuple[str, str], int]] | None = None
        self.registry = CollectorRegistry()
        r = self.registry
        self._audio_in = Counter(
            f"{PREFIX}_audio_received_seconds",
            "Audio fed to caption sessions, in seconds; kind: live (a stream) "
            "or file (an upload, fed as fast as it is transcribed)",
            ["kind"],
            registry=r,
        )
        self._audio_shed = Counter(
            f"{PREFIX}_audio_shed_seconds",
            "Stream audio skipped because the server fell behind (a stream's "
            "receive queue stayed over the lag limit), in seconds",
            registry=r,
        )
        self._packets_lost = Counter(
            f"{PREFIX}_audio_packets_lost",
            "RTP audio packets of WebRTC and WHIP streams that never arrived (given "
            "up once three later packets were in)",
            registry=r,
        )
        self._packets_late = Counter(
            f"{PREFIX}_audio_packets_late",
            "RTP audio packets that arrived after their audio had been played around, or twice, and were dropped",
            registry=r,
        )
        self._concealed = Counter(
            f"{PREFIX}_audio_concealed_seconds",
            "Audio filled in for lost packets, in seconds: recovered from the "
            "in-band FEC copy in the next packet, or concealed (a stream keeps its length; words there may be "
            "misheard)",
            registry=r,
        )
        self._decode = Histogram(
            f"{PREFIX}_decode_seconds",
            "Wall time of each finished recognizer decode, submit to result (queueing "
            "and window fallbacks included), by kind (partial, final, background) and encoder window (seconds)",
            ["kind", "window_s"],
            buckets=DECODE_BUCKETS_S,
            registry=r,
        )
        self._fallbacks = Counter(
            f"{PREFIX}_decode_fallbacks",
            "Decodes thrown away as loops and redone in a larger encoder window, by kind",
            ["kind"],
            registry=r,
        )
        self._first_text = Histogram(
            f"{PREFIX}_first_partial_latency_seconds",
            "From a live sentence's first speech reaching the server "
            "to its first text sent (a partial, or the locked sentence if no partial showed)",
            buckets=FIRST_TEXT_BUCKETS_S,
            registry=r,
        )
        self._lock = Histogram(
            f"{PREFIX}_lock_latency_seconds",
            "From a live sentence's last speech reaching the server to the "
            "sentence locked (the endpoint's silence wait and the final decode)",
            buckets=LOCK_BUCKETS_S,
            registry=r,
        )
        self._lock_lag = Histogram(
            f"{PREFIX}_lock_lag_seconds",
            "From the audio that closed a live sentence's segment reaching the server to "
            "the sentence locked: what its final decode added to the endpoint's silence (how late finals run)",
            buckets=LOCK_LAG_BUCKETS_S,
            registry=r,
        )
        self._output_sent = Counter(
            f"{PREFIX}_output_captions_sent",
            "Captions the rooms' outputs delivered to their destinations (YouTube "
            "Live's caption ingestion, OBS), by kind",
            ["kind"],
            registry=r,
        )
        self._output_errors = Counter(
            f"{PREFIX}_output_send_errors",
            "Caption sends of the rooms' outputs that failed (each retry counts; a "
            "permanent refusal stops the output), by kind",
            ["kind"],
            registry=r,
        )
        for kind in DECODE_KINDS:  # every kind shows from the first scrape, at zero
            self._fallbacks.labels(kind)
        for kind in ("live", "file"):
            self._audio_in.labels(kind)
        r.register(_LiveState(self))

    def watch_engine(self, engine: CaptionEngine) -> None:
        """Read ``engine``'s sessions and queue when scraped, and hear its events (until ``unwatch_engine``)."""
        self.engine = engine
        engine.observers.add(self)

    def unwatch_engine(self) -> None:
        """Stop hearing the engine's events (a shared engine outlives this app); safe to call twice."""
        if self.engine is not None:
            self.engine.observers.remove(self)

    def watch_outputs(self, counts: Callable[[], Mapping[tuple[str, str], int]], kinds: Iterable[str]) -> None:
        """Read the rooms' outputs by ``(kind, state)`` from ``counts`` when scraped; every one of ``kinds`` shows in
        the counters from the first scrape, at zero."""
        self.outputs = counts
        for kind in kinds:
            self._output_sent.labels(kind)
            self._output_errors.labels(kind)

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """The registry in the format ``accept`` asks for (Prometheus text, or OpenMetrics): (body, content type)."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type

    # ---- engine events (engine.EngineObserver) -------------------------------------------------------------
    def audio_received(self, seconds: float, background: bool) -> None:
        self._audio_in.labels("file" if background else "live").inc(seconds)

    def decoded(self, kind: str, window_s: float, decode_s: float, fallbacks: int) -> None:
        self._decode.labels(kind, f"{window_s:g}").observe(decode_s)
        if fallbacks:
            self._fallbacks.labels(kind).inc(fallbacks)

    def first_text(self, latency_s: float) -> None:
        self._first_text.observe(latency_s)

    def locked(self, latency_s: float) -> None:
        self._lock.observe(latency_s)

    def lock_lag(self, seconds: float, speech_s: float) -> None:
        self._lock_lag.observe(seconds)

    # ---- transport events -----------------------------------------------------------------------------------
    def shed(self, seconds: float) -> None:
        """The WebRTC ingest skipped ``seconds`` of a stream's audio to catch up."""
        self._audio_shed.inc(seconds)

    def audio_packets_lost(self, packets: int) -> None:
        self._packets_lost.inc(packets)

    def audio_packets_late(self, packets: int) -> None:
        self._packets_late.inc(packets)

    def audio_concealed(self, seconds: float) -> None:
        self._concealed.inc(seconds)

    def output_sent(self, kind: str) -> None:
        """An output of ``kind`` delivered a caption."""
        self._output_sent.labels(kind).inc()

    def output_send_error(self, kind: str) -> None:
        """A send of an output of ``kind`` failed."""
        self._output_errors.labels(kind).inc()


def _gauge(name: str, doc: str, *labels: str) -> Callable[[], GaugeMetricFamily]:
    """What makes the gauge family ``live_captions_<name>`` (a ``_Families`` field: a new one each scrape)."""
    return lambda: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels) or None)


def _counter(name: str, doc: str, *labels: str) -> Callable[[], CounterMetricFamily]:
    """What makes the counter family ``live_captions_<name>`` (a ``_Families`` field: a new one each scrape)."""
    return lambda: CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels) or None)


@dataclass
class _Families:
    """One scrape's families of ``_LiveState``, empty until filled."""

    sessions: GaugeMetricFamily = field(
        default_factory=_gauge(
            "sessions_active",
            "Caption sessions open now; kind: live (a stream: WebRTC, WHIP, FunASR WebSocket) or file "
            "(an upload being transcribed)",
            "kind",
        )
    )
    voices: GaugeMetricFamily = field(
        default_factory=_gauge(
            "voices_active",
            "Live sessions talking now (the others are connected and silent: a meeting's other microphones)",
        )
    )
    connections: GaugeMetricFamily = field(
        default_factory=_gauge(
            "capacity_connections",
            "Live sessions the server estimates it holds connected, talking or not (a silent "
            "microphone costs its VAD and WebRTC only)",
        )
    )
    viewers: GaugeMetricFamily = field(
        default_factory=_gauge("room_viewers", "Room viewers connected now (event streams)")
    )
    rooms: GaugeMetricFamily = field(
        default_factory=_gauge(
            "rooms_in_memory", "Rooms held in memory now (in use, or idle for less than the idle time)"
        )
    )
    unsaved: GaugeMetricFamily = field(
        default_factory=_gauge(
            "room_events_unsaved",
            "Room events kept in memory because the transcript store refused them (written when it recovers)",
        )
    )
    dropped: CounterMetricFamily = field(
        default_factory=_counter("room_viewers_dropped", "Room viewers cut off for falling too far behind")
    )
    corrections: CounterMetricFamily = field(
        default_factory=_counter(
            "room_corrections", "Editors' corrections committed (edits, deletions, splits, speaker names)"
        )
    )
    held: GaugeMetricFamily = field(
        default_factory=_gauge(
            "room_events_held", "Room events waiting for their room's hold-back delay before its audience gets them"
        )
    )
    requests: GaugeMetricFamily = field(
        default_factory=_gauge(
            "recognizer_requests", "Decode requests in the recognizer now (running or queued), by priority", "priority"
        )
    )
    state: GaugeMetricFamily = field(
        default_factory=_gauge(
            "engine_state",
            "1 for the speech engine's current state (new, loading, ready, failed, closed), 0 for the others",
            "state",
        )
    )
    capacity: GaugeMetricFamily = field(
        default_factory=_gauge(
            "capacity_sessions",
            "Live sessions the server estimates can talk at once on time (a warm-up measurement, "
            "then the measured decode load); source: warm-up or measured",
            "source",
        )
    )
    limit: GaugeMetricFamily = field(
        default_factory=_gauge(
            "max_sessions",
            "Live sessions let in at most now: the capacity estimate (--max-sessions auto) or the operator's number",
        )
    )
    headroom: GaugeMetricFamily = field(
        default_factory=_gauge(
            "capacity_headroom_sessions",
            "Live sessions the server would still let in now (0 while its finals run late)",
        )
    )
    busy: GaugeMetricFamily = field(
        default_factory=_gauge("recognizer_busy_ratio", "Share of the last ~10 s the recognizer spent decoding (0-1)")
    )
    late: GaugeMetricFamily = field(
        default_factory=_gauge(
            "finals_late_seconds",
            "How late finals run: p90 of the last 30 s of lock lag (close to lock); past the capacity's bound (1 s by "
            "default), with several sessions on a busy recognizer, new live sessions are refused",
        )
    )
    refused: CounterMetricFamily = field(
        default_factory=_counter(
            "sessions_refused",
            "Live sessions refused (503/429), by reason: loading (the model), engine_failed, full "
            "(the server's capacity), limit (--max-sessions), shutting_down; all but engine_failed with Retry-After",
            "reason",
        )
    )
    outputs: GaugeMetricFamily = field(
        default_factory=_gauge(
            "room_outputs",
            "The rooms' outputs (captions out to YouTube Live, OBS) by kind and state: connected, sending, "
            "retrying, failed, stopped",
            "kind",
            "state",
        )
    )
    translated: CounterMetricFamily = field(
        default_factory=_counter(
            "translations", "Sentence translations committed (one sentence into one room language)"
        )
    )
    translation_failures: CounterMetricFamily = field(
        default_factory=_counter(
            "translation_failures", "Translation engine calls that failed (each retried after 5, 30 and 120 s)"
        )
    )
    translations_missing: CounterMetricFamily = field(
        default_factory=_counter(
            "translations_missing",
            "Sentences committed in their source text because their translation failed (until a retry translates them)",
        )
    )
    translations_dropped: CounterMetricFamily = field(
        default_factory=_counter(
            "translations_dropped", "Sentences left untranslated because a room's translation queue was full"
        )
    )
    translations_waiting: GaugeMetricFamily = field(
        default_factory=_gauge(
            "translations_waiting", "Sentences waiting for their translation now, over every room and language"
        )
    )
    store_errors: CounterMetricFamily = field(
        default_factory=_counter(
            "store_errors",
            "Transcript store operations that failed (a full or unwritable disk); room events are kept in "
            "memory and retried meanwhile",
        )
    )

    def all(self) -> Iterator[Metric]:
        return iter([getattr(self, f.name) for f in fields(self)])


class _LiveState(Collector):
    """Gauges (and self-kept counts) read from the app's live objects at scrape time: a few dict walks, no call
    into the model. Before the app has started (no engine or store yet) those families come out empty."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterator[Metric]:
        return _Families().all()

    def collect(self) -> Iterator[Metric]:
        f = _Families()
        engine = self._metrics.engine
        if engine is not None:
            live = sum(1 for s in list(engine.sessions.values()) if not s.options.background)
            f.sessions.add_metric(["live"], live)
            f.sessions.add_metric(["file"], len(engine.sessions) - live)
            f.voices.add_metric([], engine.voices_active if engine.state is EngineState.READY else 0)
            for priority, n in engine.load().items():
                f.requests.add_metric([priority], n)
            now = engine.state
            for value in EngineState:
                f.state.add_metric([value.value], 1 if value is now else 0)
            if now is EngineState.READY:
                self._capacity(f, engine)
        registry = self._metrics.rooms
        if registry is not None:
            counts = registry.snapshot_stats()
            f.rooms.add_metric([], counts["in_memory"])
            f.viewers.add_metric([], counts["viewers"])
            f.unsaved.add_metric([], counts["unsaved_events"])
            f.dropped.add_metric([], counts["viewers_dropped"])
            f.corrections.add_metric([], counts["corrections"])
            f.held.add_metric([], counts["held_events"])
            translations = counts["translations"]
            f.translated.add_metric([], translations["sentences"])
            f.translation_failures.add_metric([], translations["failures"])
            f.translations_missing.add_metric([], translations["missing"])
            f.translations_dropped.add_metric([], translations["dropped"])
            f.translations_waiting.add_metric([], counts["translations_waiting"])
        outputs = self._metrics.outputs
        if outputs is not None:
            for (kind, state), n in sorted(outputs().items()):
                f.outputs.add_metric([kind, state], n)
        store = self._metrics.store
        if store is not None:
            f.store_errors.add_metric([], store.errors)
        admission = self._metrics.admission
        if admission is not None:
            for reason in RefusalReason:
                f.refused.add_metric([reason.value], admission.refused.get(reason.value, 0))
        return f.all()

    def _capacity(self, f: _Families, engine: CaptionEngine) -> None:
        admission = self._metrics.admission
        estimate = (admission.estimate() if admission is not None else None) or engine.capacity_estimate()
        f.capacity.add_metric([estimate.source], estimate.sessions)
        f.connections.add_metric([], estimate.holds)
        f.busy.add_metric([], estimate.recognizer_busy)
        f.late.add_metric([], estimate.finals_late_s)
        if admission is None:
            return
        limit = estimate.holds if admission.auto else admission.limit or 0
        f.limit.add_metric([], limit)
        f.headroom.add_metric([], 0 if admission.check() is not None else max(0, limit - admission.in_use))
