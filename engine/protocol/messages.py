"""Server -> client messages: one class per message type (``ServerMessage``), each with its ``wire()`` form, and
``parse_server_message`` to read the JSON back (clients and tests)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .codes import ErrorCode


@dataclass(frozen=True)
class Word:
    """One word of a locked sentence and when it was said (ms, on the sentence's timeline)."""

    w: str
    start_ms: int
    end_ms: int

    def wire(self) -> dict[str, Any]:
        return {"w": self.w, "start_ms": self.start_ms, "end_ms": self.end_ms}

    def shifted(self, ms: int) -> Word:
        return Word(self.w, self.start_ms + ms, self.end_ms + ms)


@dataclass(frozen=True)
class Sentence:
    """One locked sentence: ``start_ms``/``end_ms`` in ms of session audio (room timeline in a room; the wire's
    ``start``/``end``), ``spk`` its speaker label (None when labels are off), ``session`` the publishing session
    (room messages only), ``words`` its words with their times (same timeline; sent only to clients that ask, see
    ``wire``)."""

    id: int
    text: str
    start_ms: int
    end_ms: int
    spk: int | None
    session: str | None = None
    words: tuple[Word, ...] = ()
    # Server-side only, never on the wire (file transcripts report them): the final decode's mean token
    # log-probability, and 1 - the segment's mean VAD speech probability (the VAD's, not Whisper's, no-speech).
    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    # Server-side only too: the decoder's probability of each of ``words`` (0-1), where the decode gave them and its
    # words line up with these (else empty): Deepgram's per-word confidence, OpenAI's logprobs.
    word_probs: tuple[float, ...] = ()

    def wire(self, words: bool = False) -> dict[str, Any]:
        """The JSON form; ``words``: include the ``words`` list (opt-in: it triples a sentence's size)."""
        out: dict[str, Any] = {
            "id": self.id,
            "text": self.text,
            "start": self.start_ms,
            "end": self.end_ms,
            "spk": self.spk,
        }
        if self.session is not None:
            out["session"] = self.session
        if words:
            out["words"] = [w.wire() for w in self.words]
        return out


@dataclass(frozen=True)
class Ready:
    session: str
    model: str
    language: str | None
    seq: int = 0

    def wire(self) -> dict[str, Any]:
        return {
            "type": "ready",
            "seq": self.seq,
            "session": self.session,
            "model": self.model,
            "language": self.language,
        }


@dataclass(frozen=True)
class OpenLine:
    """One speaking publisher's open text in a room (``Caption.open``): ``text`` of publisher ``session``, its first
    ``stable`` words settled, in the voice labelled ``spk`` (None: not known)."""

    session: str
    text: str
    stable: int = 0
    spk: int | None = None

    def wire(self) -> dict[str, Any]:
        return {"session": self.session, "text": self.text, "stable": self.stable, "spk": self.spk}


@dataclass
class Caption:
    """Newly locked ``sentences`` (each sent once) and the whole current ``partial`` text. Mutable: a waiting
    caption absorbs the next one (``engine.stream.mailbox``)."""

    sentences: list[Sentence]
    partial: str
    is_final: bool = False
    latency_ms: int | None = None
    seq: int = 0
    partial_spk: int | None = None
    # Room messages only: the publishing session whose voice ``partial_spk`` names (labels are per session).
    partial_session: str | None = None
    # How many leading words of ``partial`` (split on spaces) are settled: they lock exactly as shown.
    stable: int = 0
    # Words that settled since the previous caption (each sent once), with estimated times.
    stable_words: list[Word] = field(default_factory=list)
    # Room messages only (None elsewhere): each speaking publisher's open text on its own, in the order they started.
    open: list[OpenLine] | None = None

    def wire(self, words: bool = False) -> dict[str, Any]:
        """``words``: include each sentence's word times (``Sentence.wire``)."""
        out: dict[str, Any] = {
            "type": "caption",
            "seq": self.seq,
            "sentences": [s.wire(words) for s in self.sentences],
            "partial": self.partial,
            "is_final": self.is_final,
        }
        if self.latency_ms is not None:
            out["latency_ms"] = self.latency_ms
        if self.partial_spk is not None:
            out["partial_spk"] = self.partial_spk
        if self.partial_session is not None:  # the publisher of ``partial_spk`` and of ``stable_words`` (rooms)
            out["partial_session"] = self.partial_session
        if self.stable:
            out["stable"] = self.stable
        if self.stable_words:
            out["stable_words"] = [w.wire() for w in self.stable_words]
        if self.open is not None:
            out["open"] = [line.wire() for line in self.open]
        return out


@dataclass(frozen=True)
class WordTimes:
    """Better times for the words of locked sentence ``id`` (the same words as its text, on the same timeline): the
    aligner's, which follow the lock instead of delaying it. ``session``: the publishing session (room messages)."""

    id: int
    words: tuple[Word, ...]
    seq: int = 0
    session: str | None = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "words", "seq": self.seq, "id": self.id, "words": [w.wire() for w in self.words]}
        if self.session is not None:
            out["session"] = self.session
        return out


