"""Secrets and room ids never reach the access log.

- ``token=`` and ``key=`` values in logged URLs and referrers are written as ``REDACTED``.
- Room ids are view capabilities (knowing an open room's id is what lets someone read it), and every viewer, file
  and player request carries one: in a path (``/rooms/<id>/...``, ``/whip/<id>``) or as ``room=<id>`` in a query
  (``/view``, ``/kiosk``, ``/embed``, ``/?room=``, the streaming APIs). Each is written as ``~`` and the first 8 hex
  digits of an HMAC-SHA256 of the id under a key made when the filter is (once per process): one room's lines can
  still be told apart and followed within a run, and the id cannot be read back from them, nor matched across
  restarts.

aiohttp formats each access-log line before handing it to the ``aiohttp.access`` logger, so a logging filter on
that logger rewrites the finished line: whatever the log format, a URL that carries a viewer token, the server
token or a room id is logged without it. The fields aiohttp also puts on the record for structured handlers
(``first_request_line``, ``request_header``, ``response_header``: a referrer, a WHIP ``Location``) are rewritten
the same way.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets

_SECRET = re.compile(r"(?i)\b(token|key)=[^&\s\"']+")
# A room id where a path or a query names one. Any value, not only a valid id's 8-64 characters: a mistyped id is
# most of a real one.
_ROOM_IN_PATH = re.compile(r"(?i)(/(?:rooms|whip)/)([A-Za-z0-9_%-]+)")
_ROOM_IN_QUERY = re.compile(r"(?i)([?&;]room=)([^&#\s\"']+)")
_RECORD_FIELDS = ("first_request_line", "request_header", "response_header")  # aiohttp's ``extra`` (web_log.py)
HASH_HEX = 8  # 32 bits: enough to tell a run's rooms apart, far too few to find an id by


def redact(line: str) -> str:
    """``line`` with the value of every ``token=`` and ``key=`` query parameter replaced by ``REDACTED``."""
    return _SECRET.sub(r"\1=REDACTED", line)


class RoomIds:
    """Writes room ids in logged lines as ``~`` and ``HASH_HEX`` hex digits of their HMAC under this object's own
    random key: the same id gives the same mark for this object's life, and nothing else can make it."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def mark(self, room_id: str) -> str:
        return "~" + hmac.new(self._key, room_id.encode("utf-8"), hashlib.sha256).hexdigest()[:HASH_HEX]

    def hide(self, line: str) -> str:
        """``line`` with every room id in a ``/rooms/``, ``/whip/`` path or a ``room=`` query replaced by its mark."""
        line = _ROOM_IN_PATH.sub(lambda m: m[1] + self.mark(m[2]), line)
        return _ROOM_IN_QUERY.sub(lambda m: m[1] + self.mark(m[2]), line)


class RedactSecrets(logging.Filter):
    """Rewrites access-log records in place (secrets, then room ids); never drops one."""

    def __init__(self) -> None:
        super().__init__()
        self.rooms = RoomIds()

    def clean(self, text: str) -> str:
        return self.rooms.hide(redact(text))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg = record.getMessage()
            record.args = None
        record.msg = self.clean(str(record.msg))
        for name in _RECORD_FIELDS:
            value = record.__dict__.get(name)
            if isinstance(value, str):
                record.__dict__[name] = self.clean(value)
            elif isinstance(value, dict):
                record.__dict__[name] = {k: self.clean(v) if isinstance(v, str) else v for k, v in value.items()}
        return True


def install() -> None:
    """Add the filter to aiohttp's access logger (idempotent: one filter, so one key, per process)."""
    logger = logging.getLogger("aiohttp.access")
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
