"""Where a live speaker's CPU goes: the real server with N WebRTC sessions, each process sampled by py-spy.

    python -m bench.profile [--sessions 1 3 5] [--clips read|hard] [--seconds 40] [--pause-s 1.2] [--packet-ms 20]
                            [--set partial.interval_s=0.6] [--json out.json]

The bench server (``bench/serve.py``, shipped defaults) runs the engine core (vLLM's ``EngineCore`` child: the
recognizer) and the front process (WebRTC, Opus, VAD, speaker embeddings, word alignment, sessions, vLLM's client
side). For each N, N clients stream read speech at real time (``bench/lib/clips.py``; ``--pause-s`` between sentences,
in ``--packet-ms`` Opus packets, as ``bench.sessions`` sends them) while:

- each process's CPU time is read from ``/proc`` (psutil): the measured totals;
- py-spy (``pip install py-spy``; without it only the totals and counters are printed) samples every thread of both
  processes (``--rate`` Hz, idle threads left out), and each sample is put in the first category whose frames it
  holds (``CORE_PARTS``, ``FRONT_PARTS``). A process's CPU is split in proportion to its samples: the engine core's
  OpenMP helper threads have no Python frames and are not sampled, so its split is that of its main thread, and what
  the process spent beyond its sampled threads is shown as ``threads beyond the model thread`` (the second compute
  thread, and its spinning while the first runs Python);
- the engine's own counters give exact figures where they exist: CPU of the speaker-embedding and aligner threads
  (their ``thread_time``), and the recognizer time charged to partials and to finals (``engine.stream.load``).

Each figure is printed in CPU seconds per second of audio per session (a share of one core per speaker).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.lib.clips import CACHE_DIR, CLIP_SETS, session_clip
from bench.lib.harness import bench_server, get_json, run_clients

# (part, any of these frame substrings), first match wins; frames are "function (file:line)".
CORE_PARTS = (
    ("encoder (audio in)", ("_execute_mm_encoder", "get_encoder_outputs", "embed_multimodal")),
    ("decoder (a token a step)", ("WhisperDecoder.forward", "_model_forward")),
    ("logits and sampling", ("compute_logits", "sample_tokens", "Sampler.")),
    ("vLLM scheduling and step Python", ("EngineCore.step", "Scheduler.", "execute_model")),
    ("vLLM busy loop and I/O", ("run_busy_loop", "process_input_sockets", "process_output_sockets")),
)
FRONT_PARTS = (
    ("speaker embeddings", ("engine/speakers/",)),
    ("word alignment", ("engine/asr/align",)),
    ("VAD", ("engine/stream/vad_batch", "engine/audio/vad")),
    ("Opus, RTP, ICE (WebRTC)", ("app/webrtc/", "aiortc/", "aioice/", "av/")),
    ("vLLM client (audio features, outputs)", ("vllm/",)),
    ("sessions, scheduling", ("engine/stream/", "engine/asr/")),
    ("rooms, store", ("app/rooms/",)),
    ("event loop, HTTP, other", ("",)),
)


def classify(path: Path, parts: tuple[tuple[str, tuple[str, ...]], ...], main_only: bool) -> dict[str, int]:
    """Samples of a py-spy ``--format raw`` file by part. ``main_only``: the process's main thread alone."""
    counts: collections.Counter[str] = collections.Counter()
    if not path.exists():
        return {}
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or (main_only and "MainThread" not in stack.split(";", 1)[0]):
            continue
        for part, keys in parts:
            if any(k in stack for k in keys):
                counts[part] += int(n)
                break
    return dict(counts)


