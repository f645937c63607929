"""Cross-talk between the microphones of one room: every voice captioned once, from the microphone it belongs to.

In a meeting where each person has a microphone (their phone on the table), every microphone also hears the others'
voices, 6-20 dB down and a few milliseconds late. Left alone, each would caption every voice it hears. ``CrossTalk``
decides, for each moment of each microphone's audio, whether what it hears is its own voice; where it is only a copy
of a voice that is louder at another microphone, the session's VAD is told "no speech" (``Microphone.allows``), so
the copy is neither decoded nor shown. Two people talking at once, each at their own microphone, are both kept.

How: a voice is loudest at its own microphone, and it reaches microphone ``i`` from microphone ``j``'s position with a
power gain ``G[i][j]`` (about -12 dB for phones a seat apart) that stays put while people sit. So the power microphone
``i`` hears in a slot of ``SLOT_S`` is its own voice plus ``sum_j G[i][j] * P_j`` of the others': what is left after
taking the others' share away is its own. A slot is the microphone's own when that remainder is at least
``own_share`` of its power; a microphone keeps its voice ``hold_slots`` slots past the last slot it owned, so that a
word's soft ending is not cut. Powers are the speech band's (``SpeechBand``: above 300 Hz), so a headset's breath
rumble or a knock on the table is nobody's voice. ``G[i][j]`` is learned as the room goes: each slot that is ``j``'s
own speech (its VAD says speech) and loud (within ``loud_db`` of its recent peak) is a sample of ``P_i / P_j`` for
every ``i`` that did not speak then and heard less than ``j``, and ``G[i][j]`` is their ``learn_quantile`` over the
last ``history`` samples (``prior_db`` until ``min_samples`` are in).

A window is judged once every other microphone's audio of its moment has arrived, or ``max_wait_s`` after it ended
(``Microphone.decidable``; ``OwnVoice`` holds the session's VAD windows back until then). A window judged another
microphone's voice reaches the session's endpointer as silence, and its audio is silenced too: an open sentence's
decode must not hear it either.

One clock: each microphone's audio is placed on the server's monotonic clock by the earliest arrival of its recent
samples (``arrival - media time``, its minimum over the last 6 s: the least-delayed packet bounds the path's delay,
and a sender that fell behind or whose clock drifts is followed), so the microphones' slots line up to within their
networks' difference in least delay; the comparison takes the others' loudest slot within ``tolerance_slots`` either
side. A room with one microphone compares nothing (``allows`` is True at once).

Everything here is arithmetic on a few floats per 60 ms of audio per microphone: no model, nothing that blocks.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.signal import butter, sosfilt

from engine.audio.pcm import SAMPLE_RATE

SPEECH_PROB = 0.5  # a VAD window this sure of speech is speech (its slot, if the microphone's own, teaches the room)
SLOT_S = 0.06  # the arbiter's grain: one 60 ms chunk (what a transport feeds at a time)
_CLOCK_CHUNKS = 100  # a microphone's clock: its least-delayed chunk of the last 6 s
_KEEP_SLOTS = 100  # a microphone's last 6 s of slot powers (the VAD asks within a second of the audio arriving)
_FLOOR = 1e-9  # mean-square power below -90 dBFS: digital silence, nobody's voice
SPEECH_HZ = 300.0
_HIGH_PASS = butter(2, SPEECH_HZ, btype="highpass", fs=SAMPLE_RATE, output="sos")


@dataclass(frozen=True)
class CrossTalkConfig:
    """How the arbiter decides (see the module docstring)."""

    own_share: float = 0.4  # a slot is a microphone's own when its own voice is at least this share of its power
    hold_slots: int = 2  # ...and stays its own this many slots after the last that was
    tolerance_slots: int = 1  # the others' power: their loudest slot within this many either side (clock error)
    prior_db: float = -15.0  # leak gain between two microphones before it is learned (unrelated ones: none)
    learn_quantile: float = 0.2  # the leak gain: this quantile of the power ratios seen
    history: int = 200  # ...over the last this many slots where the other microphone spoke loudly
    min_samples: int = 5  # ...once at least this many are in
    loud_db: float = 10.0  # own speech teaches the leak gains when within this of the microphone's recent peak
    # A slot is judged once every other microphone's audio of it (and of ``tolerance_slots`` after) is in, or this
    # long after it ended: a microphone whose audio stalls holds the others' speech back no longer than this.
    max_wait_s: float = 0.2
    # A microphone whose speaker paused this long while another microphone's voice speaks ends its sentence: the turn
    # went to them (``OwnVoice.floor_taken``).
    floor_pause_ms: int = 250
    peak_decay: float = 0.999  # per slot: a microphone's recent peak power forgets (about a minute to fall 26 dB)


class SpeechBand:
    """A microphone's audio above ``SPEECH_HZ`` (a 2nd-order Butterworth high-pass, its state carried across chunks):
    what the arbiter compares is the speech band's power, so that a headset's breath and handling rumble, a knock on
    the table or a room's hum, all far below it, do not make a microphone look like it has a voice of its own."""

    def __init__(self) -> None:
        self._state = np.zeros((_HIGH_PASS.shape[0], 2))

    def power(self, samples: np.ndarray) -> float:
        """Mean-square power of the next ``samples`` in the speech band."""
        band, self._state = sosfilt(_HIGH_PASS, samples, zi=self._state)
        return float(np.dot(band, band) / max(1, band.size))


