"""The JSON messages of Deepgram's live API, built from this server's sentences and words.

Times are seconds on the stream's timeline (0 = its first audio), as Deepgram's. A ``Results`` message's ``start``
and ``duration`` tile the stream: each final starts where the previous one ended (``Tiling``), interim results
cover the audio since the last final.

Confidence: Whisper gives a sentence's mean token log-probability (``Sentence.avg_logprob``); a final's
``confidence`` and its words' are ``exp`` of it. (A per-word probability would replace it in ``word_entry``.)
Interim results are not scored: their confidence is 0.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engine import protocol

_NOT_WORD = re.compile(r"[^\w']+|(?<!\w)'|'(?!\w)")
MODEL_UUID = str(uuid.uuid5(uuid.NAMESPACE_URL, "live-captions/model"))


def plain(word: str) -> str:
    """Deepgram's ``word``: lower case, no punctuation (the written form is ``punctuated_word``)."""
    return _NOT_WORD.sub("", word.lower()) or word.lower()


def confidence(sentence: protocol.Sentence) -> float:
    """A final's confidence from its decode's mean token log-probability (0 when unknown)."""
    if sentence.avg_logprob is None:
        return 0.0
    return round(min(1.0, max(0.0, math.exp(sentence.avg_logprob))), 4)


def word_confidences(sentence: protocol.Sentence, words: Sequence[protocol.Word]) -> list[float]:
    """Each of ``words``' confidence: the decoder's probability of that word where it gave one for each word of the
    sentence (``Sentence.word_probs``), else the sentence's ``confidence`` for all."""
    if len(sentence.word_probs) == len(words):
        return [round(min(1.0, max(0.0, p)), 4) for p in sentence.word_probs]
    return [confidence(sentence)] * len(words)


def word_entry(w: protocol.Word, conf: float, speaker: int | None) -> dict[str, Any]:
    """One entry of ``words`` (times in seconds; ``speaker`` only with ``diarize``)."""
    entry: dict[str, Any] = {
        "word": plain(w.w),
        "start": w.start_ms / 1000,
        "end": w.end_ms / 1000,
        "confidence": conf,
        "punctuated_word": w.w,
    }
    if speaker is not None:
        entry["speaker"] = speaker
        entry["speaker_confidence"] = conf
    return entry


def transcript(words: Sequence[protocol.Word], formatted: bool) -> str:
    """The transcript of ``words``: as written (``punctuate``/``smart_format``) or plain, as Deepgram's."""
    return " ".join(w.w if formatted else plain(w.w) for w in words)


def estimate_words(text: str, start_ms: int, end_ms: int) -> list[protocol.Word]:
    """Times for words whose times are not known yet (the unsettled end of an interim result): spread over
    [start_ms, end_ms] by length."""
    words = text.split()
    if not words:
        return []
    end_ms = max(end_ms, start_ms + 100 * len(words))
    total = sum(len(w) + 1 for w in words)
    out, t = [], float(start_ms)
    for w in words:
        step = (end_ms - start_ms) * (len(w) + 1) / total
        out.append(protocol.Word(w, int(t), int(t + step)))
        t += step
    return out


@dataclass
class Tiling:
    """Where the last final ended (ms): results start there."""

    end_ms: int = 0


def results(
    request_id: str,
    model: str,
    words: Sequence[protocol.Word],
    *,
    start_ms: int,
    end_ms: int,
    is_final: bool,
    speech_final: bool,
    from_finalize: bool,
    conf: float,
    speaker: int | None,
    formatted: bool,
    word_confs: Sequence[float] | None = None,
) -> dict[str, Any]:
    """A ``Results`` message for one channel (``channel_index`` ``[0, 1]``, as Deepgram sends for mono).
    ``word_confs``: each word's confidence (default: ``conf`` for every word)."""
    confs = list(word_confs) if word_confs is not None and len(word_confs) == len(words) else [conf] * len(words)
    return {
        "type": "Results",
        "channel_index": [0, 1],
        "duration": round(max(0, end_ms - start_ms) / 1000, 3),
        "start": start_ms / 1000,
        "is_final": is_final,
        "speech_final": speech_final,
        "from_finalize": from_finalize,
        "channel": {
            "alternatives": [
                {
                    "transcript": transcript(words, formatted),
                    "confidence": conf,
                    "words": [word_entry(w, c, speaker) for w, c in zip(words, confs, strict=True)],
                }
            ]
        },
        "metadata": {"request_id": request_id, "model_info": model_info(model), "model_uuid": MODEL_UUID},
    }


def model_info(model: str) -> dict[str, str]:
    return {"name": model, "version": "live-captions", "arch": "whisper"}


def metadata(request_id: str, model: str, duration_s: float, sha256: str, created: datetime) -> dict[str, Any]:
    """The ``Metadata`` message that ends a stream (after ``CloseStream``)."""
    return {
        "type": "Metadata",
        "transaction_key": "deprecated",
        "request_id": request_id,
        "sha256": sha256,
        "created": created.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "duration": round(duration_s, 3),
        "channels": 1,
        "models": [MODEL_UUID],
        "model_info": {MODEL_UUID: model_info(model)},
    }


def speech_started(timestamp_ms: int) -> dict[str, Any]:
    return {"type": "SpeechStarted", "channel": [0, 1], "timestamp": timestamp_ms / 1000}


def utterance_end(last_word_end_ms: int) -> dict[str, Any]:
    return {"type": "UtteranceEnd", "channel": [0, 1], "last_word_end": last_word_end_ms / 1000}


def error(description: str, variant: str = "SchemaError", message: str | None = None) -> dict[str, Any]:
    """An ``Error`` message (the stream goes on): ``SchemaError`` for a client message this server cannot read."""
    out: dict[str, Any] = {"type": "Error", "variant": variant, "description": description}
    if message is not None:
        out["message"] = message[:200]
    return out
