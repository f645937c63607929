"""``python -m app`` (or ``live-captions``): run the caption server."""

from __future__ import annotations

import logging
import sys

from aiohttp import web

from .config import build_parser, config_from_args
from .drain import DRAIN, HANDLERS_AFTER_DRAIN_S
from .keys import EXIT_STATUS
from .rooms import STORE, StoreError
from .server import create_app, tls_context

EXIT_STORE_FAILED = 2  # the transcript store (--db) could not be opened


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("aioice", "aiortc", "vllm", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))  # exits with status 2 and the usage line, as for any bad flag
    ssl_context = tls_context(config)
    scheme = "https" if ssl_context else "http"
    print(f"live captions: {scheme}://{config.host}:{config.port}/ (model loads in the background)", flush=True)
    app = create_app(config)
    try:
        # Sessions drain in a shutdown handler of their own (app.drain), so little is left for aiohttp to wait for.
        web.run_app(
            app,
            host=config.host,
            port=config.port,
            ssl_context=ssl_context,
            print=None,
            shutdown_timeout=HANDLERS_AFTER_DRAIN_S,
        )
    except StoreError as exc:  # the transcript store cannot be opened: say why, no traceback
        print(f"live captions: {exc}", file=sys.stderr, flush=True)
        return EXIT_STORE_FAILED
    print(stopped_line(app), flush=True)
    return app.get(EXIT_STATUS, 0)


def stopped_line(app: web.Application) -> str:
    """The one line a stop prints: what it finished and where the transcripts are."""
    report = app[DRAIN]
    store = app.get(STORE)
    where = f"; transcripts in {store.where}" if store is not None else ""
    if not report.done:
        return f"live captions: stopped{where}"
    unfinished = f", {report.unfinished} closed unfinished" if report.unfinished else ""
    return (
        f"live captions: stopped; {_count(report.sessions, 'session')} ended{unfinished}, "
        f"{_count(report.sentences, 'sentence')} locked on the way out{where}"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


if __name__ == "__main__":
    sys.exit(main())
