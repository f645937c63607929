"""Logging helpers: every line about a session carries its id."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any


class SessionLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Prefixes each message with ``[session-id]``."""

    def __init__(self, logger: logging.Logger, session_id: str) -> None:
        super().__init__(logger, {"session": session_id})

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return f"[{self.extra['session'] if self.extra else '-'}] {msg}", kwargs
