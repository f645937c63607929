"""OpenAI-compatible speech to text: ``POST /v1/audio/transcriptions``, ``POST /v1/audio/translations`` and
``GET /v1/models``.

Any client written for OpenAI's audio API (its official ``openai`` packages, ``curl``, tools that take a base URL)
works against this server: a multipart upload with ``file`` and optional ``model``, ``language``, ``prompt``,
``response_format`` (``json``, ``text``, ``srt``, ``vtt``, ``verbose_json``, ``diarized_json``), ``temperature``,
``timestamp_granularities[]`` and ``stream``. The file goes through the live engine as a background session
(``file_jobs``): the same VAD segmentation, speaker labels and recognizer as live captions, behind every live decode.
``stream=true`` answers server-sent events as OpenAI does: ``transcript.text.delta`` per locked sentence
(``transcript.text.segment`` too for ``diarized_json``), then ``transcript.text.done``. ``translations`` takes the
same fields and answers the speech in English (Whisper's translate task, a multilingual model's), as OpenAI's does;
``language``, which OpenAI's translations do not take, may name the language spoken (else it is detected).

What differs from OpenAI's service, on purpose: any ``model`` value is accepted and the loaded model answers
(``/v1/models`` names it); SRT and WebVTT are cut by this server's cue builder (speaker labels included when
labels are on); ``verbose_json`` segments are the locked sentences, with their ``speaker``; ``no_speech_prob`` is
the VAD's estimate (1 - mean speech probability), not Whisper's; ``tokens`` is empty. Errors use OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import tempfile
import time
import zlib
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from aiohttp import BodyPartReader, web

from engine import LANGUAGE_CODES, LANGUAGES, EngineError, EngineNotReady, EngineState, SessionOptions, protocol

from ..auth import presented_token, token_matches
from ..bodies import BodyError, unless_stalled
from ..keys import CONFIG, ENGINE
from ..ops import FILE_JOBS, STREAMS
from ..rooms import SentenceRecord
from ..transcripts import speaker_name, to_srt, to_vtt
from .audio_files import AudioFileError, AudioFileReader, discard_file
from .file_jobs import FileJobError, FileTranscript, open_file, transcribe_file, unless_client_leaves

log = logging.getLogger(__name__)

FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
STREAM_FORMATS = ("json", "text", "diarized_json")
_MAX_FIELD_BYTES = 64 * 1024  # any form field but the file
_CHUNK_BYTES = 256 * 1024
T = TypeVar("T")
_CREATED = int(time.time())  # "created" of the loaded model in /v1/models: when this process started


class ApiError(Exception):
    """An error answer in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status)


@dataclass(frozen=True)
class TranscriptionForm:
    """The upload's fields, checked."""

    file_path: str
    language: str | None
    prompt: str
    response_format: str
    temperature: float
    stream: bool
    word_times: bool  # timestamp_granularities[] includes "word"
    task: str = "transcribe"  # "translate": POST /v1/audio/translations


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/audio/transcriptions", transcriptions)
    app.router.add_post("/v1/audio/translations", translations)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model}", model)


