"""Room corrections bench: how soon an editor's save reaches viewers on its own front end and on another, and
whether a hold-back delay keeps every uncorrected version from the audience.

    python -m bench.corrections [--saves 40] [--spacing-s 0.3] [--delay-s 5] [--json PATH]

Two front ends (``python -m bench.serve``, A and B) share one PostgreSQL database (``bench/lib/postgres.py`` starts a
throwaway server for the run), as ``bench/sessions.py --remote-viewer`` does. Both run the named fake recognizer
(``--recognizer fake --no-speakers``: ``FakeTranscriber``, whose sentences read "audio of N seconds"): what is
measured is the rooms, the store and the event streams, never a model. A publisher (``bench/lib/client.py``) streams
a recorded clip of read speech (``bench/lib/clips.py``) over real WebRTC into a room on A, at real time; every
viewer reads ``GET /rooms/{id}/events`` (server-sent events) in this process. Times are this process's
``time.monotonic()``, in seconds.

1. **Reach** (a room without delay). Viewers on A and on B. Once ``--min-sentences`` sentences have locked, an
   editor on A corrects each locked sentence in turn, round after round, ``--spacing-s`` apart, ``--saves`` times in
   all (``PUT /rooms/{id}/sentences/{sid}`` with the room's editor token), while the publisher goes on. A save's
   delay at a viewer runs from just before its PUT to the arrival of the ``correction`` event of the seq the PUT
   answered. ``lost``: saves a viewer never got; ``wrong``: corrections that arrived with another text than saved;
   ``final wrong``: sentences whose text at the end (captions and corrections applied in order) is not the last one
   saved. Target: p95 <= 1 s on the other front end.
2. **Hold-back** (``delay_s`` = ``--delay-s``, 5). An editor's stream on A (``?editor=1&token=``) and audience
   viewers on A and B. Each sentence is corrected ``--fix-after-s`` (3 s) after it arrived on the editor's stream
   ("audio" becomes "speech", " [fixed]" appended). ``lock -> audience``: seconds from a sentence's arrival on the
   editor's stream to its first arrival at an audience viewer; ``store lock -> audience``: the same from the lock
   time the store wrote for it (``sentences.locked_ms``, Unix ms taken as its write began: the editor's stream gets
   the lock a few ms after its commit, so only this one is a bound), which must be >= the delay (``before delay``
   counts the sentences that were not); ``uncorrected``: sentences an audience viewer ever received with another
   text than the corrected one (must be 0). The transcript files
   (txt, srt, vtt, json), fetched from both front ends at the end, must hold every corrected text and none of the
   recognizer's (the JSON's ``original`` and ``edits`` are the history: expected there, and not checked).

Every answer of the server that is not what the protocol promises (a PUT's status, a lost or wrong correction) is
kept in the JSON with its request and response, and printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from bench.lib import postgres
from bench.lib.clips import CACHE_DIR, session_clip
from bench.lib.harness import ROOT, ServerProcess, bench_server, machine_info, pct, write_json
from bench.lib.metrics import print_markdown_table
from bench.lib.room_editing import (
    RoomReader,
    Save,
    create_room,
    fixed,
    follow,
    locked,
    publish,
    publisher_problems,
    publisher_report,
    put_text,
    roman,
    stop,
)

FAKE_NOTE = (
    "recognizer: the named fake (FakeTranscriber, --recognizer fake --no-speakers): what is measured is the "
    "rooms, the store (PostgreSQL) and the event streams, not a model"
)
DEFAULT_JSON = ROOT / "bench" / "results" / "corrections.json"
FORMATS = ("txt", "srt", "vtt", "json")


# ---- 1. an editor's save on both front ends --------------------------------------------------------------------------
async def reach(
    http: aiohttp.ClientSession, a: ServerProcess, b: ServerProcess, args: argparse.Namespace
) -> dict[str, Any]:
    """Step 1 (see the module): returns its rows (``same``: viewers on A, ``other``: on B) and every save."""
    room, token = await create_room(http, a.base_url, {"title": "corrections-reach"})
    readers = [
        RoomReader(f"{fe.base_url}/rooms/{room}/events", f"{where}{i}")
        for where, fe in (("A", a), ("B", b))
        for i in range(args.viewers)
    ]
    tasks = await follow(http, readers)
    publisher = publish(a.base_url, room, args.seconds, 0, args.pause_s)
    watcher = readers[0]
    try:
        while len(locked(watcher)) < args.min_sentences and not publisher.done():
            watcher.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.arrived.wait(), 0.5)
        saves: list[Save] = []
        last: dict[int, str] = {}
        rnd = 0
        while len(saves) < args.saves:
            rnd += 1
            sentences = locked(watcher)
            if not sentences:
                raise RuntimeError("no sentence locked in the room: nothing to correct")
            for sid, (_, original) in sorted(sentences.items()):
                if len(saves) >= args.saves:
                    break
                save = await put_text(http, a.base_url, room, token, sid, f"{fixed(original)} (pass {roman(rnd)})")
                saves.append(save)
                if save.status == 200:
                    last[sid] = save.text
                else:
                    print(
                        f"reach: PUT /rooms/{room}/sentences/{sid} {{'text': {save.text!r}}} -> {save.status} "
                        f"{save.body}",
                        file=sys.stderr,
                    )
                await asyncio.sleep(args.spacing_s)
        run = await publisher
        await asyncio.sleep(args.settle_s)  # the last corrections (and the stop's lock) reach every viewer
    finally:
        if not publisher.done():
            publisher.cancel()
        await stop(tasks)
    expected = {sid: last.get(sid, text) for sid, (_, text) in locked(watcher).items()}
    rows, problems = [], []
    for where in ("A", "B"):
        delays: list[float] = []
        lost = wrong = final_wrong = 0
        for reader in (r for r in readers if r.name.startswith(where)):
            if reader.error:
                problems.append(f"{reader.name}: {reader.error}")
            corrections = reader.by_seq("correction")
            for seq, save in [(s.seq, s) for s in saves if s.seq is not None]:
                got = corrections.get(seq)
                if got is None:
                    lost += 1
                    problems.append(f"{reader.name}: save seq {seq} (sentence {save.sid}) never arrived")
                    continue
                texts = {int(s["id"]): s["text"] for s in got[1].get("sentences") or ()}
                if texts.get(save.sid) != save.text:
                    wrong += 1
                    problems.append(f"{reader.name}: seq {seq} carried {got[1]} for a save of {save.text!r}")
                delays.append(got[0] - save.sent_s)
            now = reader.current()
            bad = {sid: now.get(sid) for sid, text in expected.items() if now.get(sid) != text}
            final_wrong += len(bad)
            problems += [
                f"{reader.name}: sentence {sid} shows {text!r}, last saved {expected[sid]!r}"
                for sid, text in bad.items()
            ]
        rows.append(
            {
                "viewers": f"{'same' if where == 'A' else 'other'} front end ({where})",
                "saves": sum(s.seq is not None for s in saves),
                "received": len(delays),
                "lost": lost,
                "wrong": wrong,
                "final_wrong": final_wrong,
                "p50_s": pct(delays, 50),
                "p95_s": pct(delays, 95),
                "max_s": max(delays, default=float("nan")),
            }
        )
    put_s = [s.answered_s - s.sent_s for s in saves]
    files = await transcript_checks(http, [a, b], room, expected, {})
    problems += [p for f in files for p in f["problems"]] + publisher_problems(run)
    return {
        "room": room,
        "sentences": len(expected),
        "rounds": rnd,
        "rows": rows,
        "put_s_p50": pct(put_s, 50),
        "put_s_p95": pct(put_s, 95),
        "failed_puts": [s.wire() for s in saves if s.status != 200],
        "transcripts": files,
        "publisher": publisher_report(run),
        "problems": problems,
        "saves": [s.wire() for s in saves],
    }


# ---- 2. a hold-back delay --------------------------------------------------------------------------------------------
async def holdback(
    http: aiohttp.ClientSession, a: ServerProcess, b: ServerProcess, db: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Step 2 (see the module): returns its rows (audience on A, on B), the transcript checks and, per sentence,
    every text each audience viewer received with its time from the lock. ``db``: the store's URL (read for each
    sentence's lock time as the store has it)."""
    wall = time.time() - time.monotonic()  # monotonic s + wall = Unix time s (the store's clock: this machine's)
    room, token = await create_room(http, a.base_url, {"title": "corrections-holdback", "delay_s": args.delay_s})
    editor = RoomReader(f"{a.base_url}/rooms/{room}/events?editor=1&token={token}", "editor")
    audience = [
        RoomReader(f"{fe.base_url}/rooms/{room}/events", f"{where}{i}")
        for where, fe in (("A", a), ("B", b))
        for i in range(args.viewers)
    ]
    tasks = await follow(http, [editor, *audience])
    publisher = publish(a.base_url, room, args.holdback_seconds, 1, args.pause_s)
    fixes: dict[int, asyncio.Task[Save]] = {}

    async def fix_later(sid: int, lock_s: float, original: str) -> Save:
        await asyncio.sleep(max(0.0, lock_s + args.fix_after_s - time.monotonic()))
        save = await put_text(http, a.base_url, room, token, sid, fixed(original))
        if save.status != 200:
            print(
                f"holdback: PUT /rooms/{room}/sentences/{sid} {{'text': {save.text!r}}} -> {save.status} {save.body}",
                file=sys.stderr,
            )
        return save

    try:
        quiet_since: float | None = None
        while quiet_since is None or time.monotonic() - quiet_since < args.settle_s:
            for sid, (lock_s, original) in locked(editor).items():
                if sid not in fixes:
                    fixes[sid] = asyncio.create_task(fix_later(sid, lock_s, original))
            if publisher.done() and quiet_since is None:
                quiet_since = time.monotonic()  # the stop's last lock may still be on its way
            await asyncio.sleep(0.05)
        saves = {sid: await task for sid, task in fixes.items()}
        run = await publisher
        await asyncio.sleep(args.delay_s + args.settle_s)  # the audience gets the last ones
    finally:
        for task in [*fixes.values(), publisher]:
            if not task.done():
                task.cancel()
        await stop(tasks)
    locks = {sid: lock for sid, lock in locked(editor).items() if sid in saves}
    stored = await asyncio.to_thread(locked_ms, db, room)
    problems = [
        f"sentence {sid} locked after the editing ended: not corrected" for sid in locked(editor) if sid not in saves
    ]
    problems += [
        f"PUT /rooms/{room}/sentences/{s.sid} {{'text': {s.text!r}}} -> {s.status} {s.body}"
        for s in saves.values()
        if s.status != 200
    ]
    problems += [f"editor stream: {editor.error}"] if editor.error else []
    corrected = {sid: s.text for sid, s in saves.items() if s.status == 200}
    late = [sid for sid, s in saves.items() if s.answered_s - locks[sid][0] >= args.delay_s]
    sentences: dict[int, Any] = {
        sid: {
            "original": text,
            "corrected": corrected.get(sid),
            "put_after_lock_s": round(saves[sid].sent_s - lock_s, 3),
            "answered_after_lock_s": round(saves[sid].answered_s - lock_s, 3),
            "status": saves[sid].status,
            "received": {},
        }
        for sid, (lock_s, text) in sorted(locks.items())
    }
    rows = []
    for where in ("A", "B"):
        firsts: list[float] = []
        from_store: list[float] = []
        uncorrected, missing = 0, 0
        for reader in (r for r in audience if r.name.startswith(where)):
            versions = reader.sentence_versions()
            for sid, (lock_s, _) in locks.items():
                got = versions.get(sid, [])
                sentences[sid]["received"][reader.name] = [(round(t - lock_s, 3), text, kind) for t, text, kind in got]
                if not got:
                    missing += 1
                    problems.append(f"audience {reader.name}: sentence {sid} never arrived")
                    continue
                firsts.append(got[0][0] - lock_s)
                if sid in stored:
                    from_store.append(got[0][0] + wall - stored[sid] / 1000)
                stale = [text for _, text, _ in got if text != corrected.get(sid)]
                if stale and sid in corrected:
                    uncorrected += 1
                    problems.append(
                        f"audience {reader.name}: sentence {sid} arrived as {stale!r}, corrected "
                        f"{corrected[sid]!r} ({sentences[sid]['answered_after_lock_s']} s after the lock)"
                    )
        rows.append(
            {
                "audience": f"front end {where}",
                "sentences": len(locks),
                "received": len(firsts),
                "missing": missing,
                "first_s_min": min(firsts, default=float("nan")),
                "first_s_p50": pct(firsts, 50),
                "first_s_max": max(firsts, default=float("nan")),
                "store_s_min": min(from_store, default=float("nan")),
                "early": sum(f < args.delay_s for f in from_store),
                "uncorrected": uncorrected,
            }
        )
    files = await transcript_checks(
        http, [a, b], room, corrected, {sid: text for sid, (_, text) in locks.items() if sid in corrected}
    )
    problems += [p for f in files for p in f["problems"]] + publisher_problems(run)
    return {
        "room": room,
        "delay_s": args.delay_s,
        "fix_after_s": args.fix_after_s,
        "rows": rows,
        "fixed": len(corrected),
        "late_fixes": late,
        "transcripts": files,
        "publisher": publisher_report(run),
        "editor_error": editor.error,
        "problems": problems,
        "sentences": sentences,
    }


