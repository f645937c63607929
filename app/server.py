"""``create_app(config)``: the aiohttp application. aiohttp owns the lifecycle (``cleanup_ctx``); nothing happens
at import time. What is process-wide: the changes to aiortc and aioice, all applied in ``app.webrtc.patches``, and
the filter that redacts secrets from aiohttp's access log (``app.ops.access_log``).

The composition root: the packages (``webrtc``, ``rooms``, ``transcripts``, ``compat``, ``ops``) know nothing of
each other's wiring; this module creates their shared state, adds their routes and runs the lifecycle."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import ssl
from collections.abc import AsyncIterator
from dataclasses import replace

import jinja2
from aiohttp import web
from aiohttp.typedefs import Handler

from engine import (
    ENDPOINT_PRESETS,
    ApertiumTranslator,
    CaptionEngine,
    ChatTranslator,
    EngineConfig,
    ErrorCode,
    TranscriberConfig,
    TranslationService,
    Translator,
)

from . import compat, ops, outputs, pages, resources, webrtc
from .config import EXIT_ENGINE_FAILED, ServerConfig
from .drain import DRAIN, HANDLERS_AFTER_DRAIN_S, DrainReport, drain
from .keys import CONFIG, ENGINE, ENGINE_START, EXIT_STATUS, TEMPLATES
from .ops import (
    ADMISSION,
    FILE_JOBS,
    METRICS,
    STREAMS,
    Admission,
    LiveStreams,
    ServerMetrics,
    silent_microphones,
)
from .outputs import OUTPUTS, DestinationPolicy, Layout, OutputRegistry
from .responses import json_error
from .rooms import MEMORY, ROOMS, SOURCE_LANGUAGE, STORE, RoomRegistry, StoreError, Translates, open_store
from .rooms import add_routes as add_room_routes
from .transcripts import add_routes as add_transcript_routes
from .transcripts import break_lines, speaker_name
from .webrtc import PEERS

log = logging.getLogger(__name__)

_DRAIN_BEFORE_EXIT_S = 5.0  # after the engine died: time for ended sessions to reach their clients


def engine_config(config: ServerConfig) -> EngineConfig:
    return EngineConfig(
        transcriber=TranscriberConfig(
            model=config.model,
            device=config.device,
            window=config.window,
            cpu_threads=config.cpu_threads,
            cpu_decoder_threads=config.cpu_decoder_threads,
            timestamps=config.word_timestamps,
            asr_urls=config.asr_urls,
        ),
        endpoint=ENDPOINT_PRESETS[config.preset]
        if config.sentence_pause_ms is None
        else replace(ENDPOINT_PRESETS[config.preset], sentence_pause_ms=max(0, config.sentence_pause_ms)),
        speakers=config.speakers,
        speaker_model=config.speaker_model,
        default_language=config.language,
        word_align=config.word_align,
    )


async def translation_service(config: ServerConfig) -> TranslationService | None:
    """The translation engines ``config`` asks for that are installed (a chat endpoint first, then Apertium),
    started; None when there are none."""
    engines: list[Translator] = []
    if config.translate_url:
        engines.append(ChatTranslator(config.translate_url, config.translate_model, config.translate_api_key))
    if config.apertium:
        apertium = ApertiumTranslator()
        if apertium.available:
            engines.append(apertium)
        else:
            log.warning("Apertium is not installed (scripts/setup.sh installs it): rooms cannot have its languages")
    if not engines:
        return None
    service = TranslationService(engines)
    service.start()  # each language's engine starts when a room first has it (``RoomRegistry``), not here
    log.info("translation: %s into %s", ", ".join(service.names()), ", ".join(sorted(service.targets(SOURCE_LANGUAGE))))
    return service


def create_app(
    config: ServerConfig, engine: CaptionEngine | None = None, translation: Translates | None = None
) -> web.Application:
    """The server. With ``engine`` given (already started, e.g. shared by tests) the app uses it and leaves its
    lifecycle to the caller; otherwise the app creates one and starts it in the background on startup (the page
    shows "loading model" until ``/ready`` says so) and closes it on cleanup. ``translation``: the translation
    engines to use (a fake in tests; the caller's to close), else those ``config`` names (``translation_service``)."""
    app = web.Application(client_max_size=webrtc.MAX_OFFER_BYTES, middlewares=[store_errors])
    app[CONFIG] = config
    app[PEERS] = {}
    app[STREAMS] = LiveStreams()
    app[DRAIN] = DrainReport()
    # ``auto``: the engine's capacity estimate (the engine exists once the app starts; offers come after that).
    # A meeting's silent microphones are connected, not talking: the capacity counts voices.
    app[ADMISSION] = Admission(
        config.max_sessions,
        capacity=lambda: app[ENGINE].capacity_estimate(),
        engine=lambda: app[ENGINE],
        silent=lambda: silent_microphones(app),
    )
    app[FILE_JOBS] = Admission(config.max_file_jobs, what="file transcriptions")
    app[METRICS] = ServerMetrics()  # this app's own registry: never the process-wide default one
    app[METRICS].admission = app[ADMISSION]
    # The templates are read and compiled now, once: a page's request never waits for the disk on the event loop.
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(resources.templates_dir()),
        autoescape=jinja2.select_autoescape(["html"]),
        auto_reload=False,
        cache_size=-1,
    )
    for name in templates.list_templates(extensions=["html"]):
        templates.get_template(name)
    app[TEMPLATES] = templates
    webrtc.install(config.ice, config.audio_decoder)
    ops.install_access_log()
    pages.add_routes(app)
    ops.add_routes(app)
    webrtc.add_routes(app)
    add_room_routes(app)
    add_transcript_routes(app)
    outputs.add_routes(app)
    compat.add_routes(app)
    app.router.add_static("/static", resources.static_dir())

    async def transcripts(app: web.Application) -> AsyncIterator[None]:
        # Opened before the engine and closed after every session: no locked sentence finds the store closed.
        app[STORE] = await open_store(config.db_path or MEMORY)
        own_translation = translation is None
        service = translation if translation is not None else await translation_service(config)
        app[ROOMS] = RoomRegistry(app[STORE], idle_s=config.room_idle_s, translator=service)
        app[ROOMS].start()
        # Outputs write captions as the room's files do (app.transcripts' line breaking and speaker names).
        layout = Layout(break_lines=break_lines, speaker_name=speaker_name)
        policy = DestinationPolicy.from_settings(config.output_allow)  # where outputs may connect (--output-allow)
        app[OUTPUTS] = OutputRegistry(app[ROOMS], app[STORE], layout, app[METRICS], policy=policy)
        await app[OUTPUTS].start()  # the stored outputs of rooms that did not end go on
        app[METRICS].rooms, app[METRICS].store = app[ROOMS], app[STORE]
        log.info("transcripts kept in %s", app[STORE].where)
        yield
        await app[OUTPUTS].close()  # stopped at shutdown already (stop_outputs); here if startup failed after
        app[ROOMS].close()
        if own_translation and isinstance(service, TranslationService):
            await service.close()
        await app[STORE].close()

    async def finish_sessions(app: web.Application) -> None:
        # First of the shutdown: every open sentence is locked, stored and published while viewers still listen.
        report = app[DRAIN]
        await drain(app[PEERS], app[STREAMS], [app[ADMISSION], app[FILE_JOBS]], config.drain_timeout_s, report)
        if report.sessions:
            log.info(
                "stopping: %d sessions finished in %.1f s, %d sentences locked on the way out",
                report.sessions - report.unfinished,
                report.seconds,
                report.sentences,
            )

    async def stop_outputs(app: web.Application) -> None:
        # After the sessions' last sentences (a short grace to send them), before the rooms' streams end.
        if OUTPUTS in app:
            await app[OUTPUTS].close()

    async def end_viewer_streams(app: web.Application) -> None:
        # Open event streams would hold the shutdown for its whole timeout; viewers reconnect and resume.
        app[ROOMS].close()

    app.cleanup_ctx.append(transcripts)
    app.on_shutdown.append(finish_sessions)
    app.on_shutdown.append(stop_outputs)
    app.on_shutdown.append(end_viewer_streams)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        own = engine is None
        app[ENGINE] = engine or CaptionEngine(engine_config(config))
        app[EXIT_STATUS] = 0
        app[METRICS].watch_engine(app[ENGINE])
        watch = None
        if own:
            app[ENGINE_START] = asyncio.create_task(_start_engine(app[ENGINE]), name="engine-start")
            if config.exit_on_engine_failure:
                watch = asyncio.create_task(_exit_when_engine_dies(app), name="engine-death")
        yield
        if watch is not None:
            watch.cancel()
        for peer in list(app[PEERS].values()):
            peer.request_stop()
        for peer in list(app[PEERS].values()):
            await peer.close()
        app[METRICS].unwatch_engine()
        if own:
            app[ENGINE_START].cancel()
            await asyncio.gather(app[ENGINE_START], return_exceptions=True)
            await app[ENGINE].close()

    app.cleanup_ctx.append(lifecycle)
    if config.funasr_port is not None:
        app.cleanup_ctx.append(_funasr_port)
    return app