@dataclass(frozen=True)
class Original:
    """The words said in locked sentence ``id``, in language ``lang`` (a Whisper code), of a session whose task is
    ``"translate"`` (its sentences are English): the same audio decoded again with the task ``"transcribe"``, after
    the lock and behind every live decode. A room keeps it beside the English as the sentence in ``lang``
    (``Translation.original``)."""

    id: int
    lang: str
    text: str
    seq: int = 0

    def wire(self) -> dict[str, Any]:
        return {"type": "original", "seq": self.seq, "id": self.id, "lang": self.lang, "text": self.text}


@dataclass(frozen=True)
class Speakers:
    """Corrected labels: sentence id -> speaker label."""

    relabel: dict[int, int]
    seq: int = 0

    def wire(self) -> dict[str, Any]:
        return {"type": "speakers", "seq": self.seq, "relabel": {str(k): v for k, v in sorted(self.relabel.items())}}


@dataclass(frozen=True)
class Correction:
    """An editor's correction of locked sentences (rooms; a session's own client gets it with its sentence ids).
    ``sentences``: sentences in their new form (an id not seen before is a new one, from a split: it goes in order of
    ``start``, then ``id``); ``deleted``: ids removed; ``names``: speaker label -> display name ("" = back to the
    default label); ``editor``: who made it."""

    sentences: tuple[Sentence, ...] = ()
    deleted: tuple[int, ...] = ()
    names: dict[int, str] = field(default_factory=dict)
    editor: str = ""
    seq: int = 0

    def wire(self, words: bool = False) -> dict[str, Any]:
        """``words``: include each sentence's word times (``Sentence.wire``)."""
        return {
            "type": "correction",
            "seq": self.seq,
            "sentences": [s.wire(words) for s in self.sentences],
            "deleted": list(self.deleted),
            "names": {str(k): v for k, v in sorted(self.names.items())},
            "editor": self.editor,
        }


@dataclass(frozen=True)
class Vocabulary:
    """A room's vocabulary (editors only): the ``terms`` editors entered and the fixes ``learned`` from their
    corrections (``"heard → meant"``); what publishers lock in the room is respelt by both."""

    terms: tuple[str, ...] = ()
    learned: tuple[str, ...] = ()
    seq: int = 0

    def wire(self) -> dict[str, Any]:
        return {"type": "vocabulary", "seq": self.seq, "terms": list(self.terms), "learned": list(self.learned)}


@dataclass(frozen=True)
class Translation:
    """Room sentences in room language ``lang`` (BCP 47): each sentence is keyed by its source sentence's ``id`` and
    has the source's times, label and session; its ``text`` is the translation. ``update``: they replace translations
    sent before (a correction re-translated them, or an editor corrected a translation: ``editor`` says who).
    ``missing``: ids among them whose translation failed for now; they carry the source text until a retry
    succeeds. ``original``: their texts are not translations but the words said, in ``lang`` (``Original``: a
    publisher captioned its speech in English with Whisper's translate task); no engine's translation replaces
    them."""

    lang: str
    sentences: tuple[Sentence, ...]
    update: bool = False
    missing: tuple[int, ...] = ()
    editor: str = ""
    seq: int = 0
    original: bool = False

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "translation",
            "seq": self.seq,
            "lang": self.lang,
            "sentences": [s.wire() for s in self.sentences],
            "update": self.update,
            "missing": list(self.missing),
        }
        if self.editor:
            out["editor"] = self.editor
        if self.original:
            out["original"] = True
        return out


@dataclass(frozen=True)
class Languages:
    """A room's languages besides the one spoken in it (BCP 47, in the order they were added)."""

    languages: tuple[str, ...] = ()
    seq: int = 0

    def wire(self) -> dict[str, Any]:
        return {"type": "languages", "seq": self.seq, "languages": list(self.languages)}


@dataclass(frozen=True)
class Stopped:
    seq: int = 0

    def wire(self) -> dict[str, Any]:
        return {"type": "stopped", "seq": self.seq}


@dataclass(frozen=True)
class Error:
    code: ErrorCode
    message: str
    seq: int = 0

    def wire(self) -> dict[str, Any]:
        return {"type": "error", "seq": self.seq, "code": self.code.value, "message": self.message}


@dataclass(frozen=True)
class Storage:
    """Whether the session's captions are being saved (a full disk: they are not, until it recovers)."""

    saving: bool
    message: str
    seq: int = 0

    def wire(self) -> dict[str, Any]:
        return {"type": "storage", "seq": self.seq, "saving": self.saving, "message": self.message}


