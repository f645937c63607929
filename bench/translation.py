"""Translated rooms: how soon a sentence's translation reaches a viewer after its lock, what a translation costs, and
how good and how fast-reading the translations are.

    python -m bench.translation [--sessions 1 3] [--languages es ca gl] [--seconds 60] [--json PATH]

1. **Latency** (the real server, ``python -m bench.serve``, with Apertium from Debian). For each count of sessions,
   that many rooms, each translated into ``--languages``, each with one WebRTC publisher streaming ``--seconds`` of
   read speech with 1.2-2.5 s pauses (``bench/lib/clips.py``'s "users" clips, 20 ms packets) and one viewer per
   language plus one of the spoken language, all reading ``GET /rooms/{id}/events`` in this process. A sentence's
   delay into a language runs from the arrival of its caption at the spoken language's viewer to the arrival of its
   translation at that language's viewer (this process's clock, both). The recognizer is the named fake
   (``--recognizer fake``, whose sentences read "audio of N seconds"): what is measured is translation in the rooms,
   not a model. Target: p95 <= 0.5 s for three languages, at one and at three sessions.
2. **Cost**: the Apertium pipelines' CPU per translated sentence and their memory (RSS) per language pair, read
   from the server's child processes with psutil over part 1.
3. **Quality and reading speed** (Apertium in this process): chrF (sacrebleu's) of ``--languages``' first (``es``)
   against ``shared/data/translations/es.jsonl``, translating each clip's reference English; and each sentence's
   characters per second: the clips' speech one after another, 1.5 s apart, cut into subtitle cues by the room's
   cue rules (``app.transcripts.cues``, which let a cue run into the silence after it), English and translated
   (captions read comfortably at up to 20 cps, and translations run longer than their source); the share of cues at
   most that fast. ``--speech``: also end to end through a room: a fresh real server on the shipped defaults, each
   clip's speech streamed over WebRTC (20 ms packets) into a room translated into Spanish, chrF of the Spanish its
   transcript keeps beside chrF from the reference; and the Chinese clips of ``en.jsonl`` into an English room
   with Whisper's translate task (chrF of the English captions, and whether the words said were kept).
4. **Reading speed on a held-out recording** (Apertium in this process): ``bench.cues``' recording (the English
   clips with a reference transcript, read, noisy and dialogue, shuffled with 0.3-1.5 s pauses, 12.3 minutes), each
   clip's reference one sentence at its speech's times (Silero VAD's first and last speech), translated into every
   one of ``--languages`` and cut into cues by the room's rules, English beside each language: the share of cues at
   most ``READABLE_CPS`` (target: 90 % in every language). ``--sentences``: also on the recognizer's sentences of
   that recording as ``bench.cues --json`` saved them (its ``align`` mode): the English cues by their word times, as
   ``bench.cues`` cuts them, each sentence's translations spread over it as a room's files spread them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import sacrebleu

from app.rooms import SentenceRecord
from app.transcripts.cues import build_cues
from bench.cues import records_of, saved_sentences
from bench.lib.clips import CACHE_DIR, encode_opus, session_clip, speech_bounds
from bench.lib.harness import (
    ROOT,
    ServerProcess,
    bench_server,
    get_json,
    machine_info,
    pct,
    run_clients,
    write_json,
)
from bench.lib.metrics import print_markdown_table
from bench.lib.recording import build_recording
from bench.lib.room_editing import RoomReader, create_room, follow, stop
from engine import ApertiumTranslator, TranslationRequest
from speechdata.translations import references, source_sentence
from speechdata.wer import word_errors

FAKE_NOTE = (
    "recognizer: the named fake (FakeTranscriber, --recognizer fake --no-speakers): what is measured is "
    "translation in the rooms (Apertium, real), not a model"
)
DEFAULT_JSON = ROOT / "bench" / "results" / "translation.json"
APERTIUM_PROGRAMS = ("apertium", "lt-proc", "cg-proc", "apertium-", "lrx-proc", "vislcg3", "hfst-proc")
READABLE_CPS = 20.0
GAP_MS = 1500  # between two clips' speech on the timeline of part 3: a pause between sentences


# ---- 1 and 2: latency and cost in the real server ---------------------------------------------------------------
def apertium_processes(server: ServerProcess) -> list[psutil.Process]:
    """The server's Apertium pipeline processes (each language pair is a shell pipeline of several programs): the
    shells among the server's children and everything under them."""
    shells = []
    for child in server.ps.children():
        with contextlib.suppress(psutil.Error):
            if child.name() in ("sh", "bash", "dash"):
                shells.append(child.pid)
    return [p for p in with_children(shells) if p.pid in shells or p.name().startswith(APERTIUM_PROGRAMS)]


