"""How sure the recognizer was of each word it wrote: the probability of the word's tokens, from the decoder.

Whisper's BPE tokens that begin a word carry its leading space, so the generated tokens group into the words of the
text; a word's probability is the product of its tokens' (the chance the decoder gives the whole word, given what
came before). A word Whisper's decoder was made to start with (a forced prefix) was not generated: it counts as
certain. The stability policy (``engine.stream.stable``) settles no word the decoder was unsure of, and the streaming
APIs report these values as word confidences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def word_probabilities(pieces: Sequence[str], logprobs: Sequence[float]) -> list[float]:
    """Per word of ``"".join(pieces).split()``: the product of its tokens' probabilities, its punctuation left out
    (unless it is all punctuation).

    The words are what matters: where the audio stops, the decoder is often unsure whether a comma or a full stop
    follows a word it is sure of ("antecedents," at 0.5, "antecedents" at 0.99); agreement between decodes already
    judges the punctuation.

    ``pieces``: the decoded text of each generated text token, in order (a piece that starts with whitespace begins
    a word); ``logprobs``: each token's natural log-probability. A piece of whitespace alone, or a piece that both
    begins a word and holds a space inside it, is taken as the text says (``split`` decides what a word is): the
    result has exactly one value per word of the joined text."""
    if len(pieces) != len(logprobs):
        raise ValueError(f"{len(pieces)} pieces but {len(logprobs)} log-probabilities")
    probs: list[float] = []
    lexical = punctuation = 0.0  # log-probabilities of the open word's lexical and punctuation pieces
    has_word = has_lexical = False  # a word is open; it has a lexical piece

    def close() -> None:
        nonlocal lexical, punctuation, has_word, has_lexical
        if has_word:
            probs.append(math.exp(lexical if has_lexical else punctuation))
        lexical = punctuation = 0.0
        has_word = has_lexical = False

    def add(text: str, logprob: float) -> None:
        nonlocal lexical, punctuation, has_word, has_lexical
        has_word = True
        if any(c.isalnum() for c in text):
            lexical += logprob
            has_lexical = True
        else:
            punctuation += logprob

    for piece, logprob in zip(pieces, logprobs, strict=True):
        parts = piece.split()
        if not parts or piece[:1].isspace():  # a space ends the open word
            close()
        for k, part in enumerate(parts):  # each part but the last ends at a space inside the piece
            add(part, logprob)
            if k < len(parts) - 1 or piece[-1:].isspace():
                close()
    close()
    return probs


def glues_on(forced: str, generated: str) -> bool:
    """Whether a decode made to start with ``forced`` went on inside its last word: its generated text
    (``generated``, leading space kept) begins without a space ("other" + ", Kat")."""
    return bool(forced.strip()) and generated[:1] != "" and not generated[:1].isspace()


def text_word_probabilities(
    text: str, forced: str, generated: str, pieces: Sequence[str], logprobs: Sequence[float]
) -> tuple[float, ...]:
    """Per word of ``text`` (split on spaces), or () when the words cannot be matched one to one.

    ``text`` is the transcript: the words the decoder was made to start with (``forced``, probability 1), then the
    words of ``generated``, the text of the generated tokens ``pieces`` (with ``logprobs``); where ``generated``
    does not begin with a space it goes on inside the last forced word ("other" + ", Kat"), and that word keeps its
    probability unless letters were added to it. Cleaning that changed the words (a non-speech tag taken out)
    leaves nothing to match: ()."""
    words, forced_words, generated_words = text.split(), forced.split(), generated.split()
    probs = word_probabilities(pieces, logprobs)
    if "".join(pieces).split() != generated_words or len(probs) != len(generated_words):
        return ()
    if glues_on(forced, generated):
        glued = any(c.isalnum() for c in generated_words[0])
        merged = probs[0] if glued else 1.0
        result = (1.0,) * (len(forced_words) - 1) + (merged,) + tuple(probs[1:])
    else:
        result = (1.0,) * len(forced_words) + tuple(probs)
    return tuple(round(p, 4) for p in result) if len(result) == len(words) else ()
