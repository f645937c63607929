"""Room vocabulary: what its terms in the decoder's context do to recognition, through a live session's decode path.

    python -m bench.vocabulary [--terms Dashwood Quilter Frere Claflin Abbie Concord "Kate's"] [--glossary]
                               [--json out.json]

A live session's hotwords and its room's vocabulary become the Whisper decoder's previous-text context
(``Session.configure`` and ``Session.use_vocabulary``: the hotwords, the vocabulary's terms, then the prompt, joined
by spaces; ``engine.asr.prompts.decoder_prompt``). A room vocabulary grows by the proper nouns an editor corrected
once, each decoded with in every live session of the room from its next decode on. This bench
streams every English clip of ``../shared/data/speech`` several times on one loaded engine (default: the embedded
whisper-base, speaker labels on, as the server ships), a run per condition:
- ``without``: no hotwords, no vocabulary;
- ``with``: the whole vocabulary (``--terms``), given to the session as a room's (``use_vocabulary``), as the
  feature ships it;
- ``own``: only the terms the clip's reference holds, as the room's vocabulary (clips that hold a term);
- ``glossary`` (``--glossary``): no hotwords, the terms as one punctuated sentence in the prompt instead
  (``glossary_prompt``), a different way of writing the same context.
A clip's runs follow each other, each condition going first in turn from clip to clip, so that a noisy machine
weighs on all alike.

Each run is a live session (``SessionOptions``: partials on, not a background file job), its audio the clip with 1 s
of silence before and 2.5 s after, fed in 60 ms chunks as fast as the session keeps up (``Session.caught_up``, as
the file path paces its feed: at most ``--vad-backlog-s`` of audio waiting for the VAD, at most ``--pending``
closed sentences waiting for their lock); ``--realtime`` paces it like a microphone instead (slower, and partials as
frequent as live). The locked sentences are the clip's text.

Scoring (``speechdata.wer``: lower case, punctuation out, hyphens split words):
- per term: its occurrences in the references, and how many the text got right (the reference word aligned to the
  same word, so "Dash Wood" for "Dashwood" or "Fray" for "Frere" is wrong; what was written instead is listed);
- WER per condition on the clips whose reference holds none of the terms (collateral damage, by clip kind and in
  all; the target: no more than +0.5 points with the vocabulary), and on the clips that hold one;
- hallucinated terms: in each clip, a term's occurrences in the text beyond those in the reference, on every clip,
  the clips without a reference (``dns_street_mobile_*``: street noise, no speech to transcribe) included, where
  any word written at all is counted too;
- style: punctuation marks per 100 words written (Whisper copies its context's style), sentences locked, segments
  the hallucination guard dropped; and the clips whose WER the vocabulary changed most.

The terms must each be one word after normalisation. ``--json`` writes the tables, each clip's text per run and
every term occurrence with what was written for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jiwer
import numpy as np

from bench.metrics import print_markdown_table
from engine import CHUNK_SAMPLES, SAMPLE_RATE, CaptionEngine, SessionOptions, SessionState, protocol
from engine.config import EngineConfig, TranscriberConfig
from engine.stream.runner import StreamResult
from speechdata.corpus import audio, manifest, pad
from speechdata.wer import normalise, word_errors

DEFAULT_TERMS = ("Dashwood", "Quilter", "Frere", "Claflin", "Abbie", "Concord", "Kate's")
NO_TEXT_PREFIXES = ("dns_street_mobile_",)  # clips without a reference that still count for hallucinated terms
LEAD_S = 1.0  # silence before each clip: its first word is not cut
TAIL_S = 2.5  # silence after: the last sentence closes by its endpoint, not by the stop
# The runs of a clip: no vocabulary; the whole vocabulary as the room's (as the feature ships it); only the clip's
# own terms as the room's vocabulary (clips whose reference holds terms); the terms as a punctuated prompt (--glossary).
CONDITIONS = ("without", "with", "own", "glossary")
CHANGED_SHOWN = 10  # clips listed in the table of those whose errors the vocabulary changed
_PUNCT_MARKS = re.compile(r"[^\w\s']|(?<!\w)'|'(?!\w)")


@dataclass(frozen=True)
class Clip:
    """One clip of the shared corpus as the bench streams it."""

    clip_id: str
    kind: str  # the manifest's kind: read, noisy, conversational
    text: str | None  # the human reference; None for a clip without one (noise)
    samples: np.ndarray  # 16 kHz float32, the silence around it included
    terms: tuple[str, ...]  # the vocabulary's terms its reference holds

    @property
    def audio_s(self) -> float:
        return self.samples.size / SAMPLE_RATE


@dataclass(frozen=True)
class Occurrence:
    """One occurrence of a term in a clip's reference and what a run wrote for it."""

    term: str
    clip_id: str
    right: bool
    heard: str  # the words aligned to it (normalised); "" where the text left it out


