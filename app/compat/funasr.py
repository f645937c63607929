"""FunASR's realtime WebSocket protocol, so that clients written for FunASR's runtime server work unchanged.

Where: ``GET /funasr`` on the server's port, and with ``--funasr-port N`` the root path of port N (where FunASR's
server listens, so ``ws://host:10095/`` works as it is). The protocol (FunASR runtime/docs/websocket_protocol.md):

- The client's first text message configures: ``{"mode": "offline"|"online"|"2pass", "wav_name", "wav_format",
  "audio_fs", "is_speaking": true, "chunk_size", "hotwords", "itn"}``. Then binary audio: 16-bit little-endian
  mono PCM at ``audio_fs`` Hz (default 16000), or with a ``wav_format`` other than ``pcm`` the bytes of a whole
  file in any format FFmpeg reads (offline mode, as FunASR's file service takes it). ``{"is_speaking": false}`` ends
  the audio.
- The server answers ``{"mode", "wav_name", "text", "is_final", "timestamp"?, "stamp_sents"?}`` as FunASR's 2pass
  runtime server does: ``"2pass-online"`` messages carry new words as they settle (append them), ``"2pass-offline"``
  messages carry each locked sentence (it replaces that sentence's online words), with ``timestamp`` (a JSON string
  ``[[start_ms, end_ms], ...]``, one pair per word) and ``stamp_sents`` (one entry per sentence). Mode ``offline``
  gets only the offline messages, ``online`` only the online ones (each sentence's last words are sent when it
  locks), ``2pass`` both. After the end of audio, a last message with ``"is_final": true`` (empty text) closes
  the result; an engine failure sends ``"is_final": true`` with an ``"error"``.

This server's choices within the protocol: sentences come from its own VAD endpointing (``chunk_size`` and
``chunk_interval`` set no latency here), each offline message's text after the first starts with a space (clients
append them), ``itn`` is accepted and ignored (Whisper writes numbers as digits already), each offline message also
carries ``"spk"`` (the speaker label; FunASR's offline pipeline names it the same way). One connection is one
utterance: after ``{"is_speaking": false}`` and the final message, open a new connection for the next one. With
``?room=ID`` (and the server's token when auth is on) the captions are published into that room like a browser's,
with ``&name=<person>`` as that person (``app.rooms.names``; a bad one is ``400`` ``bad_parameter``). A
connection the server cannot take is refused before the upgrade with ``POST /offer``'s answers
(``app.ops.admission``): ``503`` ``busy`` (full, at the cap, stopping) or ``loading`` with ``Retry-After``,
``engine`` (it failed) without, ``404`` ``no_room`` for an unknown room; an engine that will not open the session
after the upgrade after all gets the final message with the reason and a close with 1013 (try again later), or 1011
when it failed. A stream that
sends no audio for ``--stream-idle-s`` or lives past ``--stream-max-s`` gets its last sentence, then a final
message with the reason as ``error`` and a close with 1008; a file sent in offline mode that stops arriving for 30 s
is given up the same way. Text it cannot read mid-stream is ignored, as FunASR's server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import tempfile
from dataclasses import dataclass
from typing import IO, Any

from aiohttp import WSCloseCode, WSMsgType, web

from engine import (
    MAX_HOTWORDS,
    SAMPLE_RATE,
    EngineError,
    EngineNotReady,
    ErrorCode,
    SessionOptions,
    protocol,
)

from ..auth import presented_token, token_matches
from ..keys import CONFIG, ENGINE, MAIN_APP
from ..ops import STREAMS, NoRoom, Refused, admit_publisher
from ..responses import ParameterError, bad_parameter, json_error
from ..rooms import BadName, person_name
from .audio_files import discard_file
from .client_socket import BadMessage, ClientSocket, parse_object
from .file_jobs import FileJobError, open_file, transcribe_file
from .live_audio import LIVE_BACKLOG, PcmFeed
from .live_stream import LiveStream, OnlineText, open_live
from .read_ahead import ClientSilent, ReadAhead, client_messages

log = logging.getLogger(__name__)

MODES = ("offline", "online", "2pass")
_FIRST_MESSAGE_S = 10.0  # a client that connects and says nothing is dropped after this long
_MAX_MESSAGE_BYTES = 1024 * 1024  # one audio message; FunASR's clients send 60-600 ms
_FILE_BACKLOG = (15.0, 2)  # the same for offline mode, which FunASR's clients send files in as fast as they read
_AFTER_FINAL_S = 30.0  # the connection stays open this long after the final message for the client to close it
_AFTER_FINAL_STOPPING_S = 1.0  # ...or this long when the server is stopping
_FILE_STALL_S = 30.0  # a file sent in offline mode that stops arriving for this long is given up


class FunasrError(ValueError):
    """A first message this server cannot use."""


@dataclass(frozen=True)
class FunasrConfig:
    """The client's first message, checked."""

    mode: str = "2pass"
    wav_name: str = "wav-default-id"
    wav_format: str = "pcm"
    audio_fs: int = SAMPLE_RATE
    hotwords: tuple[str, ...] = ()

    @property
    def offline(self) -> bool:
        return self.mode in ("offline", "2pass")

    @property
    def online(self) -> bool:
        return self.mode in ("online", "2pass")


