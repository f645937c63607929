"""Uploads beside live captions: does a long file sent to ``/v1/audio/transcriptions`` slow live sessions down?

    python -m bench.upload [--sessions 1] [--rounds 2] [--upload-minutes 10] [--json out.json]
    python -m bench.upload --file-wer [--cuts-ms 25000 14000] [--upload-minutes 10]

The real server (``bench/serve.py``, the embedded model) and N live WebRTC clients (``bench/lib/clips.py``: read
English utterances with 2.5 s pauses, ~40 s each, streamed at real time). Four modes, in alternating order each
round; ``live+upload-eager`` on a server of its own, started with files eager (``bench.serve --file-floor-s 0
--file-max-segment-ms`` the live cap), the others on a server as shipped:

- ``live``: the N live sessions alone;
- ``live+upload``: the same N sessions while a long recording (``bench.cues.build_recording``: the shared English
  clips with random pauses) is being transcribed through the OpenAI-compatible API (``stream=true``,
  ``diarized_json``, so each locked segment arrives with its times), with the shipped policy: a file segment waits
  while live partials run, up to ``DecodeScheduler.background_floor_s``, and file segments are at most
  ``EngineConfig.file_endpoint.max_segment_ms`` long;
- ``live+upload-eager``: the same with file segments waiting only for live finals (floor 0) and cut as live
  sentences are (at most 25 s): how files first decoded;
- ``upload``: the upload alone for as long as a live run lasts.

Printed per mode: the live sessions' first-partial and lock latency (after the end of each utterance), display lag,
WER (``bench/lib/metrics.py``), and the upload's progress: seconds of the recording locked per wall second while the
live clients streamed (``x real time``). The upload is cancelled (the client hangs up) when the live run ends.

``--file-wer``: no server; the whole recording through ``app.compat.file_jobs.transcribe_file`` ``--rounds`` times on
an in-process engine per longest file segment in ``--cuts-ms``, scored against the clips' reference transcripts: what
cutting files shorter costs in accuracy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import wave
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench.lib.clips import CACHE_DIR, session_clip
from bench.lib.harness import bench_server, pct, run_clients
from bench.lib.metrics import merge, print_markdown_table, session_metrics
from bench.lib.recording import build_recording
from engine.config import ENDPOINT_PRESETS, EngineConfig

MODES = ("live", "live+upload", "live+upload-eager", "upload")
# The bench servers (``bench.serve`` flags): files as shipped, and files eager: a file segment waits only for live
# finals and is cut as live sentences are (how files first decoded).
SERVERS = {
    "shipped": [],
    "eager": ["--file-floor-s", "0", "--file-max-segment-ms", str(EngineConfig().endpoint.max_segment_ms)],
}


def server_of(mode: str) -> str:
    """The bench server ``mode`` runs on (a name of ``SERVERS``)."""
    return "eager" if mode.endswith("-eager") else "shipped"


def upload_file(minutes: float) -> Path:
    """The recording as a 16 kHz WAV in the bench cache (built once)."""
    path = CACHE_DIR / f"upload-{minutes:g}min.wav"
    if not path.exists():
        audio, _pieces = build_recording(minutes)
        path.parent.mkdir(parents=True, exist_ok=True)
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


class Upload:
    """One streamed transcription request: the locked segments' end times as they arrive (wall clock)."""

    def __init__(self) -> None:
        self.ends: list[tuple[float, float]] = []  # (monotonic time received, segment end in s of the file)
        self.error = ""

    def done_s(self, since: float, until: float) -> float:
        """Seconds of the file locked between two moments (monotonic)."""
        before = max((e for t, e in self.ends if t < since), default=0.0)
        upto = max((e for t, e in self.ends if t <= until), default=0.0)
        return max(0.0, upto - before)

    async def run(self, base_url: str, path: Path) -> None:
        form = aiohttp.FormData()
        form.add_field("model", "whisper-1")
        form.add_field("response_format", "diarized_json")
        form.add_field("stream", "true")
        form.add_field("file", await asyncio.to_thread(path.read_bytes), filename=path.name, content_type="audio/wav")
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"{base_url}/v1/audio/transcriptions", data=form) as r,
            ):
                if r.status != 200:
                    self.error = f"{r.status} {await r.text()}"
                    return
                async for raw in r.content:
                    line = raw.decode().strip()
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    if event.get("type") == "transcript.text.segment":
                        self.ends.append((time.monotonic(), float(event["end"])))
        except (aiohttp.ClientError, asyncio.CancelledError) as exc:
            if not isinstance(exc, asyncio.CancelledError):
                self.error = str(exc)
            raise


