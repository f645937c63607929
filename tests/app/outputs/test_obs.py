"""The OBS Studio target (app/outputs/obs.py): captions into OBS's stream over obs-websocket v5.

The pure pieces first: the authentication string against the documented formula computed on its own, the
reduction to CEA-608's characters, rows of at most 32 characters and roll-up screens of at most 128 bytes. Then
the target against ``StandInObs`` (tests/support/obs_stand_in.py), an obs-websocket v5 server written from the
documented protocol (see its docstring for why the quick tier does not use the real OBS): every caption arrives as
``SendStreamCaption`` with rows of at most 32 characters and the expected text; a wrong password is a permanent
error; a restarted server is reconnected to and captions resume; a stream that is not running is a retryable
error and shows in ``status()``; a sentence whose screens were partly delivered resumes at the first one
missing; a silent server times out.

Last (``slow``), the real OBS Studio (Debian's ``obs-studio`` 29, obs-websocket 5.1.0) under Xvfb, streaming to a
local ffmpeg RTMP listener: the captions are read back out of the H.264 stream OBS sent (its CEA-608 SEI) and
decoded here, a wrong password gets OBS's own 4009 close, a stopped stream OBS's own 501.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cea608 import COLUMNS, SHOWN
from app.outputs import DestinationPolicy
from app.outputs.obs import (
    MAX_CAPTION_BYTES,
    ROWS_SHOWN,
    ObsTarget,
    auth_string,
    caption_chars,
    caption_rows,
    screens,
)
from app.outputs.target import OutgoingCaption, TargetError
from tests.support.obs_stand_in import PASSWORD, StandInObs, documented_auth, new_rows

LOOPBACK = DestinationPolicy.from_settings(["127.0.0.1"])  # --output-allow 127.0.0.1: OBS stand-ins on loopback


def caption(seq: int, text: str, speaker_changed: bool = False, spoken_ms: int = 0) -> OutgoingCaption:
    """A locked sentence as the runner hands it over; ``spoken_ms`` is how long it took to say."""
    return OutgoingCaption(
        seq=seq,
        sentence_id=seq,
        text=text,
        start_wall_ms=1_700_000_000_000,
        end_wall_ms=1_700_000_000_000 + spoken_ms,
        spk=None,
        speaker=None,
        speaker_changed=speaker_changed,
    )


def assert_shape(sent: list[str]) -> None:
    """Each caption as OBS takes it: at most ROWS_SHOWN rows of at most COLUMNS characters 608 can show, joined
    with \\n, in at most MAX_CAPTION_BYTES bytes."""
    for text in sent:
        rows = text.split("\n")
        assert 1 <= len(rows) <= ROWS_SHOWN, text
        assert all(0 < len(row) <= COLUMNS for row in rows), text
        assert set(text) - {"\n"} <= SHOWN, text
        assert len(text.encode()) <= MAX_CAPTION_BYTES, text


# -- the pure pieces


def test_auth_string_is_the_documented_formula() -> None:
    # The protocol document's own example challenge and salt, and random ones.
    doc = (
        "supersecretpassword",
        "lM1GncleQOaCu9lT1yeUZhFYnqhsLLP1G5lAGo3ixaI=",
        "+IxH4CnCiqpX1rM9scsNynZzbOe4KhDeYcTNS3PDaeY=",
    )
    assert auth_string(*doc) == documented_auth(*doc)
    for password in ("", "pässwörd ✓", PASSWORD):
        salt, challenge = base64.b64encode(secrets.token_bytes(32)).decode(), secrets.token_urlsafe(32)
        assert auth_string(password, salt, challenge) == documented_auth(password, salt, challenge)
    assert auth_string("a", "b", "c") != auth_string("a", "b", "d")


def test_caption_chars_keeps_what_608_shows() -> None:
    assert caption_chars("It’s “curly” — isn’t it…") == "It's \"curly\" - isn't it..."
    assert caption_chars("Café niño Ærø ♫ 🎉 日本 x|y `z`") == "Café niño AErø ♪ x/y 'z'"
    assert caption_chars("  spaced\tout\n") == "spaced out"
    assert caption_chars("🎉🎉") == ""
    assert caption_chars("Łódź, Ångström, naïve") == "Lódz, Ångström, naïve"


def test_caption_rows_break_at_words() -> None:
    text = "Hello from the live captions test, which has more words than one row holds."
    rows = caption_rows(text, speaker_changed=False)
    assert rows == ["Hello from the live captions", "test, which has more words than", "one row holds."]
    assert caption_rows(text, speaker_changed=True)[0] == ">> Hello from the live captions"
    assert caption_rows("x" * 70, speaker_changed=False) == ["x" * 32, "x" * 32, "x" * 6]
    assert caption_rows("", speaker_changed=True) == []


def test_screens_roll_rows_up() -> None:
    rows = [f"row {i}" for i in range(5)]
    assert screens([], rows) == [["row 0", "row 1"], ["row 1", "row 2", "row 3"], ["row 2", "row 3", "row 4"]]
    assert screens(["a", "b", "c"], ["d"]) == [["b", "c", "d"]]
    # Wide characters: 3 rows of 32 two-byte letters are 194 bytes; rows above give way, then new ones.
    wide = ["é" * 32] * 3
    assert [len("\n".join(s).encode()) <= MAX_CAPTION_BYTES for s in screens(wide[:1], wide)] == [True] * 3


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from("abéñ♪—’🎉"), max_size=25), max_size=40),
    st.lists(st.text("xyé ", max_size=32)),
    st.booleans(),
)
def test_screens_hold_every_word_in_shape(words: list[str], shown: list[str], changed: bool) -> None:
    # Numbered words, so that no two rows are alike and the rows a screen adds can be told from those it keeps.
    text = " ".join(f"{word}{i}" for i, word in enumerate(words))
    rows = caption_rows(caption_chars(text), changed)
    above = [r for r in shown if r.strip()][-ROWS_SHOWN:]
    planned = ["\n".join(screen) for screen in screens(above, rows)]
    assert_shape(planned)
    assert new_rows(planned, above) == rows
    assert " ".join(rows).replace(">> ", "").split() == caption_chars(text).split()


def test_target_wants_a_websocket_url() -> None:
    for bad in ("http://127.0.0.1:4455", "127.0.0.1:4455", "ws://"):
        with pytest.raises(ValueError):
            ObsTarget(bad, None)


@pytest.fixture
async def obs() -> AsyncIterator[StandInObs]:
    server = StandInObs(PASSWORD)
    await server.start()
    yield server
    if server._runner is not None:
        await server.stop()


@pytest.fixture
async def target(obs: StandInObs) -> AsyncIterator[ObsTarget]:
    t = ObsTarget(obs.url, PASSWORD, max_step_s=0.01, policy=LOOPBACK)
    yield t
    await t.close()


SENTENCES = [
    caption(1, "Hello from the live captions test."),
    caption(2, "It’s a “curly” test — with dashes… and an emoji 🎉 here.", speaker_changed=True),
    caption(
        3,
        "This is a much longer sentence that needs more than one screen of roll-up captions to be shown "
        "in full on the stream, so it goes out as several.",
        spoken_ms=6000,
    ),
    caption(4, "🎉"),  # nothing 608 shows: nothing sent
    caption(5, "Señor Müller, naïve café owner, said “¿qué?” ♫", speaker_changed=True),
]


def expected_rows(sentences: list[OutgoingCaption]) -> list[str]:
    return [row for c in sentences for row in caption_rows(caption_chars(c.text), c.speaker_changed)]


async def test_every_caption_arrives_in_rows_of_32(obs: StandInObs, target: ObsTarget) -> None:
    for c in SENTENCES:
        await target.send(c)
    assert_shape(obs.captions)
    assert obs.captions[:2] == [
        "Hello from the live captions\ntest.",
        'test.\n>> It\'s a "curly" test - with\ndashes... and an emoji here.',
    ]
    assert new_rows(obs.captions) == expected_rows(SENTENCES)
    assert new_rows(obs.captions)[-2:] == [">> Señor Müller, naïve café", 'owner, said "¿qué?" ♪']
    assert len(obs.captions) == 6  # 1 + 1 + 3 (the long one: 6 rows, 2 a screen) + 0 + 1
    # One connection, identified as the protocol says, no events asked for.
    assert obs.protocols == ["obswebsocket.json"]
    (identify,) = obs.identifies
    assert identify["op"] == 1 and identify["d"]["rpcVersion"] == 1 and identify["d"]["eventSubscriptions"] == 0
    status = target.status()
    assert status == {"connected": True, "streaming": True, "obs_version": "30.2.3"}
    assert PASSWORD not in repr(status)
    await target.close()
    await target.close()
    assert target.status()["connected"] is False


async def test_screens_of_a_long_sentence_follow_its_pace(obs: StandInObs) -> None:
    long = SENTENCES[2]  # 6 rows: 3 screens
    for spoken_ms, max_step_s, waits_s in ((1200, 5.0, 2 * 0.4), (6000, 0.2, 2 * 0.2)):
        target = ObsTarget(obs.url, PASSWORD, max_step_s=max_step_s, policy=LOOPBACK)
        try:
            began = time.monotonic()
            await target.send(caption(long.seq, long.text, spoken_ms=spoken_ms))
            took = time.monotonic() - began
        finally:
            await target.close()
        assert waits_s - 0.05 <= took < waits_s + 0.5, (spoken_ms, max_step_s, took)
    assert len(obs.captions) == 6


async def test_wrong_password_is_permanent(obs: StandInObs) -> None:
    for password, words in (("not it", "refused the password"), (None, "asks for a password")):
        target = ObsTarget(obs.url, password, policy=LOOPBACK)
        with pytest.raises(TargetError) as raised:
            await target.send(SENTENCES[0])
        assert raised.value.permanent, raised.value
        assert words in str(raised.value)
        assert target.status() == {"connected": False, "streaming": None, "obs_version": None}
        await target.close()
    assert obs.captions == []


async def test_reconnects_after_obs_restarts(obs: StandInObs, target: ObsTarget) -> None:
    await target.send(SENTENCES[0])
    port = obs.port
    await obs.stop()
    with pytest.raises(TargetError) as raised:  # the socket dropped: retryable
        await target.send(SENTENCES[1])
    assert not raised.value.permanent
    assert target.status()["connected"] is False
    with pytest.raises(TargetError) as raised:  # nothing listens: retryable
        await target.send(SENTENCES[1])
    assert not raised.value.permanent and "not reachable" in str(raised.value)
    await obs.start()
    assert obs.port == port
    await target.send(SENTENCES[1])  # the runner's retry
    await target.send(SENTENCES[2])
    assert target.status()["connected"] is True
    assert len(obs.identifies) == 2
    assert new_rows(obs.captions) == expected_rows(SENTENCES[:3])


async def test_not_streaming_is_retryable_and_shown(obs: StandInObs, target: ObsTarget) -> None:
    obs.streaming = False
    with pytest.raises(TargetError) as raised:
        await target.send(SENTENCES[0])
    assert not raised.value.permanent and "not streaming" in str(raised.value)
    assert target.status() == {"connected": True, "streaming": False, "obs_version": "30.2.3"}
    obs.streaming = True
    await target.send(SENTENCES[0])
    assert target.status()["streaming"] is True
    assert obs.captions == ["Hello from the live captions\ntest."]


async def test_a_retry_resumes_at_the_first_screen_missing(obs: StandInObs, target: ObsTarget) -> None:
    obs.stop_streaming_after = 2  # the stream stops after the long sentence's second screen
    with pytest.raises(TargetError):
        await target.send(SENTENCES[2])
    assert len(obs.captions) == 2 and target.status()["streaming"] is False
    obs.streaming, obs.stop_streaming_after = True, None
    await target.send(SENTENCES[2])
    assert len(obs.captions) == 3
    assert new_rows(obs.captions) == expected_rows(SENTENCES[2:3])


async def test_a_silent_server_times_out(obs: StandInObs) -> None:
    obs.silent = True
    target = ObsTarget(obs.url, PASSWORD, response_timeout_s=0.3, policy=LOOPBACK)
    began = time.monotonic()
    with pytest.raises(TargetError) as raised:
        await target.send(SENTENCES[0])
    assert time.monotonic() - began < 2
    assert not raised.value.permanent and "did not answer Hello" in str(raised.value)
    await target.close()


# -- the real OBS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_OBS_GLOBAL = """[General]
FirstRun=true
LastVersion=486539266
EnableAutoUpdates=false
ConfirmOnExit=false

