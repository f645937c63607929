"""The hallucination guard (``engine.asr.guard``): empty text, stock phrases on near-silence, loops, low confidence
and too little speech are rejected; ordinary speech is kept."""

from __future__ import annotations

import pytest

from engine.asr.guard import reject_reason
from engine.asr.transcriber import Transcript
from engine.config import GuardConfig


def _t(text: str, logprob: float = -0.2, tokens: int = 8) -> Transcript:
    return Transcript(text, "en", logprob, tokens, 0.1)


@pytest.mark.parametrize(
    ("transcript", "level", "speech_ms", "rejected"),
    [
        (_t("The two stray kittens gradually make themselves at home."), -25.0, 3000, False),
        (_t(""), -25.0, 3000, True),
        (_t("  ...  "), -25.0, 3000, True),
        (_t("I'm not sure if I can get it right.", logprob=-1.4), -30.0, 2000, True),
        (_t("Thank you.", logprob=-0.3), -55.0, 800, True),  # stock phrase on near-silence
        (_t("Thank you.", logprob=-0.2), -24.0, 800, False),  # said out loud, it stays
        (_t("the end of the road " * 12), -25.0, 9000, True),  # a loop
        (_t("hello"), -25.0, 100, True),  # too little speech to trust
    ],
)
def test_guard(transcript: Transcript, level: float, speech_ms: int, rejected: bool) -> None:
    assert (reject_reason(transcript, level, speech_ms, GuardConfig()) is not None) is rejected
