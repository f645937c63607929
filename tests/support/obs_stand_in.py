"""A stand-in for OBS Studio's obs-websocket v5 server (``StandInObs``), written from the documented protocol, with
the password it is started with in the tests (``PASSWORD``), the protocol's authentication string computed on its
own (``documented_auth``) and the rows a run of roll-up captions added (``new_rows``)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import secrets
from typing import Any

import aiohttp
from aiohttp import web

from app.outputs.obs import ROWS_PER_STEP

PASSWORD = "correct horse battery staple"


def documented_auth(password: str, salt: str, challenge: str) -> str:
    """The protocol document's steps, written out separately from the module's: sha256 of ``password + salt``,
    base64 of it (the "base64 secret"), sha256 of ``secret + challenge``, base64 of that."""
    secret_digest = bytes.fromhex(hashlib.new("sha256", password.encode("utf-8") + salt.encode("utf-8")).hexdigest())
    secret = binascii.b2a_base64(secret_digest, newline=False).decode("ascii")
    answer_digest = bytes.fromhex(hashlib.new("sha256", f"{secret}{challenge}".encode()).hexdigest())
    return binascii.b2a_base64(answer_digest, newline=False).decode("ascii")


def new_rows(sent: list[str], shown: list[str] | None = None) -> list[str]:
    """The rows each screen added, in order, after ``shown`` (the screen before the first): a screen's rows start
    with rows that stayed from the screen before (roll-up: those move up), which this checks, and the rest are
    new."""
    out: list[str] = []
    before = shown or []
    for text in sent:
        rows = text.split("\n")
        kept = next(k for k in range(len(rows), -1, -1) if k <= len(before) and rows[:k] == before[len(before) - k :])
        assert len(rows) - kept <= ROWS_PER_STEP, f"{text!r} adds more than {ROWS_PER_STEP} rows"
        out += rows[kept:]
        before = rows
    return out


class StandInObs:
    """A stand-in for OBS Studio's obs-websocket v5 server on 127.0.0.1, written here from the documented
    protocol (github.com/obsproject/obs-websocket, docs/generated/protocol.md), not from its code: ``Hello`` (op 0)
    with a fresh ``challenge`` and ``salt`` when ``password`` is set; ``Identify`` (op 1) checked against
    ``documented_auth``, the socket closed with 4009 (AuthenticationFailed) on a wrong or missing answer;
    ``Identified`` (op 2); then ``RequestResponse`` (op 7) to ``GetVersion``, ``GetStreamStatus`` (``outputActive``
    is ``streaming``) and ``SendStreamCaption`` (the text recorded in ``captions``; code 501 OutputNotRunning while
    not ``streaming``, as obs-websocket answers). ``stop()`` closes every socket (code 1001, as when OBS quits)
    and the port; ``start()`` again listens on the same port. ``chatter_s``: events instead of answers.

    Why a stand-in: the real OBS does run on this machine (``test_real_obs`` drives Debian's OBS 29.0.2 under
    Xvfb), but it needs an X server, software GL, an RTMP listener for its stream and seconds to start, which the
    quick tier does not have; and only a stand-in can be told to stop streaming after a given caption, or to say
    nothing at all."""

    def __init__(self, password: str | None) -> None:
        self.password = password
        self.port = 0
        self.streaming = True
        self.stop_streaming_after: int | None = None  # captions taken before the stream stops by itself
        self.silent = False  # accept the socket, never say Hello
        self.chatter_s: float | None = None  # once identified: an event this often, and no request ever answered
        self.captions: list[str] = []
        self.identifies: list[dict[str, Any]] = []
        self.protocols: list[str | None] = []
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._serve)
        # No access log: its request lines carry the URL a test gave it, credentials included, and what the tests check
        # for secrets is the caption server's log.
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)
        assert self._runner is not None
        await self._runner.cleanup()
        self._runner = None

    async def _serve(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=("obswebsocket.json", "obswebsocket.msgpack"))
        await ws.prepare(request)
        self.protocols.append(ws.ws_protocol)
        self._sockets.add(ws)
        try:
            if self.silent:
                await ws.receive()
                return ws
            hello: dict[str, Any] = {"obsWebSocketVersion": "5.5.2", "rpcVersion": 1}
            salt = base64.b64encode(secrets.token_bytes(32)).decode()
            challenge = base64.b64encode(secrets.token_bytes(32)).decode()
            if self.password is not None:
                hello["authentication"] = {"challenge": challenge, "salt": salt}
            await ws.send_json({"op": 0, "d": hello})
            identify = json.loads((await ws.receive()).data)
            self.identifies.append(identify)
            if identify["op"] != 1:
                await ws.close(code=4007)  # NotIdentified
                return ws
            if self.password is not None and (
                identify["d"].get("authentication") != documented_auth(self.password, salt, challenge)
            ):
                await ws.close(code=4009, message=b"Authentication failed.")
                return ws
            await ws.send_json({"op": 2, "d": {"negotiatedRpcVersion": 1}})
            if self.chatter_s is not None:
                await self._chatter(ws, self.chatter_s)
                return ws
            async for msg in ws:
                request_msg = json.loads(msg.data)
                assert request_msg["op"] == 6
                await ws.send_json({"op": 7, "d": self._answer(request_msg["d"])})
            return ws
        finally:
            self._sockets.discard(ws)

    @staticmethod
    async def _chatter(ws: web.WebSocketResponse, every_s: float) -> None:
        """Events (op 5, as OBS sends them to a client that subscribed) until the client goes; requests are never
        read, so never answered: an OBS busy with everything but this client."""
        event = {
            "op": 5,
            "d": {"eventType": "CurrentProgramSceneChanged", "eventIntent": 4, "eventData": {"sceneName": "Scene"}},
        }
        try:
            while not ws.closed:
                await ws.send_json(event)
                await asyncio.sleep(every_s)
        except ConnectionError:
            pass  # the client closed the socket

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        kind, data = request["requestType"], request.get("requestData", {})
        answer: dict[str, Any] = {"requestType": kind, "requestId": request["requestId"]}
        if kind == "GetVersion":
            answer["responseData"] = {"obsVersion": "30.2.3", "obsWebSocketVersion": "5.5.2", "rpcVersion": 1}
        elif kind == "GetStreamStatus":
            answer["responseData"] = {"outputActive": self.streaming, "outputReconnecting": False}
        elif kind == "SendStreamCaption":
            if not isinstance(data.get("captionText"), str):
                answer["requestStatus"] = {"result": False, "code": 300, "comment": "captionText"}
                return answer
            if not self.streaming:
                answer["requestStatus"] = {"result": False, "code": 501}
                return answer
            self.captions.append(data["captionText"])
            if self.stop_streaming_after is not None and len(self.captions) >= self.stop_streaming_after:
                self.streaming = False
        else:
            answer["requestStatus"] = {"result": False, "code": 204}  # UnknownRequestType
            return answer
        answer["requestStatus"] = {"result": True, "code": 100}
        return answer
