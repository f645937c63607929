"""The room's cross-talk arbiter (``engine.stream.crosstalk``) on real recorded speech: the four close-talk channels
of an AMI meeting, each microphone also hearing its neighbours 12 dB down and 2-6 ms late (as phones a seat apart do),
and two read clips spoken at once. No recognizer: the arbiter alone, then real engine sessions (real VAD, the named
fake recognizer) publishing side by side, where a copy of a voice must open no sentence."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine import CaptionEngine, CrossTalk, protocol
from engine.audio.pcm import CHUNK_SAMPLES, SAMPLE_RATE
from engine.audio.vad import WINDOW
from speechdata.corpus import audio, turns

MEETING = ["MEO015", "FEE013", "MEE014", "FEE016"]  # the speakers of ami_seriously_mixture, one headset each
LEAK_DB = 12.0
READER_A, READER_B = "ls_1988-24833-0001", "ls_2412-153948-0000"  # two readers, 7.9 s and 11.7 s


def leaked(channels: list[np.ndarray], leak_db: float = LEAK_DB, seed: int = 0) -> list[np.ndarray]:
    """Each channel plus every other one ``leak_db`` down and 2-6 ms late."""
    rng = np.random.default_rng(seed)
    n = min(c.size for c in channels)
    gain = 10 ** (-leak_db / 20)
    out = []
    for i, own in enumerate(channels):
        mic = own[:n].astype(np.float32).copy()
        for j, other in enumerate(channels):
            if j != i:
                d = int(rng.uniform(0.002, 0.006) * SAMPLE_RATE)
                mic[d:] += gain * other[: n - d]
        out.append(mic)
    return out


def chunk_power(x: np.ndarray) -> np.ndarray:
    n = x.size // CHUNK_SAMPLES
    return np.mean(x[: n * CHUNK_SAMPLES].reshape(n, CHUNK_SAMPLES) ** 2, axis=1)


def arbitrate(mics: list[np.ndarray], jitter_s: float = 0.02, seed: int = 1) -> np.ndarray:
    """Feed ``mics`` chunk by chunk, in a shuffled order with arrival jitter, as a room's transports would; ask for
    every VAD window two chunks later (the VAD's lag). Returns allowed[mic, chunk]."""
    rng = np.random.default_rng(seed)
    now = [0.0]
    room = CrossTalk(clock=lambda: now[0])
    handles = [room.microphone(f"m{i}") for i in range(len(mics))]
    chunks = min(m.size for m in mics) // CHUNK_SAMPLES
    allowed = np.ones((len(mics), chunks), dtype=bool)
    for k in range(chunks + 2):
        if k < chunks:
            for i in rng.permutation(len(mics)):
                now[0] = (k + 1) * CHUNK_SAMPLES / SAMPLE_RATE + rng.uniform(0, jitter_s)
                handles[i].heard((k + 1) * CHUNK_SAMPLES, mics[i][k * CHUNK_SAMPLES : (k + 1) * CHUNK_SAMPLES])
        if (kk := k - 2) >= 0:
            for i, mic in enumerate(handles):
                start = kk * CHUNK_SAMPLES
                allowed[i, kk] = all(
                    mic.allows(s, s + WINDOW) for s in range(start, start + CHUNK_SAMPLES - WINDOW + 1, WINDOW)
                )
    return allowed


def speaking(clip: str, names: list[str], chunks: int) -> np.ndarray:
    """speaking[speaker, chunk] from the clip's reference turns."""
    out = np.zeros((len(names), chunks), dtype=bool)
    for t in turns(clip):
        i = names.index(t.speaker)
        out[i, int(t.start_s / 0.06) : int(np.ceil(t.end_s / 0.06))] = True
    return out


def test_a_voice_on_every_microphone_goes_to_its_own() -> None:
    sources = [audio(f"ami_seriously_src_{n}") for n in MEETING]
    mics = leaked(sources)
    allowed = arbitrate(mics)
    chunks = allowed.shape[1]
    turn = speaking("ami_seriously_mixture", MEETING, chunks)
    power = np.array([chunk_power(s)[:chunks] for s in sources])
    # Where each one's own voice is really sounding (in their turns, within 20 dB of their loud speech)...
    active = turn & (
        power > np.array([np.percentile(p[t], 90) for p, t in zip(power, turn, strict=True)])[:, None] * 0.01
    )
    others = np.array([active[[j for j in range(len(MEETING)) if j != i]].any(axis=0) for i in range(len(MEETING))])
    copies = ~turn & others  # ...and where a microphone hears only the others
    own_kept = (allowed & active).sum() / active.sum()
    # Loud copies: what a VAD would take for speech (a copy within 30 dB of the loudest thing the microphone hears).
    loud_copy = copies & (np.array([chunk_power(m)[:chunks] for m in mics]) > power.max(axis=1)[:, None] * 1e-3)
    # MEE014's headset carries loud sounds of its own that nobody transcribed (they follow no other speaker's voice):
    # those are its own, not copies, so the copies are counted at the other three.
    others3 = [i for i, name in enumerate(MEETING) if name != "MEE014"]
    copies_kept = (allowed & loud_copy)[others3].sum() / loud_copy[others3].sum()
    assert own_kept >= 0.9, own_kept
    assert copies_kept <= 0.06, copies_kept


def test_two_voices_at_once_stay_on_both() -> None:
    a, b = audio(READER_A), audio(READER_B)
    n = min(a.size, b.size)
    mics = leaked([a[:n], b[:n]])
    allowed = arbitrate(mics)
    chunks = allowed.shape[1]
    for i, own in enumerate((a[:n], b[:n])):
        p = chunk_power(own)[:chunks]
        loud = p > np.percentile(p, 90) * 0.01
        # Kept where that reader's voice is loud; the rest is where the other reader is louder at this microphone
        # than this one's own voice (its quiet syllables): a partial gap, not a lost sentence (next test).
        assert (allowed[i] & loud).sum() / loud.sum() >= 0.75, i


def test_silence_everywhere_and_one_microphone() -> None:
    quiet = [np.zeros(SAMPLE_RATE * 3, dtype=np.float32) for _ in range(3)]
    assert arbitrate(quiet).all()
    alone = arbitrate([audio(READER_A)])  # a room with one microphone compares nothing
    assert alone.all()


def test_a_microphone_that_leaves_is_forgotten() -> None:
    room = CrossTalk(clock=lambda: 1.0)
    a, b = room.microphone("a"), room.microphone("b")
    b.close()
    assert list(room.microphones) == ["a"]
    a.heard(CHUNK_SAMPLES, np.ones(CHUNK_SAMPLES, dtype=np.float32) * 0.1)
    assert a.allows(0, WINDOW)


async def locked_speech_s(session_messages: list[protocol.ServerMessage]) -> float:
    return sum(
        (s.end_ms - s.start_ms) / 1000 for m in session_messages if isinstance(m, protocol.Caption) for s in m.sentences
    )


async def publish_side_by_side(engine: CaptionEngine, mics: list[np.ndarray], arbitrated: bool) -> list[float]:
    """Real engine sessions (real VAD) fed the microphones chunk by chunk, interleaved, each in one room's arbiter
    (or none); returns the seconds of speech each locked."""
    now = [0.0]
    room = CrossTalk(clock=lambda: now[0])
    sessions = [engine.open_session(session_id=f"mic{i}") for i in range(len(mics))]
    if arbitrated:
        for s in sessions:
            s.share_room(room.microphone(s.session_id))
    collected: list[list[protocol.ServerMessage]] = [[] for _ in sessions]

    async def drain(i: int) -> None:
        async for m in sessions[i].messages():
            collected[i].append(m)

    readers = [asyncio.create_task(drain(i)) for i in range(len(sessions))]
    chunks = min(m.size for m in mics) // CHUNK_SAMPLES
    for k in range(chunks):
        now[0] = (k + 1) * CHUNK_SAMPLES / SAMPLE_RATE
        for s, mic in zip(sessions, mics, strict=True):
            s.feed(mic[k * CHUNK_SAMPLES : (k + 1) * CHUNK_SAMPLES])
        await asyncio.sleep(0)
        if k % 8 == 0:
            for s in sessions:
                await s.caught_up(0.3, 4)
    for s in sessions:
        await s.stop()
    await asyncio.gather(*readers)
    return [await locked_speech_s(c) for c in collected]


@pytest.mark.parametrize("arbitrated", [True, False])
async def test_a_copy_opens_no_sentence(fake_engine: CaptionEngine, arbitrated: bool) -> None:
    """One reader at microphone 0, heard 12 dB down by a silent microphone 1: with the arbiter only microphone 0
    captions; without it (the control) both do."""
    a = audio(READER_A)
    silence = np.zeros_like(a)
    mics = leaked([a, silence])
    spoken = await publish_side_by_side(fake_engine, mics, arbitrated)
    assert spoken[0] >= 5.0, spoken
    if arbitrated:
        assert spoken[1] == 0.0, spoken
    else:
        assert spoken[1] >= 5.0, spoken


async def test_two_readers_at_once_both_caption(fake_engine: CaptionEngine) -> None:
    a, b = audio(READER_A), audio(READER_B)
    n = min(a.size, b.size)
    spoken = await publish_side_by_side(fake_engine, leaked([a[:n], b[:n]]), arbitrated=True)
    assert min(spoken) >= 5.0, spoken