@dataclass(frozen=True)
class RoomStatus:
    """A room's state for its viewers (never stored; ``seq`` repeats the room's newest event)."""

    room: str
    live: bool
    publishers: int
    viewers: int
    saving: bool
    seq: int = 0
    # A room with a hold-back delay (``delay_s`` > 0): how many durable events wait for it, and how long (ms) the
    # oldest has waited. ``released``: the newest seq its audience has (editors' status only; None elsewhere).
    delay_s: float = 0.0
    held: int = 0
    behind_ms: int = 0
    released: int | None = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "room",
            "seq": self.seq,
            "room": self.room,
            "live": self.live,
            "publishers": self.publishers,
            "viewers": self.viewers,
            "saving": self.saving,
        }
        if self.delay_s:
            out.update(delay_s=self.delay_s, held=self.held, behind_ms=self.behind_ms)
        if self.released is not None:
            out["released"] = self.released
        return out


ServerMessage = (
    Ready
    | Caption
    | WordTimes
    | Original
    | Speakers
    | Correction
    | Vocabulary
    | Translation
    | Languages
    | Stopped
    | Error
    | Storage
    | RoomStatus
)


def parse_server_message(data: dict[str, Any]) -> ServerMessage:
    """A server message from its JSON form (``wire()``). Raises ``ValueError`` (``KeyError``/``TypeError`` as
    ``ValueError``) for anything that is not one."""
    try:
        kind, seq = data["type"], int(data["seq"])
        if kind == "caption":
            return Caption(
                [_sentence(s) for s in data["sentences"]],
                str(data["partial"]),
                bool(data["is_final"]),
                _int_or_none(data.get("latency_ms")),
                seq,
                _int_or_none(data.get("partial_spk")),
                _str_or_none(data.get("partial_session")),
                int(data.get("stable") or 0),
                list(_words(data.get("stable_words"))),
                _open_lines(data.get("open")),
            )
        if kind == "words":
            return WordTimes(int(data["id"]), _words(data["words"]), seq, _str_or_none(data.get("session")))
        if kind == "ready":
            return Ready(str(data["session"]), str(data["model"]), data["language"], seq)
        if kind == "speakers":
            return Speakers({int(k): int(v) for k, v in data["relabel"].items()}, seq)
        if kind == "correction":
            return Correction(
                tuple(_sentence(x) for x in data["sentences"]),
                tuple(int(i) for i in data["deleted"]),
                {int(k): str(v) for k, v in data["names"].items()},
                str(data.get("editor") or ""),
                seq,
            )
        if kind == "vocabulary":
            return Vocabulary(tuple(str(t) for t in data["terms"]), tuple(str(t) for t in data["learned"]), seq)
        if kind == "translation":
            return Translation(
                str(data["lang"]),
                tuple(_sentence(x) for x in data["sentences"]),
                bool(data.get("update")),
                tuple(int(i) for i in data.get("missing") or ()),
                str(data.get("editor") or ""),
                seq,
                bool(data.get("original")),
            )
        if kind == "original":
            return Original(int(data["id"]), str(data["lang"]), str(data["text"]), seq)
        if kind == "languages":
            return Languages(tuple(str(lang) for lang in data["languages"]), seq)
        if kind == "stopped":
            return Stopped(seq)
        if kind == "error":
            return Error(ErrorCode(data["code"]), str(data["message"]), seq)
        if kind == "storage":
            return Storage(bool(data["saving"]), str(data["message"]), seq)
        if kind == "room":
            return RoomStatus(
                str(data["room"]),
                bool(data["live"]),
                int(data["publishers"]),
                int(data["viewers"]),
                bool(data["saving"]),
                seq,
                float(data.get("delay_s") or 0),
                int(data.get("held") or 0),
                int(data.get("behind_ms") or 0),
                _int_or_none(data.get("released")),
            )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed {data.get('type')!r} message: {exc!r}") from None
    raise ValueError(f"unknown message type {kind!r}")


def _words(items: Any) -> tuple[Word, ...]:
    return tuple(Word(str(w["w"]), int(w["start_ms"]), int(w["end_ms"])) for w in items or ())


def _open_lines(items: Any) -> list[OpenLine] | None:
    return (
        None
        if items is None
        else [
            OpenLine(str(o["session"]), str(o["text"]), int(o.get("stable") or 0), _int_or_none(o.get("spk")))
            for o in items
        ]
    )


def _sentence(s: dict[str, Any]) -> Sentence:
    words = _words(s.get("words"))
    return Sentence(
        int(s["id"]), str(s["text"]), int(s["start"]), int(s["end"]), _int_or_none(s["spk"]), s.get("session"), words
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def dumps(message: ServerMessage, words: bool = False) -> str:
    """Serialise a message compactly (no NaN: the browser's JSON.parse would reject it). ``words``: captions carry
    their sentences' word times (for clients that asked for them)."""
    body = message.wire(words) if isinstance(message, Caption | Correction) else message.wire()
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