def _authorize(request: web.Request) -> None:
    if not token_matches(presented_token(request), request.app[CONFIG].auth_token):
        raise ApiError(
            401,
            "this server needs its token: send 'Authorization: Bearer <token>' (the API key)",
            code="invalid_api_key",
        )


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": _CREATED, "owned_by": "live-captions"}


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the one loaded model (OpenAI's list shape)."""
    try:
        _authorize(request)
    except ApiError as exc:
        return exc.response()
    return web.json_response({"object": "list", "data": [_model_card(request.app[ENGINE].model_name)]})


async def model(request: web.Request) -> web.Response:
    """``GET /v1/models/{id}``: the loaded model whatever the id (every model name maps to it)."""
    try:
        _authorize(request)
    except ApiError as exc:
        return exc.response()
    return web.json_response(_model_card(request.app[ENGINE].model_name))


async def transcriptions(request: web.Request) -> web.StreamResponse:
    return await _speech_to_text(request, "transcribe")


async def translations(request: web.Request) -> web.StreamResponse:
    return await _speech_to_text(request, "translate")


async def _speech_to_text(request: web.Request, task: str) -> web.StreamResponse:
    try:
        _authorize(request)
        engine = request.app[ENGINE]
        if engine.state is not EngineState.READY:
            raise ApiError(
                503,
                f"the speech model is {engine.state.value}; try again shortly",
                kind="server_error",
                code="model_not_ready",
            )
        if request.app[FILE_JOBS].closed:
            raise _stopping()
    except ApiError as exc:
        return exc.response()
    form: TranscriptionForm | None = None
    slot = None
    try:
        # The body first, then a file slot: an upload that is slow to arrive (or stalls: 408) holds none.
        form = dataclasses.replace(await _read_form(request), task=task)
        cannot = engine.cannot_caption(form.language, task)
        if cannot:
            raise ApiError(
                400,
                cannot,
                param="language" if task == "transcribe" else None,
                code="unsupported_language" if task == "transcribe" else "unsupported_task",
            )
        slot = request.app[FILE_JOBS].try_acquire()
        if slot is None:
            if request.app[FILE_JOBS].closed:
                raise _stopping()
            raise ApiError(
                429,
                f"{request.app[CONFIG].max_file_jobs} files are being transcribed; try again shortly",
                kind="rate_limit_error",
                code="rate_limit_exceeded",
            )
        options = SessionOptions(language=form.language, prompt=form.prompt, temperature=form.temperature, task=task)
        reader = await open_file(form.file_path)  # a file that is not audio is a 400 before any answer starts
        if form.stream:
            return await _stream(request, form, options, reader)
        result = await unless_client_leaves(
            request, transcribe_file(engine, reader, options, streams=request.app[STREAMS])
        )
        if result.cut_short:
            raise _shutting_down(result)
        return _answer(form, result)
    except ApiError as exc:
        return exc.response()
    except AudioFileError as exc:
        return ApiError(400, f"the file cannot be decoded: {exc}", param="file", code="invalid_file").response()
    except (EngineNotReady, EngineError, FileJobError) as exc:
        return ApiError(503, f"the speech engine cannot transcribe now: {exc}", kind="server_error").response()
    except ConnectionResetError:
        log.info("%s: the client went away; its file's transcription was abandoned", request.path)
        return web.Response(status=400)  # nobody reads it
    finally:
        if slot is not None:
            slot.release()
        if form is not None:
            await discard_file(form.file_path)


def _stopping() -> ApiError:
    return ApiError(
        503,
        "the server is shutting down; send the file again in a moment",
        kind="server_error",
        code="server_shutting_down",
    )


# ---- the form ---------------------------------------------------------------------------------------------------
async def _read_form(request: web.Request) -> TranscriptionForm:
    """Read the multipart body: the file into a temporary file (refused past ``max_upload_mb`` as soon as it
    passes it), the other fields into memory. Raises ``ApiError``."""
    if request.content_type != "multipart/form-data":
        raise ApiError(400, "send the audio as multipart/form-data with a 'file' field", code="invalid_content_type")
    limit = request.app[CONFIG].max_upload_mb * 1024 * 1024
    if request.content_length is not None and request.content_length > limit + _MAX_FIELD_BYTES:
        raise _too_large(limit)
    fields: dict[str, list[str]] = {}
    path = name = None
    try:
        reader = await request.multipart()
        while (part := await _unless_stalled(reader.next())) is not None:
            if not isinstance(part, BodyPartReader):
                raise ApiError(400, "nested multipart bodies are not supported")
            if part.name == "file":
                if path is not None:
                    raise ApiError(400, "send one file", param="file")
                name = part.filename or "audio"
                path = await _save(part, limit, os.path.splitext(name)[1][:16])
            elif part.name:
                value = await _unless_stalled(part.read(decode=True))
                if len(value) > _MAX_FIELD_BYTES:
                    raise ApiError(400, f"field {part.name!r} is over {_MAX_FIELD_BYTES} bytes", param=part.name)
                fields.setdefault(part.name.removesuffix("[]"), []).append(value.decode("utf-8", "replace"))
    except ValueError as exc:  # aiohttp's multipart parser: a malformed body
        await discard_file(path)
        raise ApiError(400, f"malformed multipart body: {exc}") from None
    except BaseException:
        await discard_file(path)
        raise
    if path is None or name is None:
        raise ApiError(400, "no 'file' field: upload the audio as 'file'", param="file")
    try:
        return _check_fields(fields, path)
    except ApiError:
        await discard_file(path)
        raise


async def _unless_stalled(reading: Awaitable[T]) -> T:
    """One read of the body; ``ApiError`` 408 when it stalls (``bodies.unless_stalled``)."""
    try:
        return await unless_stalled(reading)
    except BodyError as exc:
        raise ApiError(exc.status, exc.message, code="upload_stalled") from None


def _shutting_down(result: FileTranscript) -> ApiError:
    return ApiError(
        503,
        f"the server is shutting down: the transcription stopped {result.read_s:.1f} s into the "
        "file; send it again in a moment",
        kind="server_error",
        code="server_shutting_down",
    )


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"the file is over the server's upload limit of {limit // (1024 * 1024)} MB",
        param="file",
        code="file_too_large",
    )