def locked_ms(db: str, room: str) -> dict[int, int]:
    """Each sentence's lock time as the store wrote it (``sentences.locked_ms``: Unix ms, taken as the write began,
    so at or before its commit): sentence id -> ms."""
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT id, locked_ms FROM sentences WHERE room = %s", (room,)).fetchall()
    return {int(sid): int(ms) for sid, ms in rows}


# ---- transcript files ------------------------------------------------------------------------------------------------
def cue_text(document: str, fmt: str) -> str:
    """The words of an SRT or WebVTT file, cue after cue, on one line (numbers, times and the header left out): a
    sentence broken over lines or cues reads whole again."""
    lines = [
        line
        for line in document.splitlines()
        if line.strip() and "-->" not in line and not line.strip().isdigit() and line.strip() != "WEBVTT"
    ]
    text = " ".join(re.sub(r"<[^>]*>", "", line) for line in lines)
    if fmt == "vtt":
        text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return " ".join(text.split())


async def transcript_checks(
    http: aiohttp.ClientSession,
    front_ends: list[ServerProcess],
    room: str,
    expected: dict[int, str],
    originals: dict[int, str],
) -> list[dict[str, Any]]:
    """Fetch the room's transcript in every format from every front end and check it: each sentence of
    ``expected`` (id -> text) has that text, and no text of ``originals`` (id -> recognizer's text of a corrected
    sentence) is in it (the JSON: no sentence's ``text``; its ``original`` is the history and expected)."""
    out = []
    for name, fe in zip("AB", front_ends, strict=True):
        for fmt in FORMATS:
            url = f"{fe.base_url}/rooms/{room}/transcript.{fmt}"
            async with http.get(url) as r:
                status, document = r.status, await r.text()
            problems: list[str] = []
            if status != 200:
                problems.append(f"GET {url}: {status} {document[:300]}")
            elif fmt == "json":
                entries = {int(s["id"]): s for s in json.loads(document)["sentences"]}
                for sid, text in expected.items():
                    entry = entries.get(sid)
                    if entry is None or entry["text"] != text:
                        problems.append(f"{name} json: sentence {sid} is {entry and entry['text']!r}, not {text!r}")
                    elif entry["words"] and " ".join(w["w"] for w in entry["words"]) != text:
                        problems.append(f"{name} json: sentence {sid}'s words {entry['words']} are not {text!r}")
                    elif sid in originals and entry.get("original") != originals[sid]:
                        problems.append(
                            f"{name} json: sentence {sid}'s original is {entry.get('original')!r}, "
                            f"not {originals[sid]!r}"
                        )
            else:
                body = " ".join(document.split()) if fmt == "txt" else cue_text(document, fmt)
                problems += [f"{name} {fmt}: no {text!r}" for text in expected.values() if text not in body]
                problems += [
                    f"{name} {fmt}: still has {text!r} (sentence {sid})"
                    for sid, text in originals.items()
                    if re.search(rf"(?<!\S){re.escape(text)}(?!\S)", body)
                ]
            out.append({"front_end": name, "format": fmt, "status": status, "ok": not problems, "problems": problems})
    return out


