"""Whisper's decoder prompt (``engine.asr.prompts``): the task and the language a decode asks for."""

from __future__ import annotations


def test_a_translation_asks_whisper_for_its_translate_task_in_the_language_spoken() -> None:
    from engine.asr.prompts import decoder_prompt
    from engine.models.resolve import ModelSpec

    multilingual = ModelSpec("whisper-base", "", multilingual=True, embedded=True)
    assert decoder_prompt(multilingual, "zh", "", task="translate").endswith("<|zh|><|translate|><|notimestamps|>")
    assert decoder_prompt(multilingual, "zh", "").endswith("<|zh|><|transcribe|><|notimestamps|>")
    english_only = ModelSpec("whisper-tiny.en", "", multilingual=False, embedded=True)
    assert "translate" not in decoder_prompt(english_only, "en", "", task="translate")
