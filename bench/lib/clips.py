"""Bench audio: real read-speech clips joined into one "microphone" per session, encoded once to Opus.

Each session plays its own sequence of real English utterances from ``shared/data/speech`` (the clips with a
human reference transcript), joined by pauses long enough for the balanced endpointer to close each one (for the
"users" set, 1.2-2.5 s drawn per gap as people pause: shorter than the balanced schedule's longest waits, so a
sentence may close there only because its decoded text ends one), with leading and trailing silence. Where the
speech lies inside each utterance comes from Silero VAD run offline on the source file, so every utterance gives
one reference sentence with speech onset, speech end and reference text.

The Opus files (libopus, 48 kHz mono, Ogg) are written once per (clip set, session index, length, pause, packet
length, FEC) into a cache folder; aiortc's ``MediaPlayer(path, decode=False)`` then forwards their packets without
re-encoding.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import av
import numpy as np

from engine.audio.pcm import SAMPLE_RATE
from engine.audio.vad import WINDOW, BatchedVad
from speechdata.corpus import audio as clip_audio
from speechdata.corpus import manifest

CACHE_DIR = Path(tempfile.gettempdir()) / "live-captions-bench"
LEAD_S = 1.0  # leading silence: the first word is never cut by connection set-up
TAIL_S = 3.5  # trailing silence: the last sentence closes by its endpoint, not by the stop
OPUS_RATE = 48_000


@dataclass(frozen=True)
class Utterance:
    """One reference sentence inside a session's audio; times in seconds of that audio."""

    clip_id: str
    text: str
    speech_start_s: float
    speech_end_s: float


@dataclass(frozen=True)
class SessionClip:
    """What one bench session streams: the Opus file and the sentences it holds."""

    index: int
    ogg: Path
    duration_s: float
    utterances: tuple[Utterance, ...]

    @property
    def reference(self) -> str:
        return " ".join(u.text for u in self.utterances)


# What sessions say (``pool``): "read", every English read clip with a reference (most are short: median 5 s);
# "hard", long and difficult sentences, as users also speak: the read clips of 10 s or more (the 16 s LibriSpeech one,
# the public address) and every noisy clip with a reference (reverberant, babble and street noise at 0-15 dB SNR,
# far field, telephone band); "users", a speaker's mix: of every three sentences two "read" ones and one "hard" one,
# with pauses of 1.2-2.5 s between them (``USERS_PAUSE_S``, drawn per gap) instead of one fixed pause.
CLIP_SETS = ("read", "hard", "users")
HARD_MIN_READ_S = 10.0
USERS_PAUSE_S = (1.2, 2.5)  # "users": each pause drawn uniformly from this range (s)
_STEP = {"read": 5, "hard": 3, "users": 6}  # how far apart in the pool sessions start (sentences)


