"""Whisper's timestamp tokens: where in the audio each stretch of the decoded text was said.

A decode whose prompt ends in ``<|0.00|>`` instead of ``<|notimestamps|>`` writes the text as timed stretches:
``text <|2.40|><|2.40|> more text <|5.00|>``, each timestamp token ``<|t|>`` meaning t seconds (steps of 20 ms)
from the start of the decoded audio. ``parse_spans`` turns the generated token ids back into those stretches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

TIMESTAMP_STEP_S = 0.02


@dataclass(frozen=True)
class TimedSpan:
    """Text the recognizer placed in [start_s, end_s) seconds of the decoded audio."""

    start_s: float
    end_s: float
    text: str


def parse_spans(
    ids: Sequence[int],
    first_timestamp_id: int,
    decode: Callable[[list[int]], str],
    is_text: Callable[[int], bool],
    forced: str = "",
    audio_s: float | None = None,
) -> list[TimedSpan]:
    """The timed stretches of one timestamped decode.

    ``ids``: the generated ids (the prompt's ``<|0.00|>`` not included); ids >= ``first_timestamp_id`` are
    timestamps; ``is_text`` tells text ids from other special tokens (end of text), which are skipped. ``forced``:
    text that was forced after ``<|0.00|>`` in the prompt (it begins the first stretch). A stretch whose end
    timestamp never came (the decode stopped) ends at ``audio_s`` (or at its start). Timestamps are made
    monotonic: a timestamp earlier than the previous one is read as the previous one.
    """
    spans: list[TimedSpan] = []
    start = 0.0
    last = 0.0
    text_ids: list[int] = []
    pending_forced = forced.strip()

    def close(end: float) -> None:
        nonlocal pending_forced
        text = " ".join(filter(None, (pending_forced, decode(text_ids).strip() if text_ids else "")))
        pending_forced = ""
        if text:
            spans.append(TimedSpan(start, max(end, start), text))
        text_ids.clear()

    open_span = True  # the prompt's <|0.00|> opened the first stretch
    for token in ids:
        if token >= first_timestamp_id:
            t = max(last, (token - first_timestamp_id) * TIMESTAMP_STEP_S)
            last = t
            if open_span:
                close(t)
                open_span = False
            else:
                start = t
                open_span = True
        elif is_text(token):
            if not open_span:  # text without an opening timestamp: it starts where the last stretch ended
                start = last
                open_span = True
            text_ids.append(token)
    if open_span and (text_ids or pending_forced):
        close(max(last, audio_s if audio_s is not None else last))
    return spans