[Basic]
Profile=Test
ProfileDir=Test
SceneCollection=Test
SceneCollectionFile=Test

[BasicWindow]
SysTrayEnabled=true
WarnBeforeStartingStream=false
WarnBeforeStoppingStream=false

[OBSWebSocket]
FirstLoad=false
ServerEnabled=true
ServerPort={ws_port}
AlertsEnabled=false
AuthRequired=true
ServerPassword={password}
"""

_OBS_PROFILE = """[General]
Name=Test

[Output]
Mode=Simple

[SimpleOutput]
VBitrate=300
StreamEncoder=x264
ABitrate=64
Preset=ultrafast

[Video]
BaseCX=320
BaseCY=240
OutputCX=320
OutputCY=240
FPSType=0
FPSCommon=30
"""


class RealObs:
    """Debian's OBS Studio under its own Xvfb, streaming (``--startstreaming``) to an ffmpeg RTMP listener that
    keeps the stream in ``flv``; obs-websocket on ``ws_port`` with ``password``. HOME is a temporary folder with
    the configuration written here. OBS's outgoing HTTP (rtmp-services' update of its service list) goes to a
    proxy address on loopback where nothing listens, so nothing leaves the machine."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ws_port, self.rtmp_port = _free_port(), _free_port()
        self.flv = folder / "stream.flv"
        self.log = folder / "obs.log"
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        config = self.folder / ".config" / "obs-studio"
        (config / "basic" / "profiles" / "Test").mkdir(parents=True)
        (config / "basic" / "scenes").mkdir(parents=True)
        (config / "global.ini").write_text(_OBS_GLOBAL.format(ws_port=self.ws_port, password=PASSWORD))
        (config / "basic" / "profiles" / "Test" / "basic.ini").write_text(_OBS_PROFILE)
        service = {"type": "rtmp_custom", "settings": {"server": f"rtmp://127.0.0.1:{self.rtmp_port}/live", "key": "x"}}
        (config / "basic" / "profiles" / "Test" / "service.json").write_text(json.dumps(service))
        # A scene collection of one empty scene: without one OBS creates it and skips --startstreaming.
        scenes = {
            "name": "Test",
            "current_scene": "Scene",
            "current_program_scene": "Scene",
            "scene_order": [{"name": "Scene"}],
            "sources": [{"id": "scene", "name": "Scene", "settings": {"items": [], "id_counter": 0}}],
        }
        (config / "basic" / "scenes" / "Test.json").write_text(json.dumps(scenes))
        self._procs.append(
            subprocess.Popen(
                [
                    "ffmpeg",
                    "-nostdin",
                    "-hide_banner",
                    "-loglevel",
                    "error",
                    "-listen",
                    "1",
                    "-i",
                    f"rtmp://127.0.0.1:{self.rtmp_port}/live/x",
                    "-c",
                    "copy",
                    "-f",
                    "flv",
                    str(self.flv),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        read_fd, write_fd = os.pipe()
        self._procs.append(
            subprocess.Popen(
                ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "1280x720x24", "-nolisten", "tcp"],
                pass_fds=(write_fd,),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        os.close(write_fd)
        with os.fdopen(read_fd) as pipe:
            display = pipe.readline().strip()
        assert display, "Xvfb did not start"
        proxy = "http://127.0.0.1:9"  # discard port: nothing listens
        env = {
            **os.environ,
            "HOME": str(self.folder),
            "DISPLAY": f":{display}",
            "http_proxy": proxy,
            "https_proxy": proxy,
            "HTTPS_PROXY": proxy,
            "ALL_PROXY": proxy,
            "no_proxy": "",
            "LIBGL_ALWAYS_SOFTWARE": "1",
        }
        with self.log.open("wb") as log:
            self._procs.append(
                subprocess.Popen(
                    ["obs", "--startstreaming", "--minimize-to-tray", "--disable-updater", "--disable-shutdown-check"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.folder,
                )
            )

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def wait_stream_end(self) -> None:
        """Let the RTMP listener finish the file (OBS stopped streaming)."""
        self._procs[0].wait(15)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"


@pytest.fixture
def real_obs() -> Iterator[RealObs]:
    missing = [p for p in ("obs", "Xvfb", "ffmpeg") if shutil.which(p) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}: apt-get install obs-studio xvfb ffmpeg")
    with tempfile.TemporaryDirectory(prefix="obs-test-") as folder:
        obs_ = RealObs(Path(folder))
        obs_.start()
        try:
            yield obs_
        finally:
            obs_.stop()


# CEA-608 characters a decoder draws, for reading the stream back (channel 1 only).
_SPECIAL = "®°½¿™¢£♪à èâêîôû"  # 0x11 0x30-0x3F (0x39: transparent space)
_EXTENDED = {0x12: "ÁÉÓÚÜü‘¡*’—©℠•“”ÀÂÇÈÊËëÎÏïÔÙùÛ«»", 0x13: "ÃãÍÌìÒòÕõ{}\\^_|~ÄäÖöß¥¤│ÅåØø┌┐└┘"}
_BASIC = {0x2A: "á", 0x5C: "é", 0x5E: "í", 0x5F: "ó", 0x60: "ú", 0x7B: "ç", 0x7C: "÷", 0x7D: "Ñ", 0x7E: "ñ", 0x7F: "█"}
_PAC_ROWS = {
    (0x11, 0): 1,
    (0x11, 1): 2,
    (0x12, 0): 3,
    (0x12, 1): 4,
    (0x15, 0): 5,
    (0x15, 1): 6,
    (0x16, 0): 7,
    (0x16, 1): 8,
    (0x17, 0): 9,
    (0x17, 1): 10,
    (0x10, 0): 11,
    (0x13, 0): 12,
    (0x13, 1): 13,
    (0x14, 0): 14,
    (0x14, 1): 15,
}


def stream_cc_pairs(flv: Path) -> list[list[tuple[int, int]]]:
    """Per SEI of the H.264 stream in ``flv``, in stream order: its CEA-608 field-1 byte pairs (parity off).
    Read here from the bitstream: OBS puts its caption SEI after the frame's slices, which Debian's ffmpeg decoder
    skips ("Late SEI is not implemented")."""
    annexb = subprocess.run(
        [
            "ffmpeg",
            "-nostdin",
            "-loglevel",
            "error",
            "-i",
            str(flv),
            "-map",
            "0:v",
            "-c",
            "copy",
            "-bsf:v",
            "h264_mp4toannexb",
            "-f",
            "h264",
            "-",
        ],
        capture_output=True,
        check=True,
    ).stdout
    out: list[list[tuple[int, int]]] = []
    for nal in re.split(b"\x00\x00\x01", annexb)[1:]:
        if not nal or nal[0] & 0x1F != 6:  # SEI
            continue
        payload = re.sub(b"\x00\x00\x03", b"\x00\x00", nal[1:])
        i = 0
        while i < len(payload) and payload[i] != 0x80:
            kind = size = 0
            while payload[i] == 0xFF:
                kind, i = kind + 255, i + 1
            kind, i = kind + payload[i], i + 1
            while payload[i] == 0xFF:
                size, i = size + 255, i + 1
            size, i = size + payload[i], i + 1
            body, i = payload[i : i + size], i + size
            # user_data_registered_itu_t_t35: USA, ATSC, "GA94", cc_data
            if kind == 4 and body[:1] == b"\xb5" and body[3:7] == b"GA94" and body[7] == 3:
                triplets = [body[10 + 3 * k : 13 + 3 * k] for k in range(body[8] & 0x1F)]
                out.append([(b & 0x7F, c & 0x7F) for a, b, c in triplets if a & 0x04 and a & 0x03 == 0])
    return out


def decode_608(frames: list[list[tuple[int, int]]]) -> list[str]:
    """The screens a CEA-608 decoder shows on channel 1 (pop-on, as libcaption sends: ENM, RCL, PACs and
    characters into hidden memory, EOC to show it), each as its rows top to bottom joined with ``\\n``."""
    shown: dict[int, dict[int, str]] = {}
    hidden: dict[int, dict[int, str]] = {}
    screens_out: list[str] = []
    row, col = 15, 0
    last: tuple[int, int] | None = None

    def put(ch: str) -> None:
        nonlocal col
        hidden.setdefault(row, {})[col] = ch
        col = min(col + 1, 31)

    for pairs in frames:
        for a, b in pairs:
            if a == 0 and b == 0:
                continue
            if 0x10 <= a <= 0x17 and 0x20 <= b <= 0x7F:  # a control code, sent twice
                if (a, b) == last:
                    last = None
                    continue
                last = (a, b)
            else:
                last = None
            if a == 0x14 and b == 0x2E:  # ENM
                hidden = {}
            elif a == 0x14 and b == 0x2C:  # EDM
                shown = {}
            elif a == 0x14 and b == 0x2F:  # EOC
                shown, hidden = hidden, shown
                screens_out.append(
                    "\n".join(
                        "".join(cells.get(c, " ") for c in range(32)).rstrip() for _, cells in sorted(shown.items())
                    )
                )
            elif a == 0x14 and b == 0x20:  # RCL
                pass
            elif a == 0x11 and 0x30 <= b <= 0x3F:
                put(_SPECIAL[b - 0x30])
            elif a in _EXTENDED and 0x20 <= b <= 0x3F:
                col = max(col - 1, 0)  # drawn over the fallback character before it
                put(_EXTENDED[a][b - 0x20])
            elif a == 0x11 and 0x20 <= b <= 0x2F:  # mid-row style: a space
                put(" ")
            elif 0x10 <= a <= 0x17 and 0x40 <= b <= 0x7F:  # PAC
                row = _PAC_ROWS[(a, 1 if b >= 0x60 else 0)]
                col = ((b & 0x1E) >> 1) * 4 if b & 0x10 else 0
            elif a >= 0x20:
                for byte in (a, b):
                    if byte >= 0x20:
                        put(_BASIC.get(byte, chr(byte)))
    return screens_out


@pytest.mark.slow
async def test_real_obs(real_obs: RealObs) -> None:
    target = ObsTarget(f"ws://127.0.0.1:{real_obs.ws_port}", PASSWORD, max_step_s=0.5, policy=LOOPBACK)
    try:
        deadline = time.monotonic() + 60
        while True:  # as the runner does: retry until OBS is up and streaming
            try:
                await target.send(SENTENCES[0])
                break
            except TargetError as e:
                assert not e.permanent, e
                assert time.monotonic() < deadline, f"OBS never took a caption: {e}\n{real_obs.log_tail()}"
                await asyncio.sleep(0.5)
        for c in SENTENCES[1:]:
            await target.send(c)
        status = target.status()
        assert status["connected"] is True and status["streaming"] is True, status
        assert re.fullmatch(r"\d+\.\d+\.\d+.*", status["obs_version"] or ""), status

        # A wrong password: OBS's own close code.
        wrong = ObsTarget(target.url, "not it", policy=LOOPBACK)
        with pytest.raises(TargetError) as raised:
            await wrong.send(SENTENCES[0])
        assert raised.value.permanent and "refused the password" in str(raised.value)
        await wrong.close()

        await asyncio.sleep(2)  # the encoder's frames that carry the last captions reach the listener
        # Stop the stream with a client of this test's own (identified with ``documented_auth``): OBS answers 501.
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(target.url, protocols=("obswebsocket.json",)) as ws,
        ):
            hello = (await ws.receive_json(timeout=5))["d"]["authentication"]
            await ws.send_json(
                {
                    "op": 1,
                    "d": {
                        "rpcVersion": 1,
                        "eventSubscriptions": 0,
                        "authentication": documented_auth(PASSWORD, hello["salt"], hello["challenge"]),
                    },
                }
            )
            assert (await ws.receive_json(timeout=5))["op"] == 2
            await ws.send_json({"op": 6, "d": {"requestType": "StopStream", "requestId": "stop"}})
            assert (await ws.receive_json(timeout=5))["d"]["requestStatus"]["result"] is True
        real_obs.wait_stream_end()
        with pytest.raises(TargetError) as raised:
            await target.send(caption(9, "Nobody will see this."))
        assert not raised.value.permanent and "not streaming" in str(raised.value)
        assert target.status()["streaming"] is False
    finally:
        await target.close()

    # What OBS put in its stream, read back: the screens sent, in order, each one a 608 screen.
    shown = [s.replace("’", "'") for s in decode_608(stream_cc_pairs(real_obs.flv))]
    sent = ["\n".join(screen) for screen in _screens_of(SENTENCES)]
    assert shown == sent, real_obs.log_tail()


def _screens_of(sentences: list[OutgoingCaption]) -> list[list[str]]:
    """The screens ``ObsTarget`` sends for ``sentences`` in order, from a fresh start."""
    out: list[list[str]] = []
    for c in sentences:
        out += screens(out[-1] if out else [], caption_rows(caption_chars(c.text), c.speaker_changed))
    return out