class Microphone:
    """One session's microphone in its room's ``CrossTalk``: the session tells it what it hears (``heard``) and asks
    it whether a VAD window is its own voice (``allows``). Sample positions are the session's (16 kHz, from 0)."""

    def __init__(self, room: CrossTalk, key: str) -> None:
        self.key = key
        self._room = room
        self.offset_s: float | None = None  # monotonic time of the session's sample 0 (``_clock``)
        # (chunk number, arrival - media time) of the last ``_CLOCK_CHUNKS`` chunks, increasing: their minimum first
        self._arrivals: deque[tuple[int, float]] = deque()
        self._chunks = 0
        self.slots: dict[int, float] = {}  # slot -> mean-square power heard in it
        self._order: deque[int] = deque()  # slots in the order they were heard (to forget the oldest)
        self._peak = _FLOOR  # its recent loudest own speech (``_speaking``)
        self._peak_slot = 0
        self._taught = -(10**9)  # the newest slot that was its own speech
        self.spoke: set[int] = set()  # its recent slots of own speech (forgotten with their powers)
        self._last_own = -(10**9)  # the newest slot that was this microphone's own
        self._decided: tuple[int, bool] = (-(10**9), True)  # (slot, decision): VAD windows are finer than slots
        self.newest = -(10**9)  # the newest slot heard
        self._band = SpeechBand()

    def heard(self, end_sample: int, samples: np.ndarray) -> None:
        """The session received ``samples`` (float32, -1..1), ending at session sample ``end_sample``, now."""
        if samples.size == 0:
            return
        self._clock(self._room.clock() - end_sample / SAMPLE_RATE)
        middle = (end_sample - samples.size / 2) / SAMPLE_RATE
        slot = self._slot(middle)
        power = self._band.power(samples)
        if slot not in self.slots:
            self._order.append(slot)
            while len(self._order) > _KEEP_SLOTS:
                old = self._order.popleft()
                self.slots.pop(old, None)
                self.spoke.discard(old)
        self.slots[slot] = max(power, self.slots.get(slot, 0.0))
        self.newest = max(self.newest, slot)

    @property
    def config(self) -> CrossTalkConfig:
        return self._room.config

    def decidable(self, start_sample: int, end_sample: int) -> bool:
        """Whether ``allows`` can judge the session's audio from ``start_sample`` to ``end_sample`` now: every other
        microphone's audio of that moment is in (or it waited ``max_wait_s``)."""
        if len(self._room.microphones) < 2 or self.offset_s is None:
            return True
        config = self._room.config
        slot = self._slot((start_sample + end_sample) / 2 / SAMPLE_RATE)
        if all(m.newest >= slot + config.tolerance_slots for m in self._room.microphones.values() if m is not self):
            return True
        return self._room.clock() >= (slot + 1 + config.tolerance_slots) * SLOT_S + config.max_wait_s

    def allows(self, start_sample: int, end_sample: int, speech: float = 1.0) -> bool:
        """Whether the session's audio from ``start_sample`` to ``end_sample`` (a VAD window whose speech probability
        is ``speech``) may be speech: False where it is a louder microphone's voice heard from afar. Its own loud
        speech teaches the room how much of it the others hear (``CrossTalk.learn``)."""
        if len(self._room.microphones) < 2 or self.offset_s is None:
            return True
        slot = self._slot((start_sample + end_sample) / 2 / SAMPLE_RATE)
        if self._decided[0] != slot:
            own = self._room.own(self, slot)
            if own:
                self._last_own = slot
            allowed = own or slot - self._last_own <= self._room.config.hold_slots
            self._decided = (slot, allowed)
        if speech >= SPEECH_PROB and self._last_own == slot and self._taught < slot:
            self._taught = slot
            self._speaking(slot)
        return self._decided[1]

    def _speaking(self, slot: int) -> None:
        """Slot ``slot`` is this microphone's own speech: it sets the microphone's recent peak, and a loud one
        teaches the leak gains."""
        config = self._room.config
        self.spoke.add(slot)
        self._peak = max(self._peak * config.peak_decay ** max(0, slot - self._peak_slot), self.slots.get(slot, 0.0))
        self._peak_slot = slot
        if self.loud(slot):
            self._room.learn(self, slot)

    def loud(self, slot: int) -> bool:
        """This microphone spoke loudly in ``slot`` (within ``loud_db`` of its recent peak)."""
        return self.slots.get(slot, 0.0) >= self._peak * 10 ** (-self._room.config.loud_db / 10)

    def power(self, slot: int, around: int = 0) -> float:
        """Its power in ``slot``, or its loudest within ``around`` slots either side (0 where nothing was heard)."""
        return max((self.slots.get(s, 0.0) for s in range(slot - around, slot + around + 1)), default=0.0)

    def close(self) -> None:
        """The session left the room."""
        self._room.remove(self)

    def _clock(self, arrival_offset: float) -> None:
        """Place the session's audio on the server's clock: the least-delayed chunk of the last ``_CLOCK_CHUNKS``
        (a sliding minimum, so that a sender that fell behind, or whose clock runs slow, is followed within seconds)."""
        self._chunks += 1
        while self._arrivals and self._arrivals[-1][1] >= arrival_offset:
            self._arrivals.pop()
        self._arrivals.append((self._chunks, arrival_offset))
        while self._arrivals[0][0] <= self._chunks - _CLOCK_CHUNKS:
            self._arrivals.popleft()
        self.offset_s = self._arrivals[0][1]

    def _slot(self, media_s: float) -> int:
        assert self.offset_s is not None
        return math.floor((media_s + self.offset_s) / SLOT_S)