async def step(base_url: str, mode: str, n: int, args: argparse.Namespace, upload_path: Path) -> dict[str, Any]:
    upload = Upload()
    task = asyncio.create_task(upload.run(base_url, upload_path)) if "upload" in mode else None
    row: dict[str, Any] = {"mode": mode, "sessions": n if "live" in mode else 0}
    try:
        if "live" in mode:
            if task is not None:
                await asyncio.sleep(args.head_start_s)  # the upload is decoding when the live sessions begin
            clips = [session_clip(i, args.seconds, args.pause_s) for i in range(n)]
            run = await run_clients(base_url, [c.ogg for c in clips])
            endpoint = ENDPOINT_PRESETS[args.preset]
            m = merge([session_metrics(c, clip, endpoint) for c, clip in zip(run.clients, clips, strict=True)])
            since, until = run.all_live_s, run.first_done_s
            row.update(
                {
                    "sentences": m.sentences,
                    "lost": m.lost,
                    "first_partial_s_p50": pct(m.first_partial_s, 50),
                    "first_partial_s_p95": pct(m.first_partial_s, 95),
                    "lock_s_p50": pct(m.lock_s, 50),
                    "lock_s_p95": pct(m.lock_s, 95),
                    "lag_s_p95": pct(m.lag_s, 95),
                    "wer": m.errors / m.words if m.words else float("nan"),
                    "failures": m.failures[:3],
                }
            )
        else:
            await asyncio.sleep(args.head_start_s)
            since = time.monotonic()
            await asyncio.sleep(args.seconds)
            until = time.monotonic()
        if task is not None:
            row["upload_x_realtime"] = upload.done_s(since, until) / max(1e-9, until - since)
            row["upload_error"] = upload.error
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await task
    return row


COLUMNS = [
    ("mode", "mode", "{}"),
    ("sessions", "N", "{:d}"),
    ("lost", "lost", "{:d}"),
    ("first_partial_s_p50", "1st partial p50", "{:.2f}"),
    ("first_partial_s_p95", "p95", "{:.2f}"),
    ("lock_s_p50", "lock p50", "{:.2f}"),
    ("lock_s_p95", "p95", "{:.2f}"),
    ("lag_s_p95", "lag p95", "{:.2f}"),
    ("wer", "WER", "{:.1%}"),
    ("upload_x_realtime", "upload x real time", "{:.2f}"),
]


async def file_wer(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from app.compat.file_jobs import open_file, transcribe_file
    from bench.lib.recording import reference_words
    from engine import SessionOptions
    from engine.stream.engine import CaptionEngine
    from speechdata.wer import word_errors

    path = upload_file(args.upload_minutes)
    _audio, pieces = build_recording(args.upload_minutes)
    reference = " ".join(reference_words(pieces)[0])
    rows: list[dict[str, Any]] = []
    for cut in args.cuts_ms:  # an engine per longest segment (``EngineConfig.file_endpoint``), its rounds on it
        config = EngineConfig()
        engine = CaptionEngine(replace(config, file_endpoint=replace(config.file_endpoint, max_segment_ms=cut)))
        await engine.start()
        try:
            for r in range(args.rounds):
                t0 = time.monotonic()
                result = await transcribe_file(engine, await open_file(path), SessionOptions())
                wall = time.monotonic() - t0
                errors, words = word_errors(reference, result.text)
                row = {
                    "max_segment_ms": cut,
                    "round": r,
                    "wer": errors / words,
                    "sentences": len(result.sentences),
                    "x_realtime": result.duration_s / wall,
                }
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
        finally:
            await engine.close()
    print(f"\n{path.name}: the whole recording as one upload\n")
    print_markdown_table(
        [
            ("max_segment_ms", "longest segment ms", "{:d}"),
            ("round", "round", "{:d}"),
            ("sentences", "sentences", "{:d}"),
            ("wer", "WER", "{:.2%}"),
            ("x_realtime", "x real time", "{:.1f}"),
        ],
        rows,
    )
    return 0


async def main(args: argparse.Namespace) -> int:
    if args.file_wer:
        return await file_wer(args)
    upload_path = upload_file(args.upload_minutes)
    for i in range(max(args.sessions)):
        session_clip(i, args.seconds, args.pause_s)
    rows: list[dict[str, Any]] = []
    for name, flags in SERVERS.items():
        modes = [m for m in MODES if server_of(m) == name]
        async with bench_server(
            ["--recognizer", "vllm", "--preset", args.preset, *flags], CACHE_DIR / f"upload-server-{name}.log"
        ) as server:
            print(f"server ready ({name}): {server.info}", file=sys.stderr)
            await run_clients(server.base_url, [session_clip(0, 10.0, args.pause_s).ogg])  # warm-up, not measured
            for r in range(args.rounds):
                for n in args.sessions:
                    for mode in modes if r % 2 == 0 else list(reversed(modes)):
                        if mode == "upload" and n != args.sessions[0]:
                            continue  # the upload alone does not depend on N
                        await asyncio.sleep(args.settle_s)
                        row = await step(server.base_url, mode, n, args, upload_path)
                        row["round"] = r
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr)
    print(f"\nupload: {upload_path.name}; live sessions {args.seconds:g} s each, {args.rounds} rounds\n")
    print_markdown_table(COLUMNS, [{k: r.get(k, float("nan")) for k, _h, _f in COLUMNS} for r in rows])
    if args.json:
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(rows, indent=1), encoding="utf-8")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.upload", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sessions", type=int, nargs="+", default=[1])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--upload-minutes", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=40.0, help="audio per live session")
    p.add_argument("--pause-s", type=float, default=2.5)
    p.add_argument("--preset", choices=sorted(ENDPOINT_PRESETS), default="balanced")
    p.add_argument("--head-start-s", type=float, default=5.0, help="the upload starts this long before the live run")
    p.add_argument("--settle-s", type=float, default=3.0)
    p.add_argument("--json", default=None)
    p.add_argument("--file-wer", action="store_true", help="score whole-file transcripts by longest segment instead")
    p.add_argument("--cuts-ms", type=int, nargs="+", default=[25_000, 14_000])
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
