"""The caption a session's client shows, composed from the session's parts and posted as ``caption`` messages
(docs/protocol.md): the sentences that just locked, then the text not locked yet (closed segments awaiting their
final decode, ``Finals.previews``, then the open segment's partial, ``Partials.text``) with how many of its leading
words are settled, the open segment's provisional speaker label, and the latency of the audio a caption covers.
"""

from __future__ import annotations

from collections.abc import Callable

import engine.protocol as protocol
from engine.stream.arrivals import Arrivals
from engine.stream.finals import Finals, Preview
from engine.stream.mailbox import Mailbox
from engine.stream.partials import Partials
from engine.stream.voices import Voices


class OnScreen:
    """Posts a session's captions into its ``mailbox``. ``live``: the session is still live (only then does a
    caption carry a latency: a stopping session's audio has all arrived)."""

    def __init__(
        self,
        mailbox: Mailbox,
        *,
        finals: Finals,
        partials: Partials,
        voices: Voices,
        arrivals: Arrivals,
        live: Callable[[], bool],
    ) -> None:
        self._mailbox, self._finals, self._partials, self._voices = mailbox, finals, partials, voices
        self._arrivals, self._live = arrivals, live

    def tentative(self) -> Preview:
        """The text not locked yet (closed segments awaiting their final, then the open segment) and how many of its
        leading words are settled (they lock exactly as shown)."""
        parts = self._finals.previews()
        if self._partials.text:
            parts.append(Preview(self._partials.text, len(self._partials.stable.words)))
        settled = 0
        for part in parts:
            settled += part.stable
            if part.stable < len(part.text.split()):
                break
        return Preview(" ".join(part.text for part in parts), settled)

    def post(self, sentences: list[protocol.Sentence], covered_end_sample: int, is_final: bool = False) -> None:
        """A caption with ``sentences`` (just locked) and the text not locked yet; ``covered_end_sample``: the session
        audio (samples) it is up to date with, for its latency (0: none); ``is_final``: the session's last caption
        (no text is left unlocked)."""
        latency = None
        if covered_end_sample and self._arrivals and self._live():
            latency = int(self._arrivals.since(covered_end_sample) * 1000)
        if is_final:
            self._mailbox.post_caption(sentences, "", is_final=True, latency_ms=latency)
            return
        shown = self.tentative()
        self._mailbox.post_caption(
            sentences,
            shown.text,
            latency_ms=latency,
            partial_spk=self._voices.label if self._partials.text else None,
            stable=shown.stable,
            stable_words=self._partials.new_stable_words(),
        )
