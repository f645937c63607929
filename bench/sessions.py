"""End-to-end sessions bench: the real server, N WebRTC clients on loopback, the real engine against the
serialized baseline on the same model in the same run.

    python -m bench.sessions [--sessions 1 2 3 4 6 8] [--modes engine engine-stock baseline] [--json out.json]

The server runs as a subprocess (``bench/serve.py``) so that its CPU (vLLM's EngineCore child included) is
measured apart from the clients'. All clients share this process: each is an aiortc peer forwarding a different
session's Ogg Opus file (``bench/lib/clips.py``: real read English utterances separated by 2.5 s pauses, ~40 s) at
real time, without re-encoding. Each mode (``bench/lib/modes.py``) runs on a server of its own, started with it
(``bench.serve --mode``), one after the other on the same model (default: the embedded whisper-base, as the server
ships): the shipped decode policy ("engine", per-request encoder windows), the same policy with Whisper's stock 30 s
window for every request ("engine-stock") and the serialized baseline ("baseline", 30 s window). Each sweeps N up
and stops once it has lost real time beyond doubt (display lag p95 over ``--give-up-lag-s`` twice in a row); with
``--until-late`` already at the first step that is not on time, and with ``--budget-s`` before a step that would end
past that many seconds of the mode's sweep (``should_stop``; the JSON's ``stops`` says why each mode stopped).

N sessions are *offered* at once: the server admits as many as it holds on time (``--max-sessions auto``, its
capacity estimate, read from ``/ready`` before each step: ``capacity``) and refuses the rest with ``503`` busy and
``Retry-After`` (``refused``); every figure is that of the sessions it admitted. ``engine-unbounded`` is the server
as it was before it knew its capacity (every session admitted, partials paced by their own decode time alone, a CPU
recognizer on every core however many speak), for the comparison. ``--clips hard`` sends long read sentences and
noisy, reverberant, far-field and telephone speech instead of short read ones; ``--clips users`` a speaker's mix
(of every three sentences two short read ones and one hard one, pauses of 1.2-2.5 s), best sent as browsers do
unasked, in 20 ms packets (``--packet-ms 20``).

``--cold``: no warm-up session, so the first step of each mode meets a fresh server as users do; the first sentence
of each session it admitted is reported apart (``cold lock``: its lock latency, ``cold 1st right``: its first correct
word; the JSON's ``cold_lock_s_max``, ``cold_first_correct_s_max``, ``cold_first_partial_s_max`` and, over more
than one, their ``_p50``), and that step's other figures (first partial, first correct word, lock, label and the
held and on-time verdicts) are over its other sentences. Without it an unmeasured warm-up session runs first
(``--no-warmup`` skips it) and the cold columns are empty. ``--as-users`` is ``--clips users --packet-ms 20
--cold``: the streams as users send them, on a server as they meet it, the set the headline figures come from.

A mode *holds* N sessions in real time when: display lag p95 <= ``--lag-limit-s`` (1 s), lock latency p95 <=
endpoint silence + ``--lock-limit-s`` (0.4 s), no sentence lost and no audio skipped. It is *on time* when every
admitted session's first words p95 <= ``--first-bound-s`` (2 s) and lock p95 <= ``--lock-bound-s`` (2 s after the end
of speech, the endpoint's silence included) and no sentence was lost. Metrics: see ``bench/lib/metrics.py``; ``1st
partial``: seconds from a sentence's onset leaving the client to the first new text shown for it, right or wrong;
``1st right``: to the first word of its reference shown (``no_correct`` in the JSON counts sentences that showed
none before they locked); CPU per live session is the server tree's CPU over the window in which all N clients
were streaming, divided by N, in % of one core. ``stable p50``: seconds from a settled word's audio (its end, as the
engine estimated it) leaving the client to the word arriving as stable on that client's data channel. ``label
p95``: seconds from a sentence's end of speech leaving the client to its speaker label being final while live (its
lock, or the ``speakers`` correction after it, whichever came last); ``relabelled``: locked sentences whose label
such a correction changed (the re-clustering at stop is counted in neither).

``--remote-viewer`` adds a second front end (``bench/lib/remote_viewer.py``): a PostgreSQL server is started for the
run, both servers use it as their store, each session publishes into a room of its own on the measured server,
and a viewer follows that room on the other front end. ``on B``: seconds from the same moment to the word's first
arrival there, settled (a stable word through the store's announcements, or its locked sentence);
``remote_missing`` in the JSON counts settled words that never got there.

``--room-languages es ca gl``: each session publishes into a room of its own on the measured server, translated
into those languages (Apertium, in the server): run it beside ``--room-languages`` with no language (the same rooms,
untranslated) to see what translation costs the source captions.

``--loss RATE``: each client's network loses that fraction of its audio packets at random
(``bench.lib.client.PacketLoss``, the same packets in every mode). ``pkts lost`` is what the server counted as lost
(``/metrics``), ``concealed s`` the audio its decoder filled in for them; the JSON also has ``packets_dropped``,
what the clients dropped. ``--fec``: the clients' packets carry in-band FEC, as Chromium's do once the server
reports loss (``bench.lib.clips.encode_opus``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.lib import postgres
from bench.lib.clips import CACHE_DIR, CLIP_SETS, session_clip
from bench.lib.harness import CpuTrace, HealthProbe, ServerProcess, bench_server, get_json, pct, run_clients
from bench.lib.metrics import merge, print_markdown_table, session_metrics
from bench.lib.modes import MODES
from bench.lib.remote_viewer import RemoteViewer, StableDelays, follow, stable_delays, stop
from engine.config import ENDPOINT_PRESETS


def row_for(
    mode: str, n: int, metrics: Any, cpu_s: float, window_s: float, rss: int, depth: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    """One step's row: ``n`` sessions streamed (those the server admitted), ``metrics`` pooled over them."""
    m = metrics
    lag95 = pct(m.lag_s, 95)
    lock_over95 = pct(m.lock_over_silence_s, 95)
    row = {
        "mode": mode,
        "sessions": n,
        "ref_sentences": m.sentences,
        "lost": m.lost,
        "no_partial": m.no_partial,
        "no_correct": m.no_correct,
        "first_partial_s_p50": pct(m.first_partial_s, 50),
        "first_partial_s_p95": pct(m.first_partial_s, 95),
        "first_correct_s_p50": pct(m.first_correct_s, 50),
        "first_correct_s_p95": pct(m.first_correct_s, 95),
        "lock_s_p50": pct(m.lock_s, 50),
        "lock_s_p95": pct(m.lock_s, 95),
        "lock_over_silence_s_p95": lock_over95,
        "lag_s_p50": pct(m.lag_s, 50),
        "lag_s_p95": lag95,
        "lag_s_max": max(m.lag_s, default=float("nan")),
        "wer": m.errors / m.words if m.words else float("nan"),
        "churn": m.churned / m.partial_words if m.partial_words else float("nan"),
        "flicker": m.flickered / m.tentative_words if m.tentative_words else float("nan"),
        "stable_withdrawn": m.withdrawn,
        "label_s_p50": pct(m.label_s, 50),
        "label_s_p95": pct(m.label_s, 95),
        "relabelled": m.relabelled,
        "cpu_pct_per_session": 100 * cpu_s / window_s / n if window_s > 0 else float("nan"),
        "server_cpu_pct": 100 * cpu_s / window_s if window_s > 0 else float("nan"),
        "rss_gb": rss / 1e9,
        "queue_p50": pct([float(d) for d in depth], 50),
        "queue_max": max(depth, default=0),
        "overloaded_msgs": m.overloaded,
        "failures": m.failures[:5],
        # A fresh server's first sentences (--cold), apart from the figures above: NaN where none were measured.
        "cold_sentences": m.cold,
    }
    for key, values in (
        ("cold_lock_s", m.cold_lock_s),
        ("cold_first_correct_s", m.cold_first_correct_s),
        ("cold_first_partial_s", m.cold_first_partial_s),
    ):
        row[f"{key}_max"] = max(values, default=float("nan"))
        row[f"{key}_p50"] = pct(values, 50) if len(values) > 1 else float("nan")
    reasons = []
    if not lag95 <= args.lag_limit_s:
        reasons.append(f"lag p95 {lag95:.2f} s > {args.lag_limit_s} s")
    if not lock_over95 <= args.lock_limit_s:
        reasons.append(f"lock p95 {lock_over95:+.2f} s over silence > {args.lock_limit_s} s")
    if m.lost:
        reasons.append(f"{m.lost} sentences lost")
    if m.overloaded:
        reasons.append("audio skipped")
    if m.failures:
        reasons.append("client failures")
    row["held"] = not reasons
    row["why_not"] = "; ".join(reasons)
    # On time as the capacity promises it: first words and locks within their bounds for every admitted session.
    row["on_time"] = bool(n) and (
        pct(m.first_partial_s, 95) <= args.first_bound_s and pct(m.lock_s, 95) <= args.lock_bound_s and not m.lost
    )
    return row


