"""WHIP ingest (RFC 9725).

The fast test drives the HTTP semantics with an aiortc publisher and the named fake recognizer. The heavy test
publishes real speech with GStreamer's ``whip-client`` (Debian ``simple-whip-client``) into a real server, both in a
private network namespace (see ``tests/support/whip_scenario.py``), and checks the room's transcript by word error rate.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from app.rooms.keys import ROOMS
from app.webrtc.keys import PEERS
from engine import CaptionEngine
from speechdata.corpus import audio, pad, reference, wav_path
from speechdata.wer import wer
from tests.support.paths import SUPPORT
from tests.support.rtc_client import ArrayAudioTrack
from tests.support.servers import running_server

CLIP = "whisper_jfk"
SHORT = "ls_1988-24833-0000"  # 3.3 s: the fast test streams it at real time
SDP = {"Content-Type": "application/sdp"}


async def offer_sdp(pc: RTCPeerConnection, with_audio: bool = True) -> str:
    if with_audio:
        pc.addTrack(ArrayAudioTrack(pad(audio(SHORT), 0.3, 2.5)))
    else:
        pc.createDataChannel("captions")
    await pc.setLocalDescription(await pc.createOffer())
    return str(pc.localDescription.sdp)


async def test_whip_publish_trickle_delete_and_errors(fake_engine: CaptionEngine) -> None:
    async with running_server(fake_engine, auth_token="tok") as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        endpoint = f"{url}/whip/{room.id}"
        auth = {"Authorization": "Bearer tok"}
        async with http.options(endpoint) as r:
            assert r.status == 204 and r.headers["Accept-Post"] == "application/sdp"
            assert "POST" in r.headers["Access-Control-Allow-Methods"]

        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        sdp = await offer_sdp(pc)
        async with http.post(endpoint, data=sdp, headers=SDP) as r:
            assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        async with http.post(endpoint, data=sdp, headers={**auth, "Content-Type": "application/json"}) as r:
            assert r.status == 415
        async with http.post(f"{url}/whip/nosuchroom", data=sdp, headers={**auth, **SDP}) as r:
            assert r.status == 404
        async with http.post(endpoint, data="v=0\r\nnonsense", headers={**auth, **SDP}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "bad_sdp"
        async with http.post(endpoint, data="a" * 70_000, headers={**auth, **SDP}) as r:
            assert r.status == 413
        no_audio = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        async with http.post(endpoint, data=await offer_sdp(no_audio, with_audio=False), headers={**auth, **SDP}) as r:
            assert r.status == 400 and "no audio" in (await r.json())["error"]["message"]
        await no_audio.close()
        assert not app[PEERS], "refused offers leave no session behind"

        async with http.post(endpoint, data=sdp, headers={**auth, **SDP}) as r:
            assert r.status == 201 and r.headers["Content-Type"] == "application/sdp"
            location = r.headers["Location"]
            assert re.fullmatch(rf"/whip/{room.id}/[\w-]+", location) and r.headers["ETag"]
            answer = await r.text()
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        resource = url + location
        ufrag = re.search(r"a=ice-ufrag:(\S+)", sdp)
        assert ufrag is not None
        fragment = (
            f"a=ice-ufrag:{ufrag.group(1)}\r\na=ice-pwd:x\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\n"
            "a=candidate:1 1 udp 2113937151 127.0.0.1 9 typ host\r\na=end-of-candidates\r\n"
        )
        trickle = {**auth, "Content-Type": "application/trickle-ice-sdpfrag"}
        async with http.patch(resource, data=fragment, headers=trickle) as r:
            assert r.status == 204
        async with http.patch(resource, data=fragment.replace(ufrag.group(1), "restart"), headers=trickle) as r:
            assert r.status == 422  # ICE restarts are not supported
        async with http.patch(resource, data=fragment, headers={**auth, "Content-Type": "text/plain"}) as r:
            assert r.status == 415

        # The captions reach the room as a browser publisher's do; DELETE ends the session and locks the sentence.
        for _ in range(300):
            if app[PEERS] and next(iter(app[PEERS].values())).ingest.audio_s > 2.5:  # mid-sentence: DELETE locks it
                break
            await asyncio.sleep(0.1)
        async with http.delete(resource) as r:
            assert r.status == 401
        async with http.delete(resource, headers=auth) as r:
            assert r.status == 200
        for _ in range(100):
            if not app[PEERS]:
                break
            await asyncio.sleep(0.1)
        assert not app[PEERS]
        async with http.get(f"{url}/rooms/{room.id}/transcript.txt") as r:
            assert "audio of" in await r.text()
        async with http.delete(resource, headers=auth) as r:
            assert r.status == 404
        await pc.close()

    async with running_server(fake_engine, max_sessions=0) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        async with http.post(f"{url}/whip/{room.id}", data=sdp, headers=SDP) as r:
            assert r.status == 503 and r.headers["Retry-After"]


def _namespace_ok() -> str:
    """Why the WHIP client test cannot run here, or "" if it can."""
    for tool in ("whip-client", "unshare", "ip", "cc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup.sh --tests installs it)"
    probe = subprocess.run(
        ["unshare", "-rn", "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"], capture_output=True
    )
    return "" if probe.returncode == 0 else f"no private network namespace here: {probe.stderr.decode().strip()}"


@pytest.mark.heavy
async def test_gstreamer_whip_client_publishes_real_speech(tmp_path: Path) -> None:
    why = _namespace_ok()
    if why:
        pytest.skip(why)
    proc = await asyncio.create_subprocess_exec(
        "unshare",
        "-rn",
        sys.executable,
        str(SUPPORT / "whip_scenario.py"),
        str(wav_path(CLIP)),
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 900)
    assert proc.returncode == 0, err.decode()[-4000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["whip_status"] == 201
    assert result["deleted"], "whip-client sent DELETE when it stopped, and the session ended"
    assert wer(reference(CLIP), result["text"]) <= 0.1, result


async def test_a_broadcasters_video_is_declined(fake_engine: CaptionEngine) -> None:
    """OBS publishes video with the audio: the answer turns video off, so none is sent or decoded."""
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver("video", direction="sendonly")
        async with http.post(f"{url}/whip/{room.id}", data=await offer_sdp(pc), headers=SDP) as r:
            assert r.status == 201
            answer = await r.text()
            location = r.headers["Location"]
        video = answer[answer.index("m=video") :]
        assert "a=inactive" in video.split("m=audio")[0], answer
        async with http.delete(url + location) as r:
            assert r.status == 200
        await pc.close()
