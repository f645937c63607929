"""OBS Studio as a caption target: the room's locked sentences go, over obs-websocket (protocol v5, built into OBS
since 28), into the CEA-608 captions of the stream OBS sends (``SendStreamCaption``).

The connection (``ObsTarget``): an aiohttp WebSocket client on the ``obswebsocket.json`` subprotocol. OBS speaks
first with ``Hello`` (op 0: its obs-websocket version, and ``authentication`` = ``{challenge, salt}`` when a
password is set); the client answers ``Identify`` (op 1: ``rpcVersion`` 1, the authentication string of
``auth_string``, ``eventSubscriptions`` 0: no events); OBS confirms with ``Identified`` (op 2), or closes the
socket with code 4009 (AuthenticationFailed) on a wrong password. Then each ``Request`` (op 6: ``requestType``,
``requestId``, ``requestData``) gets its ``RequestResponse`` (op 7: ``requestStatus`` = ``{result, code,
comment}``). The client asks one thing at a time and waits for its answer, so no reader task is needed.

What OBS does with a caption (libobs ``obs_output_output_caption_text2``, called by obs-websocket with a display
duration of 0 s): it keeps the **first 128 bytes** of the UTF-8 text and silently drops the rest, then draws the
text as one whole CEA-608 screen on the next video frame (libcaption's ``caption_frame_from_text``), breaking rows
at ``\\n`` and wrapping what is longer than 32 columns at a space itself. The screen stays up until the next
caption replaces it. Captions sent in quick succession each get one frame, so only the last of them is read.
Checked against OBS 29.0.2 (obs-websocket 5.1.0) in tests/app/outputs/test_obs.py's ``test_real_obs``: each row sent
lands whole on its own 608 row (pop-on, from the top of the picture); libcaption sends ``'`` as 608's ``’``.

So the text is shaped here, as roll-up captions look on US broadcasts (``screens``):

- only characters CEA-608 can show (``caption_chars``): curly quotes and dashes become ASCII, accented letters
  608 lacks lose their accents, anything else (emoji, CJK) is dropped;
- rows of at most 32 characters (``COLUMNS``), broken at spaces (``caption_rows``); a sentence by another speaker
  than the one before starts with ``>> ``;
- each screen shows the last ``ROWS_SHOWN`` rows of the running text, rows joined with ``\\n``, at most 128 bytes
  (``MAX_CAPTION_BYTES``); a screen adds at most ``ROWS_PER_STEP`` new rows, so at least one row just read stays
  on screen, one row higher, as in roll-up;
- a sentence longer than one step goes out as several screens, spaced by its spoken duration divided by the
  number of screens, at most ``max_step_s`` apart: the captions never fall behind the speaker, and each screen
  stays up for its share of the time the sentence took to say (the last one until the next sentence).

Streaming state: OBS refuses ``SendStreamCaption`` with code 501 (OutputNotRunning) while it is not streaming;
that is a retryable ``TargetError`` (the runner retries with backoff until the stream starts), and ``status()``
then says ``"streaming": False``. ``GetStreamStatus`` (``outputActive``) is asked after identifying and before a
send when the last answer is ``STREAM_STATUS_EVERY_S`` or more old.

Failures: a refused, dropped or silent connection (every await has a timeout: ``connect_timeout_s``,
``response_timeout_s``; an answer's is a deadline, which no other message on the socket moves) raises a retryable
``TargetError`` and forgets the socket; the next ``send`` connects again (the runner does the backoff). A wrong or
missing password raises a permanent one, as does a destination the server's outbound policy refuses
(``destinations``: checked for every connection; a redirect is never followed). An error says only the class of
what happened (``failures``), never what the peer sent; messages are at most ``MAX_MESSAGE_BYTES``; the URL is
logged without its user information and query values. A sentence whose screens were partly delivered resumes at
the first screen not delivered when the runner retries it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import aiohttp
from yarl import URL

from ..cea608 import COLUMNS, shown_form
from . import failures
from .destinations import DestinationPolicy, DestinationRefused, OutboundSession, RedirectRefused
from .spec import OutputKind, redacted_url
from .target import OutgoingCaption, Target, TargetError

log = logging.getLogger(__name__)

SUBPROTOCOL = "obswebsocket.json"  # JSON over text frames
RPC_VERSION = 1

# obs-websocket op codes (WebSocketOpCode)
OP_HELLO = 0
OP_IDENTIFY = 1
OP_IDENTIFIED = 2
OP_REQUEST = 6
OP_REQUEST_RESPONSE = 7

# obs-websocket close codes (WebSocketCloseCode) that retrying cannot fix
CLOSE_AUTHENTICATION_FAILED = 4009
CLOSE_UNSUPPORTED_RPC_VERSION = 4010

# obs-websocket request status codes (RequestStatus)
STATUS_OUTPUT_NOT_RUNNING = 501

ROWS_SHOWN = 3  # rows on screen: the roll-up depth
ROWS_PER_STEP = 2  # new rows a screen may add (< ROWS_SHOWN: a row already read stays up)
MAX_CAPTION_BYTES = 128  # libobs keeps this many bytes of a caption's UTF-8 text and drops the rest
SPEAKER_CHANGE = ">> "  # opens a new speaker's first row, as US broadcast captions do
STREAM_STATUS_EVERY_S = 5.0  # ask GetStreamStatus at most this often (seconds)
# The largest message taken from OBS: GetVersion's answer (its list of requests) is a few KiB; no events are asked for.
MAX_MESSAGE_BYTES = 64 * 1024
VERSION = re.compile(r"\d{1,4}(\.\d{1,4}){1,3}(-[A-Za-z0-9.]{1,16})?")  # OBS's version as shown: "30.1.2"


def auth_string(password: str, salt: str, challenge: str) -> str:
    """obs-websocket's answer to a ``Hello``'s challenge: base64(sha256(base64(sha256(password + salt)) +
    challenge)), all strings UTF-8."""
    secret = base64.b64encode(hashlib.sha256((password + salt).encode()).digest()).decode()
    return base64.b64encode(hashlib.sha256((secret + challenge).encode()).digest()).decode()


def caption_chars(text: str) -> str:
    """``text`` in characters CEA-608 shows (``app.cea608.shown_form``: all in ``SHOWN``; libcaption maps the
    ones beyond ASCII from UTF-8 to their 608 codes). Whitespace becomes one space; the result is stripped."""
    return " ".join("".join(shown_form(ch) for ch in text).split())


def caption_rows(text: str, speaker_changed: bool) -> list[str]:
    """``text`` (already in 608's characters) as rows of at most ``COLUMNS`` characters, broken at spaces; a word
    longer than a row is cut. With ``speaker_changed`` the first row opens with ``SPEAKER_CHANGE``. ``[]`` when
    there are no words."""
    words = text.split()
    if not words:
        return []
    rows: list[str] = []
    row = SPEAKER_CHANGE.rstrip() if speaker_changed else ""
    for word in words:
        if row and len(row) + 1 + len(word) <= COLUMNS:
            row += " " + word
            continue
        if row:
            rows.append(row)
        while len(word) > COLUMNS:
            rows.append(word[:COLUMNS])
            word = word[COLUMNS:]
        row = word
    rows.append(row)
    return rows


def _fits(rows: Sequence[str]) -> bool:
    return len("\n".join(rows).encode()) <= MAX_CAPTION_BYTES


def screens(shown: Sequence[str], rows: Sequence[str]) -> list[list[str]]:
    """The screens (each a list of rows, top first) that roll ``rows`` in below ``shown`` (the rows on screen
    now, top first): each adds at most ``ROWS_PER_STEP`` new rows, and shows at most ``ROWS_SHOWN`` rows in at
    most ``MAX_CAPTION_BYTES`` bytes once joined with ``\\n`` (the rows above the new ones give way first).
    Rows hold at most ``COLUMNS`` characters of at most 3 bytes, so one row always fits."""
    out: list[list[str]] = []
    above = list(shown)[-ROWS_SHOWN:]
    i = 0
    while i < len(rows):
        step = 1
        while step < ROWS_PER_STEP and i + step < len(rows) and _fits(rows[i : i + step + 1]):
            step += 1
        new = list(rows[i : i + step])
        keep = ROWS_SHOWN - len(new)
        context = above[len(above) - keep :] if keep > 0 else []
        while context and not _fits(context + new):
            context = context[1:]
        screen = context + new
        out.append(screen)
        above = screen
        i += step
    return out


@dataclass
class _Plan:
    """The screens of the caption being sent, kept across the runner's retries of it."""

    key: tuple[int, int]  # (seq, sentence_id) of its caption
    screens: list[list[str]]
    interval_s: float  # between two screens
    done: int = 0  # screens OBS took


class ObsTarget(Target):
    """OBS Studio at ``url`` (``ws://host:4455``, obs-websocket's default port), with the obs-websocket
    ``password`` (``None`` when OBS has authentication off). See the module's docstring for the protocol and the
    caption shape. Raises ``ValueError`` at once for a URL that is not ``ws://`` or ``wss://`` with a host.

    ``connect_timeout_s`` bounds opening the socket; ``response_timeout_s`` each answer (``Hello``,
    ``Identified``, a ``RequestResponse``); ``max_step_s`` the time between two screens of one sentence.
    ``policy``: where it may connect (None: public addresses only)."""

    kind: ClassVar[OutputKind] = OutputKind.OBS

    def __init__(
        self,
        url: str,
        password: str | None,
        *,
        connect_timeout_s: float = 5.0,
        response_timeout_s: float = 5.0,
        max_step_s: float = 2.0,
        policy: DestinationPolicy | None = None,
    ) -> None:
        parsed = URL(url)
        if parsed.scheme not in ("ws", "wss") or not parsed.host:
            raise ValueError(f"an OBS address is ws://host:port (obs-websocket), not {redacted_url(url)!r}")
        self.url = url
        self.policy = policy or DestinationPolicy()
        self._where = redacted_url(url)  # for the log: user information and query values are secrets
        self._password = password
        self._connect_timeout_s = connect_timeout_s
        self._response_timeout_s = response_timeout_s
        self._max_step_s = max_step_s
        self._session: OutboundSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._identified = False  # ``_ws`` got its ``Identified``
        self._lock = asyncio.Lock()  # one exchange at a time: answers are read in line
        self._ids = itertools.count(1)
        self._streaming: bool | None = None
        self._streaming_at = -math.inf  # time.monotonic() of the last GetStreamStatus answer
        self._obs_version: str | None = None
        self._shown: list[str] = []  # the rows on OBS's screen, top first
        self._plan: _Plan | None = None

    # -- Target

    async def send(self, caption: OutgoingCaption) -> None:
        """Put ``caption`` on OBS's stream as one or more screens (see the module's docstring); returns when OBS
        took the last. Connects first if needed. Raises ``TargetError``: retryable when OBS is not reachable, does
        not answer, or is not streaming; permanent when it refuses the password. A caption with no character 608
        can show sends nothing."""
        async with self._lock:
            plan = self._plan_for(caption)
            while plan.done < len(plan.screens):
                ws = await self._connected()
                if self._streaming_at + STREAM_STATUS_EVERY_S <= time.monotonic():
                    await self._ask_stream_status(ws)
                if plan.done:
                    await asyncio.sleep(plan.interval_s)
                screen = plan.screens[plan.done]
                status, _ = await self._request(ws, "SendStreamCaption", {"captionText": "\n".join(screen)})
                if status.get("code") == STATUS_OUTPUT_NOT_RUNNING:
                    self._streaming = False
                    self._streaming_at = time.monotonic()
                    raise TargetError("OBS is not streaming: it puts captions only in a running stream")
                if not status.get("result"):
                    code = failures.number(status.get("code"))  # its comment is OBS's words: not shown
                    raise TargetError(f"OBS refused the caption (code {'unknown' if code is None else code})")
                self._streaming = True
                plan.done += 1
                self._shown = screen
            self._plan = None

    def status(self) -> dict[str, Any]:
        """``connected``: identified to OBS now; ``streaming``: OBS's stream is running (``None`` until known);
        ``obs_version``: OBS's version (``"30.1.2"``), once connected."""
        connected = self._identified and self._ws is not None and not self._ws.closed
        return {"connected": connected, "streaming": self._streaming, "obs_version": self._obs_version}

    async def close(self) -> None:
        """Close the socket. Safe to call twice; a later ``send`` connects again."""
        await self._drop()

    # -- captions

    def _plan_for(self, caption: OutgoingCaption) -> _Plan:
        key = (caption.seq, caption.sentence_id)
        if self._plan is not None and self._plan.key == key:
            return self._plan  # a retry: resume where OBS stopped taking screens
        rows = caption_rows(caption_chars(caption.text), caption.speaker_changed)
        planned = screens(self._shown, rows)
        spoken_s = max(0.0, (caption.end_wall_ms - caption.start_wall_ms) / 1000)
        interval_s = min(self._max_step_s, spoken_s / len(planned)) if planned else 0.0
        self._plan = _Plan(key, planned, interval_s)
        return self._plan

    # -- connection

    async def _connected(self) -> aiohttp.ClientWebSocketResponse:
        """The identified socket, connecting and identifying first when there is none."""
        if self._identified and self._ws is not None and not self._ws.closed:
            return self._ws
        await self._drop()
        self._session = self.policy.session()
        try:
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    # max_msg_size: what OBS sends is small; a peer that is no OBS cannot make the server hold more
                    self._ws = await self._session.http.ws_connect(
                        self.url, protocols=(SUBPROTOCOL,), autoping=True, max_msg_size=MAX_MESSAGE_BYTES
                    )
            except TimeoutError:
                raise TargetError(f"OBS did not accept a connection within {self._connect_timeout_s:g} s") from None
            except DestinationRefused as e:
                raise failures.refused(e) from None
            except RedirectRefused as e:
                raise TargetError(
                    f"not obs-websocket (HTTP status {e.status} to the WebSocket handshake; redirects "
                    "are not followed)",
                    permanent=True,
                ) from None
            except aiohttp.InvalidURL:
                raise TargetError(failures.NOT_A_URL, permanent=True) from None
            except aiohttp.WSServerHandshakeError as e:
                raise TargetError(f"not obs-websocket (HTTP status {e.status} to the WebSocket handshake)") from None
            except (aiohttp.ClientError, OSError) as e:
                raise TargetError(f"OBS is not reachable: {failures.connection_failure(e)}") from None
            await self._identify(self._ws)
            self._identified = True
            self._streaming_at = -math.inf  # ask about the stream on this new connection
        except BaseException:
            await self._drop()
            raise
        log.info("obs %s: connected, OBS %s", self._where, self._obs_version)
        return self._ws

    async def _identify(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        hello = await self._receive(ws, "Hello", OP_HELLO)
        identify: dict[str, Any] = {"rpcVersion": RPC_VERSION, "eventSubscriptions": 0}
        auth = hello.get("authentication")
        if isinstance(auth, dict):
            if self._password is None:
                raise TargetError(
                    "authentication failed: OBS asks for a password (obs-websocket authentication is "
                    "on) and none is set",
                    permanent=True,
                )
            identify["authentication"] = auth_string(
                self._password, str(auth.get("salt", "")), str(auth.get("challenge", ""))
            )
        await self._send_json(ws, {"op": OP_IDENTIFY, "d": identify})
        await self._receive(ws, "Identified", OP_IDENTIFIED)
        status, data = await self._request(ws, "GetVersion", {})
        version = data.get("obsVersion") if status.get("result") else None
        # shown in the output's status: a version number, or nothing (never other text the peer sent)
        self._obs_version = version if isinstance(version, str) and VERSION.fullmatch(version) else None

    async def _ask_stream_status(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        status, data = await self._request(ws, "GetStreamStatus", {})
        if status.get("result") and isinstance(data.get("outputActive"), bool):
            self._streaming = data["outputActive"]
        self._streaming_at = time.monotonic()

    async def _request(
        self, ws: aiohttp.ClientWebSocketResponse, request_type: str, data: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Send one request and wait for its answer: ``(requestStatus, responseData)``, within
        ``response_timeout_s`` of the call whatever else arrives. Other messages (events, answers to requests given
        up on) are skipped."""
        deadline = asyncio.get_running_loop().time() + self._response_timeout_s
        request_id = str(next(self._ids))
        await self._send_json(
            ws, {"op": OP_REQUEST, "d": {"requestType": request_type, "requestId": request_id, "requestData": data}}
        )
        while True:
            answer = await self._receive(ws, request_type, OP_REQUEST_RESPONSE, deadline)
            if answer.get("requestId") == request_id:
                status = answer.get("requestStatus")
                response = answer.get("responseData")
                return (status if isinstance(status, dict) else {}, response if isinstance(response, dict) else {})

    async def _send_json(self, ws: aiohttp.ClientWebSocketResponse, message: dict[str, Any]) -> None:
        try:
            async with asyncio.timeout(self._response_timeout_s):
                await ws.send_str(json.dumps(message))
        except TimeoutError:
            await self._drop()
            raise TargetError(f"OBS did not take a message within {self._response_timeout_s:g} s") from None
        except (aiohttp.ClientError, ConnectionError):
            await self._drop()
            raise TargetError("the connection to OBS dropped") from None

    async def _receive(
        self, ws: aiohttp.ClientWebSocketResponse, what: str, op: int, deadline: float | None = None
    ) -> dict[str, Any]:
        """The ``d`` of the next message with op code ``op``; earlier messages of other op codes are skipped. It
        must come by ``deadline`` (the loop's clock; None: ``response_timeout_s`` from now): skipped messages do
        not move it. Raises ``TargetError`` (the socket forgotten) on a timeout, a close or a malformed message."""
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + self._response_timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                msg, data = await self._next(ws, op)
        except TimeoutError:
            await self._drop()
            raise TargetError(f"OBS did not answer {what} within {self._response_timeout_s:g} s") from None
        if data is not None:
            return data
        code = ws.close_code
        await self._drop()
        if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            raise TargetError("OBS sent something that is not obs-websocket")  # what it sent is not shown
        if code == CLOSE_AUTHENTICATION_FAILED:
            raise TargetError(
                "authentication failed: OBS refused the password (obs-websocket closed with 4009, "
                "AuthenticationFailed): check the password in OBS's Tools > WebSocket Server "
                "Settings",
                permanent=True,
            )
        if code == CLOSE_UNSUPPORTED_RPC_VERSION:
            raise TargetError(
                "OBS's obs-websocket does not speak RPC version 1 (closed with 4010): OBS 28 or later is needed",
                permanent=True,
            )
        reason = f" (close code {code})" if failures.number(code) is not None else ""
        raise TargetError(f"the connection to OBS dropped while waiting for {what}{reason}")

    @staticmethod
    async def _next(ws: aiohttp.ClientWebSocketResponse, op: int) -> tuple[aiohttp.WSMessage, dict[str, Any] | None]:
        """The next message with op code ``op`` and its ``d``; or the first message that is no obs-websocket
        JSON, or that ends the socket, with None."""
        while True:
            msg = await ws.receive()
            if msg.type is not aiohttp.WSMsgType.TEXT:
                return msg, None
            try:
                message = json.loads(msg.data)
            except ValueError:
                return msg, None
            if not isinstance(message, dict) or not isinstance(message.get("d"), dict):
                return msg, None
            if message.get("op") == op:
                return msg, message["d"]

    async def _drop(self) -> None:
        """Forget the socket and its session, closing both."""
        ws, session = self._ws, self._session
        self._ws = self._session = None
        self._identified = False
        try:
            if ws is not None and not ws.closed:
                async with asyncio.timeout(self._response_timeout_s):
                    await ws.close()
        except (TimeoutError, aiohttp.ClientError, ConnectionError):
            pass  # the socket is gone either way
        finally:
            if session is not None:
                await session.close()
