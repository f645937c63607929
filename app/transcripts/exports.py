"""Transcripts as TXT, SRT, WebVTT, SCC or JSON: the one formatter of the project. A room's transcript files
(``GET /rooms/{id}/transcript.{fmt}``) and the caption page's download buttons (``POST /exports/transcript.{fmt}``
with the sentences the page shows) both come from here. Times are milliseconds (the room's timeline for a room,
the session's for the page).

SRT and WebVTT carry the same cues: subtitle-grade ones from ``cues`` by default (``ExportOptions``, set from the
URL's query by ``parse_options``), or one cue per sentence on one line with ``?cues=sentence``. A change of speaker
is marked in the text as ``?speakers=`` says (``cues.SPEAKER_STYLES``: a dialogue dash by default); WebVTT also
names the speaker of every cue in a voice span. SCC (broadcast captions, ``scc``) carries the same subtitle cues
within CEA-608's 4 rows of 32 characters, as pop-on captions on drop-frame timecode."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..responses import ParameterError
from ..rooms import RoomRecord, SentenceRecord
from . import scc
from .cues import SPEAKER_STYLES, Cue, CueRules, build_cues, speaker_mark, speaker_name

# SCC has no registered type, and players and converters go by its extension and first line: plain text (it is
# ASCII), which a browser shows as it shows the TXT.
MIME = {
    "txt": "text/plain",
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
    "scc": "text/plain",
    "json": "application/json",
}
# Every download carries this: a browser must never guess another type than the one sent (a transcript is what
# people said, and a guess of HTML would run whatever they said as markup in this server's origin).
NOSNIFF = {"X-Content-Type-Options": "nosniff"}


CUE_MODES = ("subtitle", "sentence")


@dataclass(frozen=True)
class ExportOptions:
    """How SRT and WebVTT files cut the transcript: ``cues`` "subtitle" (``rules`` apply) or "sentence"; and how
    the text marks a change of speaker: ``speakers``, one of ``cues.SPEAKER_STYLES``."""

    cues: str = "subtitle"
    rules: CueRules = field(default_factory=CueRules)
    speakers: str = "dash"
    names: Mapping[int, str] = field(default_factory=dict)  # speaker label -> the name a room's editors gave it


class OptionError(ParameterError):
    """A bad cue option in the query; ``param`` names it."""


# Query parameter -> (CueRules field, lowest, highest). Bounds keep a file readable and the cue search small.
_RULE_PARAMS: dict[str, tuple[str, float, float]] = {
    "max_chars": ("max_chars", 10, 200),
    "max_lines": ("max_lines", 1, 4),
    "min_ms": ("min_ms", 0, 10_000),
    "max_ms": ("max_ms", 1000, 60_000),
    "max_cps": ("max_cps", 5, 100),
    "gap_ms": ("gap_ms", 0, 2000),
    "lead_ms": ("lead_ms", 0, 2000),
}


def parse_options(query: Mapping[str, str]) -> ExportOptions:
    """Export options from a transcript URL's query (``?cues=sentence``, ``?max_chars=32&max_lines=2``,
    ``?speakers=label``, ...); absent parameters keep the defaults. Raises ``OptionError`` naming the first bad
    parameter."""
    cues = query.get("cues", "subtitle")
    if cues not in CUE_MODES:
        raise OptionError("cues", f"cues must be one of {', '.join(CUE_MODES)}")
    speakers = query.get("speakers", "dash")
    if speakers not in SPEAKER_STYLES:
        raise OptionError("speakers", f"speakers must be one of {', '.join(SPEAKER_STYLES)}")
    values: dict[str, Any] = {}
    for param, (name, lo, hi) in _RULE_PARAMS.items():
        raw = query.get(param)
        if raw is None:
            continue
        number = _number(raw, integer=name != "max_cps")
        if number is None or not lo <= number <= hi:
            kind = "a number" if name == "max_cps" else "an integer"
            raise OptionError(param, f"{param} must be {kind} from {lo:g} to {hi:g}")
        values[name] = number
    rules = CueRules(**values)
    if rules.min_ms > rules.max_ms:
        raise OptionError("min_ms", "min_ms must not exceed max_ms")
    return ExportOptions(cues, rules, speakers)


def _number(raw: str, integer: bool) -> float | None:
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


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


def to_txt(sentences: Sequence[SentenceRecord], names: Mapping[int, str] | None = None) -> str:
    return "\n".join(
        f"[{clock_time(t[0].start_ms, '.')[:8]}] {speaker_name(t[0].spk, names)}\n"
        f"{' '.join(_one_line(s.text) for s in t)}\n"
        for t in turns(sentences)
    )


def to_srt(sentences: Sequence[SentenceRecord], options: ExportOptions = ExportOptions()) -> str:
    blocks = [
        f"{i}\n{clock_time(c.start_ms, ',')} --> {clock_time(c.end_ms, ',')}\n"
        f"{chr(10).join(_cue_line(line) for line in c.lines)}\n"
        for i, c in enumerate(_cues(sentences, options), 1)
    ]
    return "\n".join(blocks)


def to_vtt(sentences: Sequence[SentenceRecord], options: ExportOptions = ExportOptions()) -> str:
    """Starts with ``WEBVTT`` even when there is no cue. The text is the SRT's; each cue of a known speaker also
    opens with a voice span ``<v Speaker 1>`` (not shown, for players that style speakers): the name is there
    whatever mark the text uses."""
    blocks = ["WEBVTT\n"]
    for i, c in enumerate(_cues(sentences, options), 1):
        lines = [_vtt_escape(_cue_line(line)) for line in c.lines]
        if c.spk is not None and lines:
            lines[0] = f"<v {_vtt_escape(speaker_name(c.spk, options.names))}>{lines[0]}"
        blocks.append(f"{i}\n{clock_time(c.start_ms, '.')} --> {clock_time(c.end_ms, '.')}\n" + "\n".join(lines) + "\n")
    return "\n".join(blocks)


def _cues(sentences: Sequence[SentenceRecord], options: ExportOptions) -> list[Cue]:
    if options.cues == "subtitle":
        return build_cues(sentences, options.rules, options.speakers, options.names)
    # One cue per sentence, on one line: the speaker's mark (a label on every sentence of a known speaker, a dash
    # or chevrons where the speaker changes) and the whole text (players drop a cue whose end is not after its
    # start: such a cue gets one millisecond).
    out = []
    for k, s in enumerate(sentences):
        changed = k > 0 and (s.spk, s.session) != (sentences[k - 1].spk, sentences[k - 1].session)
        out.append(
            Cue(
                s.start_ms,
                max(s.end_ms, s.start_ms + 1),
                (speaker_mark(options.speakers, s.spk, changed, options.names) + _one_line(s.text),),
                s.spk,
                s.session,
                (),
            )
        )
    return out


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def room_header(room: RoomRecord) -> dict[str, Any]:
    """The JSON export's leading fields for a room's transcript."""
    return {
        "room": room.id,
        "title": room.title,
        "language": room.language,
        "room_created": datetime.fromtimestamp(room.created_ms / 1000, UTC).isoformat(),
    }


@dataclass(frozen=True)
class Edit:
    """One editor's change of one sentence, for the JSON export's history: its room ``seq``, when (ms since the
    Unix epoch), who, and what the sentence became (``text`` and ``spk``), or that it was ``deleted``."""

    seq: int
    at_ms: int
    editor: str
    text: str | None = None
    spk: int | None = None
    deleted: bool = False

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seq": self.seq,
            "at": datetime.fromtimestamp(self.at_ms / 1000, UTC).isoformat(),
            "editor": self.editor,
        }
        if self.deleted:
            out["deleted"] = True
        else:
            out.update(text=self.text, spk=self.spk)
        return out


def to_json(
    sentences: Sequence[SentenceRecord],
    header: dict[str, Any],
    names: Mapping[int, str] | None = None,
    history: Mapping[int, Sequence[Edit]] | None = None,
    deleted: Sequence[SentenceRecord] = (),
) -> str:
    """``header`` fields first (``room_header``, or the page's model and language), then ``exported_at`` and the
    sentences. A room's transcript also has its speaker ``names``, each sentence's ``translations`` into the room's
    languages (``{"lang": text}``, where it has them), and for each sentence an editor changed, the
    recognizer's text (``original``, whenever a sentence has one) and the ``edits`` in order (``history``: sentence
    id -> edits); the sentences editors ``deleted`` follow, with theirs. The editing is for the room's editors only:
    a caller rendering for anyone else passes sentences without ``original``, no ``history`` and no ``deleted``."""

    def entry(s: SentenceRecord) -> dict[str, Any]:
        out = {
            "id": s.id,
            "session": s.session,
            "start_ms": s.start_ms,
            "end_ms": s.end_ms,
            "spk": s.spk,
            "speaker": None if s.spk is None else speaker_name(s.spk, names),
            "text": s.text,
            "words": [w.wire() for w in s.words],
        }
        if s.translations:
            out["translations"] = dict(sorted(s.translations.items()))
        if s.original is not None:
            out["original"] = s.original
        if history and history.get(s.id):
            out["edits"] = [e.wire() for e in history[s.id]]
        return out

    document: dict[str, Any] = {**header, "exported_at": datetime.now(UTC).isoformat()}
    if names:
        document["speaker_names"] = {str(k): v for k, v in sorted(names.items())}
    document["sentences"] = [entry(s) for s in sentences]
    if deleted:
        document["deleted"] = [entry(s) for s in deleted]
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def render(
    fmt: str,
    sentences: Sequence[SentenceRecord],
    header: dict[str, Any],
    options: ExportOptions = ExportOptions(),
    history: Mapping[int, Sequence[Edit]] | None = None,
    deleted: Sequence[SentenceRecord] = (),
) -> str:
    """Raises ``KeyError`` for a format not in ``MIME``. ``header``: see ``to_json``; ``options``: how SRT,
    WebVTT and SCC cut cues (SCC always cuts subtitle cues, its rules clamped to CEA-608's: ``scc.rules_for``) and
    what speakers are called; ``history`` and ``deleted``: a room's edits (JSON only)."""
    renderers: dict[str, Callable[[], str]] = {
        "txt": lambda: to_txt(sentences, options.names),
        "srt": lambda: to_srt(sentences, options),
        "vtt": lambda: to_vtt(sentences, options),
        "scc": lambda: scc.to_scc(sentences, options.rules, options.speakers, options.names),
        "json": lambda: to_json(sentences, header, options.names, history, deleted),
    }
    return renderers[fmt]()


def _cue_line(text: str) -> str:
    # A blank line ends a cue and "-->" would read as a timing line: one line of text, no arrow.
    return _one_line(text).replace("-->", "→")


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
