"""Whisper's tokens as the vLLM recognizer reads them: which ids are special (language, task, timestamps), the text
of a token, a decode's confidence per token and per word, and its timed stretches.

Built once from the loaded engine's tokenizer (``WhisperTokens.of``); until then (``WhisperTokens()``) nothing is
special, nothing is timed and no text has ids, so a recognizer that is not loaded reads no decode wrongly.
"""

from __future__ import annotations

import math
from typing import Any

from engine.asr.confidence import text_word_probabilities
from engine.asr.guard import strip_nonspeech
from engine.asr.timestamps import TimedSpan, parse_spans

_NONE = 1 << 30  # an id beyond every vocabulary: "no such token"


class WhisperTokens:
    """The token facts of one loaded Whisper (see the module). ``tokenizer``: the engine's (Hugging Face's
    ``WhisperTokenizer`` interface: ``get_vocab``, ``convert_tokens_to_ids``, ``convert_ids_to_tokens``, ``decode``,
    ``encode``), None before the model is loaded."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer
        self.languages: dict[int, str] = {}  # token id -> language code, to report what a multilingual model heard
        self.first_special = _NONE  # ids from here up are special: <|endoftext|>, languages, tasks, timestamps
        self.first_timestamp = _NONE  # <|0.00|>; every later id is a timestamp
        self._pieces: dict[int, str] = {}  # token id -> its text (``piece``)

    @classmethod
    def of(cls, tokenizer: Any) -> WhisperTokens:
        """The facts of ``tokenizer`` (reads its whole vocabulary: call it off the event loop)."""
        tokens = cls(tokenizer)
        if tokenizer is not None:
            tokens.languages = tokens._language_ids()
            tokens.first_special = tokens.token_id("<|endoftext|>")
            tokens.first_timestamp = tokens.token_id("<|0.00|>")
        return tokens

    @property
    def timed(self) -> bool:
        """Whether the model has timestamp tokens (English-only checkpoints converted without them have none)."""
        return self.first_timestamp < _NONE

    def token_id(self, token: str) -> int:
        """The id of one special token, or a number beyond the vocabulary if the tokenizer lacks it."""
        tok = self.tokenizer
        if tok is None:
            return _NONE
        found = tok.convert_tokens_to_ids(token)
        # An unknown token maps to the unknown id (Whisper's is <|endoftext|>): check the id names the token.
        known = isinstance(found, int) and found > 0 and tok.convert_ids_to_tokens(found) == token
        return int(found) if known else _NONE

    def _language_ids(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for token, token_id in self.tokenizer.get_vocab().items():
            code = token[2:-2]
            if (
                token.startswith("<|")
                and token.endswith("|>")
                and 2 <= len(code) <= 3
                and code.isalpha()
                and code.islower()
            ):
                out[token_id] = code
        return out

    def is_text(self, token_id: int) -> bool:
        """Whether ``token_id`` is a piece of the transcript's text (not a special token)."""
        return token_id < self.first_special

    def piece(self, token_id: int) -> str:
        """The text of one token as it reads inside a transcript (its leading space kept)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = str(self.tokenizer.decode([token_id]))
        return piece

    def text(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens left out, its spaces as one."""
        return " ".join(str(self.tokenizer.decode(ids)).split()) if ids else ""

    def text_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` as Whisper writes it after the task tokens (leading space included)."""
        if not text or self.tokenizer is None:
            return []
        return list(self.tokenizer.encode(" " + text, add_special_tokens=False))

    def avg_logprob(self, completion: Any, ids: list[int], timestamps: bool) -> float:
        """Mean log-probability per generated token of ``completion`` (vLLM's ``CompletionOutput`` of ``ids``),
        timestamp tokens left out: the model is often unsure *when* a stretch ends while sure of its words, and the
        hallucination guard judges the words."""
        total = completion.cumulative_logprob or 0.0
        if not timestamps or completion.logprobs is None:
            return float(total / len(ids))
        timing = [k for k, t in enumerate(ids) if t >= self.first_timestamp]
        if len(timing) == len(ids):
            return float(total / len(ids))
        total -= sum(completion.logprobs[k][ids[k]].logprob for k in timing)
        return float(total / (len(ids) - len(timing)))

    def word_probs(
        self, completion: Any, ids: list[int], text: str, forced: str, generated: str, kept: int | None = None
    ) -> tuple[float, ...]:
        """Per word of ``text``, the decoder's probability of it (``engine.asr.confidence``); () when the
        completion has no log-probabilities or its tokens do not line up with the words. ``kept``: of a decode cut
        at a loop, how many generated text tokens its text keeps (``generated`` is then their text)."""
        logprobs = completion.logprobs
        if logprobs is None or len(logprobs) < len(ids):
            return ()
        text_at = [k for k, t in enumerate(ids) if self.is_text(t)][:kept]
        pieces = [self.piece(ids[k]) for k in text_at]
        if kept is not None:
            generated = "".join(pieces)
        return text_word_probabilities(
            text, forced, generated, pieces, [self.spelling_logprob(logprobs[k], ids[k]) for k in text_at]
        )

    def spelling_logprob(self, alternatives: dict[int, Any], token_id: int) -> float:
        """The log-probability of token ``token_id`` with its other spellings among the decoder's top alternatives
        (``alternatives``: id -> vLLM's ``Logprob``) counted in: " somehow" and "Somehow" are one word to a reader,
        and at the start of a sentence Whisper splits its certainty between them."""
        mine = self.piece(token_id).strip().lower()
        total = sum(
            math.exp(lp.logprob)
            for tid, lp in alternatives.items()
            if tid == token_id or (self.is_text(tid) and self.piece(tid).strip().lower() == mine)
        )
        return math.log(min(1.0, total)) if total > 0 else float(alternatives[token_id].logprob)

    def spans(self, ids: list[int], forced: str, audio_s: float) -> tuple[TimedSpan, ...]:
        """The timed stretches of a timestamped decode of ``audio_s`` seconds, each text cleaned as the whole text
        is."""
        tok = self.tokenizer
        spans = parse_spans(ids, self.first_timestamp, lambda t: str(tok.decode(t)), self.is_text, forced, audio_s)
        cleaned = (TimedSpan(s.start_s, s.end_s, strip_nonspeech(" ".join(s.text.split()))) for s in spans)
        return tuple(s for s in cleaned if s.text)