async def _save(part: BodyPartReader, limit: int, suffix: str) -> str:
    """Copy the file part to a temporary file (written in a worker thread) and return its path."""
    handle: IO[bytes] = await asyncio.to_thread(
        tempfile.NamedTemporaryFile, prefix="upload-", suffix=suffix, delete=False
    )
    size = 0
    try:
        while chunk := await _unless_stalled(part.read_chunk(_CHUNK_BYTES)):
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            await asyncio.to_thread(handle.write, chunk)
    except BaseException:
        handle.close()
        await discard_file(handle.name)
        raise
    handle.close()
    return handle.name


def _check_fields(fields: dict[str, list[str]], path: str) -> TranscriptionForm:
    def one(key: str, default: str = "") -> str:
        return fields.get(key, [default])[-1].strip()

    response_format = one("response_format", "json") or "json"
    if response_format not in FORMATS:
        raise ApiError(400, f"response_format must be one of {', '.join(FORMATS)}", param="response_format")
    language: str | None = one("language").lower() or None
    if language is not None and language not in LANGUAGE_CODES:
        raise ApiError(400, f"unknown language {language!r}: use an ISO-639-1 code such as 'en'", param="language")
    try:
        temperature = float(one("temperature", "0") or 0)
    except ValueError:
        raise ApiError(400, "temperature must be a number between 0 and 1", param="temperature") from None
    if not 0.0 <= temperature <= 1.0:
        raise ApiError(400, "temperature must be a number between 0 and 1", param="temperature")
    stream_text = one("stream", "false").lower()
    if stream_text not in ("true", "false", "1", "0", ""):
        raise ApiError(400, "stream must be true or false", param="stream")
    stream = stream_text in ("true", "1")
    if stream and response_format not in STREAM_FORMATS:
        raise ApiError(400, f"stream=true works with response_format {', '.join(STREAM_FORMATS)}", param="stream")
    granularities = {g.strip() for g in fields.get("timestamp_granularities", []) if g.strip()}
    if granularities - {"word", "segment"}:
        raise ApiError(400, "timestamp_granularities[] takes 'word' and 'segment'", param="timestamp_granularities")
    prompt = one("prompt")
    return TranscriptionForm(
        path, language, prompt[-1000:], response_format, temperature, stream, "word" in granularities
    )


# ---- answers ----------------------------------------------------------------------------------------------------
def _usage(result: FileTranscript) -> dict[str, Any]:
    return {"type": "duration", "seconds": math.ceil(result.duration_s)}


def _records(sentences: list[protocol.Sentence]) -> list[SentenceRecord]:
    return [SentenceRecord(s.id, "", s.text, s.start_ms, s.end_ms, s.spk, s.words) for s in sentences]


def _letter(spk: int | None) -> str:
    """OpenAI's diarized labels: A, B, ... Z, then AA, AB, ..."""
    n = 0 if spk is None else spk
    out = ""
    while True:
        out = chr(ord("A") + n % 26) + out
        n = n // 26 - 1
        if n < 0:
            return out


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return round(len(data) / len(zlib.compress(data)), 4) if data else 0.0


