"""Streaming-API bench: WebSocket sessions of Deepgram's ``/v1/listen`` and OpenAI Realtime's ``/v1/realtime``
next to WebRTC sessions, all on one server and one engine, all streaming real read speech at real time.

    python -m bench.streaming_apis [--deepgram 8] [--realtime 8] [--webrtc 2] [--model whisper-tiny.en]
                                   [--seconds 30] [--json out.json]

The server runs as a subprocess (``bench/serve.py``). Every session streams a different session clip
(``bench/lib/clips.py``: read English utterances separated by pauses). The WebSocket clients are plain aiohttp
clients speaking each protocol as its SDKs do (Deepgram: 100 ms of 16 kHz PCM per message, ``interim_results``;
OpenAI: 100 ms of 24 kHz PCM per ``input_audio_buffer.append``, server VAD), then end the stream (``CloseStream``;
closing the socket a few seconds after the audio). WebRTC sessions are ``bench/lib/client.py``'s aiortc peers.

Per kind of session: first text (from a sentence's first speech leaving the client to the first message showing
text for it: an interim result, a delta, a partial), lock (from its last speech leaving the client to the final
result, ``completed`` or locked sentence covering it), lost sentences (no final covers them) and WER of the finals.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench.lib.clips import Utterance, build_session, session_clip
from bench.lib.harness import bench_server, pct, run_clients
from bench.lib.metrics import merge, session_metrics
from engine.config import ENDPOINT_PRESETS, EndpointPreset
from speechdata.wer import word_errors

_SLOP_S = 0.3  # VAD edges vs reference edges


@dataclass
class Span:
    """Text the client was shown: its audio span (s) and when it arrived (monotonic)."""

    start_s: float
    end_s: float
    at: float
    text: str
    final: bool


@dataclass
class WsSession:
    kind: str
    audio: np.ndarray
    utterances: tuple[Utterance, ...]
    spans: list[Span] = field(default_factory=list)
    t0: float = 0.0  # monotonic time the first audio was sent
    error: str = ""


def pcm(audio: np.ndarray, rate: int) -> bytes:
    if rate != 16000:
        audio = np.interp(np.arange(0, len(audio), 16000 / rate), np.arange(len(audio)), audio)
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


async def paced_send(s: WsSession, data: bytes, rate: int, send: Any) -> None:
    step = rate * 2 // 10  # 100 ms
    loop = asyncio.get_running_loop()
    s.t0 = loop.time()
    for i in range(0, len(data), step):
        await send(data[i : i + step])
        await asyncio.sleep(max(0.0, s.t0 + (i + step) / (2 * rate) - loop.time()))


async def deepgram_session(http: aiohttp.ClientSession, base: str, s: WsSession) -> None:
    url = "ws" + base[4:] + "/v1/listen?encoding=linear16&sample_rate=16000&interim_results=true&punctuate=true"
    async with http.ws_connect(url) as ws:

        async def read() -> None:
            async for msg in ws:
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    break
                m = json.loads(msg.data)
                alt = m.get("channel", {}).get("alternatives", [{}])[0]
                if m["type"] == "Results" and alt.get("transcript"):
                    words = alt["words"]
                    s.spans.append(
                        Span(words[0]["start"], words[-1]["end"], time.monotonic(), alt["transcript"], m["is_final"])
                    )

        reader = asyncio.create_task(read())
        await paced_send(s, pcm(s.audio, 16000), 16000, ws.send_bytes)
        await ws.send_str('{"type": "CloseStream"}')
        await asyncio.wait_for(reader, 120)


async def realtime_session(http: aiohttp.ClientSession, base: str, s: WsSession) -> None:
    async with http.ws_connect("ws" + base[4:] + "/v1/realtime?intent=transcription") as ws:
        await ws.send_str(
            json.dumps(
                {
                    "type": "session.update",
                    "session": {
                        "type": "transcription",
                        "audio": {
                            "input": {
                                "format": {"type": "audio/pcm", "rate": 24000},
                                "turn_detection": {"type": "server_vad"},
                                "transcription": {"model": "whisper-1", "language": "en"},
                            }
                        },
                    },
                }
            )
        )
        items: dict[str, list[float]] = {}

        async def read() -> None:
            async for msg in ws:
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    break
                e = json.loads(msg.data)
                kind, item = e["type"], e.get("item_id", "")
                if kind == "input_audio_buffer.speech_started":
                    items[item] = [e["audio_start_ms"] / 1000, 1e9]
                elif kind == "input_audio_buffer.speech_stopped":
                    items.setdefault(item, [0.0, 0.0])[1] = e["audio_end_ms"] / 1000
                elif kind.startswith("conversation.item.input_audio_transcription."):
                    start, end = items.get(item, [0.0, 1e9])
                    final = kind.endswith("completed")
                    text = e.get("transcript" if final else "delta") or ""
                    if text:
                        s.spans.append(Span(start, end, time.monotonic(), text, final))

        reader = asyncio.create_task(read())

        async def append(chunk: bytes) -> None:
            await ws.send_str(
                json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
            )

        await paced_send(s, pcm(s.audio, 24000), 24000, append)
        await asyncio.sleep(6.0)  # the last sentence's completion
        await ws.close()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


def ws_metrics(sessions: list[WsSession]) -> dict[str, Any]:
    first, lock, errors, words, lost, total = [], [], 0, 0, 0, 0
    for s in sessions:
        finals = [sp for sp in s.spans if sp.final]
        e, w = word_errors(" ".join(u.text for u in s.utterances), " ".join(sp.text for sp in finals))
        errors, words = errors + e, words + w
        for u in s.utterances:
            total += 1
            covering = [
                sp for sp in finals if sp.start_s < u.speech_end_s + _SLOP_S and sp.end_s > u.speech_start_s - _SLOP_S
            ]
            if not covering:
                lost += 1
                continue
            lock.append(max(sp.at for sp in covering) - (s.t0 + u.speech_end_s))
            shown = [
                sp.at for sp in s.spans if sp.at > s.t0 + u.speech_start_s and sp.end_s > u.speech_start_s - _SLOP_S
            ]
            if shown:
                first.append(min(shown) - (s.t0 + u.speech_start_s))
    return {
        "sessions": len(sessions),
        "sentences": total,
        "lost": lost,
        "errors": sum(1 for s in sessions if s.error),
        "first_text_s_p50": pct(first, 50),
        "first_text_s_p95": pct(first, 95),
        "lock_s_p50": pct(lock, 50),
        "lock_s_p95": pct(lock, 95),
        "wer": errors / words if words else float("nan"),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    serve = [
        "--recognizer",
        args.recognizer,
        "--max-sessions",
        "64",
        *(["--model", args.model] if args.model else []),
        *(["--no-speakers"] if args.no_speakers else []),
    ]
    kinds = ["deepgram"] * args.deepgram + ["realtime"] * args.realtime
    ws_sessions = []
    for i, kind in enumerate(kinds):
        audio, utterances = build_session(args.webrtc + i, args.seconds, args.pause_s)
        ws_sessions.append(WsSession(kind, audio, utterances))
    clips = [session_clip(i, args.seconds, args.pause_s) for i in range(args.webrtc)]
    async with bench_server(serve, Path(args.log)) as server, aiohttp.ClientSession() as http:

        async def one(s: WsSession) -> None:
            try:
                await (deepgram_session if s.kind == "deepgram" else realtime_session)(http, server.base_url, s)
            except Exception as exc:
                s.error = repr(exc)

        webrtc = asyncio.create_task(run_clients(server.base_url, [c.ogg for c in clips]))
        await asyncio.gather(*(one(s) for s in ws_sessions))
        rtc_run = await webrtc
    rows = {kind: ws_metrics([s for s in ws_sessions if s.kind == kind]) for kind in ("deepgram", "realtime")}
    m = merge(
        [
            session_metrics(c, clip, ENDPOINT_PRESETS[EndpointPreset.BALANCED])
            for c, clip in zip(rtc_run.clients, clips, strict=True)
        ]
    )
    rows["webrtc"] = {
        "sessions": len(clips),
        "sentences": m.sentences,
        "lost": m.lost,
        "errors": sum(1 for c in rtc_run.clients if c.error),
        "first_text_s_p50": pct(m.first_partial_s, 50),
        "first_text_s_p95": pct(m.first_partial_s, 95),
        "lock_s_p50": pct(m.lock_s, 50),
        "lock_s_p95": pct(m.lock_s, 95),
        "wer": m.errors / m.words if m.words else float("nan"),
    }
    for s in ws_sessions:
        if s.error:
            print(f"{s.kind}: {s.error}", file=sys.stderr)
    return rows


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    print("| kind | sessions | sentences | lost | failed | first text p50 / p95 s | lock p50 / p95 s | WER |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, r in rows.items():
        print(
            f"| {kind} | {r['sessions']} | {r['sentences']} | {r['lost']} | {r['errors']} | "
            f"{r['first_text_s_p50']:.2f} / {r['first_text_s_p95']:.2f} | {r['lock_s_p50']:.2f} / "
            f"{r['lock_s_p95']:.2f} | {r['wer']:.1%} |"
        )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deepgram", type=int, default=8, help="Deepgram /v1/listen sessions")
    p.add_argument("--realtime", type=int, default=8, help="OpenAI /v1/realtime sessions")
    p.add_argument("--webrtc", type=int, default=2, help="WebRTC sessions")
    p.add_argument(
        "--recognizer",
        choices=["vllm", "fake"],
        default="vllm",
        help="fake: the named fake recognizer (checks the bench itself, measures no model)",
    )
    p.add_argument("--model", default=None, help="the server's --model (default: the embedded whisper-base)")
    p.add_argument("--no-speakers", action="store_true")
    p.add_argument("--seconds", type=float, default=30.0, help="speech and pauses per session")
    p.add_argument("--pause-s", type=float, default=2.5)
    p.add_argument("--log", default="bench/results/streaming_apis-server.log")
    p.add_argument("--json", default=None, help="also write the rows here")
    return p


def main() -> int:
    args = build_parser().parse_args()
    rows = asyncio.run(run(args))
    print_table(rows)
    print(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