@dataclass
class Run:
    """One session's outcome: its locked text and how long it took (wall seconds, the feed included)."""

    text: str
    sentences: list[str]
    wall_s: float
    partials: int  # partial decodes made
    dropped: dict[str, int]  # segments the hallucination guard dropped, by why
    errors: list[str] = field(default_factory=list)


def term_key(term: str) -> str:
    """The term as the scoring sees it: its one normalised word. Raises ``ValueError`` for a term of several."""
    words = normalise(term)
    if len(words) != 1:
        raise ValueError(f"term {term!r} normalises to {len(words)} words {words}; give one word per term")
    return words[0]


def occurrences(reference: str, hypothesis: str, terms: tuple[str, ...], clip_id: str) -> list[Occurrence]:
    """Every occurrence of ``terms`` in ``reference``, right where the word alignment (jiwer's, after ``normalise``)
    pairs it with the same word of ``hypothesis``. ``heard`` is the hypothesis word substituted for it, with the
    words inserted right beside it ("dash wood" for "dashwood"), or "" where it was deleted."""
    keys = {term_key(t): t for t in terms}
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not any(w in keys for w in ref):
        return []
    if not hyp:
        return [Occurrence(keys[w], clip_id, False, "") for w in ref if w in keys]
    chunks = jiwer.process_words(" ".join(ref), " ".join(hyp)).alignments[0]
    out = []
    for k, chunk in enumerate(chunks):
        if chunk.type == "insert":
            continue
        for i in range(chunk.ref_start_idx, chunk.ref_end_idx):
            if ref[i] not in keys:
                continue
            if chunk.type == "equal":
                out.append(Occurrence(keys[ref[i]], clip_id, True, ref[i]))
            elif chunk.type == "delete":
                out.append(Occurrence(keys[ref[i]], clip_id, False, ""))
            else:  # substitute: the word in its place, and the words inserted right before or after it
                j = chunk.hyp_start_idx + (i - chunk.ref_start_idx)
                lo, hi = j, j + 1
                before = chunks[k - 1] if k > 0 else None
                after = chunks[k + 1] if k + 1 < len(chunks) else None
                if i == chunk.ref_start_idx and before is not None and before.type == "insert":
                    lo = before.hyp_start_idx
                if i == chunk.ref_end_idx - 1 and after is not None and after.type == "insert":
                    hi = after.hyp_end_idx
                out.append(Occurrence(keys[ref[i]], clip_id, False, " ".join(hyp[lo:hi])))
    return out


def extra_terms(reference: str | None, hypothesis: str, terms: tuple[str, ...]) -> Counter[str]:
    """Hallucinated terms: per term, how many more times the hypothesis has it than the reference (none: 0)."""
    ref = Counter(normalise(reference or ""))
    hyp = Counter(normalise(hypothesis))
    out: Counter[str] = Counter()
    for term in terms:
        key = term_key(term)
        if hyp[key] > ref[key]:
            out[term] = hyp[key] - ref[key]
    return out


