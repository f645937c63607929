"""The caption wire protocol: the one place that defines every message on the ``captions`` data channel.

Server -> client (JSON, one message per data-channel message; every message has ``type`` and a per-session
increasing ``seq``):

- ``{"type":"ready","seq":N,"session":ID,"model":NAME,"language":CODE|null}`` once the session can take audio.
- ``{"type":"caption","seq":N,"sentences":[{"id":K,"text":T,"start":MS,"end":MS,"spk":S|null}],"partial":P,
  "is_final":false,"latency_ms":L}``: ``sentences`` are only the sentences locked since the previous message
  (each is sent once and never changes); ``partial`` is the whole text of the open segment (may be empty, replaces
  the previous partial); ``start``/``end`` are milliseconds of session audio; ``latency_ms`` (optional) is how far
  the text trails the live audio at the moment the message is produced; ``partial_spk`` (optional) is the speaker
  label of the voice now speaking (the end of ``partial``), as soon as the server has heard enough of it: the label
  its sentence will most likely lock with. ``stable`` (optional, absent = 0) is how many leading words of
  ``partial`` (split on spaces) are settled: they lock exactly as shown and never change; ``stable_words``
  (optional) are the words that settled since the previous message, each sent once, with estimated times
  (``{"w","start_ms","end_ms"}``, session audio ms).
- ``{"type":"words","seq":N,"id":K,"words":[{"w":W,"start_ms":MS,"end_ms":MS},...]}``: better word times for the
  locked sentence ``K`` (Whisper's cross-attention, which runs after the lock so that it never delays it); they
  replace the times sent with the sentence. Sent only to clients that asked for words.
- ``{"type":"original","seq":N,"id":K,"lang":L,"text":T}``: for a session whose task is ``"translate"`` (its
  sentences are English), the words said in locked sentence ``K``, in language ``L``: the same audio transcribed,
  after the lock and behind every live decode.
- ``{"type":"speakers","seq":N,"relabel":{"K":S,...}}``: corrected speaker labels for earlier sentences (once the
  speaker embedding of a sentence that locked before it was in gives another label, and after the re-clustering at
  stop).
- ``{"type":"correction","seq":N,"sentences":[...],"deleted":[K,...],"names":{"S":NAME},"editor":E}``: an editor
  corrected sentences of the session's room (sessions that publish into a room with an editor); the only way a
  locked sentence's text changes.
- After a stop: ``{"type":"caption",...,"is_final":true}`` (the last sentences, empty partial), then
  ``{"type":"stopped","seq":N}``.
- ``{"type":"error","seq":N,"code":C,"message":M}`` for anything the client must know; see ``ErrorCode``.
- ``{"type":"storage","seq":N,"saving":false,"message":M}`` when the server cannot save this session's captions
  (a full disk: live captions and viewers go on, the transcript file misses them until space returns), and
  ``{"type":"storage","seq":N,"saving":true,"message":M}`` once everything held back has been saved.

Client -> server: ``{"type":"start","language":"en"|null,"hotwords":[...],"words":false}`` (optional; defaults
apply if audio simply flows; ``"words":true`` adds ``"words":[{"w":W,"start_ms":MS,"end_ms":MS}]`` to every locked
sentence) and ``{"type":"stop"}``. A session publishing into a room that names no language decodes the room's.
Field names follow FunASR's realtime service where they overlap.

Room viewers (server-sent events) get the same ``caption`` and ``speakers`` messages with room-wide sentence ids
(each sentence names its ``session``; ``partial_spk`` comes with ``partial_session``, the session whose voice it
names, and only while one publisher is speaking) and
``{"type":"room","seq":N,"room":ID,"live":B,"publishers":N,"viewers":N,"saving":B}`` status messages; a room's
editors also get ``{"type":"vocabulary","seq":N,"terms":[...],"learned":[...]}``. A room with languages sends
``{"type":"translation","seq":N,"lang":L,"sentences":[...],"update":B,"missing":[K,...],"editor":E}``: its locked
sentences in language ``L`` (each keyed by the source sentence's ``id``, with the source's times and label;
``update``: they replace translations sent before, after a correction; ``missing``: ids whose translation failed for
now, sent with the source text, retried; ``"original":true``: the words said in ``L``, see ``original`` above), and
``{"type":"languages","seq":N,"languages":[L,...]}`` when its
languages change.

Every server message is one class below (``ServerMessage``): the engine posts them, the transport and the room
stream send ``wire()``, clients and tests read JSON back with ``parse_server_message``. docs/protocol.md is the
reference for clients.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

MAX_CLIENT_MESSAGE_BYTES = 4096
MAX_HOTWORDS = 32
MAX_HOTWORD_CHARS = 48
# Whisper's languages: code -> the English name OpenAI's API reports (``verbose_json`` ``language``).
LANGUAGES: dict[str, str] = {
    "en": "english",
    "zh": "chinese",
    "de": "german",
    "es": "spanish",
    "ru": "russian",
    "ko": "korean",
    "fr": "french",
    "ja": "japanese",
    "pt": "portuguese",
    "tr": "turkish",
    "pl": "polish",
    "ca": "catalan",
    "nl": "dutch",
    "ar": "arabic",
    "sv": "swedish",
    "it": "italian",
    "id": "indonesian",
    "hi": "hindi",
    "fi": "finnish",
    "vi": "vietnamese",
    "he": "hebrew",
    "uk": "ukrainian",
    "el": "greek",
    "ms": "malay",
    "cs": "czech",
    "ro": "romanian",
    "da": "danish",
    "hu": "hungarian",
    "ta": "tamil",
    "no": "norwegian",
    "th": "thai",
    "ur": "urdu",
    "hr": "croatian",
    "bg": "bulgarian",
    "lt": "lithuanian",
    "la": "latin",
    "mi": "maori",
    "ml": "malayalam",
    "cy": "welsh",
    "sk": "slovak",
    "te": "telugu",
    "fa": "persian",
    "lv": "latvian",
    "bn": "bengali",
    "sr": "serbian",
    "az": "azerbaijani",
    "sl": "slovenian",
    "kn": "kannada",
    "et": "estonian",
    "mk": "macedonian",
    "br": "breton",
    "eu": "basque",
    "is": "icelandic",
    "hy": "armenian",
    "ne": "nepali",
    "mn": "mongolian",
    "bs": "bosnian",
    "kk": "kazakh",
    "sq": "albanian",
    "sw": "swahili",
    "gl": "galician",
    "mr": "marathi",
    "pa": "punjabi",
    "si": "sinhala",
    "km": "khmer",
    "sn": "shona",
    "yo": "yoruba",
    "so": "somali",
    "af": "afrikaans",
    "oc": "occitan",
    "ka": "georgian",
    "be": "belarusian",
    "tg": "tajik",
    "sd": "sindhi",
    "gu": "gujarati",
    "am": "amharic",
    "yi": "yiddish",
    "lo": "lao",
    "uz": "uzbek",
    "fo": "faroese",
    "ht": "haitian creole",
    "ps": "pashto",
    "tk": "turkmen",
    "nn": "nynorsk",
    "mt": "maltese",
    "sa": "sanskrit",
    "lb": "luxembourgish",
    "my": "myanmar",
    "bo": "tibetan",
    "tl": "tagalog",
    "mg": "malagasy",
    "as": "assamese",
    "tt": "tatar",
    "haw": "hawaiian",
    "ln": "lingala",
    "ha": "hausa",
    "ba": "bashkir",
    "jw": "javanese",
    "su": "sundanese",
    "yue": "cantonese",
}
LANGUAGE_CODES = frozenset(LANGUAGES)


class ErrorCode(StrEnum):
    """Every machine-readable error code this server puts on the wire: the data channel's ``error`` messages and
    the ``{"error": {"code", ...}}`` bodies of its HTTP API (docs/protocol.md lists them). One enum for both, since
    the two share codes (``loading``, ``busy``, ``engine``, ``bad_message``, ``too_large``) and a client reads them
    the same way. (Other services' protocols spoken here, Deepgram's and OpenAI's, keep their own codes.)"""

    # On the data channel, and in HTTP error bodies.
    BAD_MESSAGE = "bad_message"  # not JSON, not an object, unknown type, bad field
    TOO_LARGE = "too_large"  # message (or request body) over its limit
    BAD_STATE = "bad_state"  # e.g. start after stop
    ENGINE = "engine"  # the recognizer failed; captions may be missing (a new session: not until a restart)
    OVERLOADED = "overloaded"  # audio arrives faster than it can be processed; some was skipped
    BUSY = "busy"  # no new session now: full, at the operator's cap, or stopping (``reason`` says which)
    LOADING = "loading"  # the model is still loading
    # In HTTP error bodies only.
    UNAUTHORIZED = "unauthorized"  # no token, or not the one this needs (401, or 403 for a room's own token)
    BAD_PARAMETER = "bad_parameter"  # a query parameter is wrong (``param`` names it)
    BAD_SDP = "bad_sdp"  # an SDP offer that cannot be used
    NO_ROOM = "no_room"  # no such room
    NO_SESSION = "no_session"  # no such WHIP session
    NO_SENTENCE = "no_sentence"  # no such sentence in the room (or it was deleted)
    NO_OUTPUT = "no_output"  # no such output of the room
    NO_SEGMENT = "no_segment"  # an HLS segment not listed (yet)
    NO_VIEWER_TOKEN = "no_viewer_token"  # a private room's viewer token was not kept
    ROOM_ENDED = "room_ended"  # the room has ended (no new output)
    TOO_MANY_OUTPUTS = "too_many_outputs"  # the room has as many outputs as it may
    STORAGE = "storage"  # the transcript store cannot be read (or written)


class ProtocolError(ValueError):
    """A client message that breaks the protocol; ``code`` goes on the wire."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class StartMessage:
    language: str | None
    hotwords: tuple[str, ...]
    words: bool = False  # send each locked sentence's word times
    task: str = "transcribe"  # "translate": captions in English of speech in ``language`` (Whisper's task)
    language_given: bool = True  # False: it named none (or null, "auto"): a session in a room then takes the room's


TASKS = ("transcribe", "translate")


@dataclass(frozen=True)
class StopMessage:
    pass


ClientMessage = StartMessage | StopMessage


def parse_client_message(raw: str | bytes) -> ClientMessage:
    """Validate one client message. Raises ``ProtocolError`` with a message fit to show the client."""
    if len(raw) > MAX_CLIENT_MESSAGE_BYTES:
        raise ProtocolError(ErrorCode.TOO_LARGE, f"message over {MAX_CLIENT_MESSAGE_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "a message must be a JSON object")
    kind = data.get("type")
    if kind == "stop":
        return StopMessage()
    if kind != "start":
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"unknown message type {kind!r}; expected 'start' or 'stop'")
    language = data.get("language", "en")
    if language in ("", "auto"):
        language = None
    if language is not None and (not isinstance(language, str) or language not in LANGUAGE_CODES):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"unknown language {language!r}")
    hotwords = data.get("hotwords") or []
    if not isinstance(hotwords, list) or not all(isinstance(h, str) for h in hotwords):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "hotwords must be a list of strings")
    if len(hotwords) > MAX_HOTWORDS or any(len(h) > MAX_HOTWORD_CHARS for h in hotwords):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"at most {MAX_HOTWORDS} hotwords of at most {MAX_HOTWORD_CHARS} characters"
        )
    words = data.get("words", False)
    if not isinstance(words, bool):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "words must be true or false")
    task = data.get("task", "transcribe")
    if task not in TASKS:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, 'task must be "transcribe" or "translate"')
    return StartMessage(
        language,
        tuple(h.strip() for h in hotwords if h.strip()),
        words,
        task,
        language_given=language is not None and "language" in data,
    )


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
