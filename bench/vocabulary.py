"""Room vocabulary: what respelling locked text by it does to recognition, against the terms in the decoder's context.

    python -m bench.vocabulary [--terms Dashwood Quilter Frere Claflin Abbie Concord "Kate's"] [--no-prompt]
                               [--json out.json]

A room's vocabulary does not reach the recognizer: its publishers respell what they lock
(``app.rooms.publisher``, ``_respelt``) with ``app.rooms.vocabulary.Corrector``, built from the terms an editor
entered and the fixes the room learned from editors' corrections (``app.rooms.edits.learned_fixes``: "heard →
meant" where an editor replaced the recognizer's words by a name). The decoder prompt was measured here first and
made whisper-base drop whole sentences (+9 WER points on clips without any term). This bench measures the product's
way, with the prompt beside it as the comparison a user would rerun.

Every English clip of ``../shared/data/speech`` is decoded on one loaded engine (default: the embedded whisper-base,
speaker labels on, as the server ships) through a live session (partials on, not a background file job), its audio
the clip with 1 s of silence before and 2.5 s after, fed in 60 ms chunks as fast as the session keeps up
(``Session.caught_up``: at most ``--vad-backlog-s`` of audio waiting for the VAD, at most ``--pending`` closed
sentences waiting for their lock; ``--realtime`` paces it like a microphone), at most twice:
- ``without``: no context, the live session's path;
- ``prompt`` (on unless ``--no-prompt``): the terms as hotwords (``SessionOptions.hotwords``), the decoder's
  previous-text context, as the old room vocabulary gave them; each clip's two decodes alternate which goes first.
Three more conditions come from the ``without`` text, sentence by sentence as a room respells them, with no decode:
- ``entered``: ``Corrector(terms)``, an editor typed the vocabulary before the event;
- ``learned``: the clips in manifest order as one event; an editor corrects the first occurrence of each term the
  room shows wrong: the reference and the shown words are aligned (difflib over ``normalise``d words), the shown
  stretch aligned to the term is replaced by the term in its sentence, and the room learns
  ``learned_fixes(shown sentence, corrected sentence)``, as ``PUT /rooms/{id}/sentences/{sid}`` does; every later
  clip is shown through ``Corrector(learned meants, learned fixes)``. A term's occurrences in the clips after the
  one where it was corrected are its "later" ones (the target: at least 80 % of them right). An occurrence whose
  recording an earlier one of the term already came from (a derived clip: the same utterance reverberated, in
  babble, or inside a concatenation; the manifest's ``components``) is no new test of the fix and is counted
  apart; with fewer than ``MIN_NEW_LATER`` from new recordings the bench says the target cannot be judged.

Scoring (``speechdata.wer``: lower case, punctuation out, hyphens split words):
- per term: occurrences in the references, right per condition (the reference word aligned by jiwer to the same
  word: "Dash Wood" for "Dashwood" is wrong), what was written instead, the editor's correction, what the room
  learned from it, and the later occurrences right without and with what it learned;
- WER on the clips whose reference holds none of the terms, per condition (``learned`` with every fix of the run;
  the target: entered and learned at most +0.5 points over without), and on the clips that hold one;
- rewrites: the stretches the Corrector changed, on every clip, each listed (on a clip without a term, a false
  rewrite); hallucinated terms: a term written more often than the reference has it, the reference-less
  street-noise clips (``dns_street_mobile_*``) included;
- the prompt's style: sentences locked, segments the hallucination guard dropped, words written; the clips whose
  errors it changed most.

The terms must each be one word after normalisation. ``--json`` writes the tables, each clip's text per condition,
the editor's corrections and every term occurrence.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from app.rooms.vocabulary import Corrector, Fix
from bench.lib.metrics import print_markdown_table
from bench.lib.room_terms import (
    DEFAULT_TERMS,
    Clip,
    Occurrence,
    Run,
    extra_terms,
    occurrences,
    recording,
    respelt,
    rewrites,
    select_clips,
    simulate_room,
    term_key,
    transcribe,
)
from engine import CaptionEngine, SessionOptions
from engine.config import EngineConfig, TranscriberConfig
from speechdata.wer import normalise, word_errors

DECODES = ("without", "prompt")  # the decodes of a clip: no context; the terms as hotwords
CONDITIONS = ("without", "entered", "learned", "prompt")
MIN_NEW_LATER = 5  # later occurrences from new recordings needed before the 80 % target is judged
CHANGED_SHOWN = 10  # clips listed in the table of those whose errors the prompt changed


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), with "avx512_bf16" after it where the CPU has that instruction set
    (bfloat16 decodes run much faster with it); the machine's architecture where there is no such file."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.machine()
    name = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
        platform.machine(),
    )
    return name + (" avx512_bf16" if "avx512_bf16" in info else "")


def wer_row(
    name: str, clips: list[Clip], texts: dict[str, dict[str, str]], conditions: tuple[str, ...]
) -> dict[str, Any]:
    """WER per condition over ``clips`` (pooled: errors / reference words, in %), and its change against
    "without" in points."""
    row: dict[str, Any] = {"set": name, "clips": len(clips), "words": 0}
    for condition in CONDITIONS:
        row[f"wer_{condition}"] = row[f"delta_{condition}"] = float("nan")
    for condition in conditions:
        errors = words = 0
        for clip in clips:
            e, w = word_errors(clip.text or "", texts[clip.clip_id][condition])
            errors, words = errors + e, words + w
        row["words"] = words
        row[f"errors_{condition}"] = errors
        row[f"wer_{condition}"] = 100 * errors / words if words else float("nan")
        row[f"delta_{condition}"] = row[f"wer_{condition}"] - row["wer_without"]
    return row


def report(clips: list[Clip], runs: dict[str, dict[str, Run]], terms: tuple[str, ...]) -> dict[str, Any]:
    """The bench's tables and every term occurrence and rewrite, from the decodes (``runs[clip id][decode]``)."""
    conditions = tuple(c for c in CONDITIONS if c != "prompt" or all("prompt" in runs[k.clip_id] for k in clips))
    entered = Corrector(terms)
    shown, edits, learned = simulate_room(clips, runs, terms)
    fixes = [f for f in (Fix.parse(e) for e in learned) if f is not None]
    everything = Corrector([f.meant for f in fixes], learned)  # every fix of the run, for the clips without a term
    sentences: dict[str, dict[str, list[str]]] = {}
    for clip in clips:
        raw = runs[clip.clip_id]["without"].sentences
        sentences[clip.clip_id] = {
            "without": raw,
            "entered": respelt(entered, raw),
            "learned": shown[clip.clip_id] if clip.terms else respelt(everything, raw),
        }
    texts = {k: {c: " ".join(s) for c, s in v.items()} for k, v in sentences.items()}
    if "prompt" in conditions:
        for clip in clips:
            texts[clip.clip_id]["prompt"] = runs[clip.clip_id]["prompt"].text
    found: dict[str, list[Occurrence]] = {c: [] for c in conditions}
    for clip in clips:
        if clip.text and clip.terms:
            for condition in conditions:
                found[condition] += occurrences(clip.text, texts[clip.clip_id][condition], terms, clip.clip_id)
    # Where each occurrence was spoken, and whether it comes after the editor's correction of its term.
    order = {c.clip_id: k for k, c in enumerate(clips)}
    by_id = {c.clip_id: c for c in clips}
    seen: Counter[tuple[str, str]] = Counter()
    where: list[str] = []
    for o in found["without"]:
        where.append(recording(by_id[o.clip_id], o.term, seen[o.term, o.clip_id]))
        seen[o.term, o.clip_id] += 1
    corrected_at = {e.term: order[e.clip_id] for e in edits}
    later = [
        k for k, o in enumerate(found["without"]) if o.term in corrected_at and order[o.clip_id] > corrected_at[o.term]
    ]
    term_rows: list[dict[str, Any]] = []
    learn_rows: list[dict[str, Any]] = []
    for term in terms:
        mine = {c: [o for o in found[c] if o.term == term] for c in conditions}
        n = len(mine["without"])
        term_rows.append(
            {
                "term": term,
                "clips": len({o.clip_id for o in mine["without"]}),
                "occurrences": n,
                **{f"right_{c}": sum(o.right for o in mine[c]) for c in conditions},
                **{
                    f"heard_{c}": ", ".join(sorted({o.heard or "(left out)" for o in mine[c] if not o.right})) or "-"
                    for c in conditions
                },
            }
        )
        edit = next((e for e in edits if e.term == term), None)
        mine_later = [k for k in later if found["without"][k].term == term]
        before = {
            where[k]
            for k, o in enumerate(found["without"])
            if o.term == term and edit is not None and order[o.clip_id] <= corrected_at[term]
        }
        new = [k for k in mine_later if where[k] not in before]
        learn_rows.append(
            {
                "term": term,
                "corrected_in": edit.clip_id if edit else "-",
                "edit": f"{edit.shown} => {edit.corrected}" if edit else "-",
                "learned": (", ".join(edit.fixes) or "(nothing)") if edit else "-",
                "later": len(mine_later),
                "later_new": len(new),
                "later_right_without": sum(found["without"][k].right for k in mine_later),
                "later_right_learned": sum(found["learned"][k].right for k in mine_later),
                "later_new_right_learned": sum(found["learned"][k].right for k in new),
                "later_clips": ", ".join(
                    f"{found['without'][k].clip_id} ({'new recording' if k in new else 'again'})" for k in mine_later
                )
                or "-",
            }
        )
    totals = {
        k: sum(r[k] for r in learn_rows)
        for k in ("later", "later_new", "later_right_without", "later_right_learned", "later_new_right_learned")
    }
    learn_rows.append(
        {
            "term": "all",
            "corrected_in": f"{len(edits)} corrections",
            "edit": "-",
            "learned": f"{len(learned)} entries",
            "later_clips": "-",
            **totals,
        }
    )
    with_text = [c for c in clips if c.text]
    other = [c for c in with_text if not c.terms]
    termed = [c for c in with_text if c.terms]
    wer_rows = [
        wer_row(f"other: {kind}", [c for c in other if c.kind == kind], texts, conditions)
        for kind in sorted({c.kind for c in other})
    ]
    wer_rows.append(wer_row("other: all", other, texts, conditions))
    wer_rows.append(wer_row("clips with a term", termed, texts, conditions))
    rewrite_rows, rewrite_list = [], []
    for name, group in [
        ("other clips", other),
        ("clips with a term", termed),
        ("no-text noise", [c for c in clips if not c.text]),
    ]:
        row: dict[str, Any] = {"set": name, "clips": len(group)}
        for condition in conditions:
            extra: Counter[str] = Counter()
            for clip in group:
                extra += extra_terms(clip.text, texts[clip.clip_id][condition], terms)
            row[f"terms_{condition}"] = sum(extra.values())
            row[f"which_{condition}"] = ", ".join(f"{t} x{n}" for t, n in sorted(extra.items())) or "-"
            if condition in ("entered", "learned"):
                changed = []
                for clip in group:
                    got = rewrites(sentences[clip.clip_id]["without"], sentences[clip.clip_id][condition])
                    changed += got
                    rewrite_list += [
                        {"condition": condition, "set": name, "clip": clip.clip_id, "written": a, "respelt": b}
                        for a, b in got
                    ]
                row[f"rewrites_{condition}"] = len(changed)
                row[f"rewritten_words_{condition}"] = sum(max(1, len(a.split())) for a, _ in changed)
        rewrite_rows.append(row)
    style = []
    for name, group in [
        ("other clips", other),
        ("clips with a term", termed),
        ("no-text noise", [c for c in clips if not c.text]),
    ]:
        looks: dict[str, Any] = {"set": name, "clips": len(group)}
        for decode in (d for d in DECODES if d in conditions):
            mine_runs = [runs[c.clip_id][decode] for c in group]
            looks[f"words_{decode}"] = sum(len(normalise(r.text)) for r in mine_runs)
            looks[f"sentences_{decode}"] = sum(len(r.sentences) for r in mine_runs)
            looks[f"dropped_{decode}"] = sum(sum(r.dropped.values()) for r in mine_runs)
        style.append(looks)
    changed_rows: list[dict[str, Any]] = []
    if "prompt" in conditions:
        for clip in with_text:
            without = word_errors(clip.text or "", texts[clip.clip_id]["without"])
            prompt = word_errors(clip.text or "", texts[clip.clip_id]["prompt"])
            if prompt[0] != without[0]:
                changed_rows.append(
                    {
                        "clip": clip.clip_id,
                        "words": without[1],
                        "errors_without": without[0],
                        "errors_prompt": prompt[0],
                        "delta": prompt[0] - without[0],
                        "text_prompt": texts[clip.clip_id]["prompt"],
                    }
                )
        changed_rows.sort(key=lambda r: (-abs(r["delta"]), r["clip"]))
    occurrence_rows = {
        c: [{**vars(o), "recording": where[k], "later": k in later} for k, o in enumerate(found[c])] for c in conditions
    }
    return {
        "conditions": list(conditions),
        "terms": term_rows,
        "learning": learn_rows,
        "recurrence": recurrence_note(totals),
        "wer": wer_rows,
        "rewrites": rewrite_rows,
        "rewrite_list": rewrite_list,
        "style": style,
        "changed": changed_rows,
        "edits": [vars(e) for e in edits],
        "learned": list(learned),
        "occurrences": occurrence_rows,
        "texts": texts,
    }


