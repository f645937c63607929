"""Whisper's decoder prompt as this project writes it, and the transcript of a decode made to start with given words."""

from __future__ import annotations

from engine.asr.confidence import glues_on
from engine.models.resolve import ModelSpec

MAX_CONTEXT_CHARS = 400  # keeps <|startofprev|> context well inside Whisper's 448-token decoder window


def decoder_prompt(
    spec: ModelSpec,
    language: str | None,
    context: str,
    forced: str = "",
    timestamps: bool = False,
    task: str = "transcribe",
) -> str:
    """Whisper's decoder prompt: optional previous-text context, the task tokens, then ``forced`` text the
    transcript must start with.

    English-only checkpoints take no language or task token. With ``language=None`` a multilingual model writes
    the language token itself (detection), then the task token; no text can be forced then. ``timestamps``: open
    the text with ``<|0.00|>`` instead of ``<|notimestamps|>``, so the model writes timestamp tokens (as vLLM's
    transcription server does for ``verbose_json``). ``task``: ``"translate"`` writes the speech in English (a
    multilingual model given the language only: an English-only one has no task token and transcribes).
    """
    prefix = ""
    context = " ".join(context.split())[:MAX_CONTEXT_CHARS]
    if context:
        prefix = "<|startofprev|> " + context
    forced = f" {forced.strip()}" if forced.strip() else ""
    mode = "<|0.00|>" if timestamps else "<|notimestamps|>"
    if not spec.multilingual:
        return prefix + "<|startoftranscript|>" + mode + forced
    if language is None:
        return prefix + "<|startoftranscript|>"
    return prefix + f"<|startoftranscript|><|{language}|><|{task}|>{mode}" + forced


def joined(forced: str, generated: str) -> str:
    """The transcript of a decode made to start with ``forced``: ``generated`` (the generated tokens' text, its
    leading space kept) after it, glued on where the decoder went on inside the forced text's last word (forced
    "other", generated ", Kat": "other, Kat"), spaces folded."""
    if glues_on(forced, generated):
        return " ".join((forced + generated).split())
    return " ".join(filter(None, (forced, " ".join(generated.split()))))
