"""A whole audio file through the live engine: the same VAD segmentation, speakers and recognizer as a live
session, as a background session (``SessionOptions.background``: no partials, finals behind every live decode).

The file is decoded a block at a time in a worker thread and fed only as fast as the session consumes it (its VAD
backlog and the segments waiting for their decode stay small), so an hour-long upload holds seconds of audio in
memory, not the hour. Cancelling the caller (a client that hung up) closes the session and abandons its decodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiohttp import web

from engine import SAMPLE_RATE, CaptionEngine, SessionOptions, SessionState, protocol

from ..ops import LiveStreams
from .audio_files import AudioFileReader

log = logging.getLogger(__name__)

_MAX_VAD_BACKLOG_S = 15.0  # feed more only while less than this waits for the VAD...
_MAX_PENDING_SEGMENTS = 2  # ...and at most this many closed segments wait for their decode
_DISCONNECT_POLL_S = 0.5  # how often a file job looks whether its client is still there


class FileJobError(RuntimeError):
    """The engine could not finish the file (it failed or went away); the message says why."""


@dataclass
class FileTranscript:
    """A transcribed file: its locked sentences in order (speaker labels after the re-clustering at the end; times
    in ms from the file's start), its length, and the language most of it was decoded in (None if none)."""

    sentences: list[protocol.Sentence] = field(default_factory=list)
    duration_s: float = 0.0
    language: str | None = None
    cut_short: bool = False  # the server stopped part way: the sentences cover the file's first ``read_s`` only
    read_s: float = 0.0  # seconds of the file fed to the engine

    @property
    def text(self) -> str:
        return " ".join(s.text for s in self.sentences)


SentenceSink = Callable[[list[protocol.Sentence]], Awaitable[None]]


async def open_file(path: str | Path) -> AudioFileReader:
    """Open an audio file for ``transcribe_file`` (in a worker thread). Raises ``AudioFileError``."""
    return await asyncio.to_thread(AudioFileReader, path)


async def transcribe_file(
    engine: CaptionEngine,
    reader: AudioFileReader,
    options: SessionOptions,
    on_sentences: SentenceSink | None = None,
    streams: LiveStreams | None = None,
) -> FileTranscript:
    """Transcribe the file ``reader`` reads (``open_file``), and close it. ``on_sentences`` gets each batch of newly
    locked sentences as they lock (their labels may still change at the end; the returned transcript has the
    final ones). Registered in ``streams`` while it runs: a server that stops asks it to finish, and it locks what
    was read so far and returns with ``cut_short``.

    Raises ``AudioFileError`` (a stream that breaks part way), ``EngineNotReady``/``EngineError`` (cannot open a
    session) and ``FileJobError`` (the engine failed part way)."""
    try:
        session = engine.open_session(replace(options, background=True))
    except BaseException:
        reader.close()
        raise
    session.configure(replace(options, background=True))  # hotwords and prompt apply from the first segment
    result = FileTranscript()
    failure: list[str] = []

    async def collect() -> None:
        async for msg in session.messages():
            if isinstance(msg, protocol.Caption) and msg.sentences:
                result.sentences.extend(msg.sentences)
                if on_sentences is not None:
                    await on_sentences(list(msg.sentences))
            elif isinstance(msg, protocol.Speakers):
                result.sentences = [replace(s, spk=msg.relabel.get(s.id, s.spk)) for s in result.sentences]
            elif isinstance(msg, protocol.WordTimes):  # (background sessions lock with aligned words: a safeguard)
                result.sentences = [replace(s, words=msg.words) if s.id == msg.id else s for s in result.sentences]
            elif isinstance(msg, protocol.Error) and msg.code is protocol.ErrorCode.ENGINE:
                failure.append(msg.message)

    collector = asyncio.create_task(collect(), name=f"{session.session_id}-file-collect")
    stopping = asyncio.Event()
    running = streams.running(session, stopping.set) if streams is not None else contextlib.nullcontext()
    with running:
        try:
            while (block := await asyncio.to_thread(reader.read)) is not None:
                # The engine ended it, or the sink failed:
                if session.state is not SessionState.LIVE or collector.done():
                    break
                if stopping.is_set():
                    result.cut_short = True
                    break
                session.feed(block)
                result.read_s += block.size / SAMPLE_RATE
                catch_up = asyncio.ensure_future(session.caught_up(_MAX_VAD_BACKLOG_S, _MAX_PENDING_SEGMENTS))
                stop = asyncio.ensure_future(stopping.wait())
                await asyncio.wait({catch_up, collector, stop}, return_when=asyncio.FIRST_COMPLETED)
                catch_up.cancel()
                stop.cancel()
            result.duration_s = reader.duration_s
            if session.state is SessionState.LIVE and not collector.done():
                await session.stop()
            await collector  # raises what the sink raised (a client that went away)
            if failure:
                raise FileJobError(failure[0])
            if session.stats.languages:
                result.language = max(session.stats.languages.items(), key=lambda kv: kv[1])[0]
            else:
                result.language = options.language
            log.info("file %s: %.1f s, %d sentences", session.session_id, result.duration_s, len(result.sentences))
            return result
        finally:
            reader.close()
            collector.cancel()
            await session.close()
            await asyncio.gather(collector, return_exceptions=True)


async def unless_client_leaves(request: web.Request, job: Coroutine[Any, Any, FileTranscript]) -> FileTranscript:
    """Run ``job`` (``transcribe_file``); cancel it if the client of ``request`` hangs up first (aiohttp does not
    cancel handlers on disconnect), so that nobody's decodes are spent on an answer no one will read. Raises
    ``ConnectionResetError`` then."""
    task = asyncio.ensure_future(job)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
            if request.transport is None or request.transport.is_closing():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise ConnectionResetError("the client went away")
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