class OwnVoice:
    """A session's VAD windows on their way to its endpointer through its room's ``Microphone``: each window waits
    until the room can judge it (``Microphone.decidable``: at most ``max_wait_s``), then goes on with its speech
    probability, or, where the room judged it another microphone's voice, with 0 and its audio silenced."""

    def __init__(self, microphone: Microphone, window: int, silence: Callable[[int, int], None]) -> None:
        """``window``: samples per VAD window; ``silence(start, stop)``: the session's audio of a window judged
        another microphone's voice is made silent (an open sentence's decode must not hear it either)."""
        self.microphone = microphone
        self._window = window
        self._silence = silence
        self._waiting = np.zeros(0, dtype=np.float32)  # probabilities of the windows not judged yet
        # Another microphone's voice has the floor: the newest window judged was someone else's speech. (The session
        # then ends its own sentence at a short pause: the turn went to them.)
        self.floor_taken = False

    def judged(self, probs: np.ndarray, start_sample: int, final: bool = False) -> np.ndarray:
        """The next windows' probabilities (``probs`` after those still waiting, which begin at session sample
        ``start_sample``), as far as they can be judged now; ``final``: all of them (the stream ends)."""
        waiting = np.concatenate([self._waiting, probs.astype(np.float32, copy=False)]) if self._waiting.size else probs
        w, mic = self._window, self.microphone
        n = len(waiting)
        if not final:
            n = 0
            while n < len(waiting) and mic.decidable(start_sample + n * w, start_sample + (n + 1) * w):
                n += 1
        ready, self._waiting = waiting[:n], waiting[n:]
        keep = [mic.allows(start_sample + i * w, start_sample + (i + 1) * w, float(ready[i])) for i in range(n)]
        if n:
            self.floor_taken = not keep[-1] and float(ready[-1]) >= SPEECH_PROB
        if all(keep):
            return ready
        for i, kept in enumerate(keep):
            if not kept:
                self._silence(start_sample + i * w, start_sample + (i + 1) * w)
        return np.where(keep, ready, 0.0).astype(ready.dtype)


