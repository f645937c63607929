"""Stable words: the words of an open segment that have stopped changing, sent once and never withdrawn.

Policy (LocalAgreement-2, as in whisper_streaming): a word settles once two consecutive partial decodes of the
segment agree on it and on every word before it, exactly (spelling, case and punctuation). The last word of a
decode whose audio ended inside speech does not count: the audio may have cut it mid-syllable ("fore" of
"forest"). Settled words are forced as the start of every later decode of the segment, its final included
(``DecodeRequest.prefix``), so the locked sentence begins with exactly them; a recognizer that cannot force text
is reconciled afterwards (``onto``). A word one decode is very sure of (``sure_prob``) settles without waiting for
the next decode once enough of that decode's words follow it (``sure_after``): the rule that two decodes agree
is what makes a word wait, not its age (docs/benchmarks.md, "Captions that settle").

Pure and synchronous; one ``StableWords`` per open segment (``engine.stream.session``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from engine.asr.guard import normalise


def onto(stable: list[str], decoded: list[str]) -> list[str]:
    """``decoded`` with ``stable`` in front: the words a decode that was forced to start with ``stable`` returns,
    whatever the decode did. Where it strayed (compared without case or punctuation), the settled words stay and
    the decode's words continue from where the settled words' end lies in it: after the last settled word it
    matches, as many words on as the settled words go on past that match. A decode that says none of the settled
    words (it heard none of them: audio that begins after them) follows them whole."""
    n = len(stable)
    if not n:
        return list(decoded)
    key_s, key_d = [normalise(w) for w in stable], [normalise(w) for w in decoded]
    if key_d[:n] == key_s:
        return stable + _after(stable, decoded[n:])
    blocks = [
        b for b in difflib.SequenceMatcher(None, key_s, key_d[: n + 3], autojunk=False).get_matching_blocks() if b.size
    ]
    if not blocks:
        return stable + _after(stable, decoded)
    last = blocks[-1]
    end = last.b + last.size + (n - last.a - last.size)  # where the settled words end in the decode
    return stable + _after(stable, decoded[end:])


def _after(stable: list[str], rest: list[str]) -> list[str]:
    """The decode's words after the settled ones, less the punctuation it wrote on its own right after them (forced
    "don't" then ". When": the settled "don't." has its full stop already)."""
    k = 0
    while k < len(rest) and not normalise(rest[k]) and stable and not stable[-1][-1:].isalnum():
        k += 1
    return rest[k:]


def without_lead(words: list[str], lead: list[str]) -> list[str]:
    """``words`` less their longest start that is a start of ``lead`` (compared without case or punctuation)."""
    k = 0
    while k < min(len(words), len(lead)) and normalise(words[k]) == normalise(lead[k]):
        k += 1
    return words[k:]


@dataclass
class StableWords:
    """The settled words of one open segment and how many of them were sent. ``min_age_s``: a word settles only once
    it has held, unchanged and with every word before it, over decodes spanning this many seconds of audio (the words
    said last are the ones a decode with more audio after them most often corrects: on noisy speech two partials
    agreed on "which plays" that the whole sentence decoded as "to its place")."""

    words: list[str] = field(default_factory=list)
    sent: int = 0  # leading ``words`` already sent to the client as stable (``take_new``)
    min_age_s: float = 0.0
    min_prob: float = 0.0  # a word the decode gave a lower probability than this does not settle
    # A word one decode gave at least ``sure_prob`` settles without waiting for the next decode once ``sure_after``
    # words follow it in that decode, as do all before it (0: off). The age limit does not apply to it: the words
    # after it stand for the audio after it.
    sure_prob: float = 0.0
    sure_after: int = 2
    agreed: int = 0  # leading words the newest decode said as the one before it did (settled or not)
    _previous: list[str] | None = None  # the words of the previous decode (with the settled words in front)
    _previous_open: bool = False  # that decode's audio ended inside speech
    _since: list[float] = field(default_factory=list)  # per word of ``_previous``: audio end of the decode it began in

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def update(
        self, decoded: list[str], ended_in_speech: bool, audio_end_s: float = 0.0, probs: tuple[float, ...] = ()
    ) -> list[str]:
        """Take the words of the segment's next partial decode (decodes in order; ``ended_in_speech``: its audio
        stopped while the speaker was talking; ``audio_end_s``: where its audio ends, seconds on any clock that
        moves with the audio; ``probs``: the decoder's probability of each word of ``decoded``, or () if unknown).
        Returns the words to show: the settled ones, then the decode's. Settles the words it agrees on with the
        previous decode that have held for ``min_age_s`` and that it gave at least ``min_prob``, then those it alone
        gave at least ``sure_prob`` with ``sure_after`` of its words after them. An empty decode
        (rejected, or no words yet) settles nothing and is not compared with."""
        words = onto(self.words, decoded)
        if not decoded:
            return words
        previous = self._previous or []
        agreed = 0
        while agreed < min(len(words), len(previous)) and words[agreed] == previous[agreed]:
            agreed += 1
        since = self._since[:agreed] + [audio_end_s] * (len(words) - agreed)
        self.agreed = agreed
        limit = len(self.words)
        if self._previous is not None:
            limit = min(agreed, len(words) - int(ended_in_speech), len(previous) - int(self._previous_open))
            while limit > len(self.words) and audio_end_s - since[limit - 1] < self.min_age_s:
                limit -= 1
            limit = max(len(self.words), self._sure_run(words, decoded, probs, len(self.words), limit, self.min_prob))
        if self.sure_prob > 0 and len(probs) == len(decoded):  # words this decode alone is sure of
            limit = self._sure_run(words, decoded, probs, limit, len(words) - self.sure_after, self.sure_prob)
        if limit > len(self.words):
            self.words = words[:limit]
        self._previous, self._previous_open, self._since = words, ended_in_speech, since
        return words

    @staticmethod
    def _sure_run(
        words: list[str], decoded: list[str], probs: tuple[float, ...], start: int, stop: int, threshold: float
    ) -> int:
        """Where the run of ``words[start:stop]`` that the decode gave at least ``threshold`` each ends (``start``
        if ``stop`` is not past it). A decode without probabilities is sure of every word. ``words`` ends with the
        decode's words (``onto`` put the settled ones in front of what follows them)."""
        shift = len(decoded) - len(words)  # words[k] is decoded[k + shift]
        known = len(probs) == len(decoded)
        k = start
        while k < stop and (not known or k + shift < 0 or probs[k + shift] >= threshold):
            k += 1
        return k

    def take_new(self) -> list[str]:
        """The settled words not sent yet (they count as sent from now on), with their indexes from ``sent``."""
        new = self.words[self.sent :]
        self.sent = len(self.words)
        return new
