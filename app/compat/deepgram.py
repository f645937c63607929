"""Deepgram's live transcription API at ``/v1/listen``, so that Deepgram's clients (``deepgram-sdk``, LiveKit
Agents' ``livekit-plugins-deepgram``, Pipecat's ``DeepgramSTTService``) stream to this server unchanged but for
their URL and key. Every connection is an ordinary engine session: admitted like a WebRTC one, batched with every
other session, endpointed and speaker-labelled, published into ``?room=<id>`` (as ``?name=<person>``), finished by a
stopping server.

The protocol (Deepgram's "Live Audio" reference):

- Connect with query parameters (``deepgram_params``) and ``Authorization: Token <key>`` (or the WebSocket
  subprotocols ``token, <key>``), checked against ``--auth-token``. A connection this server cannot serve is
  refused before the upgrade: ``400`` bad parameters, ``401`` a wrong key, ``404`` no such room, and admission's
  refusals (``app.ops.admission``): ``429`` every slot of a fixed ``--max-sessions N`` in use, ``503`` the server
  is full (its capacity), the model is loading, the server is stopping, or its engine failed; a ``dg-error`` header
  and a JSON body ``{"err_code", "err_msg", "request_id"}`` say why, and ``Retry-After`` when to try again (none
  for a failed engine: waiting does not help).
- The client sends audio as binary messages and, as text, ``{"type": "KeepAlive"}``, ``{"type": "Finalize"}``
  (lock the open sentence now, keep streaming) and ``{"type": "CloseStream"}`` (lock it, send the last results and
  ``Metadata``, close with 1000). An empty binary message closes the stream as ``CloseStream`` does.
- The server sends ``Results``: interim ones (``is_final: false``, with ``interim_results=true``) from the
  engine's partial text, whose settled words carry their times and never change while the rest may; and one final
  (``is_final: true``) per locked sentence, with its words (``speaker`` with ``diarize=true``), ``speech_final``
  (false when the speaker went on without a pause: a change of voice or a long sentence cut) and ``from_finalize``
  (the sentence a ``Finalize`` flushed). A final's word times are the ones the sentence locks with (the VAD's
  estimates; the aligner's better times that follow a lock are not sent: Deepgram has no message for them, and a
  final is never held back for them). ``SpeechStarted`` (``vad_events=true``) when speech begins,
  ``UtteranceEnd`` (``utterance_end_ms``) after that long without words, ``Metadata`` at the end.
- Without ``encoding`` the audio is a recording, told apart by its first bytes: a mono WAV stream (its header gives
  the format), or WebM/Opus (``MediaRecorder``), Ogg/Opus, MP3 or FLAC (``container_audio``).
- Errors close the stream as Deepgram's do: an engine that will not open the session after the upgrade after all:
  1013 (try again later) ``NET-0000``, or 1011 ``NET-0000`` when it failed; no audio or ``KeepAlive`` for 10 s: 1011
  ``NET-0001``; audio this
  server cannot decode: 1008 ``DATA-0000``; a message over 1 MiB: 1009;
  a server that stops: 1001; the server's own limits (``--stream-idle-s`` without audio, ``KeepAlive`` or not;
  ``--stream-max-s``): 1008 with the reason. The open sentence is locked and sent (and stored in the room) before
  any close. A text message that is not one of the above gets an ``Error`` message (``SchemaError``) and the stream
  goes on. A burst of ``Finalize`` costs one flush at a time. What every streaming API shares (pings, the send
  deadline, hang-ups) is ``client_socket``'s and ``live_stream``'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

from engine import SessionOptions, SpeechStarted, protocol

from ..auth import token_matches
from ..keys import CONFIG, ENGINE
from ..ops import NoRoom, RefusalReason, Refused, admit_publisher
from . import deepgram_results as dg
from .client_socket import BadMessage, ClientSocket, parse_object
from .container_audio import ContainerFeed, sniff
from .deepgram_params import ListenParams, ParamError, parse_params, presented_key
from .live_audio import MAX_RATE_HZ, MIN_RATE_HZ, PcmFeed, WavHeader
from .live_stream import LiveStream, SpeechWatch, open_live
from .read_ahead import ClientSilent, ReadAhead
from .redaction import Redactor

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0  # Deepgram closes a stream that sent no audio or KeepAlive for this long (NET-0001)
MAX_MESSAGE_BYTES = 1024 * 1024  # one audio message (Deepgram's clients send 20-250 ms)
_GOES_ON_MS = 300  # a sentence whose next speech began within this long after it is not ``speech_final``
# Admission's refusals as Deepgram's: a server that cannot serve now is unavailable (503); the operator's
# ``--max-sessions`` cap is Deepgram's concurrency limit (429). ``Retry-After`` says when to try again, except for a
# failed engine (``Refusal.headers``).
_REFUSALS = {RefusalReason.LIMIT: (429, "TOO_MANY_REQUESTS")}
_UNAVAILABLE = (503, "SERVICE_UNAVAILABLE")
NET_0001 = "NET-0001: no audio or KeepAlive received within 10 s"
DATA_0000 = "DATA-0000: the payload cannot be decoded as audio"


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/listen", listen)


def deepgram_error(
    status: int, code: str, message: str, request_id: str, headers: dict[str, str] | None = None
) -> web.Response:
    """Deepgram's refusal of a connection or request: ``dg-error`` header and JSON body (``headers``: more, e.g.
    ``Retry-After``)."""
    return web.json_response(
        {"err_code": code, "err_msg": message, "request_id": request_id},
        status=status,
        headers={"dg-error": message[:200], "dg-request-id": request_id, **(headers or {})},
    )


async def listen(request: web.Request) -> web.StreamResponse:
    """``GET /v1/listen``: one live stream (see the module's docstring)."""
    app, request_id = request.app, str(uuid.uuid4())
    key, as_subprotocol = presented_key(request)
    if not token_matches(key, app[CONFIG].auth_token):
        return deepgram_error(401, "INVALID_AUTH", "Invalid credentials.", request_id)
    protocols = ("token", "bearer") if as_subprotocol else ()
    ws = ClientSocket.response(protocols, MAX_MESSAGE_BYTES)
    if not ws.can_prepare(request).ok:
        return deepgram_error(400, "Bad Request", "connect with a WebSocket client (or POST a file)", request_id)
    try:
        params = parse_params(request.query, app[CONFIG].language)
        admitted = await admit_publisher(app, request.query.get("room"), params.name)
        if admitted.room is not None:  # a stream into a room that names no language speaks the room's
            params = parse_params(request.query, admitted.room.language)
            if params.language not in (None, admitted.room.language):
                admitted.slot.release()
                raise ParamError(
                    f"this room is spoken in {admitted.room.language}: name no language (or "
                    f"{admitted.room.language!r}) to caption into it"
                )
    except ParamError as exc:
        return deepgram_error(400, "Bad Request", str(exc), request_id)
    except NoRoom as exc:
        return deepgram_error(404, "NOT_FOUND", str(exc), request_id)
    except Refused as exc:
        status, code = _REFUSALS.get(exc.refusal.reason, _UNAVAILABLE)
        return deepgram_error(status, code, str(exc), request_id, exc.refusal.headers)
    ws.headers["dg-request-id"] = request_id
    try:
        sock = await ClientSocket.accept(request, ws, app[CONFIG].send_timeout_s)
    except BaseException:
        admitted.slot.release()
        raise
    # With ``diarize`` each final result names its words' speaker, and Deepgram's protocol has no way to correct one
    # later: each sentence waits for its speaker embedding.
    options = SessionOptions(
        language=params.language, hotwords=params.hotwords, words=True, relabels=not params.diarize
    )
    try:
        redactor = Redactor(params.redact) if params.redact else None
        async with open_live(app, admitted, options, redactor=redactor, sock=sock) as live:
            await DeepgramStream(sock, params, live, request_id, app[ENGINE].model_name).run()
    except Refused as exc:  # (the engine would not open the session after the upgrade)
        await sock.close(exc.refusal.close_code, f"NET-0000: {exc}")
    except Exception:  # logged, and the open sentence finished, by open_live
        await sock.close(1011, "NET-0000: internal server error")
    return ws


class DeepgramStream:
    """One ``/v1/listen`` connection: its audio into the engine session, the session's messages out as Deepgram's."""

    def __init__(self, sock: ClientSocket, params: ListenParams, live: LiveStream, request_id: str, model: str) -> None:
        self.sock, self.params, self.live, self.request_id, self.model = sock, params, live, request_id, model
        self.watch = SpeechWatch(live.session)
        self.created = datetime.now(UTC)
        self._sha = hashlib.sha256()
        self._feed: PcmFeed | ContainerFeed | None = None
        self._head = b""  # the start of a stream without an encoding, until its format is known
        self._wav_offset = 0
        self._tiling = dg.Tiling()
        self._settled: list[protocol.Word] = []  # the settled words of the text not locked yet, with their times
        self._last_interim = ""
        # A Finalize flushes the sentences that end by here: every one until its flush has run (the flush takes
        # whatever audio reached the session meanwhile), then those that end by where the flush ended.
        self._finalize_upto_ms: float | None = None
        self._last_word_end_ms = 0
        self._utterance_open = False  # words were sent since the last UtteranceEnd
        self._last_speaker = 0
        # Speech events and the session's messages are handled one at a time, in the order the session told them.
        self._order = asyncio.Lock()

    async def run(self) -> None:
        relay = asyncio.create_task(self.relay(), name=f"{self.live.session.session_id}-deepgram-relay")
        watch = asyncio.create_task(self.watch_speech(), name=f"{self.live.session.session_id}-deepgram-watch")
        try:
            try:
                code, reason = await self.read()
            finally:
                await self.end_audio()
            if isinstance(self._feed, ContainerFeed) and self._feed.error and code == 1000:
                code, reason = 1008, DATA_0000  # (a recording the decoder gave up on while the client sent it)
            await self.live.finish()
            await relay
        finally:
            self.watch.close()
            for task in (relay, watch):
                task.cancel()
            await asyncio.gather(relay, watch, return_exceptions=True)
        if self.sock.open:
            duration = self._feed.received_s if self._feed is not None else 0.0
            await self.send(dg.metadata(self.request_id, self.model, duration, self._sha.hexdigest(), self.created))
            await self.sock.close(code, reason)

    # ---- client -> server --------------------------------------------------------------------------------------
    async def read(self) -> tuple[int, str]:
        """Read the client until it ends the stream, goes away or falls silent, or the server stops or the
        session ends; returns the close code and reason to send (if the socket is still open)."""
        try:
            async with ReadAhead(self.sock.ws, *self.live.stops, timeout_s=TIMEOUT_S) as messages:
                return await self._read(messages)
        except ClientSilent:
            return 1011, NET_0001

    async def _read(self, messages: ReadAhead) -> tuple[int, str]:
        async for msg in messages:
            if msg.type is WSMsgType.BINARY:
                if not msg.data:  # Deepgram's older way to close a stream
                    return 1000, ""
                self._sha.update(msg.data)
                if not await self.audio(msg.data):
                    return 1008, DATA_0000
            elif msg.type is WSMsgType.TEXT:
                if not self.sock.open:  # cut off or gone: only its audio still counts (its words are kept)
                    continue
                if await self.control(msg.data):
                    return 1000, ""
            elif msg.type is WSMsgType.ERROR:  # aiohttp closed it already (1009 for an oversized message)
                return 1000, ""
        if self.live.stopping.is_set():
            return 1001, "the server is shutting down"
        if self.live.expiry is not None:
            return 1008, self.live.expiry.message
        return 1000, ""

    async def audio(self, data: bytes) -> bool:
        """Feed one audio message; False for audio this server cannot decode."""
        if self._feed is None:
            if self.params.encoding is not None:
                self._feed = PcmFeed(
                    self.live.session, self.params.encoding, self.params.sample_rate or 16000, unpaced=self.live.ending
                )
            else:
                self._head += data
                if len(self._head) < 12:
                    return True
                kind = sniff(self._head)
                if kind not in (None, "wav"):  # a recorder's container: decoded as it arrives
                    self._feed = ContainerFeed(self.live.session, kind, unpaced=self.live.ending)
                    data, self._head = self._head, b""
                elif not await self._wav():
                    return False
                elif self._feed is None:
                    return True
                else:
                    data, self._head = self._head[self._wav_offset :], b""
        return await self._feed.feed(data)

    async def _wav(self) -> bool:
        """The WAV header at the start of ``_head``: the feed it asks for (None while more bytes are needed);
        False for bytes that are neither WAV nor a container this server reads."""
        try:
            header = WavHeader.parse(self._head)
        except ValueError as exc:
            log.info("%s: %s", self.live.session.session_id, exc)
            return False
        if header is None:
            return True
        if header.channels != 1 or not MIN_RATE_HZ <= header.rate <= MAX_RATE_HZ:
            log.info(
                "%s: WAV of %d channels at %d Hz refused", self.live.session.session_id, header.channels, header.rate
            )
            return False
        self._feed = PcmFeed(self.live.session, header.encoding, header.rate, unpaced=self.live.ending)
        self._wav_offset = header.data_offset
        return True

    async def end_audio(self) -> None:
        """The client's audio is over: a container's decoder gives up what it still holds."""
        if isinstance(self._feed, ContainerFeed):
            await self._feed.close()

    async def control(self, raw: str) -> bool:
        """A text message; True when it ends the stream."""
        try:
            kind = parse_object(raw).get("type")
        except BadMessage:
            kind = None
        if kind == "CloseStream":
            return True
        if kind == "Finalize":
            self._finalize_upto_ms = math.inf
            self.live.flush(self._flushed)
        elif kind != "KeepAlive":
            await self.send(dg.error("expected a JSON message of type KeepAlive, Finalize or CloseStream", message=raw))
        return False

    def _flushed(self, flushed_ms: int) -> None:
        if self._finalize_upto_ms is not None:  # no later sentence came meanwhile
            self._finalize_upto_ms = flushed_ms

    # ---- server -> client --------------------------------------------------------------------------------------
    async def send(self, message: dict[str, Any]) -> None:
        """To the client, if it still takes messages (a client gone or cut off costs the room nothing)."""
        await self.sock.send_json(message)

    async def relay(self) -> None:
        """The session's messages as Deepgram's, until the session ends."""
        async for msg in self.live.messages():
            async with self._order:
                await self._speech_events()
                await self._relay_one(msg)

    async def _relay_one(self, msg: protocol.ServerMessage) -> None:
        """One session message as Deepgram's (holding ``_order``)."""
        if isinstance(msg, protocol.Caption):
            for sentence in msg.sentences:
                await self.final(sentence)
            self._settled = (self._settled + msg.stable_words)[-msg.stable :] if msg.stable else []
            if not msg.is_final:
                await self.interim(msg)
        elif isinstance(msg, protocol.Error) and msg.code is protocol.ErrorCode.ENGINE:
            await self.send(dg.error(msg.message, variant="ServerError"))

    async def final(self, s: protocol.Sentence) -> None:
        words = list(s.words) or dg.estimate_words(s.text, s.start_ms, s.end_ms)
        upto = self._finalize_upto_ms
        from_finalize = upto is not None and s.end_ms <= upto
        if upto is not None and not from_finalize:
            self._finalize_upto_ms = None
        start = self._tiling.end_ms
        end = max(s.end_ms, start)
        conf = dg.confidence(s)
        await self.send(
            dg.results(
                self.request_id,
                self.model,
                words,
                start_ms=start,
                end_ms=end,
                is_final=True,
                speech_final=self._speech_final(s),
                from_finalize=from_finalize,
                conf=conf,
                speaker=self._speaker(s.spk),
                formatted=self.params.formatted,
                word_confs=dg.word_confidences(s, words),
            )
        )
        self._tiling.end_ms = end
        self._last_interim = ""
        if words:
            self._last_word_end_ms, self._utterance_open = words[-1].end_ms, True

    def _speaker(self, spk: int | None) -> int | None:
        """A word's ``speaker`` with ``diarize=true`` (0 where the server runs without speaker labels), else None."""
        if not self.params.diarize:
            return None
        self._last_speaker = spk if spk is not None else self._last_speaker
        return self._last_speaker

    def _speech_final(self, s: protocol.Sentence) -> bool:
        """The speaker paused after this sentence (Deepgram's endpoint): false when the next speech began right
        after it (a change of voice, a long sentence cut at its cap), and always with ``endpointing=false``."""
        if self.params.endpointing_ms is None:
            return False
        speaking = self.watch.speaking
        return speaking is None or speaking.speech_ms - s.end_ms > _GOES_ON_MS

    async def interim(self, c: protocol.Caption) -> None:
        if not self.params.interim_results or not c.partial or c.partial == self._last_interim:
            return
        self._last_interim = c.partial
        texts = c.partial.split()
        known = [protocol.Word(t, w.start_ms, w.end_ms) for t, w in zip(texts, self._settled, strict=False)]
        end = max(self.watch.heard_ms, self._tiling.end_ms)
        rest_start = known[-1].end_ms if known else max(self._tiling.end_ms, self._speech_ms())
        words = known + dg.estimate_words(" ".join(texts[len(known) :]), rest_start, max(end, rest_start))
        speaker = self._speaker(c.partial_spk if c.partial_spk is not None else self._last_speaker)
        await self.send(
            dg.results(
                self.request_id,
                self.model,
                words,
                start_ms=self._tiling.end_ms,
                end_ms=max(end, words[-1].end_ms),
                is_final=False,
                speech_final=False,
                from_finalize=False,
                conf=0.0,
                speaker=speaker,
                formatted=self.params.formatted,
            )
        )

    def _speech_ms(self) -> int:
        speaking = self.watch.speaking
        return speaking.speech_ms if speaking is not None else 0

    async def watch_speech(self) -> None:
        """``SpeechStarted`` and ``UtteranceEnd`` as the session's VAD hears speech begin and end."""
        while True:
            await self.watch.wait()
            async with self._order:
                await self._speech_events()

    async def _speech_events(self) -> None:
        """Handle the speech events told so far (holding ``_order``; the relay calls this before each message, so
        that what a final says of the speech after it is as of its lock)."""
        gap_ms = self.params.utterance_end_ms
        for event in self.watch.ready():
            if isinstance(event, SpeechStarted) and self.params.vad_events:
                await self.send(dg.speech_started(event.speech_ms))
        if (
            gap_ms is not None
            and self._utterance_open
            and self.watch.speaking is None
            and self.watch.heard_ms - self._last_word_end_ms >= gap_ms
        ):
            self._utterance_open = False
            await self.send(dg.utterance_end(self._last_word_end_ms))