def spy(pid: int, seconds: float, out: Path, rate: int) -> subprocess.Popen[bytes] | None:
    """py-spy recording ``pid`` for ``seconds`` into ``out`` (raw collapsed stacks), or None without py-spy."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        return None
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--nonblocking",
            "--threads",
            "--duration",
            str(int(seconds)),
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def split(total_s: float, samples: dict[str, int]) -> dict[str, float]:
    n = sum(samples.values())
    return {part: total_s * k / n for part, k in samples.items()} if n else {}


async def step(server: Any, n: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    front = server.ps
    core = next((c for c in front.children(recursive=True) if "EngineCore" in c.name()), None)
    if core is None:
        raise SystemExit("no VLLM::EngineCore child: the bench server did not start vLLM")
    clips = [session_clip(i, args.seconds, args.pause_s, args.packet_ms, False, args.clips) for i in range(n)]
    async with aiohttp.ClientSession() as http:
        before = (await get_json(http, f"{server.base_url}/bench/stats"))["engine"]
        c0 = {"front": cpu_s(front), "core": cpu_s(core)}
        spies = [
            spy(p.pid, args.seconds, work / f"{name}-n{n}.txt", args.rate)
            for p, name in ((front, "front"), (core, "core"))
        ]
        t0 = time.monotonic()
        run = await run_clients(server.base_url, [c.ogg for c in clips], connect_concurrency=max(8, n))
        wall = time.monotonic() - t0
        c1 = {"front": cpu_s(front), "core": cpu_s(core)}
        after = (await get_json(http, f"{server.base_url}/bench/stats"))["engine"]
    for s in spies:
        if s is not None:
            s.wait()
    admitted = sum(1 for c in run.clients if c.refused is None)
    audio_s = admitted * max(c.duration_s for c in clips)
    per = 1.0 / audio_s if audio_s else float("nan")  # CPU s per audio s per session
    core_total, front_total = c1["core"] - c0["core"], c1["front"] - c0["front"]
    core_main = classify(work / f"core-n{n}.txt", CORE_PARTS, main_only=True)
    core_rate_s = sum(core_main.values()) / args.rate  # seconds the model thread was sampled busy
    core_split = {part: k / args.rate for part, k in core_main.items()}
    if core_split:
        core_split["threads beyond the model thread"] = max(0.0, core_total - core_rate_s)
    front_split = split(front_total, classify(work / f"front-n{n}.txt", FRONT_PARTS, main_only=False))

    def delta(key: str) -> float:
        return float(after.get(key, 0.0)) - float(before.get(key, 0.0))

    return {
        "sessions": n,
        "admitted": admitted,
        "wall_s": round(wall, 1),
        "audio_s_per_session": max(c.duration_s for c in clips),
        "cpu_per_audio_s": (core_total + front_total) * per,
        "core_per_audio_s": core_total * per,
        "front_per_audio_s": front_total * per,
        "core_parts": {k: v * per for k, v in sorted(core_split.items(), key=lambda kv: -kv[1])},
        "front_parts": {k: v * per for k, v in sorted(front_split.items(), key=lambda kv: -kv[1])},
        "speaker_thread_per_audio_s": delta("speaker_cpu_s") * per,
        "align_thread_per_audio_s": delta("align_cpu_s") * per,
        "vad_busy_per_audio_s": delta("vad_busy_s") * per,
    }


def print_step(r: dict[str, Any]) -> None:
    print(f"\n### N = {r['sessions']} ({r['admitted']} admitted), {r['audio_s_per_session']:.0f} s of audio each\n")
    print(
        f"all: **{r['cpu_per_audio_s']:.3f}** CPU-s per audio-s per session (engine core "
        f"{r['core_per_audio_s']:.3f}, front process {r['front_per_audio_s']:.3f})\n"
    )
    print("| process | part | CPU-s per audio-s per session |\n|---|---|---|")
    for name, parts in (("engine core", r["core_parts"]), ("front", r["front_parts"])):
        for part, value in parts.items():
            print(f"| {name} | {part} | {value:.3f} |")
    print(
        f"\ncounters: speaker-embedding thread {r['speaker_thread_per_audio_s']:.3f}, aligner thread "
        f"{r['align_thread_per_audio_s']:.3f}, VAD batches (wall) {r['vad_busy_per_audio_s']:.3f}"
    )


async def main(args: argparse.Namespace) -> int:
    for i in range(max(args.sessions)):
        session_clip(i, args.seconds, args.pause_s, args.packet_ms, False, args.clips)
    work = Path(tempfile.mkdtemp(prefix="live-captions-profile-"))
    rows = []
    server_args = ["--recognizer", "vllm", *(a for setting in args.settings for a in ("--set", setting))]
    async with bench_server(server_args, CACHE_DIR / "profile-server.log") as server:
        await run_clients(
            server.base_url, [session_clip(0, 10.0, args.pause_s, args.packet_ms).ogg]
        )  # warm-up, not measured
        for n in args.sessions:
            await asyncio.sleep(3.0)  # the engine core busy-waits ~1 s after activity
            row = await step(server, n, args, work)
            rows.append(row)
            print_step(row)
    print(f"\npy-spy stacks in {work}")
    if args.json:
        report = json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "clips": args.clips,
                "pause_s": args.pause_s,
                "packet_ms": args.packet_ms,
                "settings": args.settings,
                "rows": rows,
            },
            indent=2,
        )
        await asyncio.to_thread(Path(args.json).write_text, report, "utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.profile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 3, 5])
    p.add_argument("--clips", choices=CLIP_SETS, default="read")
    p.add_argument("--seconds", type=float, default=40.0, help="speech + pauses per session")
    p.add_argument("--pause-s", type=float, default=1.2, help="silence between sentences (s)")
    p.add_argument("--packet-ms", type=int, default=20, choices=(20, 60), help="audio per Opus packet (ms)")
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="bench server --set: an engine setting with no flag of its own (repeatable)",
    )
    p.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    p.add_argument("--json", default=None)
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