def parse_config(raw: str) -> FunasrConfig:
    """Raises ``FunasrError`` for anything FunASR's server would not accept either."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise FunasrError(f"the first message is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise FunasrError("the first message must be a JSON object")
    mode = data.get("mode", "2pass")
    if mode not in MODES:
        raise FunasrError(f"mode must be one of {', '.join(MODES)}")
    wav_format = str(data.get("wav_format") or "pcm").lower()
    audio_fs = data.get("audio_fs", SAMPLE_RATE)
    if not isinstance(audio_fs, int) or not 8000 <= audio_fs <= 48000:
        raise FunasrError("audio_fs must be a sample rate in Hz between 8000 and 48000")
    if wav_format != "pcm" and mode != "offline":
        raise FunasrError(f"wav_format {wav_format!r} needs mode 'offline'; live modes take PCM")
    return FunasrConfig(
        mode,
        str(data.get("wav_name") or "wav-default-id")[:200],
        wav_format,
        audio_fs,
        parse_hotwords(data.get("hotwords")),
    )


def parse_hotwords(raw: Any) -> tuple[str, ...]:
    """FunASR's hotwords: a JSON object string ``{"word": weight}`` (weights have no meaning to Whisper: the words
    become context) or plain words separated by spaces."""
    if not raw or not isinstance(raw, str):
        return ()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    words = [str(k) for k in parsed] if isinstance(parsed, dict) else raw.split()
    return tuple(w.strip()[:48] for w in words if w.strip())[:MAX_HOTWORDS]


class FunasrStream:
    """One FunASR connection: the translation of its session's caption messages into FunASR's (the session and the
    room it publishes into are its ``LiveStream``'s)."""

    def __init__(self, sock: ClientSocket, config: FunasrConfig) -> None:
        self.sock = sock
        self.config = config
        self.online = OnlineText()
        self.offline_sent = 0
        self.online_sent = 0

    async def send(self, mode: str, text: str, is_final: bool = False, **extra: Any) -> None:
        msg = {"mode": mode, "wav_name": self.config.wav_name, "text": text, "is_final": is_final, **extra}
        await self.sock.send_json(msg)  # (a client gone or cut off costs the room nothing)

    async def relay(self, live: LiveStream) -> None:
        """Every message of the stream's session to the client (the room has it first), until the session ends."""
        async for msg in live.messages():
            if isinstance(msg, protocol.Caption):
                for sentence in msg.sentences:
                    await self.sentence(sentence)
                if self.config.online and not msg.is_final:
                    await self.online_words(self.online.partial(msg.partial, msg.stable))
            elif isinstance(msg, protocol.Error) and msg.code is protocol.ErrorCode.ENGINE:
                await self.send(self.final_mode, "", True, error=msg.message)

    @property
    def final_mode(self) -> str:
        return "2pass-offline" if self.config.offline else "2pass-online"

    async def online_words(self, words: list[str]) -> None:
        if words:
            await self.send("2pass-online", (" " if self.online_sent else "") + " ".join(words))
            self.online_sent += len(words)

    async def sentence(self, s: protocol.Sentence) -> None:
        if self.config.online:
            rest = self.online.locked(s.text)
            if self.config.mode == "online":
                await self.online_words(rest)
        if not self.config.offline:
            return
        stamps = [[w.start_ms, w.end_ms] for w in s.words]
        await self.send(
            "2pass-offline",
            (" " if self.offline_sent else "") + s.text,
            timestamp=json.dumps(stamps),
            stamp_sents=[{"text_seg": s.text, "punc": "", "start": s.start_ms, "end": s.end_ms, "ts_list": stamps}],
            spk=s.spk,
        )
        self.offline_sent += 1


def add_routes(app: web.Application) -> None:
    app.router.add_get("/funasr", handle)


def side_app(main: web.Application) -> web.Application:
    """The application of ``--funasr-port``: FunASR's protocol at ``/``, on the main app's engine and rooms."""
    side = web.Application()
    side[MAIN_APP] = main
    side.router.add_get("/", handle)
    return side


async def handle(request: web.Request) -> web.StreamResponse:
    app = request.app.get(MAIN_APP, request.app)
    config = app[CONFIG]
    if not token_matches(presented_token(request), config.auth_token):
        return json_error(401, ErrorCode.UNAUTHORIZED, "this server needs its token")
    ws = ClientSocket.response(("binary",), _MAX_MESSAGE_BYTES)
    if not ws.can_prepare(request).ok:
        return json_error(400, ErrorCode.BAD_MESSAGE, "connect with a WebSocket client")
    # Admitted before the upgrade, as every other way in: a full server answers 503 with Retry-After, which the
    # client sees as a failed connection rather than a stream that closes at once.
    try:
        name = person_name(request.query.get("name"))
    except BadName as exc:
        return bad_parameter(ParameterError("name", str(exc)))
    try:
        admitted = await admit_publisher(app, request.query.get("room"), name)
    except NoRoom as exc:
        return json_error(404, ErrorCode.NO_ROOM, str(exc))
    except Refused as exc:
        return exc.refusal.response()  # (the same answers as POST /offer's)
    try:
        sock = await ClientSocket.accept(request, ws, config.send_timeout_s)
        fconfig = await _configuration(sock)
    except BaseException:
        admitted.slot.release()
        raise
    if fconfig is None:
        admitted.slot.release()
        return ws
    # Offline mode sends no online text, so it needs no partials; it is a live stream all the same (FunASR's
    # clients use it for a microphone too), so its sentences decode at live priority, at the pace of speech (PCM sent
    # faster is taken at most ``LIVE_AHEAD_S`` ahead of real time). Its files (a ``wav_format``) go as uploads do.
    # Each sentence's message names its speaker (``spk``) and the protocol cannot correct one later: each sentence
    # waits for its speaker embedding.
    spoken = admitted.room.language if admitted.room is not None else config.language  # (its clients name none)
    options = SessionOptions(
        language=spoken, hotwords=fconfig.hotwords, words=True, partials=fconfig.online, relabels=False
    )
    stream = FunasrStream(sock, fconfig)
    if fconfig.wav_format != "pcm":
        try:
            await _serve_file(app, sock, stream, options)
        finally:
            admitted.slot.release()
        return ws
    try:
        async with open_live(app, admitted, options, sock=sock) as live:
            relay = asyncio.create_task(stream.relay(live), name=f"{live.session.session_id}-funasr-relay")
            try:
                await _live(sock, live, stream, relay, fconfig)
            finally:
                relay.cancel()
                await asyncio.gather(relay, return_exceptions=True)
            await sock.close(WSCloseCode.GOING_AWAY if live.stopping.is_set() else WSCloseCode.OK)
    except Refused as exc:  # (the engine would not open the session after the upgrade)
        await _refuse(sock, str(exc), code=exc.refusal.close_code)
    except Exception:  # logged, and the open sentence finished, by open_live
        await _refuse(sock, "internal server error", code=1011)
    return ws


async def _configuration(sock: ClientSocket) -> FunasrConfig | None:
    """The client's first message, its configuration; None (the connection closed with the reason) when it sends
    none in time or one that is not valid."""
    try:
        first = await sock.ws.receive(timeout=_FIRST_MESSAGE_S)
    except TimeoutError:
        await sock.close(1008, "send the configuration message first")
        return None
    if first.type is not WSMsgType.TEXT:
        await sock.close(1003, "the first message must be the JSON configuration")
        return None
    try:
        return parse_config(first.data)
    except FunasrError as exc:
        await _refuse(sock, str(exc))
        return None


async def _refuse(sock: ClientSocket, why: str, code: int = 1008) -> None:
    """An error result the client can show (FunASR's clients print ``text``), then close."""
    await sock.send_json({"mode": "2pass-offline", "wav_name": "", "text": "", "is_final": True, "error": why})
    await sock.close(code, why)


async def _live(
    sock: ClientSocket, live: LiveStream, stream: FunasrStream, relay: asyncio.Task[None], fconfig: FunasrConfig
) -> None:
    """Feed the client's PCM to the session until it ends its audio, goes away, the server stops or the stream
    reaches a limit; then lock the open sentence, send the final message (with the limit's reason as its
    ``error``), and give the client a moment to close."""
    feed = PcmFeed(
        live.session,
        "linear16",
        fconfig.audio_fs,
        _FILE_BACKLOG if fconfig.mode == "offline" else LIVE_BACKLOG,
        unpaced=live.ending,
    )
    async with ReadAhead(sock.ws, live.stopping, live.expired) as messages:
        async for msg in messages:
            if msg.type is WSMsgType.BINARY:
                await feed.feed(msg.data)
            elif msg.type is WSMsgType.TEXT:
                if _ends_audio(msg.data):
                    break
            elif msg.type is WSMsgType.ERROR:
                break
    # End of audio, the client went away mid-sentence, or the server stops: the open sentence is finished (and
    # published to the room) before the session closes.
    await live.finish()
    await relay
    if sock.open:
        if live.expiry is not None and not live.stopping.is_set():
            await _refuse(sock, live.expiry.message)
            return
        await stream.send(stream.final_mode, "", True)
        with contextlib.suppress(TimeoutError):
            # The client closes after the final message (a stopping server waits only a moment for that).
            await sock.ws.receive(timeout=_AFTER_FINAL_STOPPING_S if live.stopping.is_set() else _AFTER_FINAL_S)


def _ends_audio(raw: str) -> bool:
    """True for ``{"is_speaking": false}`` (other text messages mid-stream are ignored, as FunASR does)."""
    try:
        return parse_object(raw).get("is_speaking") is False
    except BadMessage:
        return False


async def _serve_file(app: web.Application, sock: ClientSocket, stream: FunasrStream, options: SessionOptions) -> None:
    """Offline mode with a file format: collect the file's bytes (up to ``max_upload_mb``; a file that stops
    arriving for ``_FILE_STALL_S`` is given up), then transcribe it as an upload is (background priority), sending
    each sentence as it locks."""
    limit = app[CONFIG].max_upload_mb * 1024 * 1024
    handle: IO[bytes] = await asyncio.to_thread(
        tempfile.NamedTemporaryFile, prefix="funasr-", suffix="." + stream.config.wav_format[:8], delete=False
    )
    try:
        try:
            got = await _read_file(sock, handle, limit)
        except ClientSilent:
            handle.close()
            await _refuse(sock, f"the file stopped arriving for {_FILE_STALL_S:.0f} s")
            return
        if got is None:
            return
        handle.close()

        async def on_sentences(sentences: list[protocol.Sentence]) -> None:
            for s in sentences:
                await stream.sentence(s)

        try:
            reader = await open_file(handle.name)
            result = await transcribe_file(app[ENGINE], reader, options, on_sentences, app[STREAMS])
        except (ValueError, EngineNotReady, EngineError, FileJobError) as exc:
            await _refuse(sock, f"cannot transcribe this file: {exc}", 1003)
            return
        if result.cut_short:
            await _refuse(
                sock,
                f"the server is shutting down: the transcription stopped {result.read_s:.1f} s into "
                "the file; send it again in a moment",
                WSCloseCode.GOING_AWAY,
            )
            return
        await stream.send("2pass-offline", "", True)
        with contextlib.suppress(TimeoutError):
            await sock.ws.receive(timeout=_AFTER_FINAL_S)
    finally:
        handle.close()
        await discard_file(handle.name)
        await sock.close()


async def _read_file(sock: ClientSocket, handle: IO[bytes], limit: int) -> int | None:
    """The file's bytes into ``handle`` until ``{"is_speaking": false}``: their size, or None when the stream ended
    without the file (the client went away: nothing to transcribe; or it was over ``limit`` bytes: refused). Raises
    ``ClientSilent`` when nothing arrives for ``_FILE_STALL_S``."""
    size = 0
    async for msg in client_messages(sock.ws, timeout_s=_FILE_STALL_S):
        if msg.type is WSMsgType.BINARY:
            size += len(msg.data)
            if size > limit:
                await _refuse(sock, f"the file is over the server's limit of {limit // (1024 * 1024)} MB", 1009)
                return None
            await asyncio.to_thread(handle.write, msg.data)
        elif msg.type is WSMsgType.TEXT and _ends_audio(msg.data):
            return size
        elif msg.type is not WSMsgType.TEXT:
            return None
    return None
