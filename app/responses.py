"""Error answers every HTTP handler gives the same way: JSON ``{"error": {"code", "message"[, "param"]}}``."""

from __future__ import annotations

from aiohttp import web

from engine import ErrorCode


class ParameterError(ValueError):
    """A bad query parameter; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        super().__init__(message)


def json_error(status: int, code: ErrorCode | str, message: str) -> web.Response:
    code_text = code.value if isinstance(code, ErrorCode) else code
    return web.json_response({"error": {"code": code_text, "message": message}}, status=status)


def bad_parameter(exc: ParameterError) -> web.Response:
    """400 for a bad query parameter: the error JSON names it (``"param"``)."""
    return web.json_response({"error": {"code": "bad_parameter", "message": str(exc), "param": exc.param}},
                             status=400)
