"""GStreamer's ``whip-client`` publishes a WAV file into a real live-captions server; prints the result as JSON.

Run inside a private network namespace (``unshare -rn python tests/support/whip_scenario.py WAV WORKDIR``, as
``tests/app/compat/test_whip.py`` does): it has only loopback and a veth pair of its own, so nothing the server or the
client does can reach another machine. The veth pair (both ends in the namespace) is there because libnice (GStreamer's
ICE) never gathers loopback candidates: it gives the client an address that is not loopback yet never leaves the
namespace; the server's ICE is bound to the same address (``--ice-host``).

Steps: bring up the interfaces, build the gupnp-igd stand-in (``whip_igd_stub.c``: why), start ``python -m app``
(the embedded default model) and wait until it is ready, create a room, publish the file paced at real time with
whip-client and the server's token, stop the client with SIGINT once the audio has played (it sends DELETE, as on
Ctrl-C), then read the room's transcript and whether the session ended.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import wave
from pathlib import Path
from typing import Any

ADDRESS = "10.77.0.1"
PORT = 18181
TOKEN = "whip-test-token"
BASE = f"http://127.0.0.1:{PORT}"
REPO = Path(__file__).resolve().parents[2]  # tests/support/ is two folders down
STUB_SOURCE = Path(__file__).with_name("whip_igd_stub.c")


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


def call(method: str, path: str, body: bytes | None = None, auth: bool = True) -> Any:
    request = urllib.request.Request(
        BASE + path, data=body, method=method, headers={"Authorization": f"Bearer {TOKEN}"} if auth else {}
    )
    if body is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def gobject_library() -> str:
    for line in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout.splitlines():
        if line.strip().startswith("libgobject-2.0.so.0 ") and "x86-64" in line:
            return line.rsplit("=> ", 1)[1].strip()
    raise RuntimeError("libgobject-2.0.so.0 not found")


def main(wav: str, workdir: str) -> None:
    work = Path(workdir)
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
    sh("ip", "addr", "add", f"{ADDRESS}/24", "dev", "v0")
    sh("ip", "link", "set", "v0", "up")
    sh("ip", "link", "set", "v1", "up")
    stub = work / "stub"
    stub.mkdir(exist_ok=True)
    sh("cc", "-shared", "-fPIC", "-o", str(stub / "libgupnp-igd-1.0.so.4"), str(STUB_SOURCE), gobject_library())

    log = (work / "server.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            "--port",
            str(PORT),
            "--ice-host",
            ADDRESS,
            "--db",
            ":memory:",
            "--auth-token",
            TOKEN,
        ],
        cwd=REPO,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 900
        while True:
            try:
                if call("GET", "/ready", auth=False).get("ready"):
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not become ready: " + (work / "server.log").read_text()[-3000:])
            time.sleep(1)
        room = call("POST", "/rooms", b"{}")["room"]
        with wave.open(wav) as w:
            audio_s = w.getnframes() / w.getframerate()
        pipeline = (
            f"filesrc location={wav} ! wavparse ! audioconvert ! audioresample ! "
            "audio/x-raw,rate=48000,channels=1 ! identity sync=true ! opusenc ! rtpopuspay pt=100 ssrc=1 ! "
            "queue ! application/x-rtp,media=audio,encoding-name=OPUS,payload=100"
        )
        env = {**os.environ, "LD_LIBRARY_PATH": str(stub)}
        client = subprocess.Popen(
            ["whip-client", "-u", f"{BASE}/whip/{room}", "-t", TOKEN, "-A", pipeline, "-o"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        time.sleep(audio_s + 4.0)  # the file plays at real time; then the last words reach the server
        client.send_signal(signal.SIGINT)  # as Ctrl-C: the client sends DELETE and exits
        output, _ = client.communicate(timeout=30)
        ended = False
        for _ in range(300):
            if call("GET", "/ready", auth=False)["sessions"] == 0:
                ended = True
                break
            time.sleep(0.1)
        transcript = call("GET", f"/rooms/{room}/transcript.json")
        server_log = (work / "server.log").read_text()
        # The access log writes the room as its mark (app.ops.access_log), never its id.
        deleted = (
            ended
            and re.search(r'"DELETE /whip/~[0-9a-f]+/', server_log) is not None
            and "ended by its client" in server_log
        )
        print(
            json.dumps(
                {
                    "whip_status": 201 if "Resource URL:" in output else 0,
                    "deleted": deleted,
                    "text": " ".join(s["text"] for s in transcript["sentences"]),
                    "client_output": output[-1500:],
                }
            )
        )
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