def _answer(form: TranscriptionForm, result: FileTranscript) -> web.Response:
    fmt = form.response_format
    if fmt == "text":
        return web.Response(text=result.text + "\n", content_type="text/plain")
    if fmt == "srt":
        return web.Response(text=to_srt(_records(result.sentences)), content_type="application/x-subrip")
    if fmt == "vtt":
        return web.Response(text=to_vtt(_records(result.sentences)), content_type="text/vtt")
    if fmt == "diarized_json":
        return web.json_response(
            {
                "task": form.task,
                "duration": round(result.duration_s, 3),
                "text": result.text,
                "segments": [_diarized_segment(s) for s in result.sentences],
                "usage": _usage(result),
            }
        )
    if fmt == "verbose_json":
        body: dict[str, Any] = {
            "task": form.task,
            # OpenAI's translations say the language of the text they give: English.
            "language": "english"
            if form.task == "translate"
            else LANGUAGES.get(result.language or "", result.language or "unknown"),
            "duration": round(result.duration_s, 3),
            "text": result.text,
            "segments": [_verbose_segment(i, s, form.temperature) for i, s in enumerate(result.sentences)],
            "usage": _usage(result),
        }
        if form.word_times:
            body["words"] = [
                {"word": w.w, "start": w.start_ms / 1000, "end": w.end_ms / 1000}
                for s in result.sentences
                for w in s.words
            ]
        return web.json_response(body)
    return web.json_response({"text": result.text, "usage": _usage(result)})


def _verbose_segment(i: int, s: protocol.Sentence, temperature: float) -> dict[str, Any]:
    return {
        "id": i,
        "seek": s.start_ms // 10,
        "start": s.start_ms / 1000,
        "end": s.end_ms / 1000,
        "text": " " + s.text,
        "tokens": [],
        "temperature": temperature,
        "avg_logprob": s.avg_logprob if s.avg_logprob is not None else 0.0,
        "compression_ratio": _compression_ratio(s.text),
        "no_speech_prob": s.no_speech_prob if s.no_speech_prob is not None else 0.0,
        "speaker": None if s.spk is None else speaker_name(s.spk),
    }


def _diarized_segment(s: protocol.Sentence) -> dict[str, Any]:
    return {
        "type": "transcript.text.segment",
        "id": f"seg_{s.id}",
        "start": s.start_ms / 1000,
        "end": s.end_ms / 1000,
        "text": s.text,
        "speaker": _letter(s.spk),
    }


async def _stream(
    request: web.Request, form: TranscriptionForm, options: SessionOptions, reader: AudioFileReader
) -> web.StreamResponse:
    """Server-sent events: a delta per batch of locked sentences, then the done event (or an error event)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    try:
        await response.prepare(request)
    except BaseException:
        reader.close()
        raise
    sent: list[str] = []

    async def event(data: dict[str, Any]) -> None:
        await response.write(f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode())

    async def on_sentences(sentences: list[protocol.Sentence]) -> None:
        for s in sentences:
            if form.response_format == "diarized_json":
                # Labels are as first assigned; the done event's text is final, segments are not re-sent.
                await event(_diarized_segment(s))
            await event({"type": "transcript.text.delta", "delta": (" " if sent else "") + s.text})
            sent.append(s.text)

    try:
        result = await unless_client_leaves(
            request, transcribe_file(request.app[ENGINE], reader, options, on_sentences, request.app[STREAMS])
        )
    except AudioFileError as exc:
        await event(ApiError(400, f"the file cannot be decoded: {exc}", param="file", code="invalid_file").body())
    except (EngineNotReady, EngineError, FileJobError) as exc:
        await event(ApiError(503, f"the speech engine cannot transcribe now: {exc}", kind="server_error").body())
    except ConnectionResetError:
        log.info("%s: the client went away; its file's transcription was abandoned", request.path)
        return response
    else:
        if result.cut_short:  # the deltas sent are all there is: say so rather than end as if complete
            await event(_shutting_down(result).body())
        else:
            await event({"type": "transcript.text.done", "text": result.text, "usage": _usage(result)})
    await response.write_eof()
    return response