async def ready_capacity(http: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    """The server's own capacity figures (``/ready``'s ``capacity``), empty if it gives none."""
    async with http.get(f"{base_url}/ready") as r:
        body = await r.json()
    return dict(body.get("capacity") or {})


async def run_step(
    server: Any,
    http: aiohttp.ClientSession,
    trace: CpuTrace,
    mode: str,
    n: int,
    args: argparse.Namespace,
    remote: ServerProcess | None = None,
    cold: bool = False,
) -> dict[str, Any]:
    """One step: ``n`` sessions in ``mode``. With ``remote`` (another front end on the same PostgreSQL store), each
    session publishes into a room of its own and a viewer follows that room on ``remote``. ``cold``: the server is
    fresh, so each session's first sentence is measured apart (``row_for``'s ``cold_*``)."""
    clips = [session_clip(i, args.seconds, args.pause_s, args.packet_ms, args.fec, args.clips) for i in range(n)]
    rooms: list[str] = []
    viewers: list[RemoteViewer] = []
    readers: list[asyncio.Task[None]] = []
    if remote is not None or args.room_languages is not None:
        fields = {"languages": args.room_languages} if args.room_languages else {}
        for i in range(n):
            async with http.post(f"{server.base_url}/rooms", json={"title": f"{mode}-{n}-{i}", **fields}) as r:
                rooms.append((await r.json())["room"])
    if remote is not None:
        viewers, readers = await follow(http, remote.base_url, rooms)
    await get_json(http, f"{server.base_url}/bench/stats")  # resets the queue-depth samples
    losses_before = await loss_counters(http, server.base_url)
    capacity = await ready_capacity(http, server.base_url)
    prober = await HealthProbe.start(f"{server.base_url}/health")
    try:
        run = await run_clients(
            server.base_url,
            [c.ogg for c in clips],
            stop_timeout_s=args.stop_timeout_s,
            offer_fields=[{"room": room} for room in rooms] if rooms else None,
            loss=args.loss,
            connect_concurrency=max(8, n),
            start={"task": "translate"} if args.task == "translate" else None,
        )
        if remote is not None:
            await asyncio.sleep(1.0)  # the last locks reach the other front end
    finally:
        health_ms = await prober.stop()
        await stop(readers)
    stats = await get_json(http, f"{server.base_url}/bench/stats")
    endpoint = ENDPOINT_PRESETS[args.preset]
    # The sessions the server refused as full streamed nothing: the metrics are those of the ones it took.
    admitted = [(cl, clip) for cl, clip in zip(run.clients, clips, strict=True) if cl.refused is None]
    metrics = merge([session_metrics(cl, clip, endpoint, cold=1 if cold else 0) for cl, clip in admitted])
    window = max(0.0, run.first_done_s - run.all_live_s)
    row = row_for(
        mode,
        len(admitted),
        metrics,
        trace.cpu_between(run.all_live_s, run.first_done_s),
        window,
        trace.peak_rss(run.t0, run.t1),
        stats["depth"],
        args,
    )
    row["offered"], row["refused"] = n, n - len(admitted)
    row["cold_start"] = cold
    row["capacity"] = capacity.get("sessions")
    row["capacity_source"] = capacity.get("source")
    row["capacity_after"] = (await ready_capacity(http, server.base_url)).get("sessions")
    row["retry_after_s"] = [c.refused.retry_after_s for c in run.clients if c.refused is not None][:1]
    # /health, asked every 0.1 s through the step by a process of its own (this one is busy with the clients).
    row["health_ms_p50"], row["health_ms_p99"] = pct(health_ms, 50), pct(health_ms, 99)
    row["health_ms_max"] = max(health_ms, default=float("nan"))
    row["window_s"] = round(window, 1)
    row["wall_s"] = round(run.t1 - run.t0, 1)
    row["lock_wait_s_total"] = stats["lock_wait_s"]
    row["final_decode_s_p50"] = pct(stats["final_s"], 50)
    row["partial_decode_s_p50"] = pct(stats["partial_s"], 50)
    row["decodes"] = len(stats["final_s"]) + len(stats["partial_s"])
    delays = StableDelays()
    for i, client in enumerate(run.clients):
        if client.refused is None:
            delays.add(stable_delays(client, viewers[i] if viewers else None))
    row["stable_s_p50"], row["stable_s_p95"] = pct(delays.local_s, 50), pct(delays.local_s, 95)
    row["remote_stable_s_p50"], row["remote_stable_s_p95"] = pct(delays.remote_s, 50), pct(delays.remote_s, 95)
    row["remote_missing"] = delays.missing
    losses = await loss_counters(http, server.base_url)
    row["packets_dropped"] = sum(c.loss.lost for c in run.clients if c.loss is not None)
    row["packets_lost"] = round(losses["lost"] - losses_before["lost"])
    row["packets_late"] = round(losses["late"] - losses_before["late"])
    row["concealed_s"] = losses["concealed"] - losses_before["concealed"]
    if args.dump:
        await asyncio.to_thread(
            dump_step, Path(args.dump) / f"{mode}-n{n}-{time.strftime('%H%M%S')}.json", run.clients, clips
        )
    return row


async def loss_counters(http: aiohttp.ClientSession, base_url: str) -> dict[str, float]:
    """The server's audio loss counters from ``/metrics``: packets lost and late, seconds concealed."""
    async with http.get(f"{base_url}/metrics") as r:
        text = await r.text()
    names = {
        "live_captions_audio_packets_lost_total": "lost",
        "live_captions_audio_packets_late_total": "late",
        "live_captions_audio_concealed_seconds_total": "concealed",
    }
    out = dict.fromkeys(names.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                out[names[sample.name]] += sample.value
    return out


def dump_step(path: Path, clients: list[Any], clips: list[Any]) -> None:
    """Every message of every client with its time since the client's first packet, and the reference times."""
    out = []
    for c, clip in zip(clients, clips, strict=True):
        t0 = c.started_s or 0.0
        out.append(
            {
                "ogg": str(clip.ogg),
                "error": c.error,
                "utterances": [
                    {
                        "start_s": u.speech_start_s,
                        "end_s": u.speech_end_s,
                        "text": u.text,
                        "sent_start_s": c.sent_at(u.speech_start_s) - t0 if c.started_s else None,
                        "sent_end_s": c.sent_at(u.speech_end_s) - t0 if c.started_s else None,
                    }
                    for u in clip.utterances
                ],
                "messages": [[round(t - t0, 3), m] for t, m in c.messages],
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1), encoding="utf-8")


COLUMNS = [
    ("mode", "mode", "{}"),
    ("offered", "offered", "{:d}"),
    ("capacity", "capacity", "{}"),
    ("sessions", "admitted", "{:d}"),
    ("refused", "refused", "{:d}"),
    ("ref_sentences", "sent", "{:d}"),
    ("lost", "lost", "{:d}"),
    ("first_partial_s_p50", "1st partial p50", "{:.2f}"),
    ("first_partial_s_p95", "p95", "{:.2f}"),
    ("first_correct_s_p50", "1st right p50", "{:.2f}"),
    ("first_correct_s_p95", "p95", "{:.2f}"),
    ("lock_s_p50", "lock p50", "{:.2f}"),
    ("lock_s_p95", "p95", "{:.2f}"),
    ("lock_over_silence_s_p95", "p95 - silence", "{:+.2f}"),
    ("cold_lock_s_max", "cold lock", "{:.2f}"),
    ("cold_first_correct_s_max", "cold 1st right", "{:.2f}"),
    ("lag_s_p50", "lag p50", "{:.2f}"),
    ("lag_s_p95", "p95", "{:.2f}"),
    ("wer", "WER", "{:.1%}"),
    ("churn", "churn", "{:.1%}"),
    ("flicker", "flicker", "{:.1%}"),
    ("stable_withdrawn", "withdrawn", "{:d}"),
    ("label_s_p95", "label p95", "{:.2f}"),
    ("relabelled", "relabelled", "{:d}"),
    ("stable_s_p50", "stable p50", "{:.2f}"),
    ("remote_stable_s_p50", "on B p50", "{:.2f}"),
    ("remote_stable_s_p95", "p95", "{:.2f}"),
    ("cpu_pct_per_session", "CPU %/session", "{:.0f}"),
    ("rss_gb", "RSS GB", "{:.2f}"),
    ("queue_p50", "queue p50", "{:.0f}"),
    ("queue_max", "max", "{:d}"),
    ("final_decode_s_p50", "final decode p50", "{:.2f}"),
    ("decodes", "decodes", "{:d}"),
    ("packets_lost", "pkts lost", "{:d}"),
    ("concealed_s", "concealed s", "{:.2f}"),
    ("health_ms_p99", "/health p99 ms", "{:.0f}"),
    ("held", "held", "{}"),
    ("on_time", "on time", "{}"),
]


def print_table(rows: list[dict[str, Any]]) -> None:
    print_markdown_table(COLUMNS, rows)


def held(rows: list[dict[str, Any]], mode: str) -> int:
    """The largest N such that this mode held every N swept up to it (N: sessions offered)."""
    best = 0
    for r in sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["offered"]):
        if not r["held"]:
            break
        best = r["offered"]
    return best


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {f"held_{mode}": held(rows, mode) for mode in MODES}
    for other in ("baseline", "engine-stock"):
        b = out[f"held_{other}"]
        out[f"ratio_vs_{other}"] = out["held_engine"] / b if b else None
    ones = {r["mode"]: r for r in rows if r["offered"] == 1}
    if "engine" in ones:
        e = ones["engine"]
        out["one_session"] = {
            "first_partial_s_p50": e["first_partial_s_p50"],
            "first_partial_s_p95": e["first_partial_s_p95"],
            "first_correct_s_p50": e["first_correct_s_p50"],
            "first_correct_s_p95": e["first_correct_s_p95"],
            "lock_over_silence_s_p95": e["lock_over_silence_s_p95"],
        }
    return out


@contextlib.asynccontextmanager
async def other_front_end(server_args: list[str]) -> AsyncIterator[ServerProcess]:
    """A PostgreSQL server for this run, the measured server's store (appended to ``server_args``), and a second
    front end on the same store (the named fake recognizer: it only serves viewers), which this yields."""
    bin_dir = postgres.binaries()
    if bin_dir is None:
        raise SystemExit("--remote-viewer needs PostgreSQL's server binaries (apt-get install postgresql)")
    with postgres.server(bin_dir) as url:
        db = await asyncio.to_thread(postgres.new_database, url)
        server_args += ["--db", db]
        async with bench_server(
            ["--recognizer", "fake", "--no-speakers", "--db", db], CACHE_DIR / "sessions-front-end-b.log"
        ) as remote:
            print(f"front end B ready: {remote.info}", file=sys.stderr)
            yield remote


def should_stop(rows: list[dict[str, Any]], args: argparse.Namespace, elapsed_s: float) -> str | None:
    """Why a mode's sweep should start no further step, or None to go on.

    ``rows``: the mode's steps so far, in the order run (``run_step``'s rows: ``lag_s_p95``, ``on_time``, ``offered``,
    ``wall_s``). ``elapsed_s``: wall seconds since the mode's sweep began, its server's start included. The reasons,
    in this order: display lag p95 over ``--give-up-lag-s`` in each of the last two steps (always on); with
    ``--until-late``, the last step not on time; with ``--budget-s``, the next step would end past the budget,
    judged to take as long as the last one did (its clients' ``wall_s`` plus the ``--settle-s`` before it; with no
    step yet, only a budget already spent on the server's start stops it). A step is never cut short: the budget
    decides only whether the next one starts.
    """
    if len(rows) >= 2 and all(not r["lag_s_p95"] <= args.give_up_lag_s for r in rows[-2:]):
        return f"lag p95 over {args.give_up_lag_s:g} s two steps in a row"
    if args.until_late and rows and not rows[-1]["on_time"]:
        return f"not on time at {rows[-1]['offered']} sessions offered (--until-late)"
    if args.budget_s is not None:
        next_s = float(rows[-1]["wall_s"]) + args.settle_s if rows else 0.0
        if elapsed_s + next_s > args.budget_s:
            return (
                f"budget: {elapsed_s:.0f} s of --budget-s {args.budget_s:g} used, "
                f"the next step would take about {next_s:.0f} s"
            )
    return None


async def sweep(
    mode: str, server_args: list[str], args: argparse.Namespace, remote: ServerProcess | None
) -> tuple[list[dict[str, Any]], str | None]:
    """``mode``'s rows: a bench server started in it, N swept up until ``should_stop`` says why not further (the
    reason, returned beside the rows; None when the whole ``--sessions`` ladder ran)."""
    rows: list[dict[str, Any]] = []
    reason: str | None = None
    t0 = time.monotonic()  # the budget counts the server's start: on a GPU it is a good part of a short sweep
    async with bench_server(server_args, CACHE_DIR / f"sessions-server-{mode}.log") as server:
        print(f"server ready: {server.info}", file=sys.stderr)
        trace = CpuTrace(server.ps)
        sampler = asyncio.create_task(trace.run())
        try:
            async with aiohttp.ClientSession() as http:
                if args.warmup and not args.cold:
                    # vLLM's first decodes after start are several times slower: keep them out of the table.
                    print("warm-up session (not measured) ...", file=sys.stderr)
                    warm_up = session_clip(0, 10.0, args.pause_s, args.packet_ms, args.fec)
                    await run_clients(server.base_url, [warm_up.ogg])
                for n in args.sessions:
                    reason = should_stop(rows, args, time.monotonic() - t0)
                    if reason:
                        print(f"{mode}: stopped sweeping before {n} sessions: {reason}", file=sys.stderr)
                        break
                    await asyncio.sleep(args.settle_s)  # the engine core busy-waits ~1 s after activity
                    # With --cold, the first step is the one that meets the fresh server: it reports that apart.
                    row = await run_step(server, http, trace, mode, n, args, remote, cold=args.cold and not rows)
                    row["model"] = server.info.get("model")
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
        finally:
            sampler.cancel()
    return rows, reason


async def main(args: argparse.Namespace) -> int:
    print(f"encoding clips into {CACHE_DIR} ...", file=sys.stderr)
    for i in range(max(args.sessions)):
        session_clip(i, args.seconds, args.pause_s, args.packet_ms, args.fec, args.clips)
    server_args = ["--recognizer", args.recognizer, "--preset", args.preset]
    if args.model:
        server_args += ["--model", args.model]
    if args.cpu_threads:
        server_args += ["--cpu-threads", str(args.cpu_threads)]
    if args.cpu_decoder_threads is not None:
        server_args += ["--cpu-decoder-threads", str(args.cpu_decoder_threads)]
    if args.no_speakers:
        server_args.append("--no-speakers")
    for setting in args.settings:
        server_args += ["--set", setting]
    rows: list[dict[str, Any]] = []
    stops: dict[str, str | None] = {}
    t_start = time.monotonic()
    model = None
    async with contextlib.AsyncExitStack() as stack:
        remote = await stack.enter_async_context(other_front_end(server_args)) if args.remote_viewer else None
        for mode in args.modes:
            mode_rows, stops[mode] = await sweep(mode, [*server_args, "--mode", mode], args, remote)
            rows += mode_rows
            model = model or (rows[-1].get("model") if rows else None)
    print(
        f"\nmodel {model}, preset {args.preset}, {args.clips} clips in {args.packet_ms} ms packets, "
        f"{args.seconds:g} s per session{', cold start' if args.cold else ''}, "
        f"{time.monotonic() - t_start:.0f} s in all\n"
    )
    print_table(rows)
    s = summary(rows)
    held_line = ", ".join(f"{mode} {s[f'held_{mode}']}" for mode in args.modes)
    ratios = ", ".join(
        f"vs {o} {s[f'ratio_vs_{o}']:.1f}x" if s[f"ratio_vs_{o}"] else f"vs {o} n/a (held none)"
        for o in ("engine-stock", "baseline")
        if o in args.modes
    )
    print(f"\nheld in real time: {held_line}; engine {ratios}")
    for r in rows:
        if not r["held"]:
            print(f"  {r['mode']} N={r['sessions']}: {r['why_not']}")
    for mode, reason in stops.items():
        if reason:
            print(f"stopped sweeping {mode}: {reason}")
    if args.json:
        report = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "model": model,
            "preset": args.preset,
            "seconds": args.seconds,
            "speakers": not args.no_speakers,
            "machine": {
                "cpus": psutil.cpu_count(),
                "python": platform.python_version(),
                "load_avg": psutil.getloadavg(),
            },
            "limits": {"lag_s": args.lag_limit_s, "lock_over_silence_s": args.lock_limit_s},
            "summary": s,
            "stops": stops,
            "rows": rows,
            "args": vars(args),
        }
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(report, indent=2, default=str), "utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.sessions", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    p.add_argument(
        "--modes",
        nargs="+",
        choices=list(MODES),
        default=["engine", "engine-stock", "baseline"],
        help="the server modes to compare, each on a server of its own (bench/lib/modes.py)",
    )
    p.add_argument(
        "--recognizer",
        choices=["vllm", "fake"],
        default="vllm",
        help="fake: the named FakeTranscriber, to check the harness only (no model)",
    )
    p.add_argument("--model", default=None, help="server --model (default: the embedded whisper-base)")
    p.add_argument("--preset", choices=sorted(ENDPOINT_PRESETS), default="balanced")
    p.add_argument("--cpu-threads", type=int, default=0, help="server --cpu-threads (0: the server's default)")
    p.add_argument(
        "--cpu-decoder-threads",
        type=int,
        default=None,
        help="server --cpu-decoder-threads (default: the server's; 0: a text step on as many as the encoder)",
    )
    p.add_argument("--no-speakers", action="store_true")
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="server --set: an engine setting with no flag of its own, e.g. partial.interval_s=0.6 (repeatable)",
    )
    p.add_argument(
        "--clips",
        choices=CLIP_SETS,
        default="read",
        help="what each session says: read, short read sentences (median 5 s); hard, long read sentences "
        "(10-16 s) and noisy, reverberant, far-field and telephone speech; users, a speaker's mix "
        "(two read sentences, then a hard one, pauses of 1.2-2.5 s), best measured with "
        "--packet-ms 20, as users' browsers send",
    )
    p.add_argument("--seconds", type=float, default=40.0, help="speech + pauses per session")
    p.add_argument(
        "--pause-s",
        type=float,
        default=2.5,
        help="pause between sentences (not for --clips users: theirs are drawn from 1.2-2.5 s)",
    )
    p.add_argument(
        "--packet-ms",
        type=int,
        choices=(20, 60),
        default=60,
        help="audio per Opus packet the clients send: 60 as browsers do when the answer asks for it (the "
        "server's default a=ptime), 20 as they do unasked",
    )
    p.add_argument(
        "--loss",
        type=float,
        default=0.0,
        metavar="RATE",
        help="each client's network loses this fraction of its audio packets, at random (0: none)",
    )
    p.add_argument(
        "--fec",
        action="store_true",
        help="the clients' Opus carries in-band FEC at 32 kb/s, as Chromium sends once loss is reported",
    )
    p.add_argument(
        "--first-bound-s",
        type=float,
        default=2.0,
        help="'on time': first words p95 at most this (every admitted session)",
    )
    p.add_argument(
        "--lock-bound-s",
        type=float,
        default=2.0,
        help="'on time': locks p95 at most this after the end of speech (every admitted session)",
    )
    p.add_argument("--lag-limit-s", type=float, default=1.0)
    p.add_argument("--lock-limit-s", type=float, default=0.4, help="lock p95 allowed over the endpoint silence")
    p.add_argument(
        "--give-up-lag-s",
        type=float,
        default=3.0,
        help="stop sweeping a mode once two steps in a row are past this lag p95",
    )
    p.add_argument(
        "--until-late",
        action="store_true",
        help="stop sweeping a mode at its first step that is not on time (see --first-bound-s)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no step that would end past this many seconds of a mode's sweep (its server's start "
        "included), judged by the last step's duration; a step is never cut short (default: none)",
    )
    p.add_argument("--stop-timeout-s", type=float, default=120.0)
    p.add_argument("--settle-s", type=float, default=3.0)
    p.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the unmeasured first session")
    p.add_argument(
        "--cold",
        action="store_true",
        help="no warm-up session: the first step meets a fresh server, the first sentence of each of its "
        "sessions is reported apart (cold lock, cold 1st right) and its other figures are the rest's",
    )
    p.add_argument(
        "--as-users",
        action="store_true",
        help="--clips users --packet-ms 20 --cold (overriding them): streams as users send them to a "
        "server as they meet it, the stream set the headline figures come from",
    )
    p.add_argument(
        "--remote-viewer",
        action="store_true",
        help="each session publishes into a room, followed by a viewer on a second front end that shares "
        "the store (a PostgreSQL server started for the run): reports how soon settled words reach it",
    )
    p.add_argument(
        "--room-languages",
        nargs="*",
        default=None,
        metavar="LANG",
        help="each session publishes into a room of its own on the server, translated into these "
        "languages (none given: untranslated rooms; the side-by-side control)",
    )
    p.add_argument(
        "--task",
        choices=("transcribe", "translate"),
        default="transcribe",
        help="Whisper's task in each session's start: translate (English speech into English text) "
        "measures what a translating session costs, each sentence's words as said decoded again",
    )
    p.add_argument("--json", default=None, help="also write every row to this JSON file")
    p.add_argument("--dump", default=None, help="folder: write every client's messages per step (diagnosis)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``build_parser``), with ``--as-users`` spelled out into the flags it stands for."""
    args = build_parser().parse_args(argv)
    if args.as_users:
        args.clips, args.packet_ms, args.cold = "users", 20, True
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
