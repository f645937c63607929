"""Speaker labels of a clip as a live session gives them, scored against its reference turns (``bench.speakers``,
``bench.speaker_models`` and the unit tests).

``segment_clip`` cuts a clip as a live session does (Silero VAD and the endpointer), ``stream_clip`` labels its
segments in arrival order (``SpeakerTracker``, the turn detector's windows), ``score_labels`` scores labels on 10 ms
frames after the optimal one-to-one mapping onto reference speakers (speaker error and DER), ``run_clip`` does all of
it for one clip; ``alternating_clip`` builds turn-taking from single readers. Clips and their RTTM turns come from
``speechdata.corpus``.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from engine.audio.pcm import CHUNK_SAMPLES, SAMPLE_RATE
from engine.audio.vad import WINDOW
from engine.speakers.service import Embedder
from engine.speakers.tracker import SpeakerConfig, SpeakerTracker
from engine.speakers.turns import TurnConfig
from speechdata import corpus
from speechdata.corpus import Turn

CLIPS: tuple[str, ...] = (
    "libri_3spk_turns",
    "libri_2spk_overlap_dialogue",
    "ami_seriously_mixture",
    *(
        f"ami_debug_{name}"
        for name in (
            "trn00",
            "trn01",
            "trn02",
            "trn03",
            "trn04",
            "trn05",
            "trn06",
            "trn07",
            "trn08",
            "trn09",
            "dev00",
            "dev01",
            "tst00",
            "tst01",
        )
    ),
)
# Readers with three or more utterances in the shared folder (LibriSpeech speaker ids, and the LibriVox reader of
# ``librivox_sns01``): ``alternating_clip`` builds turn-taking from them.
READERS: dict[str, tuple[str, ...]] = {
    "1988": ("ls_1988-24833-0000", "ls_1988-24833-0001", "ls_1988-24833-0002", "ls_1988-24833-0003"),
    "2412": ("ls_2412-153948-0000", "ls_2412-153948-0001", "ls_2412-153948-0002"),
    "3752": ("ls_3752-4944-0000", "ls_3752-4944-0001", "ls_3752-4944-0002"),
    "sns01": (
        "librivox_sns01_0870",
        "librivox_sns01_0880",
        "librivox_sns01_0890",
        "librivox_sns01_0920",
        "librivox_sns01_0930",
    ),
}
FRAME_S = 0.01
ENDPOINTER_PRESETS = ("balanced", "low-latency")
# Diagnostic only: segments cut at the reference turns (perfect segmentation), to separate assignment errors
# from segmentation errors. A live session never has these.
ORACLE = "oracle-turns"


@dataclass(frozen=True)
class Segment:
    """One closed segment of a clip: speech ran [start_s, end_s) (seconds from the clip start)."""

    start_s: float
    end_s: float
    audio_start: int  # samples of the segment's audio (pre-roll and post-roll included)
    audio_end: int
    after_turn: bool = False  # split off the segment before it at a change of voice

    @property
    def speech_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Scores:
    """Error shares of reference speech time (0..1); seconds in the other fields."""

    speaker_error: float
    der: float
    missed_s: float
    false_alarm_s: float
    confusion_s: float
    reference_s: float
    speakers_found: int


@dataclass(frozen=True)
class ClipResult:
    clip: str
    preset: str
    segments: int
    embedded: int
    reference_speakers: int
    streaming: Scores
    reclustered: Scores
    one_label: Scores  # baseline: every segment labelled as one speaker
    relabelled: int
    embed_cpu_s: float  # process CPU time spent embedding this clip's segments
    embedded_speech_s: float
    changes: int = 0  # reference changes of speaker
    changes_found: int = 0  # ... with a segment boundary within 0.5 s
    splits: int = 0  # segments split at a change of voice
    split_delay_s: list[float] = field(default_factory=list)  # audio seconds from a change to its split's decision
    label_delay_s: list[float] = field(default_factory=list)  # per change: until the new label shows (``label_delays``)
    windows: int = 0  # turn-detector windows embedded
    # Segments whose label differs from the one shown beside their text when they closed (their voice's provisional
    # label, else the label before them): a live sentence that locks before its embedding is in shows that label
    # first, and a ``speakers`` message corrects it (``engine.stream.labels``). At most that many corrections.
    guessed_wrong: int = 0


def segment_clip(audio: np.ndarray, preset: str = "balanced") -> list[Segment]:
    """Cut 16 kHz audio into segments the way a live session does (Silero VAD + the endpointer ``preset``)."""
    if preset not in ENDPOINTER_PRESETS:
        raise ValueError(f"unknown endpointer preset {preset!r}")
    from engine.config import ENDPOINT_PRESETS, EndpointPreset, VadConfig
    from engine.stream.endpoint import Endpointer, SegmentClosed

    probs = clip_probs(audio)
    endpointer = Endpointer(VadConfig(), ENDPOINT_PRESETS[EndpointPreset(preset)])
    events = endpointer.push(probs)
    last = endpointer.flush()
    closed = [e for e in [*events, last] if isinstance(e, SegmentClosed)]
    return [
        Segment(e.speech_start_sample / SAMPLE_RATE, e.speech_end_sample / SAMPLE_RATE, e.start_sample, e.end_sample)
        for e in closed
    ]


@dataclass(frozen=True)
class Shown:
    """A speaker label on screen: at ``at_s`` (audio seconds), the text of the segment whose speech starts at
    ``segment_s`` shows ``label`` (a provisional label with the partial text, or the label a segment locked with;
    decode time not included)."""

    at_s: float
    segment_s: float
    label: int


def stream_clip(
    audio: np.ndarray, embedder: Embedder, turns: TurnConfig, config: SpeakerConfig, preset: str = "balanced"
) -> tuple[list[Segment], list[float], list[Shown], int, list[int | None]]:
    """Cut 16 kHz audio into segments as a live session does, voice changes included: the VAD probabilities go to
    the endpointer as 60 ms chunks complete them and ``TurnDetector`` embeds its windows of the open segment as it
    asks (here at once; a server does it in the speaker thread a few milliseconds later) and may split the segment;
    each closed segment is labelled at once and the open one's voice gets a provisional label (``SpeakerTracker.peek``).
    Returns the segments, the audio position (seconds) at which each split was decided, the labels shown, the
    number of windows embedded and, per segment, the provisional label its voice showed when it closed (None: none
    was shown)."""
    from engine.config import ENDPOINT_PRESETS, EndpointPreset, VadConfig
    from engine.speakers.turns import TurnDetector
    from engine.stream.endpoint import Endpointer, SegmentClosed, SegmentOpened

    probs = clip_probs(audio)
    vad_config = VadConfig()
    endpointer = Endpointer(vad_config, ENDPOINT_PRESETS[EndpointPreset(preset)])
    detector = TurnDetector(turns, vad_config.offset)
    tracker = SpeakerTracker(config)
    closed: list[SegmentClosed] = []
    decided: list[float] = []
    shown: list[Shown] = []
    guesses: list[int | None] = []
    windows = 0

    def handle(events: list, cut: int | None = None) -> None:
        for event in events:
            if isinstance(event, SegmentClosed):
                start_s = event.speech_start_sample / SAMPLE_RATE
                guesses.append(next((x.label for x in reversed(shown) if x.segment_s == start_s), None))
                closed.append(event)
                speech_s = event.speech_samples / SAMPLE_RATE
                vector = (
                    embedder.embed([audio[event.start_sample : event.end_sample]])[0]
                    if speech_s >= config.min_embed_speech_s
                    else None
                )
                label = tracker.assign(len(closed) - 1, vector, speech_s, event.after_turn)
                shown.append(
                    Shown(endpointer.position_sample / SAMPLE_RATE, event.speech_start_sample / SAMPLE_RATE, label)
                )
                if cut is None:
                    detector.close()
            elif isinstance(event, SegmentOpened):
                if cut is None:
                    detector.open(event.speech_start_sample)
                else:
                    detector.cut(cut)

    # VAD windows reach the endpointer as a live session's 60 ms chunks complete them (one or two at a time), so
    # the detector's windows fall where a live session's do: a window is due at the first push past its hop, and a
    # push that brings two windows moves it one window later than a fixed step would.
    done = 0
    for chunk_end in range(CHUNK_SAMPLES, len(probs) * WINDOW + CHUNK_SAMPLES, CHUNK_SAMPLES):
        i, done = done, min(len(probs), chunk_end // WINDOW)
        if i == done:
            continue
        handle(endpointer.push(probs[i:done]))
        opened = endpointer.open_segment
        if opened is None or not detector.due(endpointer.position_sample):
            continue
        window = detector.next_window(endpointer.position_sample, endpointer.open_probs, opened.speech_start_sample)
        if window is None:
            continue
        vector = embedder.embed([audio[window.start_sample : window.end_sample]])[0]
        windows += 1
        at = detector.add(window, vector, endpointer.open_probs, opened.speech_start_sample)
        if at is not None and (events := endpointer.split(at)):
            decided.append(endpointer.position_sample / SAMPLE_RATE)
            handle(events, cut=at)
        if detector.voice is not None and endpointer.open_segment is not None:
            opened = endpointer.open_segment
            shown.append(
                Shown(
                    endpointer.position_sample / SAMPLE_RATE,
                    opened.speech_start_sample / SAMPLE_RATE,
                    tracker.peek(*detector.voice, new_voice=opened.after_turn),
                )
            )
    last = endpointer.flush()
    if last is not None:
        handle([last])
    segments = [
        Segment(
            e.speech_start_sample / SAMPLE_RATE,
            e.speech_end_sample / SAMPLE_RATE,
            e.start_sample,
            e.end_sample,
            e.after_turn,
        )
        for e in closed
    ]
    return segments, decided, shown, windows, guesses


def label_delays(reference: list[Turn], segments: list[Segment], labels: list[int], shown: list[Shown]) -> list[float]:
    """For each reference change of speaker: seconds from the new speaker's first word until a segment starting in
    their turn shows the label their speech is mapped to (the best one-to-one mapping of labels onto speakers);
    ``inf`` when that never happens during the turn."""
    from scipy.optimize import linear_sum_assignment

    names = sorted({t.speaker for t in reference})
    hyp = sorted(set(labels))
    overlap = np.zeros((len(names), len(hyp)))
    for turn in reference:
        for segment, label in zip(segments, labels, strict=True):
            both = min(turn.end_s, segment.end_s) - max(turn.start_s, segment.start_s)
            if both > 0:
                overlap[names.index(turn.speaker), hyp.index(label)] += both
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    mapped = {names[r]: hyp[c] for r, c in zip(rows, cols, strict=True)}
    delays = []
    for before, turn in itertools.pairwise(reference):
        if before.speaker == turn.speaker:
            continue
        hits = [
            x.at_s
            for x in shown
            if x.label == mapped.get(turn.speaker)
            and x.at_s >= turn.start_s
            and turn.start_s - 1.0 <= x.segment_s < turn.end_s
        ]
        delays.append(min(hits) - turn.start_s if hits else float("inf"))
    return delays


_PROBS: dict[bytes, np.ndarray] = {}  # clip_probs of each distinct clip, by a hash of its samples


def clip_probs(audio: np.ndarray) -> np.ndarray:
    """Silero's speech probability of every 512-sample window of a clip; once per distinct clip in a process (a fit
    runs the same clips many times)."""
    from engine.audio.vad import BatchedVad, VadStream

    key = hashlib.blake2b(np.ascontiguousarray(audio).tobytes(), digest_size=16).digest()
    if key not in _PROBS:
        vad = BatchedVad(max_sessions=1)
        slot = vad.acquire()
        _PROBS[key] = vad.run({slot: VadStream().push(audio)})[slot]
    return _PROBS[key]


def score_labels(reference: list[Turn], segments: list[Segment], labels: list[int], duration_s: float) -> Scores:
    """Speaker error and DER of per-segment ``labels`` against ``reference`` (see the module docstring)."""
    from scipy.optimize import linear_sum_assignment

    n_frames = int(np.ceil(duration_s / FRAME_S)) + 1
    names = sorted({t.speaker for t in reference})
    ref = np.zeros((len(names), n_frames), dtype=bool)
    for turn in reference:
        ref[names.index(turn.speaker), _frame(turn.start_s) : _frame(turn.end_s)] = True
    hyp_labels = sorted(set(labels))
    hyp = np.zeros((len(hyp_labels), n_frames), dtype=bool)
    for segment, label in zip(segments, labels, strict=True):
        hyp[hyp_labels.index(label), _frame(segment.start_s) : _frame(segment.end_s)] = True

    overlap = ref.astype(np.float64) @ hyp.T.astype(np.float64)  # [ref speakers, hyp labels] frames together
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    mapped = np.zeros_like(ref)  # mapped[r] = frames where ref speaker r's mapped label is active
    for r, c in zip(rows, cols, strict=True):
        mapped[r] = hyp[c]
    correct_any = (mapped & ref).any(axis=0)
    n_ref = ref.sum(axis=0)
    n_hyp = hyp.sum(axis=0)
    n_correct = (mapped & ref).sum(axis=0)
    covered = (n_ref > 0) & (n_hyp > 0)
    reference_s = float(n_ref.sum()) * FRAME_S
    missed = float(np.maximum(n_ref - n_hyp, 0).sum()) * FRAME_S
    false_alarm = float(np.maximum(n_hyp - n_ref, 0).sum()) * FRAME_S
    confusion = float((np.minimum(n_ref, n_hyp) - n_correct).sum()) * FRAME_S
    covered_s = float(covered.sum())
    wrong_s = float((covered & ~correct_any).sum())
    return Scores(
        speaker_error=wrong_s / covered_s if covered_s else 0.0,
        der=(missed + false_alarm + confusion) / reference_s if reference_s else 0.0,
        missed_s=missed,
        false_alarm_s=false_alarm,
        confusion_s=confusion,
        reference_s=reference_s,
        speakers_found=len(hyp_labels),
    )


def _frame(seconds: float) -> int:
    return max(round(seconds / FRAME_S), 0)


def oracle_segments(reference: list[Turn]) -> list[Segment]:
    """One segment per reference turn (diagnostic; see ``ORACLE``)."""
    turns = sorted(reference, key=lambda t: t.start_s)
    return [
        Segment(t.start_s, t.end_s, round(t.start_s * SAMPLE_RATE), round(t.end_s * SAMPLE_RATE))
        for t in turns
        if t.end_s - t.start_s >= 0.1
    ]


def label_segments(
    audio: np.ndarray, segments: list[Segment], embedder: Embedder, config: SpeakerConfig
) -> tuple[list[int], list[int], list[int], float]:
    """Run a tracker over the segments in order.

    Returns (streaming labels, labels after re-clustering, indices of embedded segments, embedding CPU s).
    """
    tracker = SpeakerTracker(config)
    long_enough = [i for i, s in enumerate(segments) if s.speech_s >= config.min_embed_speech_s]
    cpu_start = time.process_time()
    vectors = embedder.embed([audio[segments[i].audio_start : segments[i].audio_end] for i in long_enough])
    embed_cpu_s = time.process_time() - cpu_start
    by_index = dict(zip(long_enough, vectors, strict=True))
    streaming = [tracker.assign(i, by_index.get(i), s.speech_s, s.after_turn) for i, s in enumerate(segments)]
    tracker.recluster()
    return streaming, [tracker.labels[i] for i in range(len(segments))], long_enough, embed_cpu_s


def run_clip(
    clip: str, embedder: Embedder, config: SpeakerConfig, preset: str, turns: TurnConfig | None = None
) -> ClipResult:
    """Segment, label and score one clip: a clip of the shared speech folder with an RTTM file, or an
    ``alternating_clip`` named ``alt:<reader>+<reader>[+...]``; ``<clip>@<seconds>`` is that clip after that much
    leading silence. ``turns``: find voice changes inside segments."""
    name, _, lead = clip.partition("@")
    if name.startswith("alt:"):
        audio, reference = alternating_clip(tuple(name[4:].split("+")))
    else:
        audio = corpus.audio(name)
        reference = corpus.turns(name)
    if lead_s := float(lead or 0):
        # The same speech later by ``lead_s`` seconds: the turn detector's windows fall elsewhere in it.
        audio = corpus.pad(audio, lead_s)
        reference = [Turn(t.start_s + lead_s, t.end_s + lead_s, t.speaker) for t in reference]
    decided: list[float] = []
    shown: list[Shown] = []
    guesses: list[int | None] = []
    windows = 0
    if preset == ORACLE:
        segments = oracle_segments(reference)
    elif turns is not None and turns.enabled:
        segments, decided, shown, windows, guesses = stream_clip(audio, embedder, turns, config, preset)
    else:
        segments = segment_clip(audio, preset)
    duration_s = audio.size / SAMPLE_RATE
    streaming, final, embedded, embed_cpu_s = label_segments(audio, segments, embedder, config)
    guesses = guesses or [None] * len(segments)
    changes = [b.start_s for a, b in itertools.pairwise(reference) if a.speaker != b.speaker]
    bounds = [b.start_s for b in segments[1:]]
    found = [c for c in changes if any(abs(b - c) <= 0.5 for b in bounds)]
    delays = [d - c for d in decided for c in changes if 0.0 <= d - c <= 4.0]
    return ClipResult(
        clip=clip,
        preset=preset + ("+turns" if decided or (turns is not None and turns.enabled) else ""),
        segments=len(segments),
        embedded=len(embedded),
        reference_speakers=len({t.speaker for t in reference}),
        streaming=score_labels(reference, segments, streaming, duration_s),
        reclustered=score_labels(reference, segments, final, duration_s),
        one_label=score_labels(reference, segments, [0] * len(segments), duration_s),
        relabelled=sum(a != b for a, b in zip(streaming, final, strict=True)),
        embed_cpu_s=embed_cpu_s,
        embedded_speech_s=sum(segments[i].speech_s for i in embedded),
        changes=len(changes),
        changes_found=len(found),
        splits=len(decided),
        split_delay_s=sorted(delays),
        windows=windows,
        label_delay_s=label_delays(reference, segments, streaming, shown) if shown else [],
        guessed_wrong=sum(
            label != (guess if guess is not None else (streaming[i - 1] if i else 0))
            for i, (label, guess) in enumerate(zip(streaming, guesses, strict=True))
        ),
    )


def alternating_clip(
    readers: tuple[str, ...], seed: int = 0, gaps_s: tuple[float, float] = (0.3, 1.0)
) -> tuple[np.ndarray, list[Turn]]:
    """Readers taking turns: each reader's shared utterances in order, one turn each, round-robin for as many rounds
    as the reader with the fewest has, with a silence of ``gaps_s`` (uniform, seeded) between turns (the files' own
    leading and trailing silence comes on top). Returns the audio and the reference turns (each utterance from its
    first to its last speech window by the VAD at 0.5)."""
    rng = np.random.default_rng(seed)
    utterances = {r: [corpus.audio(c) for c in READERS[r]] for r in readers}
    rounds = min(len(u) for u in utterances.values())
    pieces: list[np.ndarray] = []
    turns: list[Turn] = []
    at = 0
    for i in range(rounds):
        for reader in readers:
            if pieces:
                gap = np.zeros(round(rng.uniform(*gaps_s) * SAMPLE_RATE), np.float32)
                pieces.append(gap)
                at += gap.size
            clip = utterances[reader][i]
            pieces.append(clip)
            # The turn is the utterance's speech (its file has some silence at either end).
            speech = np.flatnonzero(clip_probs(clip) >= 0.5)
            first, last = (speech[0], speech[-1] + 1) if speech.size else (0, clip.size // WINDOW)
            turns.append(Turn((at + first * WINDOW) / SAMPLE_RATE, (at + last * WINDOW) / SAMPLE_RATE, reader))
            at += clip.size
    return np.concatenate(pieces), turns


def alternating_names() -> list[str]:
    """Every reader alone (a change found there is a false one), pair and triple of ``READERS`` as ``alt:`` clip
    names."""
    from itertools import combinations

    names = sorted(READERS)
    return [f"alt:{'+'.join(c)}" for k in (1, 2, 3) for c in combinations(names, k)]