def with_children(pids: list[int]) -> list[psutil.Process]:
    """The processes ``pids`` (an engine's pipelines: each a shell) and all their descendants."""
    out: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(pid)
            out += [top, *top.children(recursive=True)]
    return out


def unique_mb(processes: list[psutil.Process]) -> float:
    """Memory only these processes hold (USS: their RSS counts each shared library again), MB."""
    total = 0
    for p in processes:
        with contextlib.suppress(psutil.Error):
            total += p.memory_full_info().uss
    return round(total / 2**20, 1)


def cpu_s(processes: list[psutil.Process]) -> float:
    total = 0.0
    for p in processes:
        with contextlib.suppress(psutil.Error):
            times = p.cpu_times()
            total += times.user + times.system
    return total


def translated_arrivals(reader: RoomReader, lang: str) -> dict[int, float]:
    """When each sentence's first translation into ``lang`` reached ``reader`` (monotonic s), by sentence id."""
    out: dict[int, float] = {}
    for t, _, m in reader.events:
        if m.get("type") == "translation" and m.get("lang") == lang:
            for s in m.get("sentences") or ():
                out.setdefault(int(s["id"]), t)
    return out


def missing(reader: RoomReader, lang: str) -> int:
    return sum(
        len(m.get("missing") or ())
        for _, _, m in reader.events
        if m.get("type") == "translation" and m.get("lang") == lang and not m.get("update")
    )


def caption_arrivals(reader: RoomReader) -> dict[int, float]:
    out: dict[int, float] = {}
    for t, _, m in reader.events:
        if m.get("type") == "caption":
            for s in m.get("sentences") or ():
                out.setdefault(int(s["id"]), t)
    return out