class CrossTalk:
    """One room's arbiter over its microphones (see the module docstring). ``clock``: monotonic seconds."""

    def __init__(self, config: CrossTalkConfig | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or CrossTalkConfig()
        self.clock = clock
        self.microphones: dict[str, Microphone] = {}
        self._ratios: dict[tuple[str, str], deque[float]] = {}  # (i, j): samples of P_i / P_j where j spoke
        self._gains: dict[tuple[str, str], float] = {}  # (i, j) -> G[i][j], power ratio, once learned
        self._prior = 10 ** (self.config.prior_db / 10)

    def microphone(self, key: str) -> Microphone:
        """A new microphone in the room (``key``: its session id); ``Microphone.close`` takes it out."""
        mic = Microphone(self, key)
        self.microphones[key] = mic
        return mic

    def remove(self, mic: Microphone) -> None:
        if self.microphones.get(mic.key) is mic:
            del self.microphones[mic.key]
            for pair in [p for p in self._ratios if mic.key in p]:
                del self._ratios[pair]
                self._gains.pop(pair, None)

    def gain(self, i: str, j: str) -> float:
        """``G[i][j]``: the share of microphone ``j``'s power that microphone ``i`` hears (power ratio)."""
        return self._gains.get((i, j), self._prior)

    def own(self, mic: Microphone, slot: int) -> bool:
        """Whether ``mic``'s voice is at least ``own_share`` of what it heard in ``slot``."""
        power = mic.slots.get(slot, 0.0)
        if power <= _FLOOR:
            return True  # nothing to take from anyone
        around = self.config.tolerance_slots
        leak = sum(
            self.gain(mic.key, other.key) * other.power(slot, around)
            for other in self.microphones.values()
            if other is not mic
        )
        return power - leak >= self.config.own_share * power

    def learn(self, mic: Microphone, slot: int) -> None:
        """``mic`` spoke loudly in ``slot``: what each other microphone heard then is a sample of its leak gain from
        ``mic``, where it did not speak and heard less (its own sounds only raise a sample, which the low quantile
        passes over)."""
        power = mic.slots.get(slot, 0.0)
        if power <= _FLOOR:
            return
        for other in self.microphones.values():
            heard = other.slots.get(slot)
            if other is mic or heard is None or heard >= power or slot in other.spoke:
                continue  # (one speaking then too, or louder: what it heard was not only ``mic``'s voice)
            ratios = self._ratios.setdefault((other.key, mic.key), deque(maxlen=self.config.history))
            ratios.append(heard / power)
            if len(ratios) >= self.config.min_samples:
                self._gains[(other.key, mic.key)] = float(np.quantile(ratios, self.config.learn_quantile))