def recurrence_note(totals: dict[str, int]) -> str:
    """What the data allows to say of the target (80 % of later occurrences right after one correction)."""
    n, new = totals["later"], totals["later_new"]
    if new >= MIN_NEW_LATER:
        pct = 100 * totals["later_new_right_learned"] / new
        return f"{new} later occurrences from new recordings, {pct:.0f} % right with what the room learned."
    return (
        f"Too few recurring misrecognised terms to judge the 80 % target: {n} later occurrence(s) of a corrected "
        f"term, {new} of them from a recording not already heard for that term (fewer than {MIN_NEW_LATER}); "
        f"the rest repeat an earlier occurrence's recording (reverberated, mixed or concatenated), which shows "
        f"the fix holding where the recognizer misspells the same way again, not a new speaker or sentence."
    )


def print_report(tables: dict[str, Any]) -> None:
    """The tables as Markdown, a column per condition."""
    conditions = tables["conditions"]
    print(
        "\nTerm occurrences recognised right (the reference word aligned to the same word), and what was written "
        "instead:\n"
    )
    print_markdown_table(
        [
            ("term", "term", "{}"),
            ("clips", "clips", "{:d}"),
            ("occurrences", "occurrences", "{:d}"),
            *[(f"right_{c}", f"right {c}", "{:d}") for c in conditions],
            *[(f"heard_{c}", f"written {c}", "{}") for c in conditions],
        ],
        tables["terms"],
    )
    print(
        "\nLearned: the editor corrects the first occurrence the room shows wrong; its later occurrences "
        "(after that clip), right without and as the room then shows them:\n"
    )
    print_markdown_table(
        [
            ("term", "term", "{}"),
            ("corrected_in", "corrected in", "{}"),
            ("learned", "room learned", "{}"),
            ("later", "later", "{:d}"),
            ("later_right_without", "right without", "{:d}"),
            ("later_right_learned", "right learned", "{:d}"),
            ("later_new", "later, new recording", "{:d}"),
            ("later_new_right_learned", "new recording right learned", "{:d}"),
            ("later_clips", "later clips", "{}"),
        ],
        tables["learning"],
    )
    print(f"\n{tables['recurrence']}\n\nThe corrections:\n")
    print_markdown_table(
        [("term", "term", "{}"), ("clip_id", "clip", "{}"), ("shown", "shown", "{}"), ("corrected", "corrected", "{}")],
        tables["edits"],
    )
    print(
        "\nWER (%) per condition (learned: every fix of the run on the clips without a term; the room as it was "
        "live on those with one), change against 'without' in points:\n"
    )
    print_markdown_table(
        [
            ("set", "clips", "{}"),
            ("clips", "n", "{:d}"),
            ("words", "ref words", "{:d}"),
            *[(f"wer_{c}", f"WER {c}", "{:.2f}") for c in conditions],
            *[(f"delta_{c}", f"delta {c}", "{:+.2f}") for c in conditions if c != "without"],
        ],
        tables["wer"],
    )
    print(
        "\nRewrites (stretches the Corrector changed, words among them) and hallucinated terms (a term written more "
        "often than the reference has it):\n"
    )
    respelling = [c for c in ("entered", "learned") if c in conditions]
    print_markdown_table(
        [
            ("set", "clips", "{}"),
            ("clips", "n", "{:d}"),
            *[(f"rewrites_{c}", f"rewrites {c}", "{:d}") for c in respelling],
            *[(f"rewritten_words_{c}", f"words {c}", "{:d}") for c in respelling],
            *[(f"terms_{c}", f"terms {c}", "{:d}") for c in conditions],
            *[(f"which_{c}", f"which {c}", "{}") for c in conditions],
        ],
        tables["rewrites"],
    )
    print("\nEvery rewrite:\n")
    print_markdown_table(
        [
            ("condition", "condition", "{}"),
            ("set", "set", "{}"),
            ("clip", "clip", "{}"),
            ("written", "written", "{}"),
            ("respelt", "respelt", "{}"),
        ],
        tables["rewrite_list"],
    )
    decodes = [d for d in DECODES if d in conditions]
    print("\nThe decodes: words written, sentences locked, segments the hallucination guard dropped:\n")
    print_markdown_table(
        [
            ("set", "clips", "{}"),
            ("clips", "n", "{:d}"),
            *[(f"words_{d}", f"words {d}", "{:d}") for d in decodes],
            *[(f"sentences_{d}", f"sentences {d}", "{:d}") for d in decodes],
            *[(f"dropped_{d}", f"dropped {d}", "{:d}") for d in decodes],
        ],
        tables["style"],
    )
    if "prompt" in conditions:
        print(f"\nClips whose errors the prompt changed ({len(tables['changed'])}; the largest changes first):\n")
        print_markdown_table(
            [
                ("clip", "clip", "{}"),
                ("words", "ref words", "{:d}"),
                ("errors_without", "errors without", "{:d}"),
                ("errors_prompt", "errors prompt", "{:d}"),
                ("text_prompt", "text with the prompt", "{}"),
            ],
            [{**r, "text_prompt": r["text_prompt"][:90]} for r in tables["changed"][:CHANGED_SHOWN]],
        )


