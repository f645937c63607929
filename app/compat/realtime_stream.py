"""One connection of OpenAI's Realtime transcription API (``app.compat.openai_realtime``, which admits it and whose
docstring describes the protocol): the client's events into the engine session, and the session's speech events and
messages out as OpenAI's events, each sentence of speech one user audio item (``Item``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import math
import secrets
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import WSMsgType

from engine import Heard, IllegalTransition, SessionOptions, SessionState, SpeechStarted, protocol

from .client_socket import BadMessage, ClientSocket, parse_object
from .live_audio import PcmFeed
from .live_stream import LiveStream, OnlineText, SpeechWatch
from .read_ahead import ClientSilent, ReadAhead
from .realtime_config import ConfigError, RealtimeConfig, apply_update

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 300.0  # a connection that sends no event for this long is closed (its items finished first)
_MIN_COMMIT_MS = 100  # OpenAI refuses to commit less audio than this


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(12).replace('-', 'x').replace('_', 'y')}"


@dataclass
class Item:
    """One user audio item: ``speech_ms`` the start of its segment's speech (server VAD: how sentences find their
    item), ``end_ms`` the audio it covers up to (set when committed by the client)."""

    id: str
    speech_ms: int | None = None
    end_ms: int | None = None
    texts: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # one per word of its sentences, where known
    start_ms: int = 0
    stop_ms: int = 0
    delta_sent: bool = False


def word_logprobs(s: protocol.Sentence) -> list[dict[str, Any]]:
    """OpenAI's ``logprobs`` entries for sentence ``s``, one per word (this recognizer's unit of probability: the
    decoder's probability of the word, its tokens together): ``token`` the word as written, ``logprob``, ``bytes``.
    Empty where the decode gave none."""
    words = s.text.split()
    if len(s.word_probs) != len(words):
        return []
    return [
        {"token": w, "logprob": round(math.log(max(p, 1e-12)), 4), "bytes": list(w.encode())}
        for w, p in zip(words, s.word_probs, strict=True)
    ]


class RealtimeStream:
    """One ``/v1/realtime`` connection: client events into the engine session, its messages out as OpenAI's (the
    beta API's names and session object when ``beta``: ``transcription_session.created``/``updated``,
    ``conversation.item.created``; a client may also choose them event by event with ``transcription_session.update``).
    """

    def __init__(
        self,
        sock: ClientSocket,
        live: LiveStream,
        config: RealtimeConfig,
        beta: bool = False,
        spoken: str | None = None,
    ) -> None:
        """``spoken``: the language of the room it publishes into (a ``session.update`` naming another is refused);
        None outside a room."""
        self.sock, self.live, self.config, self.beta = sock, live, config, beta
        self.spoken = spoken
        self.session_id = _new_id("sess")
        self.watch = SpeechWatch(live.session)
        self.online = OnlineText()
        self._feed: PcmFeed | None = None
        self._current: Item | None = None  # the item taking audio now (not committed)
        self._awaiting: deque[Item] = deque()  # committed items waiting for their transcript, oldest first
        self._previous_id: str | None = None  # the last item committed
        self._committed_ms = 0  # audio fed up to the last commit or clear
        self._discard_upto_ms = -1  # sentences that end by here were cleared
        self._sentences_seen = 0
        self._relayed = asyncio.Event()  # the relay handled a message (or ended)
        self._tasks: set[asyncio.Task[None]] = set()
        # Speech events and the session's messages are handled one at a time, in the order the session told them.
        self._order = asyncio.Lock()

    # ---- lifecycle -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        if self.beta:
            await self.emit("transcription_session.created", session=self.config.beta_session(self.session_id))
        else:
            await self.emit("session.created", session=self.config.session(self.session_id))
        relay = asyncio.create_task(self.relay(), name=f"{self.live.session.session_id}-realtime-relay")
        watch = asyncio.create_task(self.watch_speech(), name=f"{self.live.session.session_id}-realtime-watch")
        code = 1000
        try:
            try:
                async with ReadAhead(self.sock.ws, *self.live.stops, timeout_s=IDLE_TIMEOUT_S) as messages:
                    async for msg in messages:
                        if msg.type is WSMsgType.TEXT:
                            await self.event(msg.data)
                        elif msg.type is WSMsgType.BINARY:
                            await self.error("send events as JSON text messages", code="invalid_json")
                        elif msg.type is WSMsgType.ERROR:  # aiohttp closed it already (1009: an oversized message)
                            break
            except ClientSilent:
                await self.error(
                    f"no event for {IDLE_TIMEOUT_S:.0f} s: the session is closed",
                    code="idle_timeout",
                    kind="server_error",
                )
            if self.live.stopping.is_set():
                code = 1001
            elif self.live.expiry is not None:
                await self.error(
                    self.live.expiry.message,
                    kind="invalid_request_error",
                    code="session_expired" if self.live.expiry.kind == "max" else "idle_timeout",
                )
            if self._feed is None and self.live.session.state is SessionState.LIVE:
                self.live.session.configure(self._options())  # nothing was said; end it cleanly all the same
            await self.live.finish()
            await relay
            await self.finish_items()
        finally:
            self.watch.close()
            for task in (relay, watch, *self._tasks):
                task.cancel()
            await asyncio.gather(relay, watch, *self._tasks, return_exceptions=True)
        await self.sock.close(code)

    def _options(self) -> SessionOptions:
        return SessionOptions(language=self.config.language, prompt=self.config.prompt, words=True)

    # ---- client events ---------------------------------------------------------------------------------------
    async def event(self, raw: str) -> None:
        try:
            data = parse_object(raw)
            kind = data["type"]
        except (BadMessage, KeyError) as exc:
            if not self.sock.open:
                return
            why = str(exc) if isinstance(exc, BadMessage) else "the message has no 'type'"
            await self.error(f"each message must be a JSON object with a 'type': {why}", code="invalid_json")
            return
        if not self.sock.open and kind != "input_audio_buffer.append":
            return  # cut off or gone: only its audio still counts (its words are kept)
        event_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
        try:
            if kind in ("session.update", "transcription_session.update"):
                await self.update(data.get("session"), beta=kind.startswith("transcription_session"))
                self.beta = self.beta or kind.startswith("transcription_session")
            elif kind == "input_audio_buffer.append":
                await self.append(data.get("audio"))
            elif kind == "input_audio_buffer.commit":
                await self.commit()
            elif kind == "input_audio_buffer.clear":
                await self.clear()
            else:
                raise ConfigError(
                    f"event type {kind!r} is not supported by a transcription session", "type", code="unsupported_event"
                )
        except ConfigError as exc:
            await self.error(str(exc), code=exc.code, param=exc.param, event_id=event_id)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
            # A value of a shape no check foresaw (a list where a string belongs): the event is refused, the
            # session goes on with what it had.
            log.info("%s: event %r refused: %r", self.live.session.session_id, kind, exc)
            await self.error(
                f"the event {str(kind)[:64]!r} has a value this server cannot use",
                code="invalid_value",
                event_id=event_id,
            )

    async def update(self, session: Any, beta: bool) -> None:
        config = apply_update(self.config, session, beta)
        if self.spoken is not None and config.language not in (None, self.spoken):
            raise ConfigError(
                f"this room is spoken in {self.spoken}: name no language (or {self.spoken!r}) to caption into it",
                "session.audio.input.transcription.language",
                code="unsupported_language",
            )
        if config.language is None and self.spoken is not None:
            config = replace(config, language=self.spoken)  # none named: the room's
        if self._feed is not None:
            if (config.language, config.prompt) != (self.config.language, self.config.prompt):
                raise ConfigError(
                    "language and prompt apply to the whole session: set them before the first audio",
                    "session.audio.input.transcription",
                    code="unsupported_update",
                )
            if config.format != self.config.format:
                self._feed.set_format(config.encoding, config.rate)
        self.config = config
        if beta:
            await self.emit("transcription_session.updated", session=config.beta_session(self.session_id))
        else:
            await self.emit("session.updated", session=config.session(self.session_id))

    async def append(self, audio: Any) -> None:
        try:
            data = base64.b64decode(audio if isinstance(audio, str) else b"", validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError("audio must be base64-encoded audio in the session's format", "audio") from None
        if self.live.session.state is not SessionState.LIVE:
            return
        if self._feed is None:
            self.live.session.configure(self._options())
            self._feed = PcmFeed(self.live.session, self.config.encoding, self.config.rate, unpaced=self.live.ending)
        await self._feed.feed(data)

    async def commit(self) -> None:
        fed_ms = self._feed.fed_ms if self._feed is not None else 0
        if fed_ms - self._committed_ms < _MIN_COMMIT_MS:
            raise ConfigError(
                f"buffer too small: expected at least {_MIN_COMMIT_MS} ms of audio, have "
                f"{fed_ms - self._committed_ms} ms",
                "audio",
                code="input_audio_buffer_commit_empty",
            )
        self._committed_ms = fed_ms
        if self.config.server_vad:  # the open sentence ends now; its item follows the usual way
            self.live.flush()
            return
        item = self._current or Item(_new_id("item"), start_ms=self._committed_ms)
        self._current, item.end_ms = None, fed_ms
        await self._commit_item(item)
        # The item is the audio before the commit, exactly: the flush runs before this stream reads its next event
        # (audio appended after the commit waits in the read-ahead meanwhile, and belongs to the next item).
        await self._finalize()
        self._spawn(self._complete_when_relayed(item))

    async def clear(self) -> None:
        self._discard_upto_ms = self._committed_ms = self._feed.fed_ms if self._feed is not None else 0
        self._current = None
        if self.live.session.state is SessionState.LIVE and self._feed is not None:
            self.live.flush()
        await self.emit("input_audio_buffer.cleared")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finalize(self) -> None:
        with contextlib.suppress(IllegalTransition):  # the session is ending: its stop locks everything
            await self.live.session.finalize()

    async def _complete_when_relayed(self, item: Item) -> None:
        """A manual commit, flushed: wait until the relay has every sentence, complete ``item``."""
        while self._sentences_seen < self.live.session.stats.sentences and not self.live.ended.is_set():
            self._relayed.clear()
            await self._relayed.wait()
        if item in self._awaiting:
            await self._complete(item)

    # ---- server events ---------------------------------------------------------------------------------------
    async def emit(self, kind: str, **fields: Any) -> None:
        await self.sock.send_json({"type": kind, "event_id": _new_id("event"), **fields})

    async def error(
        self,
        message: str,
        *,
        code: str,
        param: str | None = None,
        event_id: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        await self.emit(
            "error", error={"type": kind, "code": code, "message": message, "param": param, "event_id": event_id}
        )

    async def watch_speech(self) -> None:
        """``speech_started`` / ``speech_stopped`` and the item's ``committed`` as the endpointer opens and closes
        segments (server VAD only), as soon as the session tells them."""
        while True:
            await self.watch.wait()
            async with self._order:
                await self._speech_events()

    async def _speech_events(self) -> None:
        """Handle the speech events told so far (holding ``_order``): the relay calls this before each message, so
        that a segment's stop and commit always come before the sentence it makes, whichever task sees them."""
        for event in self.watch.ready():
            if not self.config.server_vad or isinstance(event, Heard):
                continue
            if isinstance(event, SpeechStarted):
                await self._speech_started(event)
            elif self._current is not None:
                await self._speech_stopped(self._current, event.speech_end_ms)

    async def _speech_started(self, event: SpeechStarted) -> Item:
        # Words that settled before the watch saw the segment open went to an item made for them: it is this one.
        item = self._current if self._current is not None and self._current.speech_ms is None else Item(_new_id("item"))
        item.speech_ms, item.start_ms = event.speech_ms, event.start_ms
        self._current = item
        await self.emit("input_audio_buffer.speech_started", audio_start_ms=event.start_ms, item_id=item.id)
        return item

    async def _speech_stopped(self, item: Item, end_ms: int) -> None:
        await self.emit("input_audio_buffer.speech_stopped", audio_end_ms=end_ms, item_id=item.id)
        if self._current is item:
            self._current = None
        await self._commit_item(item)

    async def _commit_item(self, item: Item) -> None:
        self._awaiting.append(item)
        await self.emit("input_audio_buffer.committed", previous_item_id=self._previous_id, item_id=item.id)
        await self.emit(
            "conversation.item.created" if self.beta else "conversation.item.added",
            previous_item_id=self._previous_id,
            item={
                "id": item.id,
                "type": "message",
                "object": "realtime.item",
                "status": "completed",
                "role": "user",
                "content": [{"type": "input_audio", "transcript": None}],
            },
        )
        self._previous_id = item.id

    async def _delta(self, item: Item, words: list[str]) -> None:
        if words:
            text = " ".join(words)
            await self.emit(
                "conversation.item.input_audio_transcription.delta",
                item_id=item.id,
                content_index=0,
                delta=(" " if item.delta_sent else "") + text,
            )
            item.delta_sent = True

    async def _complete(self, item: Item) -> None:
        with contextlib.suppress(ValueError):
            self._awaiting.remove(item)
        seconds = max(0, item.stop_ms - item.start_ms) / 1000
        extra = {"logprobs": item.logprobs} if self.config.logprobs else {}
        await self.emit(
            "conversation.item.input_audio_transcription.completed",
            item_id=item.id,
            content_index=0,
            transcript=" ".join(item.texts),
            usage={"type": "duration", "seconds": seconds},
            **extra,
        )

    def _open_item(self) -> Item:
        """The item words being spoken now belong to: with server VAD the oldest not transcribed yet; with manual
        commits the one not committed yet (a committed item holds exactly the audio before its commit)."""
        if self._awaiting and self.config.server_vad:
            return self._awaiting[0]
        if self._current is None:
            speaking = self.watch.speaking
            self._current = Item(
                _new_id("item"), speech_ms=speaking.speech_ms if speaking else None, start_ms=self._committed_ms
            )
        return self._current

    async def relay(self) -> None:
        """The session's messages as OpenAI's events, until the session ends."""
        try:
            await self._relay()
        finally:
            self._relayed.set()

    async def _relay(self) -> None:
        async for msg in self.live.messages():
            async with self._order:
                await self._speech_events()
                await self._relay_one(msg)

    async def _relay_one(self, msg: protocol.ServerMessage) -> None:
        """One session message as OpenAI's events (holding ``_order``)."""
        self._relayed.set()
        if isinstance(msg, protocol.Caption):
            for sentence in msg.sentences:
                await self.sentence(sentence)
                self._sentences_seen += 1
                self._relayed.set()
            if not msg.is_final and msg.stable:
                words = self.online.partial(msg.partial, msg.stable)
                if words:
                    await self._delta(self._open_item(), words)
        elif isinstance(msg, protocol.Error) and msg.code is protocol.ErrorCode.ENGINE:
            for item in list(self._awaiting):
                self._awaiting.remove(item)
                await self.emit(
                    "conversation.item.input_audio_transcription.failed",
                    item_id=item.id,
                    content_index=0,
                    error={"type": "server_error", "code": "engine", "message": msg.message, "param": None},
                )
            await self.error(msg.message, code="engine", kind="server_error")

    async def sentence(self, s: protocol.Sentence) -> None:
        """A locked sentence: its item's last delta, and in server VAD mode its ``completed``."""
        rest = self.online.locked(s.text)
        if s.end_ms <= self._discard_upto_ms:
            return  # cleared by the client
        if not self.config.server_vad:
            item = self._awaiting[0] if self._awaiting and s.end_ms <= (self._awaiting[0].end_ms or 0) else None
            item = item or self._open_item()
            await self._delta(item, rest)
            item.texts.append(s.text)
            item.logprobs += word_logprobs(s)
            item.stop_ms = max(item.stop_ms, s.end_ms)
            return
        item = next((i for i in self._awaiting if i.speech_ms == s.start_ms), None)
        if item is None:
            current = self._current if self._current is not None and self._current.speech_ms == s.start_ms else None
            if current is None:  # a segment that opened and closed between two looks
                current = await self._speech_started(SpeechStarted(-1, max(0, s.start_ms - 300), s.start_ms))
            await self._speech_stopped(current, s.end_ms)
            item = current
        for earlier in list(self._awaiting):  # segments before it that locked no sentence (noise)
            if earlier is item:
                break
            await self._complete(earlier)
        await self._delta(item, rest)
        item.texts.append(s.text)
        item.logprobs += word_logprobs(s)
        item.stop_ms = s.end_ms
        await self._complete(item)

    async def finish_items(self) -> None:
        """The session ended: every item still open gets its ``completed`` (what was said of it, maybe nothing)."""
        if self._current is not None and self._current.texts:
            await self._commit_item(self._current)
        self._current = None
        for item in list(self._awaiting):
            await self._complete(item)