async def latency(
    http: aiohttp.ClientSession, server: ServerProcess, sessions: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One step of part 1: ``sessions`` rooms at once (see the module)."""
    base = server.base_url
    rooms = [(await create_room(http, base, {"languages": args.languages}))[0] for _ in range(sessions)]
    readers = {
        room: [RoomReader(f"{base}/rooms/{room}/events", f"{room}-source")]
        + [RoomReader(f"{base}/rooms/{room}/events?lang={lang}", f"{room}-{lang}") for lang in args.languages]
        for room in rooms
    }
    tasks = await follow(http, [r for rs in readers.values() for r in rs])
    engines = apertium_processes(server)
    cpu0 = cpu_s(engines)
    publishers = [
        run_clients(base, [session_clip(i, args.seconds, 0, 20, kind="users").ogg], offer_fields=[{"room": room}])
        for i, room in enumerate(rooms)
    ]
    try:
        await asyncio.gather(*publishers)
        await asyncio.sleep(args.settle_s)
    finally:
        await stop(tasks)
    engines = apertium_processes(server)  # the pipelines start with a room's first sentence in each language
    cpu1 = cpu_s(engines)
    delays: dict[str, list[float]] = {lang: [] for lang in args.languages}
    untranslated = 0
    sentences = 0
    lost = 0
    for room_readers in readers.values():
        source, *langs = room_readers
        locks = caption_arrivals(source)
        sentences += len(locks)
        for lang, reader in zip(args.languages, langs, strict=True):
            got = translated_arrivals(reader, lang)
            untranslated += missing(reader, lang)
            for sid, at in locks.items():
                if sid in got:
                    delays[lang].append(got[sid] - at)
                else:
                    lost += 1
    every = [d for ds in delays.values() for d in ds]
    translations = len(every)
    return {
        "sessions": sessions,
        "languages": list(args.languages),
        "sentences": sentences,
        "translations": translations,
        "lost": lost,
        "missing": untranslated,
        "p50_s": round(pct(every, 50), 3),
        "p95_s": round(pct(every, 95), 3),
        "max_s": round(max(every), 3) if every else None,
        "by_language_p95_s": {lang: round(pct(ds, 95), 3) for lang, ds in delays.items()},
        "engine_cpu_ms_per_translation": round((cpu1 - cpu0) * 1000 / translations, 2) if translations else None,
        "engine_processes": len(engines),
        "engine_uss_mb": unique_mb(engines),
    }


# ---- 3: quality and reading speed -------------------------------------------------------------------------------
def quality(lang: str) -> dict[str, Any]:
    """chrF of Apertium into ``lang`` against its reference translations, and reading speeds (see the module)."""
    pairs = references(lang)
    english = [source_sentence(clip) for clip, _ in pairs]
    engine = ApertiumTranslator()
    try:
        t0 = time.process_time()
        out = engine.translate(TranslationRequest("en", lang, tuple(english)))
        own_cpu = time.process_time() - t0
        pipelines = with_children(engine.pids())
        pipeline_cpu = cpu_s(pipelines)
        uss = unique_mb(pipelines)
    finally:
        engine.close()
    chrf = sacrebleu.corpus_chrf(out, [[text for _, text in pairs]]).score
    rows: list[dict[str, Any]] = []
    timeline: list[tuple[int, int]] = []  # each clip's speech on one timeline, GAP_MS apart (ms)
    at = 0
    for (clip, _), source, translated in zip(pairs, english, out, strict=True):
        start, end = speech_bounds(clip)
        seconds = max(0.5, end - start)
        timeline.append((at, at + round(seconds * 1000)))
        at += round(seconds * 1000) + GAP_MS
        rows.append(
            {
                "clip": clip,
                "seconds": round(seconds, 2),
                "source_cps": round(len(source) / seconds, 1),
                "translated_cps": round(len(translated) / seconds, 1),
                "text": translated,
            }
        )
    readable = {
        name: reading_share(
            [
                SentenceRecord(i, "s", text, start, end, 0)
                for i, (text, (start, end)) in enumerate(zip(texts, timeline, strict=True))
            ]
        )
        for name, texts in (("source", english), ("translated", out))
    }
    return {
        "lang": lang,
        "sentences": len(out),
        "chrf": round(chrf, 1),
        "longer_than_source": round(sum(map(len, out)) / sum(map(len, english)), 3),
        "readable_share": {k: round(v, 3) for k, v in readable.items()},
        "cpu_ms_per_sentence": round((own_cpu + pipeline_cpu) * 1000 / len(out), 2),
        "pipeline_uss_mb": uss,
        "rows": rows,
    }


async def publish_each(base: str, room: str, clips: list[str], start: dict[str, Any]) -> list[str]:
    """Stream each clip (0.5 s of silence before, 2 s after, 20 ms Opus packets) over WebRTC into ``room``, one
    publisher after another, each with ``start``'s fields; their session ids, in order."""
    from speechdata.corpus import audio, pad

    sessions = []
    for clip in clips:
        ogg = CACHE_DIR / f"translation-speech-{clip}.ogg"
        if not ogg.exists():
            encode_opus(pad(audio(clip), 0.5, 2.0), ogg)
        run = await run_clients(base, [ogg], offer_fields=[{"room": room}], start=start)
        [client] = run.clients
        if client.error or client.refused:
            raise RuntimeError(f"{clip}: {client.error or client.refused}")
        sessions.append(client.session)
    return sessions


async def room_versions(
    http: aiohttp.ClientSession, base: str, room: str, sessions: list[str], lang: str
) -> list[tuple[str, str]]:
    """Each session's sentences in ``room`` joined, as ``(text, text in lang)``, once every sentence has its
    version in ``lang`` (or after 60 s: those without one count as empty)."""
    deadline = time.monotonic() + 60
    while True:
        doc = await get_json(http, f"{base}/rooms/{room}/transcript.json")
        sentences = doc["sentences"]
        if all(lang in s.get("translations", {}) for s in sentences) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    return [
        (
            " ".join(s["text"] for s in sentences if s["session"] == session),
            " ".join(s.get("translations", {}).get(lang, "") for s in sentences if s["session"] == session).strip(),
        )
        for session in sessions
    ]


async def through_rooms(reference_chrf: float) -> dict[str, Any]:
    """Part 3 end to end (``--speech``): a fresh real server on the shipped defaults (the embedded model, Apertium),
    the clips of ``es.jsonl`` streamed one by one into a room translated into Spanish, and chrF of what its
    transcript keeps in Spanish, beside ``reference_chrf`` (Apertium from the reference English); then the Chinese
    clips of ``en.jsonl`` into an English room with Whisper's translate task: chrF of the English captions, and
    the words said the room keeps beside them."""
    es_pairs, zh_pairs = references("es"), references("en")
    async with bench_server([], CACHE_DIR / "translation-speech.log") as server, aiohttp.ClientSession() as http:
        base = server.base_url
        spanish, _ = await create_room(http, base, {"languages": ["es"]})
        heard = await room_versions(
            http, base, spanish, await publish_each(base, spanish, [c for c, _ in es_pairs], {}), "es"
        )
        english, _ = await create_room(http, base, {})
        said = await room_versions(
            http,
            base,
            english,
            await publish_each(base, english, [c for c, _ in zh_pairs], {"language": "zh", "task": "translate"}),
            "zh",
        )
    counts = [word_errors(source_sentence(clip), text) for (clip, _), (text, _) in zip(es_pairs, heard, strict=True)]
    errors = sum(e for e, _ in counts) / max(1, sum(n for _, n in counts))
    spanish_chrf = sacrebleu.corpus_chrf([t for _, t in heard], [[t for _, t in es_pairs]]).score
    english_chrf = sacrebleu.corpus_chrf([t for t, _ in said], [[t for _, t in zh_pairs]]).score
    return {
        "es": {
            "chrf": round(spanish_chrf, 1),
            "reference_chrf": reference_chrf,
            "recognizer_wer": round(errors, 3),
            "clips": len(es_pairs),
            "rows": heard,
        },
        "zh_translate_task": {
            "chrf": round(english_chrf, 1),
            "clips": len(zh_pairs),
            "originals_kept": sum(bool(o) and not o.isascii() for _, o in said),
            "rows": said,
        },
    }


def reading_share(sentences: list[SentenceRecord]) -> float:
    """The share of the subtitle cues of ``sentences`` (the room's cue rules, ``app.transcripts.cues``; a sentence
    without word times has its words spread over it, as for a translation) that read at most ``READABLE_CPS``
    characters per second."""
    cues = build_cues(sentences)
    return sum(c.chars * 1000 / max(1, c.end_ms - c.start_ms) <= READABLE_CPS for c in cues) / len(cues)


# ---- 4: reading speed on a held-out recording ---------------------------------------------------------------------
def held_out(languages: list[str], minutes: float, saved: Path | None) -> dict[str, Any]:
    """The share of cues at most ``READABLE_CPS`` on ``bench.cues``' recording, English and each of ``languages``
    (see the module), with the characters each language takes per English character: ``"reference"`` (each clip's
    reference one sentence), and ``"recognized"`` from ``saved`` (``bench.cues --json``) when given."""
    _, pieces = build_recording(minutes)
    bounds = {clip: speech_bounds(clip) for clip in sorted({p.clip for p in pieces})}
    reference = [
        SentenceRecord(
            k,
            "s",
            source_sentence(p.clip),
            round((p.start_s + bounds[p.clip][0]) * 1000),
            round((p.start_s + bounds[p.clip][1]) * 1000),
            0,
        )
        for k, p in enumerate(pieces)
    ]
    sets = {"reference": reference}
    if saved is not None:
        sets["recognized"] = records_of(saved_sentences(saved)["align"][1])
    result: dict[str, Any] = {"minutes": round(pieces[-1].end_s / 60, 1), "clips": len(bounds)}
    engine = ApertiumTranslator()
    try:
        for name, records in sets.items():
            english = tuple(dict.fromkeys(r.text for r in records))  # each text once (the clips repeat)
            row: dict[str, Any] = {
                "sentences": len(records),
                "en": {"readable_share": round(reading_share(records), 3), "length_to_english": 1},
            }
            for lang in languages:
                said = dict(zip(english, engine.translate(TranslationRequest("en", lang, english)), strict=True))
                translated = [dataclasses.replace(r, text=said[r.text], words=()) for r in records]
                row[lang] = {
                    "readable_share": round(reading_share(translated), 3),
                    "length_to_english": round(sum(map(len, said.values())) / sum(map(len, english)), 3),
                }
            result[name] = row
    finally:
        engine.close()
    return result


async def main(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    for i in range(max(args.sessions)):
        session_clip(i, args.seconds, 0, 20, kind="users")
    steps: list[dict[str, Any]] = []
    for sessions in [] if args.quality_only else args.sessions:
        # A fresh server per step: the first sentences (the pipelines starting) count.
        log = CACHE_DIR / f"translation-{sessions}.log"
        async with (
            bench_server(["--recognizer", "fake", "--no-speakers"], log) as server,
            aiohttp.ClientSession() as http,
        ):
            steps.append(await latency(http, server, sessions, args))
            print(json.dumps(steps[-1]), file=sys.stderr)
    scored = quality(args.languages[0]) if args.languages[0] == "es" else None
    if scored is not None and args.speech:
        scored["end_to_end"] = await through_rooms(scored["chrf"])
    recording = held_out(args.languages, args.minutes, args.sentences)
    print_markdown_table(
        [
            ("sessions", "sessions", "{}"),
            ("translations", "translations", "{}"),
            ("lost", "lost", "{}"),
            ("missing", "missing", "{}"),
            ("p50_s", "p50 s", "{:.3f}"),
            ("p95_s", "p95 s", "{:.3f}"),
            ("max_s", "max s", "{}"),
            ("engine_cpu_ms_per_translation", "engine CPU ms / translation", "{}"),
            ("engine_uss_mb", "engine memory MB (USS)", "{}"),
        ],
        steps,
    )
    if scored is not None:
        print(
            f"\nApertium en->{scored['lang']}: chrF {scored['chrf']} over {scored['sentences']} sentences; "
            f"{scored['longer_than_source']:.0%} of the source's length; cues at <= {READABLE_CPS:g} cps: "
            f"English {scored['readable_share']['source']:.0%}, translated "
            f"{scored['readable_share']['translated']:.0%}; {scored['cpu_ms_per_sentence']} ms CPU per sentence, "
            f"{scored['pipeline_uss_mb']} MB (USS) for its pipeline"
        )
        if "end_to_end" in scored:
            e2e = scored["end_to_end"]["es"]
            zh = scored["end_to_end"]["zh_translate_task"]
            print(
                f"end to end through a room (a fresh server, the embedded model, WER {e2e['recognizer_wer']:.1%}, "
                f"then the room's Apertium): chrF {e2e['chrf']} against {e2e['reference_chrf']} from the reference "
                f"English; the Chinese clips with the translate task: chrF {zh['chrf']} (English), the words said "
                f"kept for {zh['originals_kept']} of {zh['clips']}"
            )
    for name in ("reference", "recognized"):
        if name in recording:
            row = recording[name]
            print(
                f"\nheld-out recording ({recording['minutes']} min), {name} sentences ({row['sentences']}): cues "
                f"at <= {READABLE_CPS:g} cps "
                + ", ".join(
                    f"{lang} {row[lang]['readable_share']:.0%} (length {row[lang]['length_to_english']:.0%})"
                    for lang in ["en", *args.languages]
                )
            )
    ok = all(s["p95_s"] <= args.target_s and not s["lost"] for s in steps)
    document = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "recognizer": FAKE_NOTE,
        "machine": machine_info(),
        "target_p95_s": args.target_s,
        "targets_met": ok,
        "latency": steps,
        "quality": scored,
        "held_out": recording,
        "seconds": round(time.monotonic() - t0),
        "args": vars(args),
    }
    await write_json(Path(args.json), document)
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.translation", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 3], help="rooms (one publisher each) at once")
    p.add_argument("--languages", nargs="+", default=["es", "ca", "gl"], help="each room's languages")
    p.add_argument("--seconds", type=float, default=60.0, help="each publisher's speech and pauses, seconds")
    p.add_argument("--settle-s", type=float, default=3.0, help="wait for the last translations, seconds")
    p.add_argument("--target-s", type=float, default=0.5, help="lock -> translation p95 target, seconds")
    p.add_argument("--speech", action="store_true", help="3: also end to end through a room (a real server)")
    p.add_argument("--quality-only", action="store_true", help="3 and 4 only: no server, no latency steps")
    p.add_argument("--minutes", type=float, default=10.0, help="4: the held-out recording's length (at least)")
    p.add_argument("--sentences", type=Path, help="4: also on these recognized sentences (bench.cues --json)")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="write the results here (default: %(default)s)")
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
