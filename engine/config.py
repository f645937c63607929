"""Engine configuration: one dataclass per concern, units in field names.

Presets for the endpointer and the encoder window modes live here so that the CLI, the server and the benches name
them the same way. Fields the server exposes as flags declare them here (``engine.settings.setting``: help, flag,
environment variable). The ground floor of the engine: it imports nothing else of it but ``engine.settings``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from engine.settings import member_of, setting, values_of

# Seed 002 section 7, streaming column: (segment speech up to this many ms, silence that closes it in ms).
BALANCED_SCHEDULE: tuple[tuple[int, int], ...] = (
    (5_000, 2_000),
    (10_000, 1_500),
    (15_000, 1_000),
    (20_000, 800),
    (30_000, 800),
    (45_000, 400),
    (60_000, 100),
)
# Quicker locks for live conversation: a short pause already closes a sentence.
LOW_LATENCY_SCHEDULE: tuple[tuple[int, int], ...] = (
    (3_000, 700),
    (8_000, 500),
    (15_000, 400),
    (25_000, 250),
    (60_000, 100),
)


@dataclass(frozen=True)
class VadConfig:
    """Silero VAD decisions with hysteresis: speech starts at ``onset``, continues while above ``offset``."""

    onset: float = 0.5
    offset: float = 0.35
    min_speech_ms: int = 96  # this much consecutive speech opens a segment (ignores clicks)
    max_sessions: int = 256  # rows pre-allocated in the batched state
    # A VAD batch starts at most this often while sessions are live in real time, so that their pushes share one
    # model call (engine.stream.vad_batch); decisions come at most this much later. 0: one call per push. Batching
    # takes a good share off the front end's CPU per live session (docs/benchmarks.md, "Pipeline bench").
    batch_interval_ms: int = 30


@dataclass(frozen=True)
class EndpointConfig:
    """When a segment closes: trailing silence from ``silence_schedule_ms`` by speech so far, or the hard cap."""

    silence_schedule_ms: tuple[tuple[int, int], ...] = BALANCED_SCHEDULE
    tail_silence_ms: int = 100  # silence the schedule falls to past its last row
    max_segment_ms: int = 25_000  # hard cap; Whisper sees at most 30 s, keep room for pre-roll
    preroll_ms: int = 300  # audio kept before speech onset so first syllables survive
    postroll_ms: int = 200  # audio kept after the last speech window
    # A segment whose decode of all its speech ends a sentence (``engine.stream.sentence_end``) closes after this much
    # silence instead of the schedule's: the schedule is the longest wait, for text that stops mid-clause. 0 = off.
    sentence_pause_ms: int = 400

    def silence_for(self, speech_ms: int) -> int:
        """Silence in ms that closes a segment holding ``speech_ms`` of audio so far."""
        for upto_ms, silence_ms in self.silence_schedule_ms:
            if speech_ms <= upto_ms:
                return silence_ms
        return self.tail_silence_ms


class EndpointPreset(StrEnum):
    """A named endpointing setting (``ENDPOINT_PRESETS``): how long a pause closes a sentence."""

    BALANCED = "balanced"
    LOW_LATENCY = "low-latency"


ENDPOINT_PRESETS: dict[EndpointPreset, EndpointConfig] = {
    EndpointPreset.BALANCED: EndpointConfig(),
    EndpointPreset.LOW_LATENCY: EndpointConfig(
        silence_schedule_ms=LOW_LATENCY_SCHEDULE, max_segment_ms=15_000, sentence_pause_ms=300
    ),
}


@dataclass(frozen=True)
class PartialConfig:
    """Re-decoding of the open segment while someone speaks.

    ``interval_s`` is the cadence on an idle engine; under load the effective interval grows with the measured
    partial decode time (``load_factor`` times it), and no new partial starts while a final is waiting.
    """

    interval_s: float = 0.5
    # Partials take at most this share of the recognizer's time, all speaking sessions together, less what finals take
    # now; each session gets an even part of it, at most ``session_share`` (engine.stream.scheduler.partial_share). A
    # partial is due once ``interval_s`` has passed and its expected cost (its window's, measured) fits its session's
    # part: ``interval >= cost / share``. So under load partials thin out evenly across sessions, long sentences (large
    # windows) more than short ones, and finals, outside the budget, keep their time. 0: no pacing by cost (as before
    # 2026-11-28: only ``load_factor`` times a partial's own decode time).
    recognizer_share: float = 0.8
    # ...and one session alone at most this share: a single speaker's long sentences cost less CPU
    # (docs/benchmarks.md, "A full server stays on time"). 0.35 rather than 0.5 (2026-12-04): a tenth fewer decodes
    # and 4-5 points of a core less for one reader, with first words, locks, WER and flicker the same; its text
    # settles ~0.1 s later (docs/benchmarks.md, "A session's share of the recognizer").
    session_share: float = 0.35
    # The first partial of a segment once this much speech is in. 200 rather than 240: first words came sooner at p50
    # with one, three and five sessions and on conversation, for the same WER (docs/benchmarks.md, "The first partial
    # at 200 ms of speech"). 160 was no sooner: the guard drops a decode of less than 200 ms of speech
    # (``GuardConfig.min_speech_ms``).
    first_after_ms: int = 200
    # Once a segment's first words show, its next this many partials come without the interval, on
    # ``min_new_audio_ms`` more audio: a first word decoded from 200 ms of speech is often wrong ("Mr" for "mister",
    # "How" for "Had"), and the partial that puts it right should not wait the interval (docs/benchmarks.md, "First
    # words that are right"). 0: every partial after the first waits the interval.
    early_partials: int = 0
    min_new_audio_ms: int = 180  # don't re-decode for less new audio than this
    load_factor: float = 1.0
    max_inflight: int = 0  # partials running at once across sessions; 0 = auto (CPU 2, GPU 32)
    # Once this much silence follows the open segment's speech, its next partial skips the interval and the queue:
    # it covers all the speech, so it becomes the final, decoded during the endpoint's wait. 0 = off.
    closing_after_ms: int = 300
    # ...and this much while the session is alone (``DecodeScheduler.alone``: no other session asked for a partial
    # in the last 3 s, no final decoding): with the cores to itself the closing partial jumps no queue and holds no
    # one back, and the sentence locks sooner (``bench.sessions``, one session; docs/benchmarks.md). Not for
    # everyone: 150 ms for all made three sessions lock later and five show first words later (a pause between words
    # then restarts partials in a full queue). 0 = always ``closing_after_ms``.
    closing_after_alone_ms: int = 150
    # Stable words: words two consecutive partials of a segment agree on (LocalAgreement-2, the last word of a decode
    # that ended inside speech held back) settle. They are sent once (``Caption.stable``/``stable_words``), never
    # change, and are forced as the start of every later decode of the segment, its final included: a decode then
    # generates only the words after them (the decoder, not the encoder, is most of a long partial's cost).
    # A word settles only once it has held, unchanged, over partials spanning this much audio: the last words said
    # are the ones more audio corrects (measured on noisy speech, docs/benchmarks.md "Captions that settle").
    stable_min_age_s: float = 1.0
    # ...and only if the decoder gave it at least this probability (``Transcript.word_probs``; a recognizer that does
    # not say is trusted): on noisy speech the words two partials agree on wrongly are mostly ones the decoder was
    # unsure of. 0 = off.
    stable_min_prob: float = 0.4
    # ...or at once, without waiting for the next partial, if the decoder gave it at least this probability and
    # ``stable_sure_after`` words follow it in the same partial: words settle sooner for very few more wrong words on
    # read speech (0.95 and 3, against 0.9 and 0.8 with 2: docs/benchmarks.md). 0 = off.
    stable_sure_prob: float = 0.95
    stable_sure_after: int = 3
    # Don't show a tentative word the decoder gave less than this probability, or the words after it, unless the
    # partial before said them too (they wait for the next partial; a segment's first word shows at once): words the
    # decoder guesses are the ones the next partial changes (on noisy speech this halves the tentative words shown
    # that then change, for words shown a little later: docs/benchmarks.md). 0 = off.
    show_min_prob: float = 0.5
    # ...but a segment's first word shows at once, however unsure the decoder was, if it gave it at least this: below
    # it nothing shows, and the next partial comes on more speech without waiting for the interval. Decoding each
    # read and noisy clip's first 200 ms of speech (``bench.first_words``), 16 of 39 first words were wrong
    # (probability p50 0.30, p75 0.36) and 18 right (p25 0.45, p50 0.55): 0.4 keeps 12 of the wrong ones off the
    # screen and holds 4 of the right back a partial (docs/benchmarks.md, "First words that are right"). 0 = the
    # first word always shows.
    first_show_min_prob: float = 0.4


# Whisper's own threshold: text that gzip shrinks more than this repeats itself (``engine.asr.windows``).
MAX_COMPRESSION_RATIO = 2.4


@dataclass(frozen=True)
class GuardConfig:
    """Hallucination guard thresholds (see ``engine.asr.guard``)."""

    min_avg_logprob: float = -1.0  # Whisper's own fallback threshold
    max_compression_ratio: float = MAX_COMPRESSION_RATIO  # repeated text compresses too well
    quiet_dbfs: float = -42.0  # below this a known silence-phrase is dropped
    min_speech_ms: int = 200
    # A translation (``SessionOptions.task``) is judged more leniently on confidence: its tokens are English words
    # for speech in another language, so even a right one is less sure (whisper-base on read Mandarin: -1.6 and -2.0
    # for clean, clear speech); the other checks stand.
    translate_min_avg_logprob: float = -2.5


@dataclass(frozen=True)
class RemoteAsrConfig:
    """Decoding on ``vllm serve`` instances over HTTP (``engine.asr.remote``): timeouts and probing, in seconds."""

    connect_timeout_s: float = 3.0  # a TCP connect slower than this counts as the instance failing
    # Longest wait for the next bytes of a decode (its first token included): beyond it the instance counts as hung
    # and the request goes to another one. Generous: a loaded CPU instance queues decodes for seconds.
    request_timeout_s: float = 60.0
    health_interval_s: float = 2.0  # every instance's GET /health, up or down, this often
    health_timeout_s: float = 5.0
    # With no instance up for this long, the recognizer is FAILED (the engine ends its sessions with the reason);
    # a request meanwhile waits for an instance to come back.
    down_grace_s: float = 10.0
    start_timeout_s: float = 900.0  # start() waits this long for the first instance (vLLM on a CPU: minutes)
    warm_up: bool = True  # decode a tone in every window on each instance as it comes up, before it takes requests


FULL_WINDOW_S = 30.0  # Whisper's own encoder window: 3000 mel frames, 1500 encoder positions


@dataclass(frozen=True)
class WindowPolicy:
    """Which window a request runs in: the smallest of ``buckets_s`` that holds its audio plus a margin of
    ``margin_s`` or ``margin_fraction`` of the audio, whichever is larger.

    ``buckets_s`` ascend and end with ``FULL_WINDOW_S``. A few fixed sizes rather than exact lengths keep the
    shapes the encoder sees (and vLLM's batches) few, and leave every request some silence after its speech, as
    Whisper saw in training.
    """

    buckets_s: tuple[float, ...] = (4.0, 8.0, 15.0, FULL_WINDOW_S)
    margin_s: float = 1.0
    margin_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not self.buckets_s or list(self.buckets_s) != sorted(set(self.buckets_s)):
            raise ValueError(f"window buckets must be distinct and ascending, got {self.buckets_s}")
        if self.buckets_s[-1] != FULL_WINDOW_S or self.buckets_s[0] <= 0:
            raise ValueError(f"window buckets must be positive and end with {FULL_WINDOW_S:g} s")
        if self.margin_s < 0 or self.margin_fraction < 0:
            raise ValueError("window margin must be >= 0")

    @property
    def stock(self) -> bool:
        """True when every request runs in Whisper's full 30 s window."""
        return self.buckets_s == (FULL_WINDOW_S,)

    def window_for(self, audio_s: float) -> float:
        """The window for ``audio_s`` seconds of audio (longer audio than the largest window gets the largest)."""
        need = audio_s + max(self.margin_s, self.margin_fraction * audio_s)
        for bucket in self.buckets_s:
            if bucket >= need:
                return bucket
        return self.buckets_s[-1]

    def next_window(self, window_s: float) -> float | None:
        """The next larger window after ``window_s``, or None when ``window_s`` is already the largest."""
        for bucket in self.buckets_s:
            if bucket > window_s:
                return bucket
        return None


STOCK_WINDOW = WindowPolicy(buckets_s=(FULL_WINDOW_S,), margin_s=0.0)


class WindowMode(StrEnum):
    """Whisper's encoder window: ``FIT`` pads each request to a window that fits its audio (engine.asr.windows),
    ``STOCK`` always to Whisper's own 30 s."""

    FIT = "fit"
    STOCK = "stock"


WINDOW_MODES: dict[WindowMode, WindowPolicy] = {WindowMode.FIT: WindowPolicy(), WindowMode.STOCK: STOCK_WINDOW}


class Device(StrEnum):
    """Where the in-process recognizer runs (``AUTO``: a GPU when there is one)."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class TranscriberConfig:
    """The shared recognizer: vLLM in this process, or ``vllm serve`` instances at ``asr_urls``."""

    model: str | None = setting(
        None,
        help="embedded name (whisper-base, whisper-tiny.en), a local Hugging Face folder or a hub id "
        "such as openai/whisper-large-v3-turbo",
        default_text="whisper-base",
    )
    device: Device = setting(
        Device.AUTO,
        parse=member_of(Device),
        choices=values_of(Device),
        help="where the in-process recognizer runs ('auto': a GPU when there is one)",
    )
    dtype: str = "auto"  # "auto" | "float32" | "bfloat16" | "float16"
    max_num_seqs: int = 8
    max_tokens: int = 220  # per segment at most; shorter audio gets fewer (engine.asr.windows.max_tokens_for)
    window: WindowMode = setting(
        WindowMode.FIT,
        parse=member_of(WindowMode),
        choices=values_of(WindowMode),
        help="Whisper encoder window: 'fit' pads each request to a window that fits its audio (fast, "
        "engine.asr.windows), 'stock' always to 30 s",
    )
    window_buckets_s: tuple[float, ...] = WindowPolicy().buckets_s
    window_margin_s: float = WindowPolicy().margin_s
    # 0 = by load (``CaptionEngine``; ``engine.asr.cpu``). On 2 cores, 1 costs less CPU and serves several sessions
    # faster, 2 locks one speaker's long sentences sooner: docs/benchmarks.md ("CPU threads").
    cpu_threads: int = setting(
        0,
        help="compute threads of the CPU speech engine (0: every core while one session "
        "speaks, half of them while several do; a number fixes it; an "
        "OMP_NUM_THREADS in the environment wins)",
    )
    # Of those, the engine steps that only generate tokens (no audio to encode) run on at most this many: the
    # encoder uses a second core well, a step of one token per request hardly (engine.asr.vllm_worker.CpuThreads;
    # docs/benchmarks.md, "CPU threads").
    cpu_decoder_threads: int = setting(
        1,
        help="compute threads of the CPU speech engine's steps that only generate text, at most "
        "--cpu-threads (the encoder runs on all of those); 0: as many as the encoder",
    )
    cache_dir: str | None = None
    gpu_memory_utilization: float = 0.85
    # Whisper's timestamp tokens in every decode (partials too, so that a partial can still serve as the final):
    # word times then follow the model's timed stretches as well as the VAD (engine.stream.words).
    timestamps: bool = setting(
        False,
        flag="--word-timestamps",
        help="decode with Whisper's timestamp tokens: word times (and so subtitle cues) follow "
        "the model's timed stretches, not only the VAD; costs 20-50 % more decode time "
        "(see docs/benchmarks.md)",
    )
    # Base URLs of ``vllm serve`` instances (``http://host:port``; engine.asr.remote).
    asr_urls: tuple[str, ...] = setting(
        (),
        flag="--asr-url",
        metavar="URL",
        help="decode on this `vllm serve` instance (base URL, e.g. http://10.0.0.5:8000) instead of an in-process "
        "engine; repeat for several: requests go to the least loaded one that is up (serve the model as the "
        "docs/operations.md says)",
    )
    remote: RemoteAsrConfig = field(default_factory=RemoteAsrConfig)

    def window_policy(self) -> WindowPolicy:
        """The window policy of ``window``; raises ``ValueError`` for an unknown mode or bad buckets."""
        if self.window == WindowMode.STOCK:
            return STOCK_WINDOW
        if self.window != WindowMode.FIT:
            raise ValueError(f"unknown window mode {self.window!r}: use one of {', '.join(WindowMode)}")
        return WindowPolicy(self.window_buckets_s, self.window_margin_s)


@dataclass(frozen=True)
class CapacityConfig:
    """How many live sessions the engine holds on time (``engine.stream.capacity``): the recognizer's time a live
    session needs with its partials at their thinnest, from a warm-up measurement, then from the measured load."""

    # The share of the recognizer's time (and of the front end's cores) live sessions may fill at their thinnest; the
    # rest absorbs bursts (several sentences ending at once), a measurement's error (a session either way from one
    # minute to the next), and what a measurement at light load misses (a CPU recognizer's decodes are slower on the
    # half of its cores it keeps under load). 0.75 let in one session too many of long noisy speech on a 2-core
    # machine (docs/benchmarks.md, "A full server stays on time").
    target_busy: float = 0.7
    # The thinnest partial cadence counted on: a speaker still sees new words about this often when the server is full.
    thinnest_interval_s: float = 2.0
    # Finals running this late (from the segment's close to its lock, p90 over ``late_window_s``) while sessions are
    # live refuse new sessions, whatever the estimate says.
    late_after_s: float = 1.0
    late_window_s: float = 30.0
    window_s: float = 60.0  # the measured load: the last this many seconds
    # Seconds of live speech (locked sentences) in the window before the measurement replaces the warm-up's figure.
    measured_after_s: float = 30.0
    # A typical live speaker, for the warm-up's figure (read speech with pauses): speaking this share of the time, a
    # sentence every 1 / ``sentences_per_s`` seconds.
    speaking_fraction: float = 0.7
    sentences_per_s: float = 0.2
    # A connected microphone that is silent (a meeting's other phones) costs the front end its VAD and WebRTC only:
    # this many CPU seconds per second (``bench.meeting``, six silent microphones: 0.026), so the server holds many
    # more connected than talking at once. A talking voice's front-end CPU (VAD, speaker embeddings, word alignment)
    # is measured; until it is, this is taken for it (``bench.meeting``, two readers: 0.07).
    idle_front_cpu: float = 0.025
    voice_front_cpu: float = 0.07


def language_or_auto(text: str) -> str | None:
    """A language code as given on a command line: ``auto`` (or nothing) is None, detect per segment."""
    return None if text in ("auto", "") else text


@dataclass(frozen=True)
class EngineConfig:
    """Everything the process-wide engine needs."""

    transcriber: TranscriberConfig = field(default_factory=TranscriberConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    # Files (``SessionOptions.background``) are cut at 7 s at most (at the quietest moment of the last 3 s): each
    # segment decodes in the 8 s encoder window, so a live partial that arrives while a file's segment is being
    # encoded waits a quarter as long as behind a 30 s window; and Whisper drops fewer words in short segments: the
    # bench recording's WER grows with the longest cut (``bench.upload --file-wer``, docs/benchmarks.md).
    file_endpoint: EndpointConfig = field(default_factory=lambda: EndpointConfig(max_segment_ms=7_000))
    partial: PartialConfig = field(default_factory=PartialConfig)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    speakers: bool = setting(True, help="skip speaker labels")  # streaming speaker labels (needs the speaker model)
    # Which speaker-embedding model labels speakers: a name of engine.speakers.models.SPEAKER_MODELS (each brings
    # its own thresholds; an unknown name fails when the engine is built). Spelled out here because the config may not
    # import the speakers layer (the recognizer imports the config); tests check it is that module's default. For
    # the same reason the server adds the names as the flag's choices.
    speaker_model: str = setting(
        "campplus",
        help="speaker-embedding model: 'resemblyzer' (GE2E, 2019) or 'campplus' (CAM++, 2023: fewer "
        "speaker confusions, more CPU per window; see docs/benchmarks.md)",
    )
    default_language: str | None = setting(
        "en",
        flag="--language",
        parse=language_or_auto,
        help="default caption language, or 'auto' to detect it per sentence",
    )
    # Word times from Whisper's own cross-attention (engine.asr.align) for every locked sentence, where the recognizer
    # runs in this process (a local checkpoint); else, or when the aligner falls behind, from the VAD alone. Costs a
    # second encoder pass per final on the front end's CPU (docs/benchmarks.md, "Word times").
    word_align: bool = setting(
        True,
        help="word times from the VAD alone, not from Whisper's cross-attention (saves a "
        "second encoder pass per locked sentence; subtitle cues then split less "
        "accurately: docs/benchmarks.md)",
    )


@dataclass(frozen=True)
class SessionOptions:
    """What one caller chooses for its session."""

    language: str | None = "en"  # None = detect per segment
    hotwords: tuple[str, ...] = ()
    prompt: str = ""  # free context text handed to the recognizer with the hotwords
    words: bool = False  # the client wants each locked sentence's word times on the wire (they are always kept)
    partials: bool = True  # re-decode the open sentence as it grows (off: only locked sentences are sent)
    # A file, not a person waiting (an upload): no partials, and finals decode at background priority one at a time
    # (``DecodeScheduler.background``), so that live sessions keep their latency while a long file is transcribed.
    background: bool = False
    temperature: float = 0.0  # the decoder's sampling temperature (0 = greedy)
    # Whisper's task: "transcribe", or "translate": captions in English of speech in another language (a multilingual
    # model's own task; each sentence's text is English, and no word times are aligned: they would time English
    # words against the speech of another language).
    task: str = "transcribe"
    # The client applies ``speakers`` corrections to sentences it already has (docs/protocol.md): a live sentence then
    # locks as soon as its text is final, with a provisional speaker label if its embedding is not in yet
    # (``engine.stream.labels``). False: each sentence waits for its label (a protocol that cannot correct one).
    relabels: bool = True