def select_clips(terms: tuple[str, ...], exclude: list[str], only: list[str]) -> list[Clip]:
    """The English clips with a reference, and the reference-less noise clips (``NO_TEXT_PREFIXES``), in manifest
    order, less those whose id starts with an ``exclude`` prefix (and, given ``only``, just those starting with one
    of its prefixes)."""
    keys = {term_key(t): t for t in terms}
    out = []
    for clip_id, e in manifest().items():
        if e["lang"] != "en" or clip_id.startswith(tuple(exclude)):
            continue
        if only and not clip_id.startswith(tuple(only)):
            continue
        if not e["text"] and not clip_id.startswith(NO_TEXT_PREFIXES):
            continue
        held = tuple(dict.fromkeys(keys[w] for w in normalise(e["text"] or "") if w in keys))
        out.append(Clip(clip_id, e["kind"], e["text"] or None, pad(audio(clip_id), LEAD_S, TAIL_S), held))
    return out


async def transcribe(engine: CaptionEngine, samples: np.ndarray, options: SessionOptions,
                     vocabulary: tuple[str, ...] = (), *, realtime: bool, vad_backlog_s: float, pending: int) -> Run:
    """Stream ``samples`` (16 kHz float32) through one live session with ``options`` and a room's ``vocabulary``
    (``Session.use_vocabulary``, set before the first chunk), and return its locked text.

    Fed in 60 ms chunks, each once the session has caught up (``Session.caught_up(vad_backlog_s, pending)``) or,
    with ``realtime``, at its time as a microphone would. The session is closed on every way out."""
    session = engine.open_session(options)
    session.configure(options)
    if vocabulary:
        session.use_vocabulary(vocabulary)
    result = StreamResult(audio_s=samples.size / SAMPLE_RATE)
    errors: list[str] = []
    t0 = time.monotonic()

    async def collect() -> None:
        async for msg in session.messages():
            result.messages.append(msg)
            if isinstance(msg, protocol.Error):
                errors.append(f"{msg.code}: {msg.message}")

    collector = asyncio.create_task(collect(), name=f"{session.session_id}-vocabulary-collect")
    try:
        for i, start in enumerate(range(0, samples.size, CHUNK_SAMPLES)):
            if session.state is not SessionState.LIVE:
                break
            if realtime:
                await asyncio.sleep(max(0.0, t0 + i * CHUNK_SAMPLES / SAMPLE_RATE - time.monotonic()))
            else:
                await session.caught_up(vad_backlog_s, pending)
                await asyncio.sleep(0)
            session.feed(samples[start : start + CHUNK_SAMPLES])
        if session.state is SessionState.LIVE:
            await session.stop()
        await collector
    finally:
        collector.cancel()
        await session.close()
        await asyncio.gather(collector, return_exceptions=True)
    sentences = [s.text for s in result.sentences()]
    return Run(" ".join(sentences), sentences, time.monotonic() - t0, session.stats.partials,
               dict(session.stats.dropped), errors)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), with "avx512_bf16" after it where the CPU has that instruction set
    (bfloat16 decodes run much faster with it); the machine's architecture where there is no such file."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                platform.machine())
    return name + (" avx512_bf16" if "avx512_bf16" in info else "")


def conditions_for(clip: Clip, glossary: bool) -> tuple[str, ...]:
    """The runs ``clip`` gets (``CONDITIONS``): without and with the vocabulary; "own" too where its reference
    holds terms; "glossary" too with ``glossary``."""
    return tuple(c for c in CONDITIONS if c in ("without", "with") or (c == "own" and clip.terms)
                 or (c == "glossary" and glossary))


def setup_for(clip: Clip, condition: str, terms: tuple[str, ...]) -> tuple[SessionOptions, tuple[str, ...]]:
    """The session options and the room vocabulary of ``clip``'s run in ``condition`` (``CONDITIONS``)."""
    base = SessionOptions(language="en")
    if condition == "with":
        return base, terms
    if condition == "own":
        return base, clip.terms
    if condition == "glossary":
        return replace(base, prompt=glossary_prompt(terms)), ()
    return base, ()


