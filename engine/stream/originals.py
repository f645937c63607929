"""The words said, beside their English: a session whose task is ``"translate"`` captions speech in any of Whisper's
languages as English text, and each of its live sentences is decoded a second time with the task ``"transcribe"``
once it has locked, so that the original is kept too (``protocol.Original``; a room keeps it as the sentence in
that language, ``Translation.original``).

Why after the lock, in the background queue: the English caption is what the audience waits for. The second decode
of the same audio doubles the recognizer's work for such a session, so it runs behind every live decode, at the
recognizer's lowest priority (``DecodeScheduler.background``: when live speech leaves the recognizer alone, or
after a few seconds' wait), never ahead of a partial or a final. The language is the one the session named, else
the one the translate decode heard; speech in English is not decoded again (its caption is the words said). A
transcript the hallucination guard rejects is not sent (the English stands alone); a failed decode is logged and
skipped.
"""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np

from engine.asr.guard import reject_reason
from engine.asr.transcriber import DecodeRequest, Priority
from engine.audio.pcm import rms_dbfs, samples_to_ms
from engine.config import GuardConfig
from engine.errors import EngineNotReady
from engine.logs import SessionLog
from engine.protocol import Original
from engine.stream.mailbox import Mailbox
from engine.stream.partials import DecodeSettings
from engine.stream.scheduler import DecodeScheduler

TRANSCRIBE = "transcribe"
ENGLISH = "en"  # what the translate task writes


class Originals:
    """One translating session's second decodes. ``close`` (the session closed) cancels those still to come."""

    def __init__(
        self,
        session_id: str,
        decoding: DecodeSettings,
        scheduler: DecodeScheduler,
        mailbox: Mailbox,
        guard: GuardConfig,
        log: SessionLog,
    ) -> None:
        """``decoding``: the session's (its context and temperature apply to the second decode too); ``mailbox``:
        where ``original`` messages go; ``guard``: the hallucination guard's thresholds for a transcription (not
        the translate task's looser ones)."""
        self._session_id = session_id
        self._decoding = decoding
        self._scheduler = scheduler
        self._mailbox = mailbox
        self._guard = guard
        self._log = log
        self._running: set[asyncio.Task[None]] = set()

    def after_lock(self, sid: int, audio: np.ndarray | None, speech_samples: int, language: str | None) -> None:
        """Transcribe locked sentence ``sid``'s ``audio`` (16 kHz; ``speech_samples`` of it speech) in
        ``language`` (None: let the model hear it) and post its ``Original``."""
        if audio is None or not audio.size or language == ENGLISH:
            return  # (English speech: its English caption is the words said)
        request = self._decoding.request(f"{self._session_id}-o{sid}", audio, Priority.BACKGROUND, [], False)
        second = dataclasses.replace(request, language=language, task=TRANSCRIBE)
        task = asyncio.create_task(self._transcribe(sid, second, speech_samples), name=second.request_id)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _transcribe(self, sid: int, request: DecodeRequest, speech_samples: int) -> None:
        try:
            result = await self._scheduler.background(request)
        except EngineNotReady as exc:
            self._log.info("sentence %d: no original (%s)", sid, exc)
            return
        except Exception:  # the English sentence stands; nothing else depends on this decode
            self._log.exception("sentence %d: the decode of its original failed", sid)
            return
        reason = reject_reason(result, rms_dbfs(request.audio), samples_to_ms(speech_samples), self._guard)
        language = result.language or request.language
        if reason or not language:
            self._log.info("sentence %d: original dropped: %s", sid, reason or "no language")
            return
        self._mailbox.post(Original(sid, language, result.text.strip()))

    async def drained(self) -> None:
        """Return once the original of every sentence locked so far has come (or failed)."""
        if self._running:
            await asyncio.wait(set(self._running))

    def close(self) -> None:
        for task in self._running:
            task.cancel()
