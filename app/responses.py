"""This server's JSON error answers, built here and nowhere else: ``{"error": {"code", "message", ...}}`` with a code
of ``engine.ErrorCode`` (docs/protocol.md lists them all). A handler returns ``json_error`` or raises
``http_error``; both give the same body. (Other services' protocols spoken here, Deepgram's and OpenAI's, answer in
their own shapes: ``app.compat``.)"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from engine import ErrorCode


class ParameterError(ValueError):
    """A bad query parameter; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        super().__init__(message)


def error_body(code: ErrorCode, message: str, **fields: Any) -> dict[str, Any]:
    """The JSON error object: ``{"error": {"code", "message", **fields}}`` (``fields``: what a code adds, e.g.
    ``param``, ``reason``, ``retry_after_s``)."""
    return {"error": {"code": code.value, "message": message, **fields}}


def json_error(
    status: int, code: ErrorCode, message: str, *, headers: Mapping[str, str] | None = None, **fields: Any
) -> web.Response:
    """The error response to return: ``status`` with ``error_body(code, message, **fields)`` and ``headers``."""
    return web.json_response(error_body(code, message, **fields), status=status, headers=headers)


class _JsonHTTPError(web.HTTPException):
    """An ``HTTPException`` of any status whose body is this server's JSON error (aiohttp's own classes fix the
    status by class, and some of them, 413's, want more arguments)."""

    def __init__(self, status: int, body: dict[str, Any], headers: Mapping[str, str] | None) -> None:
        self.status_code = status  # read by HTTPException.__init__ (a class attribute in aiohttp's own classes)
        super().__init__(headers=headers, text=json.dumps(body), content_type="application/json")


def unreadable_body(status: int, message: str) -> web.Response:
    """The answer to a request body that could not be read (``app.bodies.BodyError``'s ``status`` and ``message``):
    ``too_large`` for 413, else ``bad_message``."""
    return json_error(status, ErrorCode.TOO_LARGE if status == 413 else ErrorCode.BAD_MESSAGE, message)


def http_error(
    status: int, code: ErrorCode, message: str, *, headers: Mapping[str, str] | None = None, **fields: Any
) -> web.HTTPException:
    """The same error (``json_error``'s arguments) as an exception to raise from a helper deep in a handler:
    aiohttp answers it as the response."""
    return _JsonHTTPError(status, error_body(code, message, **fields), headers)


def bad_parameter(exc: ParameterError) -> web.Response:
    """400 for a bad query parameter: the error JSON names it (``"param"``)."""
    return json_error(400, ErrorCode.BAD_PARAMETER, str(exc), param=exc.param)