def glossary_prompt(terms: tuple[str, ...]) -> str:
    """The terms as one punctuated sentence (``SessionOptions.prompt``): Whisper follows its context's style, and
    a bare list of capitalised words has no punctuation to follow."""
    return "Names: " + ", ".join(terms) + "."


def punctuation(text: str) -> int:
    """Punctuation marks in ``text`` (apostrophes inside words are not counted)."""
    return len(_PUNCT_MARKS.findall(text))


def wer_row(name: str, clips: list[Clip], runs: dict[str, dict[str, Run]], conditions: tuple[str, ...]
            ) -> dict[str, Any]:
    """WER per condition over ``clips`` (pooled: errors / reference words, in %), and its change against
    "without" in points."""
    row: dict[str, Any] = {"set": name, "clips": len(clips), "words": 0}
    for condition in conditions:
        errors = words = 0
        for clip in clips:
            e, w = word_errors(clip.text or "", runs[clip.clip_id][condition].text)
            errors, words = errors + e, words + w
        row["words"] = words
        row[f"errors_{condition}"] = errors
        row[f"wer_{condition}"] = 100 * errors / words if words else float("nan")
        row[f"delta_{condition}"] = row[f"wer_{condition}"] - row["wer_without"]
    return row


def report(clips: list[Clip], runs: dict[str, dict[str, Run]], terms: tuple[str, ...]) -> dict[str, Any]:
    """The bench's tables (``terms``, ``wer``, ``hallucinated``, ``style``) and every term occurrence, per
    condition, from the runs (``runs[clip id][condition]``)."""
    term_conditions = tuple(c for c in CONDITIONS if all(c in runs[k.clip_id] for k in clips if k.terms))
    found: dict[str, list[Occurrence]] = {c: [] for c in term_conditions}
    for clip in clips:
        if clip.text and clip.terms:
            for condition in term_conditions:
                found[condition] += occurrences(clip.text, runs[clip.clip_id][condition].text, terms, clip.clip_id)
    term_rows = []
    for term in terms:
        mine = {c: [o for o in found[c] if o.term == term] for c in term_conditions}
        n = len(mine["without"])
        term_rows.append({
            "term": term, "clips": len({o.clip_id for o in mine["without"]}), "occurrences": n,
            **{f"right_{c}": sum(o.right for o in mine[c]) for c in term_conditions},
            **{f"right_{c}_pct": 100 * sum(o.right for o in mine[c]) / n if n else float("nan")
               for c in term_conditions},
            **{f"heard_{c}": ", ".join(sorted({o.heard or "(left out)" for o in mine[c] if not o.right})) or "-"
               for c in term_conditions},
        })
    with_text = [c for c in clips if c.text]
    other = [c for c in with_text if not c.terms]
    termed = [c for c in with_text if c.terms]
    common = tuple(c for c in CONDITIONS if all(c in runs[k.clip_id] for k in clips))
    wer_rows = [wer_row(f"other: {kind}", [c for c in other if c.kind == kind], runs, common)
                for kind in sorted({c.kind for c in other})]
    wer_rows.append(wer_row("other: all", other, runs, common))
    wer_rows.append(wer_row("clips with a term", termed, runs, term_conditions))
    hallucinated, style = [], []
    for name, group in [("other clips", other), ("clips with a term", termed),
                        ("no-text noise", [c for c in clips if not c.text])]:
        row: dict[str, Any] = {"set": name, "clips": len(group)}
        looks: dict[str, Any] = {"set": name, "clips": len(group)}
        for condition in (term_conditions if group is termed else common):
            extra: Counter[str] = Counter()
            where = []
            for clip in group:
                got = extra_terms(clip.text, runs[clip.clip_id][condition].text, terms)
                extra += got
                where += [f"{clip.clip_id}: {t} x{n}" for t, n in got.items()]
            texts = [runs[c.clip_id][condition] for c in group]
            words = sum(len(normalise(r.text)) for r in texts)
            row[f"terms_{condition}"] = sum(extra.values())
            row[f"which_{condition}"] = ", ".join(f"{t} x{n}" for t, n in sorted(extra.items())) or "-"
            row[f"where_{condition}"] = where
            row[f"words_{condition}"] = words
            looks[f"punct_{condition}"] = 100 * sum(punctuation(r.text) for r in texts) / words if words else 0.0
            looks[f"sentences_{condition}"] = sum(len(r.sentences) for r in texts)
            looks[f"dropped_{condition}"] = sum(sum(r.dropped.values()) for r in texts)
            looks[f"partials_{condition}"] = sum(r.partials for r in texts)
        hallucinated.append(row)
        style.append(looks)
    changed: list[dict[str, Any]] = []
    for clip in with_text:
        without = word_errors(clip.text or "", runs[clip.clip_id]["without"].text)
        with_ = word_errors(clip.text or "", runs[clip.clip_id]["with"].text)
        if with_[0] != without[0]:
            changed.append({"clip": clip.clip_id, "words": without[1], "errors_without": without[0],
                            "errors_with": with_[0], "delta": with_[0] - without[0],
                            "text_with": runs[clip.clip_id]["with"].text})
    changed.sort(key=lambda r: (-abs(r["delta"]), r["clip"]))
    occurrence_rows = {c: [vars(o) for o in found[c]] for c in term_conditions}
    return {"conditions": list(common), "term_conditions": list(term_conditions), "terms": term_rows,
            "wer": wer_rows, "hallucinated": hallucinated, "style": style, "changed": changed,
            "occurrences": occurrence_rows}


