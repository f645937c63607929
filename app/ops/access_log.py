"""Secrets never reach the access log: ``token=`` and ``key=`` values in logged URLs and referrers are redacted.

aiohttp formats each access-log line before handing it to the ``aiohttp.access`` logger, so a logging filter on
that logger rewrites the finished line: whatever the log format, a URL that carries a viewer token or the server
token is logged as ``token=REDACTED``.
"""

from __future__ import annotations

import logging
import re

_SECRET = re.compile(r"(?i)\b(token|key)=[^&\s\"']+")


def redact(line: str) -> str:
    """``line`` with the value of every ``token=`` and ``key=`` query parameter replaced by ``REDACTED``."""
    return _SECRET.sub(r"\1=REDACTED", line)


class RedactSecrets(logging.Filter):
    """Rewrites access-log records in place; never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg = record.getMessage()
            record.args = None
        record.msg = redact(str(record.msg))
        return True


def install() -> None:
    """Add the filter to aiohttp's access logger (idempotent)."""
    logger = logging.getLogger("aiohttp.access")
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
