"""Reference translations of recorded clips (``shared/data/translations/<lang>.jsonl``, beside the speech): one JSON
object per clip, ``{"id", "lang", "text"}``. ``es.jsonl`` translates English clips into Spanish; ``en.jsonl``
translates the Chinese clips into English (for Whisper's translate task)."""

from __future__ import annotations

import json
from pathlib import Path

from speechdata.corpus import SPEECH_DIR, manifest

TRANSLATIONS_DIR = SPEECH_DIR.parent / "translations"


def references(lang: str) -> list[tuple[str, str]]:
    """``(clip id, reference translation)`` of every clip translated into ``lang``, in the file's order."""
    path: Path = TRANSLATIONS_DIR / f"{lang}.jsonl"
    with path.open(encoding="utf-8") as f:
        return [(str(item["id"]), str(item["text"])) for item in map(json.loads, filter(str.strip, f))]


def source_sentence(clip_id: str) -> str:
    """The clip's reference transcript as one written sentence: LibriSpeech's references are upper case without
    punctuation, so they are sentence-cased ("I" kept) and end with a full stop, as Whisper writes them."""
    text = str(manifest()[clip_id]["text"]).strip()
    if text.isupper():
        text = text[0] + text[1:].lower()
        text = " ".join("I" if w == "i" else "I'" + w[2:] if w.startswith("i'") else w for w in text.split())
    return text if text[-1:] in ".?!" else text + "."