async def main(args: argparse.Namespace) -> int:
    terms = tuple(args.terms)
    for term in terms:
        term_key(term)
    clips = select_clips(terms, args.exclude, args.only)
    audio_s = sum(c.audio_s for c in clips)
    print(f"{len(clips)} clips, {audio_s:.0f} s of audio; vocabulary: {', '.join(terms)}", file=sys.stderr, flush=True)
    engine = CaptionEngine(EngineConfig(transcriber=TranscriberConfig(model=args.model), speakers=not args.no_speakers))
    decodes = DECODES if args.prompt else DECODES[:1]
    options = {"without": SessionOptions(language="en"), "prompt": SessionOptions(language="en", hotwords=terms)}
    runs: dict[str, dict[str, Run]] = {}
    t_start = time.monotonic()
    feed = {"realtime": args.realtime, "vad_backlog_s": args.vad_backlog_s, "pending": args.pending}
    await engine.start()
    try:
        if args.warmup:  # the first decodes after start-up are slow; the first clip must not pay for them
            await transcribe(engine, clips[0].samples, options["without"], **feed)
        for k, clip in enumerate(clips):
            order = decodes[k % len(decodes) :] + decodes[: k % len(decodes)]  # each decode goes first in turn
            runs[clip.clip_id] = {}
            for decode in order:
                run = await transcribe(engine, clip.samples, options[decode], **feed)
                runs[clip.clip_id][decode] = run
                if run.errors:
                    print(f"{clip.clip_id} {decode}: {'; '.join(run.errors)}", file=sys.stderr)
            print(
                f"{k + 1}/{len(clips)} {clip.clip_id} ({time.monotonic() - t_start:.0f} s)", file=sys.stderr, flush=True
            )
    finally:
        await engine.close()
    tables = report(clips, runs, terms)
    wall = {d: round(sum(r[d].wall_s for r in runs.values() if d in r), 1) for d in decodes}
    print(
        f"\n{len(clips)} clips ({audio_s:.0f} s of audio), {time.monotonic() - t_start:.0f} s in all; session wall "
        f"time per decode: {', '.join(f'{d} {s:.0f} s' for d, s in wall.items())}; CPU: {cpu_name()}"
    )
    print_report(tables)
    if args.json:
        texts = tables.pop("texts")
        out = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "args": vars(args),
            "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()},
            "wall_s": wall,
            **tables,
            "clips": {
                c.clip_id: {
                    "kind": c.kind,
                    "reference": c.text,
                    "terms": list(c.terms),
                    "components": list(c.components),
                    "texts": texts[c.clip_id],
                    **{d: vars(run) for d, run in runs[c.clip_id].items()},
                }
                for c in clips
            },
        }
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(out, indent=2, default=str), "utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.vocabulary", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--terms", nargs="+", default=list(DEFAULT_TERMS), help="the room vocabulary (one word each)")
    p.add_argument(
        "--prompt",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a second decode of every clip with the terms as hotwords, for comparison (default: on)",
    )
    p.add_argument(
        "--exclude",
        nargs="*",
        default=["ami_seriously_src_"],
        help="leave out clips whose id starts so (default: the AMI mixture's four single sources, "
        "60 s each, the mixture's words again)",
    )
    p.add_argument("--only", nargs="*", default=[], help="only clips whose id starts so")
    p.add_argument("--realtime", action="store_true", help="feed each clip at real time, as a microphone does")
    p.add_argument(
        "--vad-backlog-s",
        type=float,
        default=0.5,
        help="fast feed: at most this much audio waits for the VAD (default 0.5 s)",
    )
    p.add_argument(
        "--pending",
        type=int,
        default=0,
        help="fast feed: at most this many closed sentences wait for their lock (default 0)",
    )
    p.add_argument("--model", default=None, help="the recognizer (default: the embedded whisper-base)")
    p.add_argument(
        "--no-speakers", action="store_true", help="no speaker labels (a voice change then splits no sentence)"
    )
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--json", default=None, help="also write the tables and every clip's text to this JSON file")
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
