"""Meeting bench: a real four-person meeting captioned through a phone per person, against the kiosk's one microphone,
and eight microphones in one room with two talking. The real server (a fresh one: the first sentence counts) and
engine, real WebRTC clients on loopback sending 20 ms Opus packets at real time.

    python -m bench.meeting [--leak-db 12] [--json out.json] [--skip phones kiosk eight]

**Phones**: the AMI meeting in the shared speech set (``ami_seriously_mixture``, 60 s, four speakers) through its four
close-talk channels, each published from its own client into one room under the speaker's name, each "phone" also
hearing the other three ``--leak-db`` down and 2-6 ms late (a phone a seat away). The clients start their audio at
one moment (the room hears one meeting). Scored (``bench.lib.meeting_scores``) from the room's transcript:
cpWER by microphone; words captioned from the wrong microphone and words captioned twice, as shares of the words
said; the share of the room's words under the right person's name; each turn's lock, from the end of the turn's
speech leaving its phone to its last sentence reaching a viewer of the room (p50/p95).

**Kiosk**: the same meeting through one microphone (the mixture), in the same run: cpWER over its voice labels,
the labels found and their DER.

**Eight**: two readers (``bench.lib.clips`` read sessions) at their own microphones hearing each other 12 dB down,
and six silent microphones that hear both from 12-20 dB down. Admitted or not; the server's CPU (its process tree)
with the six silent microphones alone, the two readers alone and all eight, each over its streaming window, so that
an idle microphone's cost (VAD and WebRTC) and the eight's against two-plus-six-idle are measured side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from app.config import IceConfig
from bench.lib.client import BenchClient, Refused
from bench.lib.clips import CACHE_DIR, build_session, encode_opus
from bench.lib.harness import CpuTrace, bench_server, get_json, install_ice_policy, ogg_duration_s, pct
from bench.lib.meeting_scores import HeardWord, cp_wer, duplicates, turn_ends, wrong_mic
from bench.lib.speaker_labels import Segment, score_labels
from engine import SAMPLE_RATE
from speechdata.corpus import audio, manifest, turns
from speechdata.wer import normalise

MEETING = "ami_seriously_mixture"
SPEAKERS = ("MEO015", "FEE013", "MEE014", "FEE016")
NAMES = {"MEO015": "Mateo", "FEE013": "Farah", "MEE014": "Elias", "FEE016": "Fiona"}  # the names the phones join with


def leaked(channels: list[np.ndarray], leak_db: list[list[float]], seed: int = 0) -> list[np.ndarray]:
    """Microphone i: channel i plus channel j ``leak_db[i][j]`` down and 2-6 ms late, for every j != i."""
    rng = np.random.default_rng(seed)
    n = min(c.size for c in channels)
    out = []
    for i, own in enumerate(channels):
        mic = own[:n].astype(np.float32).copy()
        for j, other in enumerate(channels):
            if j != i and np.isfinite(leak_db[i][j]):
                d = int(rng.uniform(0.002, 0.006) * SAMPLE_RATE)
                mic[d:] += 10 ** (-leak_db[i][j] / 20) * other[: n - d]
        out.append(mic)
    return out


def ogg_of(name: str, samples: np.ndarray) -> Path:
    path = CACHE_DIR / f"meeting-{name}.ogg"
    encode_opus(samples, path, frame_ms=20)
    return path


class RoomLog:
    """A viewer of one room (its event stream, as the kiosk reads it): when each room sentence id first arrived."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.arrived: dict[int, float] = {}
        self.open_lines_max = 0  # the most open lines one message carried (simultaneous talkers kept apart)

    async def run(self, http: aiohttp.ClientSession) -> None:
        async with http.get(self.url, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as r:
            async for raw in r.content:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("type") != "caption":
                    continue
                now = time.monotonic()
                for s in message.get("sentences") or []:
                    self.arrived.setdefault(int(s["id"]), now)
                self.open_lines_max = max(self.open_lines_max, len(message.get("open") or []))


async def meeting_room(
    http: aiohttp.ClientSession, base: str, mics: dict[str, tuple[Path, dict[str, Any]]]
) -> dict[str, Any]:
    """Publish each microphone (``key -> (ogg, extra offer fields)``) into one new room, all starting their audio at
    one moment; returns the clients, the room's transcript, the viewer's arrivals and the streaming window."""
    async with http.post(f"{base}/rooms", json={"title": "meeting"}) as r:
        room = (await r.json())["room"]
    log = RoomLog(f"{base}/rooms/{room}/events")
    reader = asyncio.create_task(log.run(http))
    gate = asyncio.Event()
    clients = {k: BenchClient(base, ogg, {"room": room, **fields}, gate=gate) for k, (ogg, fields) in mics.items()}
    refused: list[str] = []
    for key, client in clients.items():
        try:
            await client.connect(http)
        except Refused:
            refused.append(key)
            await client.close()
    live = {k: c for k, c in clients.items() if k not in refused}
    ready = await get_json(http, f"{base}/ready")
    await asyncio.sleep(0.5)
    gate.set()
    t0 = time.monotonic()
    duration = max(ogg_duration_s(c.ogg) for c in live.values()) if live else 0.0
    await asyncio.sleep(min(duration, 8.0))
    during = await get_json(http, f"{base}/ready")
    await asyncio.gather(*(c.play(ogg_duration_s(c.ogg)) for c in live.values()))
    t1 = time.monotonic()
    await asyncio.sleep(1.0)
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    transcript = await get_json(http, f"{base}/rooms/{room}/transcript.json")
    raw = {
        "transcript": transcript,
        "arrived": log.arrived,
        "clients": {
            k: {"session": c.session, "messages": c.messages, "media_s": c.track.media_s, "wall_s": c.track.wall_s}
            for k, c in live.items()
        },
    }
    await asyncio.to_thread(
        (CACHE_DIR / f"meeting-raw-{'-'.join(sorted(mics))[:40]}.json").write_text,
        json.dumps(raw, default=str),
        "utf-8",
    )
    return {
        "room": room,
        "clients": live,
        "refused": refused,
        "transcript": transcript,
        "log": log,
        "ready_before": ready,
        "ready_during": during,
        "t0": t0,
        "t1": t1,
    }


def session_offsets_s(run: dict[str, Any]) -> dict[str, float]:
    """Room time minus clip time (s) for each client's session: its first own sentence's start in the room against
    the same sentence on its own channel (session time = clip time: its sample 0 is its first audio)."""
    offsets: dict[str, float] = {}
    for client in run["clients"].values():
        own = [s for _t, m in client.messages if m.get("type") == "caption" for s in m.get("sentences") or []]
        room = [s for s in run["transcript"]["sentences"] if s["session"] == client.session]
        diffs = [(r["start_ms"] - o["start"]) / 1000 for o, r in zip(own, room, strict=False)]
        offsets[client.session] = float(np.median(diffs)) if diffs else 0.0
    return offsets


def heard_words(run: dict[str, Any], stream_of: Any) -> list[HeardWord]:
    """Every word of the room's transcript on the clip's clock, with its stream (``stream_of(sentence)``)."""
    offsets = session_offsets_s(run)
    words = []
    for s in run["transcript"]["sentences"]:
        shift = offsets.get(s["session"], 0.0)
        timed = s.get("words") or []
        if timed:
            words += [HeardWord(stream_of(s), w["w"], (w["start_ms"] + w["end_ms"]) / 2000 - shift) for w in timed]
        else:
            tokens = s["text"].split()
            for k, token in enumerate(tokens):
                t = (s["start_ms"] + (s["end_ms"] - s["start_ms"]) * (k + 0.5) / len(tokens)) / 1000 - shift
                words.append(HeardWord(stream_of(s), token, t))
    return words


async def phones(http: aiohttp.ClientSession, base: str, leak_db: float) -> dict[str, Any]:
    sources = [audio(f"ami_seriously_src_{s}") for s in SPEAKERS]
    gains = [[leak_db if i != j else float("inf") for j in range(4)] for i in range(4)]
    mics = leaked(sources, gains)
    oggs = {s: ogg_of(f"phone-{s}-{leak_db:g}db", m) for s, m in zip(SPEAKERS, mics, strict=True)}
    return score_phones(await meeting_room(http, base, {s: (oggs[s], {"name": NAMES[s]}) for s in SPEAKERS}))


def score_phones(run: dict[str, Any]) -> dict[str, Any]:
    reference = manifest()[MEETING]["text_by_speaker"]
    ref_turns = turns(MEETING)
    owner_of = {c.session: k for k, c in run["clients"].items()}
    sentences = run["transcript"]["sentences"]
    words = heard_words(run, lambda s: owner_of.get(s["session"], "?"))
    said = sum(len(normalise(t)) for t in reference.values())
    hyps = {k: " ".join(s["text"] for s in sentences if s["session"] == c.session) for k, c in run["clients"].items()}
    cp, assigned = cp_wer(reference, hyps)
    room_words = [(s, len(s["text"].split())) for s in sentences]
    # Under the person's name: theirs, or a further voice of their microphone ("Farah (2)").
    named = sum(
        n for s, n in room_words if str(s.get("speaker")).startswith(NAMES.get(owner_of.get(s["session"], ""), "\0"))
    )
    # Each turn's lock: its owner's last sentence that overlaps the turn, from the turn's end leaving the phone to
    # that sentence's arrival at the room's viewer.
    offsets = session_offsets_s(run)
    lags, missed = [], 0
    for speaker, start, end in turn_ends(ref_turns):
        client = run["clients"].get(speaker)
        if client is None:
            continue
        shift = offsets.get(client.session, 0.0)
        mine = [
            s
            for s in sentences
            if s["session"] == client.session
            and s["start_ms"] / 1000 - shift <= end + 0.5
            and s["end_ms"] / 1000 - shift >= start - 0.5
        ]
        if not mine:
            missed += 1
            continue
        last = max(mine, key=lambda s: s["end_ms"])
        arrived = run["log"].arrived.get(int(last["id"]))
        if arrived is not None:
            lags.append(arrived - client.sent_at(end))
    return {
        "admitted": len(run["clients"]),
        "refused": run["refused"],
        "cpwer": round(cp, 4),
        "assigned": assigned,
        "words_said": said,
        "words_captioned": len(words),
        "wrong_mic": round(wrong_mic(words, {k: k for k in SPEAKERS}, ref_turns, reference) / said, 4),
        "duplicates": round(duplicates(words) / said, 4),
        "named": round(named / max(1, sum(n for _s, n in room_words)), 4),
        "lock_after_turn_p50_s": round(pct(lags, 50), 2) if lags else None,
        "lock_after_turn_p95_s": round(pct(lags, 95), 2) if lags else None,
        "turns": len(lags),
        "turns_uncaptioned": missed,
        "open_lines_max": run["log"].open_lines_max,
        "ready_during": run["ready_during"].get("capacity"),
    }


async def kiosk(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    ogg = ogg_of("kiosk", audio(MEETING))
    run = await meeting_room(http, base, {"kiosk": (ogg, {})})
    reference = manifest()[MEETING]["text_by_speaker"]
    sentences = run["transcript"]["sentences"]
    labels = sorted({s["spk"] for s in sentences if s["spk"] is not None})
    hyps = {str(label): " ".join(s["text"] for s in sentences if s["spk"] == label) for label in labels}
    cp, _assigned = cp_wer(reference, hyps)
    offsets = session_offsets_s(run)
    segments = [
        Segment(
            s["start_ms"] / 1000 - offsets.get(s["session"], 0.0),
            s["end_ms"] / 1000 - offsets.get(s["session"], 0.0),
            0,
            0,
        )
        for s in sentences
        if s["spk"] is not None
    ]
    scores = score_labels(
        turns(MEETING),
        segments,
        [s["spk"] for s in sentences if s["spk"] is not None],
        float(manifest()[MEETING]["duration_s"]),
    )
    return {
        "cpwer": round(cp, 4),
        "labels": len(labels),
        "der": round(scores.der, 4),
        "words_captioned": sum(len(s["text"].split()) for s in sentences),
    }


async def eight(http: aiohttp.ClientSession, base: str, trace: CpuTrace) -> dict[str, Any]:
    readers = [build_session(i, 36.0, 1.5)[0] for i in (0, 1)]
    n = min(r.size for r in readers)
    readers = [r[:n] for r in readers]
    rng = np.random.default_rng(3)
    floor = [rng.normal(0, 10 ** (-70 / 20), n).astype(np.float32) for _ in range(8)]  # a quiet room's noise
    channels = readers + [np.zeros(n, np.float32)] * 6
    gains = [[float("inf")] * 8 for _ in range(8)]
    gains[0][1] = gains[1][0] = 12.0
    for i in range(2, 8):
        gains[i][0], gains[i][1] = rng.uniform(12, 20), rng.uniform(12, 20)
    mics = [m + f for m, f in zip(leaked(channels, gains), floor, strict=True)]
    oggs = [ogg_of(f"eight-{i}", m) for i, m in enumerate(mics)]
    silent_only = [ogg_of(f"idle-{i}", f) for i, f in enumerate(floor[2:])]

    async def phase(name: str, files: list[Path]) -> dict[str, Any]:
        run = await meeting_room(http, base, {f"{name}{i}": (p, {"name": f"Mic {i + 1}"}) for i, p in enumerate(files)})
        span = run["t1"] - run["t0"]
        cpu = trace.cpu_between(run["t0"], run["t1"]) / span
        words = {
            k: sum(len(s["text"].split()) for s in run["transcript"]["sentences"] if s["session"] == c.session)
            for k, c in run["clients"].items()
        }
        return {
            "admitted": len(run["clients"]),
            "refused": len(run["refused"]),
            "cpu_cores": round(cpu, 3),
            "words_by_mic": words,
            "ready_during": run["ready_during"],
        }

    t = time.monotonic()
    await asyncio.sleep(10.0)
    idle_server = trace.cpu_between(t, time.monotonic()) / (time.monotonic() - t)
    silent = await phase("idle", silent_only)
    two = await phase("two", oggs[:2])
    all8 = await phase("mic", oggs)
    per_idle = (silent["cpu_cores"] - idle_server) / 6
    return {
        "server_idle_cores": round(idle_server, 3),
        "six_silent": silent,
        "two_talking": two,
        "eight": all8,
        "idle_mic_cores": round(per_idle, 4),
        "eight_vs_two_plus_six_idle": round(all8["cpu_cores"] / max(1e-6, two["cpu_cores"] + 6 * per_idle), 3),
    }


def cpu_kind() -> str:
    flags = Path("/proc/cpuinfo").read_text(encoding="utf-8") if Path("/proc/cpuinfo").exists() else ""
    return "AVX-512 BF16" if "avx512_bf16" in flags else "AVX2" if "avx2" in flags else platform.processor()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    install_ice_policy(IceConfig(hosts=("127.0.0.1",)))
    out: dict[str, Any] = {"cpu": cpu_kind(), "leak_db": args.leak_db}
    async with (
        bench_server(["--max-sessions", "auto"], CACHE_DIR / "meeting-server.log") as server,
        aiohttp.ClientSession() as http,
    ):
        trace = CpuTrace(server.ps)
        sampler = asyncio.create_task(trace.run())
        base = server.base_url
        out["model"] = server.info.get("model")
        if "phones" not in args.skip:
            out["phones"] = await phones(http, base, args.leak_db)
            print_phones(out["phones"])
        if "kiosk" not in args.skip:
            out["kiosk"] = await kiosk(http, base)
            print(
                f"kiosk (one microphone): cpWER {out['kiosk']['cpwer']:.1%}, {out['kiosk']['labels']} labels, "
                f"DER {out['kiosk']['der']:.1%}"
            )
        if "eight" not in args.skip:
            out["eight"] = await eight(http, base, trace)
            e = out["eight"]
            print(
                f"eight microphones, two talking: admitted {e['eight']['admitted']}/8; server CPU (cores): idle "
                f"{e['server_idle_cores']}, six silent {e['six_silent']['cpu_cores']} ({e['idle_mic_cores']} per "
                f"silent mic), two talking {e['two_talking']['cpu_cores']}, all eight {e['eight']['cpu_cores']} "
                f"= {e['eight_vs_two_plus_six_idle']} x (two + six idle)"
            )
        sampler.cancel()
    return out


def print_phones(p: dict[str, Any]) -> None:
    print(
        f"phones ({p['admitted']} admitted, refused {p['refused']}): cpWER {p['cpwer']:.1%}, wrong microphone "
        f"{p['wrong_mic']:.1%}, twice {p['duplicates']:.1%}, named {p['named']:.1%} ({p['words_captioned']} words "
        f"captioned, {p['words_said']} said); lock after each turn p50 {p['lock_after_turn_p50_s']} s, p95 "
        f"{p['lock_after_turn_p95_s']} s over {p['turns']} turns ({p['turns_uncaptioned']} uncaptioned); open "
        f"lines at once up to {p['open_lines_max']}"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.meeting", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--leak-db", type=float, default=12.0, help="how far down each phone hears its neighbours")
    p.add_argument("--skip", nargs="*", default=[], choices=["phones", "kiosk", "eight"])
    p.add_argument("--json", default=None)
    return p


if __name__ == "__main__":
    arguments = build_parser().parse_args()
    result = asyncio.run(main(arguments))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    sys.exit(0)