async def _funasr_port(app: web.Application) -> AsyncIterator[None]:
    """``--funasr-port``: FunASR's protocol at the root path of a second port (TLS as the main one)."""
    config = app[CONFIG]
    runner = web.AppRunner(compat.funasr_side_app(app), handle_signals=False, shutdown_timeout=HANDLERS_AFTER_DRAIN_S)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.funasr_port, ssl_context=tls_context(config))
    await site.start()
    log.info("FunASR protocol on port %s", config.funasr_port)
    yield
    await runner.cleanup()


def tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The server's TLS context from ``--tls-cert``/``--tls-key``, or None for plain HTTP."""
    if not config.tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.tls_cert, config.tls_key)
    return context


@web.middleware
async def store_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A failing transcript store (a full disk) is a JSON 503 on any API call, never a bare 500."""
    try:
        return await handler(request)
    except StoreError as exc:
        log.error("%s %s: %s", request.method, request.path, exc)
        return json_error(503, ErrorCode.STORAGE, f"the transcript store fails: {exc}; try again later")


async def _exit_when_engine_dies(app: web.Application) -> None:
    """The engine has ended every session with the reason; let their last messages go out, then stop the server
    as SIGTERM would, with EXIT_ENGINE_FAILED for the supervisor (systemd ``Restart=on-failure``, Docker
    ``--restart``, ``scripts/serve.sh``). /health answers 503 meanwhile."""
    await app[ENGINE].failed.wait()
    deadline = asyncio.get_running_loop().time() + _DRAIN_BEFORE_EXIT_S
    while app[PEERS] and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110 (peers close themselves)
        await asyncio.sleep(0.1)
    log.critical(
        "the speech engine died (%s): exiting with status %d so a supervisor restarts the server",
        app[ENGINE].detail,
        EXIT_ENGINE_FAILED,
    )
    app[EXIT_STATUS] = EXIT_ENGINE_FAILED
    signal.raise_signal(signal.SIGTERM)  # aiohttp's run_app turns it into a graceful shutdown


async def _start_engine(engine: CaptionEngine) -> None:
    try:
        await engine.start()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("the speech engine failed to start; /ready reports it")
        return
    dtype = f" ({engine.model_dtype})" if engine.model_dtype else ""
    print(f"live captions: model {engine.model_name}{dtype} ready in {engine.load_s:.1f} s", flush=True)
    freeze_startup_objects()


def freeze_startup_objects() -> None:
    """Call once the models are loaded: move every object alive now (torch, vLLM, the models' Python side: millions
    of objects that live as long as the process) out of the cyclic garbage collector's view (``gc.freeze``).

    Why: each closed session leaves reference cycles (aiortc's peer connection and its callbacks, the session and
    its tasks) that only a full collection frees. With the startup objects in view, a full collection took ~330 ms
    (on the event loop) and ran so rarely that unreachable sessions piled up: the server's memory in use grew
    ~0.1 MB per session (measured: 12 MB freed by one ``gc.collect()`` after 4 minutes of a soak). Frozen, they are
    never scanned again, so full collections are short and frequent."""
    gc.freeze()
    log.info("startup objects frozen for the garbage collector: %d", gc.get_freeze_count())