# ---- the run ---------------------------------------------------------------------------------------------------------
REACH_COLUMNS = [
    ("viewers", "viewers", "{}"),
    ("saves", "saves", "{:d}"),
    ("received", "received", "{:d}"),
    ("lost", "lost", "{:d}"),
    ("wrong", "wrong", "{:d}"),
    ("final_wrong", "final wrong", "{:d}"),
    ("p50_s", "save -> viewer p50 s", "{:.3f}"),
    ("p95_s", "p95 s", "{:.3f}"),
    ("max_s", "max s", "{:.3f}"),
]
HOLD_COLUMNS = [
    ("audience", "audience", "{}"),
    ("sentences", "sentences", "{:d}"),
    ("received", "received", "{:d}"),
    ("missing", "missing", "{:d}"),
    ("first_s_min", "lock -> audience min s", "{:.3f}"),
    ("first_s_p50", "p50 s", "{:.3f}"),
    ("first_s_max", "max s", "{:.3f}"),
    ("store_s_min", "store lock -> audience min s", "{:.3f}"),
    ("early", "before delay", "{:d}"),
    ("uncorrected", "uncorrected seen", "{:d}"),
]


def report(one: dict[str, Any], two: dict[str, Any], args: argparse.Namespace) -> bool:
    """Print both tables and the verdicts; returns whether every target held."""
    print(f"\n{FAKE_NOTE}\n")
    print(
        f"1. an editor's save on front end A reaching viewers ({one['sentences']} sentences, {one['rounds']} "
        f"rounds, saves {args.spacing_s:g} s apart; PUT answered p50 {one['put_s_p50']:.3f} s, p95 "
        f"{one['put_s_p95']:.3f} s)\n"
    )
    print_markdown_table(REACH_COLUMNS, one["rows"])
    other = one["rows"][1]
    reach_ok = (
        other["p95_s"] <= args.target_s
        and not one["failed_puts"]
        and all(r["lost"] == r["wrong"] == r["final_wrong"] == 0 for r in one["rows"])
    )
    print(f"\ntarget p95 <= {args.target_s:g} s on the other front end: {'met' if reach_ok else 'NOT met'}")
    print(
        f"\n2. hold-back delay {two['delay_s']:g} s, each sentence corrected {two['fix_after_s']:g} s after its lock "
        f"({two['fixed']} corrected, {len(two['late_fixes'])} answered after the delay)\n"
    )
    print_markdown_table(HOLD_COLUMNS, two["rows"])
    earliest = min(r["first_s_min"] for r in two["rows"])
    from_store = min(r["store_s_min"] for r in two["rows"])
    never = all(r["uncorrected"] == 0 for r in two["rows"])
    print(
        f"\nearliest lock -> audience: {earliest:.3f} s from the editor stream's arrival, {from_store:.3f} s from "
        f"the store's lock time (must be >= {two['delay_s']:g} s: "
        f"{'yes' if from_store >= two['delay_s'] else 'NO'}); audience ever saw an uncorrected text: "
        f"{'no' if never else 'YES'}"
    )
    print("\ntranscript files (corrected text only):")
    for step, result in (("reach", one), ("holdback", two)):
        cells = ", ".join(
            f"{f['front_end']} {f['format']} {'ok' if f['ok'] else 'WRONG'}" for f in result["transcripts"]
        )
        print(f"  {step}: {cells}")
    problems = one["problems"] + two["problems"]
    for p in problems[:40]:
        print(f"  problem: {p}")
    hold_ok = (
        from_store >= two["delay_s"]
        and never
        and all(r["missing"] == 0 for r in two["rows"])
        and all(f["ok"] for f in two["transcripts"])
    )
    return reach_ok and hold_ok and not problems


