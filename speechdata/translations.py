"""Reference translations of recorded clips (``shared/data/translations/<lang>.jsonl``, beside the speech): one JSON
object per clip, ``{"id", "lang", "text"}``. ``es.jsonl`` translates English clips into Spanish; ``en.jsonl``
translates the Chinese clips into English (for Whisper's translate task)."""

from __future__ import annotations

import itertools
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
    punctuation, so they are sentence-cased ("I" kept) and end with a full stop, as Whisper writes them. A reference
    that joins a lower-case transcript with a LibriSpeech one (the constructed dialogues) has its upper-case run
    (three words or more) cased the same way."""
    words = str(manifest()[clip_id]["text"]).strip().split()
    out: list[str] = []
    for upper, group in itertools.groupby(words, str.isupper):
        run = list(group)
        out += [_lower_case(w) for w in run] if upper and (len(run) >= 3 or len(run) == len(words)) else run
    text = " ".join(out)
    text = text[:1].upper() + text[1:]
    return text if text[-1:] in ".?!" else text + "."


def _lower_case(word: str) -> str:
    """An upper-case reference word as Whisper writes it mid-sentence ("I" and "I'm" keep their capital)."""
    lower = word.lower()
    return "I" if lower == "i" else "I'" + lower[2:] if lower.startswith("i'") else lower