@cache
def pool(kind: str = "read") -> tuple[tuple[str, str], ...]:
    """(clip id, reference text) of the clip set ``kind`` (``CLIP_SETS``), in a fixed shuffled order."""
    if kind not in CLIP_SETS:
        raise ValueError(f"clip set must be one of {', '.join(CLIP_SETS)}, got {kind!r}")
    if kind == "users":
        # Read, read, hard, over and over, until both pools have been used whole (the shorter one wraps round).
        read, hard = pool("read"), pool("hard")
        rounds = max(-(-len(read) // 2), len(hard))
        return tuple(
            c
            for i in range(rounds)
            for c in (read[2 * i % len(read)], read[(2 * i + 1) % len(read)], hard[i % len(hard)])
        )
    english = [e for e in manifest().values() if e["lang"] == "en" and e["text"]]
    if kind == "read":
        chosen = [e for e in english if e["kind"] == "read" and e["duration_s"] >= 2.0]
    else:
        chosen = [
            e for e in english if e["kind"] == "noisy" or (e["kind"] == "read" and e["duration_s"] >= HARD_MIN_READ_S)
        ]
    out = [(e["id"], e["text"]) for e in chosen]
    order = np.random.default_rng(7).permutation(len(out))
    return tuple(out[i] for i in order)


@cache
def speech_bounds(clip_id: str, threshold: float = 0.5) -> tuple[float, float]:
    """(first, last) second of speech in a clip by Silero VAD (windows at or above ``threshold``)."""
    audio = clip_audio(clip_id)
    vad = BatchedVad(max_sessions=1)
    k = audio.size // WINDOW
    probs = vad.run({0: audio[: k * WINDOW].reshape(k, WINDOW)})[0]
    idx = np.flatnonzero(probs >= threshold)
    if idx.size == 0:
        return 0.0, audio.size / SAMPLE_RATE
    return idx[0] * WINDOW / SAMPLE_RATE, (idx[-1] + 1) * WINDOW / SAMPLE_RATE


def pauses(index: int, pause_s: float, kind: str = "read") -> Iterator[float]:
    """The pauses after each sentence of session ``index`` (s), endless: ``pause_s`` every time, or for "users" each
    drawn uniformly from ``USERS_PAUSE_S`` by a generator seeded with the session index (the same every run)."""
    if kind != "users":
        return itertools.repeat(pause_s)
    rng = np.random.default_rng([11, index])
    return (float(rng.uniform(*USERS_PAUSE_S)) for _ in itertools.count())


def build_session(
    index: int, seconds: float, pause_s: float, kind: str = "read"
) -> tuple[np.ndarray, tuple[Utterance, ...]]:
    """Session ``index``'s audio (16 kHz float32) of at least ``seconds`` of speech and pauses, and its sentences,
    from the clip set ``kind`` (``pool``), ``pauses`` apart (``pause_s`` is not used for "users").

    Sessions start at different places in the pool, so sessions playing at the same time speak different clips.
    """
    clips = pool(kind)
    parts = [np.zeros(int(LEAD_S * SAMPLE_RATE), np.float32)]
    pos = LEAD_S
    utterances: list[Utterance] = []
    k = index * _STEP[kind]
    gaps = pauses(index, pause_s, kind)
    gap = 0
    while pos < LEAD_S + seconds or not utterances:
        clip_id, text = clips[k % len(clips)]
        k += 1
        audio = clip_audio(clip_id)
        first, last = speech_bounds(clip_id)
        utterances.append(Utterance(clip_id, text, pos + first, pos + last))
        # Whole samples, and the position advanced by exactly those, so the reference times never drift.
        gap = int(next(gaps) * SAMPLE_RATE)
        parts += [audio, np.zeros(gap, np.float32)]
        pos += (audio.size + gap) / SAMPLE_RATE
    parts.append(np.zeros(max(0, int(TAIL_S * SAMPLE_RATE) - gap), np.float32))  # the last pause is part of it
    return np.concatenate(parts), tuple(utterances)


def encode_opus(audio: np.ndarray, path: Path, frame_ms: int = 20, fec: bool = False) -> None:
    """Write 16 kHz float32 mono audio as Ogg Opus (48 kHz mono, ``frame_ms`` per packet: 20 as browsers send by
    default, 60 as they send when the answer says ``a=ptime:60``). ``fec``: as Chromium encodes once its receiver
    reports loss and the answer allows FEC: ~32 kb/s wideband speech (SILK, one 60 ms frame per 60 ms packet: 261
    of 298 of Chromium's packets here were), each packet with an in-band FEC copy of the one before (else 64 kb/s
    fullband, no FEC)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.ogg")
    pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)
    with av.open(str(tmp), "w", format="ogg") as out:
        stream = out.add_stream("libopus", rate=OPUS_RATE, layout="mono")
        stream.bit_rate = 32_000 if fec else 64_000
        stream.options = {"frame_duration": str(frame_ms)}
        if fec:
            # Wideband (8 kHz cutoff) keeps libopus in SILK mode, whose 60 ms frames carry a copy of all 60 ms of the
            # packet before; fullband speech goes hybrid, three 20 ms frames a packet, and the copy covers 20 ms.
            stream.options |= {"application": "voip", "fec": "1", "packet_loss": "10", "cutoff": "8000"}
        frame_samples = OPUS_RATE * frame_ms // 1000
        resampler = av.AudioResampler(format="s16", layout="mono", rate=OPUS_RATE)
        fifo = av.AudioFifo()
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        for f in [*resampler.resample(frame), *resampler.resample(None)]:
            fifo.write(f)
        pts = 0
        while (chunk := fifo.read(frame_samples)) is not None:
            chunk.pts = pts
            pts += chunk.samples
            for packet in stream.encode(chunk):
                out.mux(packet)
        rest = fifo.read()
        if rest is not None:
            rest.pts = pts
            for packet in stream.encode(rest):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    tmp.replace(path)


def session_clip(
    index: int, seconds: float = 40.0, pause_s: float = 2.5, frame_ms: int = 20, fec: bool = False, kind: str = "read"
) -> SessionClip:
    """Session ``index``'s clip from the clip set ``kind``, encoding its Opus file (``frame_ms`` per packet, with
    in-band FEC if ``fec``: ``encode_opus``) on first use (cached across runs; "users" ignores ``pause_s``: its file
    is named by its pause range, e.g. ``session-users003-40s-p1.2-2.5.ogg``)."""
    audio, utterances = build_session(index, seconds, pause_s, kind)
    packets = ("" if frame_ms == 20 else f"-f{frame_ms}") + ("-fec" if fec else "")
    name = "session" if kind == "read" else f"session-{kind}"
    pause = "-".join(f"{p:g}" for p in USERS_PAUSE_S) if kind == "users" else f"{pause_s:g}"
    ogg = CACHE_DIR / f"{name}{index:03d}-{seconds:g}s-p{pause}{packets}.ogg"
    if not ogg.exists():
        encode_opus(audio, ogg, frame_ms, fec)
    return SessionClip(index, ogg, audio.size / SAMPLE_RATE, utterances)
