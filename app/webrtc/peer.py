"""One browser (or any WebRTC client) connected to the server: its peer connection, audio ingest, caption channel
and engine session, owned together and closed together.

Lifecycle: NEW (offer accepted) -> LIVE (audio flowing) -> STOPPING (stop asked, or the peer went away) -> CLOSED.
A stop finishes the open sentence before anything is torn down, so a client that vanishes mid-sentence loses
nothing that was said; ``close`` is idempotent and leaves no task behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from aiortc import RTCDataChannel, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamTrack

from engine import CaptionEngine, IllegalTransition, Session, SessionLog, SessionOptions, SessionState, protocol

from ..config import ServerConfig
from ..ops import Slot
from ..rooms import Room, RoomPublisher
from .ice import filter_remote_candidates, rtc_configuration
from .ingest import IngestStats, pump_track
from .jitter import LossObserver
from .rtp_audio import AudioReceiver, with_inband_fec, with_ptime

log = logging.getLogger(__name__)

CAPTIONS_CHANNEL = "captions"
_SEND_HIGH_WATER_BYTES = 256 * 1024  # past this, let the mailbox coalesce partials instead of queuing more
_BAD_REPLY_BURST = 10  # error replies to bad client messages: at most this many at once...
_BAD_REPLY_PER_S = 1.0  # ...then this many per second; the rest are counted and summarised
_BAD_SUMMARY_AFTER_S = 2.0


def _refusal_in_room(msg: protocol.StartMessage, spoken: str) -> str:
    """Why a ``start`` cannot publish into a room spoken in ``spoken`` ("" if it can): every sentence of a room is in
    its language (its files, translations and outputs start from it). Whisper's translate task writes English, so
    it fits a room spoken in English, whatever ``msg.language`` the speech is in."""
    if msg.task == "translate":
        return (
            ""
            if spoken == "en"
            else (
                f"this room is spoken in {spoken}: a session cannot publish English "
                "translations into it (the translate task suits rooms spoken in en)"
            )
        )
    if msg.language_given and msg.language != spoken:
        return f"this room is spoken in {spoken}: start without a language (or with {spoken!r}) to caption into it"
    return ""


class PeerState(StrEnum):
    NEW = "new"
    LIVE = "live"
    STOPPING = "stopping"
    CLOSED = "closed"


class PeerSession:
    """Created by ``POST /offer``; removes itself from ``registry`` when closed. With a ``room``, every message
    sent to the client is first published to the room (durable parts committed before the client sees them)."""

    def __init__(
        self,
        engine: CaptionEngine,
        config: ServerConfig,
        registry: dict[str, PeerSession],
        room: Room | None = None,
        slot: Slot | None = None,
        data_channel: bool = True,
        on_shed: Callable[[float], None] | None = None,
        loss: LossObserver | None = None,
        language: str | None = None,
    ) -> None:
        """``slot``: the admission place this session holds; released when it closes (or if opening fails).
        ``language``: what it decodes until the client's ``start`` says otherwise (None: the server's default).
        ``data_channel`` False: a publisher without a caption channel (WHIP): its captions go to its room only.
        ``on_shed(seconds)``: audio of this stream skipped because the server fell behind (metrics).
        ``loss``: hears the audio packets this stream loses and the audio concealed for them (metrics)."""
        self.engine = engine
        self.config = config
        self.registry = registry
        try:
            self.session: Session = engine.open_session(SessionOptions(language=language or config.language))
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        self._slot = slot
        self.id = self.session.session_id
        self.state = PeerState.NEW
        self.pc = RTCPeerConnection(rtc_configuration(config.ice, label=self.id))
        self.channel: RTCDataChannel | None = None
        self.data_channel = data_channel
        self.ingest = IngestStats()
        self._on_shed = on_shed
        self._loss = loss
        self._receiver: AudioReceiver | None = None  # set when the audio track arrives (with the low-delay path)
        self._channel_open = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop_task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()  # set once ``close`` has torn everything down
        self._ingesting = False
        self._bad_tokens = float(_BAD_REPLY_BURST)  # see _reply_to_bad_message
        self._bad_refill_at = time.monotonic()
        self._bad_ignored = 0
        self._bad_summary: asyncio.TimerHandle | None = None
        self._log = SessionLog(log, self.id)
        self.publisher: RoomPublisher | None = None
        self.spoken: str | None = None  # the language of the room it joined (its own room: None, any language)
        if room is not None:
            self.join(room)
        registry[self.id] = self
        self.pc.on("datachannel", self._on_datachannel)
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_connection_state)
        self._sender = self._spawn(self._send_loop(), "send")

    def join(self, room: Room, name: str | None = None, own: bool = False) -> None:
        """Publish into ``room`` from now on, as person ``name`` (None: unnamed). Call before the client can send
        ``start`` (i.e. right after ``accept``): no message exists before that, so the room misses nothing.
        A room it did not make (``own`` False) is spoken in ``room.language``: a ``start`` that names no language
        decodes that one, one that names another is refused (``_refusal_in_room``)."""
        if self.publisher is None:
            self.spoken = None if own else room.language
            self.publisher = room.join(self.id, name)
            room.share_microphone(self.id, self.session)
            self.publisher.watch(self.session.post_correction)
            self._spawn(self._tell_saving(self.publisher), "saving")

    async def _tell_saving(self, publisher: RoomPublisher) -> None:
        """Tell the client when its room's transcript store stops or resumes taking its captions."""
        async for saving, why in publisher.saving_changes():
            text = (
                "captions are saved again; nothing was lost"
                if saving
                else "captions are not being saved (the server's transcript store fails: "
                f"{why or 'unknown error'}); viewers still see them, and they are saved when it recovers"
            )
            self.session.post_storage(saving, text)

    async def accept(self, sdp: str, kind: str) -> RTCSessionDescription:
        """Apply the client's offer and return the answer (non-trickle: candidates included).

        Raises ``ValueError`` for an SDP aiortc cannot use; the caller closes the session then.
        """
        offer = RTCSessionDescription(sdp=filter_remote_candidates(sdp, self.config.ice.loopback_only), type=kind)
        await self.pc.setRemoteDescription(offer)
        audio = sum(1 for t in self.pc.getTransceivers() if t.kind == "audio")
        if audio != 1:
            # One session is one voice source: a second track's audio would be interleaved into the same stream.
            raise ValueError(
                "the offer has no audio track"
                if audio == 0
                else f"the offer has {audio} audio tracks; send exactly one"
            )
        for transceiver in self.pc.getTransceivers():
            if transceiver.kind == "video":
                # A broadcaster's offer (OBS over WHIP) carries video too: answer it inactive, so that no video is
                # sent, received or decoded (an unread video track would queue decoded frames without bound).
                transceiver.direction = "inactive"
        answer = await self.pc.createAnswer()
        await self.pc.setLocalDescription(answer)
        self.state = PeerState.LIVE
        self._log.info("peer connected (%d live)", len(self.registry))
        local = self.pc.localDescription
        # Longer packets from the sender: a third of the per-packet receive work (app.webrtc.rtp_audio.with_ptime);
        # and in-band FEC, so that a lost packet's speech comes back from the next one (with_inband_fec).
        sdp = with_inband_fec(with_ptime(local.sdp, self.config.ptime_ms))
        return RTCSessionDescription(sdp=sdp, type=local.type)

    # ---- events from aiortc ---------------------------------------------------------------------------------
    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        if channel.label != CAPTIONS_CHANNEL:
            self._log.warning("ignoring data channel %r", channel.label)
            return
        self.channel = channel
        channel.on("message", self._on_message)
        if channel.readyState == "open":
            self._channel_open.set()
        else:
            channel.on("open", self._channel_open.set)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind != "audio" or self._ingesting:
            return  # only one audio track is ever accepted; this guards the invariant, not the offer check
        self._ingesting = True
        receiver = next((t.receiver for t in self.pc.getTransceivers() if t.receiver.track is track), None)
        if isinstance(receiver, AudioReceiver):
            self._receiver = receiver
            if self._loss is not None:
                receiver.watch(self._loss)
        self._spawn(self._ingest(track), "ingest")

    async def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        self._log.info("connection %s", state)
        if state in ("failed", "closed"):
            self.request_stop()

    def _on_message(self, raw: str | bytes) -> None:
        try:
            msg = protocol.parse_client_message(raw)
        except protocol.ProtocolError as exc:
            self._reply_to_bad_message(exc)
            return
        if isinstance(msg, protocol.StopMessage):
            self.request_stop()
            return
        language = msg.language
        cannot = self.engine.cannot_caption(msg.language if msg.language_given else None, msg.task)
        if cannot:
            self._send_error(protocol.ErrorCode.BAD_MESSAGE, cannot)
            return
        if self.spoken is not None:
            refusal = _refusal_in_room(msg, self.spoken)
            if refusal:
                self._send_error(protocol.ErrorCode.BAD_MESSAGE, refusal)
                return
            language = msg.language if msg.language_given else self.spoken
        try:
            self.session.configure(
                SessionOptions(language=language, hotwords=msg.hotwords, words=msg.words, task=msg.task)
            )
        except IllegalTransition as exc:
            self._send_error(protocol.ErrorCode.BAD_STATE, str(exc))

    # ---- work -----------------------------------------------------------------------------------------------
    async def _ingest(self, track: MediaStreamTrack) -> None:
        def feed(chunk: Any) -> None:
            if self.session.state is SessionState.LIVE:
                self.session.feed(chunk)

        def overloaded(lag_s: float) -> None:
            self._log.warning("%.1f s of audio waiting to be processed: skipping audio to catch up", lag_s)
            self._send_error(
                protocol.ErrorCode.OVERLOADED,
                f"the server fell {lag_s:.1f} s behind; some audio was skipped to catch up",
            )

        await pump_track(track, feed, self.ingest, self.config.max_lag_s, overloaded, self._on_shed)
        self._log.info("audio track ended after %.1f s", self.ingest.audio_s)
        self.request_stop()

    async def _send_loop(self) -> None:
        drained = asyncio.Event()
        while (msg := await self.session.next_message()) is not None:
            if self.publisher is not None:
                try:
                    await self.publisher.publish(msg)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the store failed (disk full?): the client still gets its captions
                    self._log.exception("could not publish to room %s", self.publisher.room.id)
            if not self.data_channel:
                continue
            if isinstance(msg, protocol.WordTimes) and not self.session.options.words:
                continue  # better word times: only for clients that asked for words (the room has them regardless)
            await self._channel_open.wait()
            channel = self.channel
            if channel is None or channel.readyState != "open":
                continue  # the client is gone; the session still finishes its last sentence regardless
            if channel.bufferedAmount > _SEND_HIGH_WATER_BYTES:
                # A slow reader: wait for the channel to drain while the mailbox merges partials meanwhile.
                drained.clear()
                channel.bufferedAmountLowThreshold = _SEND_HIGH_WATER_BYTES // 4
                channel.once("bufferedamountlow", drained.set)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(drained.wait(), 5.0)
            with contextlib.suppress(Exception):  # a channel closing under us is the peer going away
                channel.send(protocol.dumps(msg, words=self.session.options.words))
        # The session has nothing more to say: stopped, or ended by the engine. Either way the peer is done.
        self.request_stop()

    def _reply_to_bad_message(self, exc: protocol.ProtocolError) -> None:
        """An error reply per bad message, within ``_BAD_REPLY_BUDGET``: a client flooding the channel would
        otherwise queue its own replies ahead of its captions and its ``stopped``. Past the budget, bad messages
        are counted and one summary says how many were ignored."""
        now = time.monotonic()
        self._bad_tokens = min(_BAD_REPLY_BURST, self._bad_tokens + (now - self._bad_refill_at) * _BAD_REPLY_PER_S)
        self._bad_refill_at = now
        if self._bad_tokens >= 1:
            self._bad_tokens -= 1
            self._send_error(exc.code, str(exc))
            return
        self._bad_ignored += 1
        if self._bad_summary is None:
            self._bad_summary = asyncio.get_running_loop().call_later(_BAD_SUMMARY_AFTER_S, self._summarise_bad)

    def _summarise_bad(self) -> None:
        self._bad_summary = None
        if self._bad_ignored:
            self._log.warning("ignored %d bad channel messages", self._bad_ignored)
            self._send_error(
                protocol.ErrorCode.BAD_MESSAGE,
                f"{self._bad_ignored} more bad messages were ignored (too many, too fast)",
            )
            self._bad_ignored = 0

    def _send_error(self, code: protocol.ErrorCode, message: str) -> None:
        self.session.post_error(code, message)

    def request_stop(self) -> None:
        """Finish the session (last sentence, final message), then close. Safe to call any number of times."""
        if self._stop_task is None and self.state is not PeerState.CLOSED:
            self.state = PeerState.STOPPING
            self._stop_task = asyncio.create_task(self._stop_then_close(), name=f"{self.id}-stop")

    async def _stop_then_close(self) -> None:
        try:
            if self.session.state is SessionState.LIVE:
                await asyncio.wait_for(self.session.stop(), self.config.stop_timeout_s)
            # Let the last messages reach a client that is still there.
            await asyncio.wait({self._sender}, timeout=2.0)
        except TimeoutError:
            self._log.warning("stop took over %.0f s; closing anyway", self.config.stop_timeout_s)
        except Exception:
            self._log.exception("stop failed")
        finally:
            await self.close()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"{self.id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Tear everything down. Idempotent."""
        if self.state is PeerState.CLOSED:
            return
        self.state = PeerState.CLOSED
        self.registry.pop(self.id, None)
        if self._bad_summary is not None:
            self._bad_summary.cancel()
        if self._slot is not None:
            self._slot.release()
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for t in tasks:
            t.cancel()
        try:
            if self.publisher is not None:
                self.publisher.leave()
            await self.session.close()
            await self.pc.close()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self.closed.set()
        self._log.info(
            "closed (%.1f s audio received, %.1f s skipped%s)",
            self.ingest.audio_s,
            self.ingest.skipped_s,
            self._loss_summary(),
        )

    def _loss_summary(self) -> str:
        """What the network lost of this stream, for the closing log line ("" when nothing was lost)."""
        receiver = self._receiver
        buffer, decoder = (receiver.buffer, receiver.decoder) if receiver is not None else (None, None)
        lost = buffer.skipped if buffer is not None else 0
        late = buffer.late if buffer is not None else 0
        concealed_s = decoder.concealed_s if decoder is not None else 0.0
        if not (lost or late or concealed_s):
            return ""
        return f"; {lost} packets lost, {late} late, {concealed_s:.2f} s concealed"