async def main(args: argparse.Namespace) -> int:
    print(f"encoding clips into {CACHE_DIR} ...", file=sys.stderr)
    session_clip(0, args.seconds, args.pause_s, 60)
    session_clip(1, args.holdback_seconds, args.pause_s, 60)
    bin_dir = postgres.binaries()
    if bin_dir is None:
        raise SystemExit("this bench needs PostgreSQL's server binaries (apt-get install postgresql)")
    t0 = time.monotonic()
    with postgres.server(bin_dir) as url:
        db = await asyncio.to_thread(postgres.new_database, url)
        server_args = ["--recognizer", "fake", "--no-speakers", "--db", db]
        async with contextlib.AsyncExitStack() as stack:
            a = await stack.enter_async_context(bench_server(server_args, CACHE_DIR / "corrections-a.log"))
            b = await stack.enter_async_context(bench_server(server_args, CACHE_DIR / "corrections-b.log"))
            print(f"front ends ready: A {a.info}, B {b.info}", file=sys.stderr)
            async with aiohttp.ClientSession() as http:
                one = await reach(http, a, b, args)
                print(json.dumps({k: v for k, v in one.items() if k != "saves"}, default=str), file=sys.stderr)
                two = await holdback(http, a, b, db, args)
    ok = report(one, two, args)
    print(f"\n{time.monotonic() - t0:.0f} s in all; logs: {CACHE_DIR}/corrections-{{a,b}}.log")
    document = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "recognizer": FAKE_NOTE,
        "store": "postgresql (two front ends, one database)",
        "machine": machine_info(),
        "targets_met": ok,
        "reach": one,
        "holdback": two,
        "args": vars(args),
    }
    await write_json(Path(args.json), document)
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.corrections", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--saves", type=int, default=40, help="1: corrections saved in all")
    p.add_argument("--spacing-s", type=float, default=0.3, help="1: seconds between one save's answer and the next")
    p.add_argument("--min-sentences", type=int, default=10, help="1: locked sentences before the editing starts")
    p.add_argument("--seconds", type=float, default=120.0, help="1: the publisher's speech and pauses, seconds")
    p.add_argument("--viewers", type=int, default=1, help="viewers on each front end")
    p.add_argument("--target-s", type=float, default=1.0, help="1: save -> other front end p95 target, seconds")
    p.add_argument("--delay-s", type=float, default=5.0, help="2: the room's hold-back delay, seconds")
    p.add_argument("--fix-after-s", type=float, default=3.0, help="2: seconds from a lock to its correction")
    p.add_argument("--holdback-seconds", type=float, default=60.0, help="2: the publisher's speech and pauses")
    p.add_argument("--pause-s", type=float, default=2.5, help="pause between the clip's sentences, seconds")
    p.add_argument("--settle-s", type=float, default=2.0, help="wait for the last events after the stream, seconds")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="write the results here (default: %(default)s)")
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
