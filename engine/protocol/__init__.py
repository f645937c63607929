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

Every server message is one class of ``messages`` (``ServerMessage``): the engine posts them, the transport and the
room stream send ``wire()``, clients and tests read JSON back with ``parse_server_message``. The client's messages and
their validation are ``client``, the error codes of both directions ``codes``, Whisper's languages ``languages``; all
are imported from here (``engine.protocol``). docs/protocol.md is the reference for clients.
"""

from __future__ import annotations

from .client import (
    MAX_CLIENT_MESSAGE_BYTES,
    MAX_HOTWORD_CHARS,
    MAX_HOTWORDS,
    TASKS,
    ClientMessage,
    StartMessage,
    StopMessage,
    parse_client_message,
)
from .codes import (
    ErrorCode,
    ProtocolError,
)
from .languages import (
    LANGUAGE_CODES,
    LANGUAGES,
)
from .messages import (
    Caption,
    Correction,
    Error,
    Languages,
    OpenLine,
    Original,
    Ready,
    RoomStatus,
    Sentence,
    ServerMessage,
    Speakers,
    Stopped,
    Storage,
    Translation,
    Vocabulary,
    Word,
    WordTimes,
    dumps,
    parse_server_message,
)

__all__ = [
    "LANGUAGES",
    "LANGUAGE_CODES",
    "MAX_CLIENT_MESSAGE_BYTES",
    "MAX_HOTWORDS",
    "MAX_HOTWORD_CHARS",
    "TASKS",
    "Caption",
    "ClientMessage",
    "Correction",
    "Error",
    "ErrorCode",
    "Languages",
    "OpenLine",
    "Original",
    "ProtocolError",
    "Ready",
    "RoomStatus",
    "Sentence",
    "ServerMessage",
    "Speakers",
    "StartMessage",
    "StopMessage",
    "Stopped",
    "Storage",
    "Translation",
    "Vocabulary",
    "Word",
    "WordTimes",
    "dumps",
    "parse_client_message",
    "parse_server_message",
]
