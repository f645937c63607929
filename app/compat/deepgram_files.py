"""Deepgram's pre-recorded API: ``POST /v1/listen`` with the audio file as the body, on the file-job path the OpenAI
route uses (``file_jobs``: the live engine as a background session, behind every live decode; ``--max-file-jobs``
at once, ``--max-upload-mb`` at most).

The body is a file in any container FFmpeg reads (``Content-Type`` is not needed), or raw audio with ``encoding``
(``linear16``, ``mulaw``, ``alaw``) and ``sample_rate``. A JSON body ``{"url": ...}`` is refused: this server never
fetches from the network. The answer is Deepgram's: ``{"metadata": {...}, "results": {"channels": [{"alternatives":
[{"transcript", "confidence", "words"}]}], "utterances"?: [...]}}`` (``utterances=true``: one per locked sentence).
The query parameters are the live API's (``deepgram_params``); ``diarize`` gives every word its ``speaker``.
Errors are Deepgram's JSON (``err_code``, ``err_msg``, ``request_id``): ``400``, ``401``, ``413`` over the upload
limit, ``429`` every file slot in use, ``503`` loading or stopping.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import struct
import tempfile
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import IO, Any

from aiohttp import web

from engine import EngineError, EngineNotReady, EngineState, SessionOptions, protocol

from ..auth import token_matches
from ..bodies import BodyError, unless_stalled
from ..keys import CONFIG, ENGINE
from ..ops import FILE_JOBS, STREAMS
from . import deepgram_results as dg
from .audio_files import AudioFileError, discard_file
from .deepgram import deepgram_error
from .deepgram_params import ListenParams, ParamError, parse_params, presented_key
from .file_jobs import FileJobError, FileTranscript, open_file, transcribe_file, unless_client_leaves
from .redaction import Redactor

log = logging.getLogger(__name__)

_CHUNK_BYTES = 256 * 1024
FILE_PARAMS = frozenset({"utterances"})  # the file API's own parameters, beside the live API's
_WAV_TAGS = {"linear16": (1, 16), "alaw": (6, 8), "mulaw": (7, 8)}


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/listen", transcribe)


def wav_header(encoding: str, rate: int) -> bytes:
    """A WAV header for headerless audio (data size left open: FFmpeg reads to the end)."""
    tag, bits = _WAV_TAGS[encoding]
    block = bits // 8
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, tag, 1, rate, rate * block, block, bits)
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
    )


async def transcribe(request: web.Request) -> web.Response:
    app, request_id = request.app, str(uuid.uuid4())
    key, _ = presented_key(request)
    if not token_matches(key, app[CONFIG].auth_token):
        return deepgram_error(401, "INVALID_AUTH", "Invalid credentials.", request_id)
    try:
        params = parse_params(request.query, app[CONFIG].language, also=FILE_PARAMS)
    except ParamError as exc:
        return deepgram_error(400, "Bad Request", str(exc), request_id)
    if request.content_type == "application/json":
        return deepgram_error(
            400,
            "Bad Request",
            "this server does not fetch audio from URLs: send the file as the request body",
            request_id,
        )
    if app[ENGINE].state is not EngineState.READY:
        return deepgram_error(503, "SERVICE_UNAVAILABLE", f"the speech model is {app[ENGINE].state.value}", request_id)
    if app[FILE_JOBS].closed:
        return deepgram_error(503, "SERVICE_UNAVAILABLE", "the server is shutting down", request_id)
    path = None
    try:
        # The body first, then a file slot: an upload that is slow to arrive (or stalls: 408) holds none.
        limit = app[CONFIG].max_upload_mb * 1024 * 1024
        header = wav_header(params.encoding, params.sample_rate or 16000) if params.encoding else b""
        try:
            path, sha = await _save(request, limit, header)
        except BodyError as exc:
            return deepgram_error(exc.status, "Bad Request", exc.message, request_id)
        if path is None:
            return deepgram_error(413, "PAYLOAD_TOO_LARGE", f"the file is over {limit // (1024 * 1024)} MB", request_id)
        slot = app[FILE_JOBS].try_acquire()
        if slot is None:
            if app[FILE_JOBS].closed:
                return deepgram_error(503, "SERVICE_UNAVAILABLE", "the server is shutting down", request_id)
            return deepgram_error(
                429,
                "TOO_MANY_REQUESTS",
                f"{app[CONFIG].max_file_jobs} files are being transcribed; try again shortly",
                request_id,
            )
        try:
            reader = await open_file(path)
            options = SessionOptions(language=params.language, hotwords=params.hotwords, words=True)
            result = await unless_client_leaves(
                request, transcribe_file(app[ENGINE], reader, options, streams=app[STREAMS])
            )
        finally:
            slot.release()
        if result.cut_short:
            return deepgram_error(
                503, "SERVICE_UNAVAILABLE", "the server is shutting down; send the file again", request_id
            )
        if params.redact:
            result = replace(result, sentences=[Redactor(params.redact).sentence(s) for s in result.sentences])
        return web.json_response(
            answer(
                result,
                params,
                request_id,
                app[ENGINE].model_name,
                sha,
                request.query.get("utterances", "").lower() == "true",
            ),
            headers={"dg-request-id": request_id},
        )
    except AudioFileError as exc:
        return deepgram_error(400, "Bad Request", f"the file cannot be decoded: {exc}", request_id)
    except (EngineNotReady, EngineError, FileJobError) as exc:
        return deepgram_error(503, "SERVICE_UNAVAILABLE", f"the speech engine cannot transcribe now: {exc}", request_id)
    except ConnectionResetError:
        log.info("%s: the client went away; its file's transcription was abandoned", request.path)
        return web.Response(status=400)  # nobody reads it
    finally:
        await discard_file(path)


async def _save(request: web.Request, limit: int, header: bytes) -> tuple[str | None, str]:
    """The body into a temporary file (``header`` first): (its path, the body's SHA-256), or (None, "") once it
    passes ``limit`` bytes."""
    handle: IO[bytes] = await asyncio.to_thread(tempfile.NamedTemporaryFile, prefix="listen-", delete=False)
    sha, size = hashlib.sha256(), 0
    try:
        if header:
            await asyncio.to_thread(handle.write, header)
        while chunk := await unless_stalled(request.content.read(_CHUNK_BYTES)):
            size += len(chunk)
            if size > limit:
                handle.close()
                await discard_file(handle.name)
                return None, ""
            sha.update(chunk)
            await asyncio.to_thread(handle.write, chunk)
    except BaseException:
        handle.close()
        await discard_file(handle.name)
        raise
    handle.close()
    return handle.name, sha.hexdigest()


def answer(
    result: FileTranscript, params: ListenParams, request_id: str, model: str, sha256: str, utterances: bool
) -> dict[str, Any]:
    """Deepgram's pre-recorded response for a transcribed file."""
    words: list[dict[str, Any]] = []
    for s in result.sentences:
        speaker = _speaker(s, params)
        words += [dg.word_entry(w, c, speaker) for w, c in zip(s.words, dg.word_confidences(s, s.words), strict=True)]
    confs = [dg.confidence(s) for s in result.sentences]
    transcript = " ".join(dg.transcript(s.words, params.formatted) for s in result.sentences)
    meta = dg.metadata(request_id, model, result.duration_s, sha256, datetime.now(UTC))
    del meta["type"]
    out: dict[str, Any] = {
        "metadata": meta,
        "results": {
            "channels": [
                {
                    "alternatives": [
                        {
                            "transcript": transcript,
                            "confidence": round(sum(confs) / len(confs), 4) if confs else 0.0,
                            "words": words,
                        }
                    ]
                }
            ]
        },
    }
    if utterances:
        out["results"]["utterances"] = [_utterance(s, params) for s in result.sentences]
    return out


def _utterance(s: protocol.Sentence, params: ListenParams) -> dict[str, Any]:
    conf = dg.confidence(s)
    return {
        "start": s.start_ms / 1000,
        "end": s.end_ms / 1000,
        "confidence": conf,
        "channel": 0,
        "transcript": dg.transcript(s.words, params.formatted),
        "speaker": s.spk if s.spk is not None else 0,
        "id": str(uuid.uuid5(uuid.NAMESPACE_OID, f"{s.id}")),
        "words": [
            dg.word_entry(w, c, _speaker(s, params))
            for w, c in zip(s.words, dg.word_confidences(s, s.words), strict=True)
        ],
    }


def _speaker(s: protocol.Sentence, params: ListenParams) -> int | None:
    """Each word's ``speaker`` with ``diarize`` (0 where the server runs without labels), else None."""
    return (s.spk if s.spk is not None else 0) if params.diarize else None
