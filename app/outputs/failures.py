"""What an output's ``last_error`` may say: a fixed class of what happened, never what the destination sent.

An editor names the destination, so whatever it answers could be a service the editor may not read (a database's
banner, an internal page). A ``TargetError``'s message is therefore one of the classes here, with at most numbers
that are themselves a class (an HTTP status, an obs-websocket status or close code, the server's own timeouts):
never bytes the peer sent, never a URL (aiohttp's own messages quote both), never the text of a library's
exception. docs/operations.md lists them ("What `last_error` can say").
"""

from __future__ import annotations

import ssl

import aiohttp

from .destinations import CannotResolve, DestinationRefused, RedirectRefused
from .target import TargetError

CANNOT_RESOLVE = "cannot resolve the host name"
CONNECTION_REFUSED = "connection refused"
CANNOT_CONNECT = "cannot connect (no route to the host)"
TIMED_OUT = "timed out"
TLS_FAILED = "TLS failed"
DROPPED = "connection dropped"
NOT_HTTP = "the answer is not HTTP"
FAILED = "the connection failed"
NOT_A_URL = "not a URL this server can connect to"


def refused(exc: DestinationRefused | RedirectRefused) -> TargetError:
    """The permanent error of a destination the outbound policy refuses, or of a redirect (never followed)."""
    return TargetError(str(exc), permanent=True)


def connection_failure(exc: BaseException) -> str:
    """The class of why connecting or an HTTP exchange failed (``exc``: aiohttp's or the socket's error)."""
    if isinstance(exc, DestinationRefused | RedirectRefused):
        return str(exc)  # the server's own words
    if isinstance(exc, aiohttp.ClientConnectorDNSError | CannotResolve):
        return CANNOT_RESOLVE
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError | ssl.SSLError):
        return TLS_FAILED
    if isinstance(exc, aiohttp.ClientConnectorError):  # no connection was made
        if isinstance(exc.os_error, ConnectionRefusedError):
            return CONNECTION_REFUSED
        return TIMED_OUT if isinstance(exc.os_error, TimeoutError) else CANNOT_CONNECT
    if isinstance(exc, ConnectionRefusedError):
        return CONNECTION_REFUSED
    if isinstance(exc, TimeoutError):
        return TIMED_OUT
    if isinstance(
        exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientOSError | ConnectionError
    ):
        return DROPPED  # a connection made, then lost
    if isinstance(exc, aiohttp.ClientResponseError):  # aiohttp could not parse the answer (its status is 400)
        return NOT_HTTP
    if isinstance(exc, aiohttp.InvalidURL):
        return NOT_A_URL
    if isinstance(exc, OSError):
        return CANNOT_CONNECT
    return FAILED


def number(value: object) -> int | None:
    """``value`` when it is a plausible status code sent by a peer (an int of at most 5 digits), else None: a
    number is a class, anything else it sends is not shown."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 100_000:
        return value
    return None