def print_report(tables: dict[str, Any]) -> None:
    """The tables as Markdown, a column per condition."""
    common, termed = tables["conditions"], tables["term_conditions"]
    print("\nTerm occurrences recognised right (the reference word aligned to the same word):\n")
    print_markdown_table([("term", "term", "{}"), ("clips", "clips", "{:d}"), ("occurrences", "occurrences", "{:d}"),
                          *[(f"right_{c}", f"right {c}", "{:d}") for c in termed],
                          *[(f"heard_{c}", f"written {c}", "{}") for c in termed]], tables["terms"])
    print("\nWER (%) per condition, change against 'without' in points:\n")
    print_markdown_table([("set", "clips", "{}"), ("clips", "n", "{:d}"), ("words", "ref words", "{:d}"),
                          *[(f"wer_{c}", f"WER {c}", "{:.2f}") for c in termed],
                          *[(f"delta_{c}", f"delta {c}", "{:+.2f}") for c in termed if c != "without"]],
                         [{**{f"{k}_{c}": float("nan") for c in termed for k in ("wer", "delta")}, **r}
                          for r in tables["wer"]])
    print("\nHallucinated terms (a term written more often than the reference has it), and words written:\n")
    print_markdown_table([("set", "clips", "{}"), ("clips", "n", "{:d}"),
                          *[(f"terms_{c}", f"terms {c}", "{:d}") for c in common],
                          *[(f"which_{c}", f"which {c}", "{}") for c in common],
                          *[(f"words_{c}", f"words {c}", "{:d}") for c in common]],
                         tables["hallucinated"])
    print("\nStyle: punctuation marks per 100 words, sentences locked, segments the guard dropped:\n")
    print_markdown_table([("set", "clips", "{}"), ("clips", "n", "{:d}"),
                          *[(f"punct_{c}", f"punct {c}", "{:.1f}") for c in common],
                          *[(f"sentences_{c}", f"sentences {c}", "{:d}") for c in common],
                          *[(f"dropped_{c}", f"dropped {c}", "{:d}") for c in common]], tables["style"])
    print(f"\nClips whose errors the vocabulary changed ({len(tables['changed'])}; the largest changes first):\n")
    print_markdown_table([("clip", "clip", "{}"), ("words", "ref words", "{:d}"),
                          ("errors_without", "errors without", "{:d}"), ("errors_with", "errors with", "{:d}"),
                          ("text_with", "text with the vocabulary", "{}")],
                         [{**r, "text_with": r["text_with"][:90]} for r in tables["changed"][:CHANGED_SHOWN]])


