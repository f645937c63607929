"""Transcripts as TXT, SRT, WebVTT or JSON: the one formatter of the project. A room's transcript files
(``GET /rooms/{id}/transcript.{fmt}``) and the caption page's download buttons (``POST /exports/transcript.{fmt}``
with the sentences the page shows) both come from here. Times are milliseconds (the room's timeline for a room,
the session's for the page)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from .store import RoomRecord, SentenceRecord

MIME = {"txt": "text/plain", "srt": "application/x-subrip", "vtt": "text/vtt", "json": "application/json"}


def speaker_name(spk: int | None) -> str:
    """0-based server labels read as "Speaker 1", "Speaker 2", ...; unknown is "Speaker ?"."""
    return "Speaker ?" if spk is None else f"Speaker {spk + 1}"


def clock_time(ms: float, sep: str) -> str:
    """``HH:MM:SS<sep>mmm``. Rounds to whole milliseconds first and derives every field from that integer, so
    999.6 ms is ``00:00:01,000`` and never ``00:00:00,1000``."""
    total = max(0, round(ms))
    hours, rest = divmod(total, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{sep}{millis:03d}"


def turns(sentences: Sequence[SentenceRecord]) -> list[list[SentenceRecord]]:
    """Consecutive sentences of one speaker within one publisher session."""
    groups: list[list[SentenceRecord]] = []
    last: SentenceRecord | None = None
    for s in sentences:
        if last is None or s.spk != last.spk or s.session != last.session:
            groups.append([])
        groups[-1].append(s)
        last = s
    return groups


def to_txt(sentences: Sequence[SentenceRecord]) -> str:
    return "\n".join(f"[{clock_time(t[0].start_ms, '.')[:8]}] {speaker_name(t[0].spk)}\n"
                     f"{' '.join(_one_line(s.text) for s in t)}\n" for t in turns(sentences))


def to_srt(sentences: Sequence[SentenceRecord]) -> str:
    cues = []
    for i, s in enumerate(sentences, 1):
        start, end = _cue_times(s)
        who = "" if s.spk is None else f"{speaker_name(s.spk)}: "
        cues.append(f"{i}\n{clock_time(start, ',')} --> {clock_time(end, ',')}\n{who}{_cue_text(s.text)}\n")
    return "\n".join(cues)


def to_vtt(sentences: Sequence[SentenceRecord]) -> str:
    """Starts with ``WEBVTT`` even when there is no cue; speakers as voice spans ``<v Speaker 1>``."""
    cues = ["WEBVTT\n"]
    for i, s in enumerate(sentences, 1):
        start, end = _cue_times(s)
        text = _cue_text(s.text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        body = text if s.spk is None else f"<v {speaker_name(s.spk)}>{text}"
        cues.append(f"{i}\n{clock_time(start, '.')} --> {clock_time(end, '.')}\n{body}\n")
    return "\n".join(cues)


def room_header(room: RoomRecord) -> dict[str, Any]:
    """The JSON export's leading fields for a room's transcript."""
    return {"room": room.id, "title": room.title,
            "room_created": datetime.fromtimestamp(room.created_ms / 1000, UTC).isoformat()}


def to_json(sentences: Sequence[SentenceRecord], header: dict[str, Any]) -> str:
    """``header`` fields first (``room_header``, or the page's model and language), then ``exported_at`` and the
    sentences."""
    document = {
        **header,
        "exported_at": datetime.now(UTC).isoformat(),
        "sentences": [{"id": s.id, "session": s.session, "start_ms": s.start_ms, "end_ms": s.end_ms, "spk": s.spk,
                       "speaker": None if s.spk is None else speaker_name(s.spk), "text": s.text}
                      for s in sentences],
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def render(fmt: str, sentences: Sequence[SentenceRecord], header: dict[str, Any]) -> str:
    """Raises ``KeyError`` for a format not in ``MIME``. ``header``: see ``to_json`` (other formats ignore it)."""
    renderers: dict[str, Callable[[], str]] = {
        "txt": lambda: to_txt(sentences), "srt": lambda: to_srt(sentences), "vtt": lambda: to_vtt(sentences),
        "json": lambda: to_json(sentences, header)}
    return renderers[fmt]()


def _cue_times(s: SentenceRecord) -> tuple[int, int]:
    # Players drop a cue whose end is not after its start; give such a cue one millisecond.
    return s.start_ms, max(s.end_ms, s.start_ms + 1)


def _cue_text(text: str) -> str:
    # A blank line ends a cue and "-->" would read as a timing line: keep the text on one line.
    return _one_line(text).replace("-->", "→")


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