async def main(args: argparse.Namespace) -> int:
    terms = tuple(args.terms)
    for term in terms:
        term_key(term)
    clips = select_clips(terms, args.exclude, args.only)
    audio_s = sum(c.audio_s for c in clips)
    print(f"{len(clips)} clips, {audio_s:.0f} s of audio; vocabulary: {', '.join(terms)}", file=sys.stderr,
          flush=True)
    engine = CaptionEngine(EngineConfig(transcriber=TranscriberConfig(model=args.model),
                                        speakers=not args.no_speakers))
    runs: dict[str, dict[str, Run]] = {}
    t_start = time.monotonic()
    feed = {"realtime": args.realtime, "vad_backlog_s": args.vad_backlog_s, "pending": args.pending}
    await engine.start()
    try:
        if args.warmup:  # the first decodes after start-up are slow; the first clip must not pay for them
            await transcribe(engine, clips[0].samples, SessionOptions(language="en"), **feed)
        for k, clip in enumerate(clips):
            mine = conditions_for(clip, args.glossary)
            order = mine[k % len(mine):] + mine[:k % len(mine)]  # each condition goes first in turn
            runs[clip.clip_id] = {}
            for condition in order:
                run = await transcribe(engine, clip.samples, *setup_for(clip, condition, terms), **feed)
                runs[clip.clip_id][condition] = run
                if run.errors:
                    print(f"{clip.clip_id} {condition}: {'; '.join(run.errors)}", file=sys.stderr)
            changed = "" if runs[clip.clip_id]["with"].text == runs[clip.clip_id]["without"].text else " (changed)"
            print(f"{k + 1}/{len(clips)} {clip.clip_id}{changed} ({time.monotonic() - t_start:.0f} s)",
                  file=sys.stderr, flush=True)
    finally:
        await engine.close()
    tables = report(clips, runs, terms)
    wall = {c: round(sum(r[c].wall_s for r in runs.values() if c in r), 1) for c in CONDITIONS}
    print(f"\n{len(clips)} clips ({audio_s:.0f} s of audio), {time.monotonic() - t_start:.0f} s in all; session wall "
          f"time per condition: {', '.join(f'{c} {s:.0f} s' for c, s in wall.items() if s)}; CPU: {cpu_name()}")
    print_report(tables)
    if args.json:
        out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "args": vars(args),
               "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()},
               "glossary_prompt": glossary_prompt(terms), "wall_s": wall, **tables,
               "clips": {c.clip_id: {"kind": c.kind, "reference": c.text, "terms": list(c.terms),
                                     **{cond: vars(run) for cond, run in runs[c.clip_id].items()}} for c in clips}}
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(out, indent=2, default=str), "utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.vocabulary", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--terms", nargs="+", default=list(DEFAULT_TERMS), help="the room vocabulary (one word each)")
    p.add_argument("--glossary", action="store_true",
                   help="one more run of every clip: the terms as a punctuated sentence in the prompt, no vocabulary")
    p.add_argument("--exclude", nargs="*", default=["ami_seriously_src_"],
                   help="leave out clips whose id starts so (default: the AMI mixture's four single sources, "
                        "60 s each, the mixture's words again)")
    p.add_argument("--only", nargs="*", default=[], help="only clips whose id starts so")
    p.add_argument("--realtime", action="store_true", help="feed each clip at real time, as a microphone does")
    p.add_argument("--vad-backlog-s", type=float, default=0.5,
                   help="fast feed: at most this much audio waits for the VAD (default 0.5 s)")
    p.add_argument("--pending", type=int, default=0,
                   help="fast feed: at most this many closed sentences wait for their lock (default 0)")
    p.add_argument("--model", default=None, help="the recognizer (default: the embedded whisper-base)")
    p.add_argument("--no-speakers", action="store_true", help="no speaker labels (a voice change then splits "
                                                              "no sentence)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--json", default=None, help="also write the tables and every clip's text to this JSON file")
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(build_parser().parse_args())))
