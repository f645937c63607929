"""Caption-file bench: word times and subtitle cues on a long multi-reader recording, through the live engine.

    python -m bench.cues [--modes align vad timestamps] [--minutes 10] [--groups read noisy dialogue] [--json out.json]
    python -m bench.cues --sentences out.json [--no-cut] [--speakers label] [--json again.json]
    python -m bench.cues --cost-only

The recording: the English clips of ``shared/data/speech`` with a reference transcript in ``--groups`` (default:
read speech, the same with noise, reverb or a telephone band, and the two constructed LibriSpeech dialogues: 39
clips, dozens of readers, 6 minutes; ``meeting`` adds the AMI clips), in a fixed shuffled order, joined with
pauses drawn from 0.3-1.5 s (shorter than the endpoint's silence wait, so neighbouring clips often share a
segment), then again in a new order until it is at least ``--minutes`` long (12.3 minutes by default). It
streams through a live session (Silero VAD, endpointing, partials, finals, speaker labels) as fast as the engine
takes it, once per word-time mode, each on an engine of its own:

- ``align``: Whisper's cross-attention alignment of each locked sentence (``engine.asr.align``; the default);
- ``vad``: words laid along the VAD's speech frames by length (the aligner off: ``--no-word-align``);
- ``timestamps``: the aligner off, every decode also writes Whisper's timestamp tokens, and words keep to those
  stretches as well.

Per mode it reports the locked WER and the decode time (does timestamp mode cost accuracy or time?), where word
times land (of the words matched to the reference, the share whose middle lies inside its own clip: at the joins of
two clips said in one segment, which side of the change each word falls on), and the shipped cue defaults' targets:
lines per cue, characters per line, cue durations, reading speed (and how many cues the speech itself makes faster
than 20 characters per second: their characters over the time from their first word to the next cue's first word,
or, counting the lead-in a cue may take, to the next cue's first word less the gap from as early as the cue may
start; the share at 20 or less among the others), words lost or reordered, SRT and WebVTT parsed by third-party
parsers to the same cues, and the cut-and-decode check: each cue's audio cut at its start and end and decoded alone
must give back the cue's text (WER). The same check on one cue per sentence (``?cues=sentence``) is the baseline.
``--cost-only`` measures what timestamp tokens cost a decode: every short clip decoded whole with and without them,
alternating.

Every run keeps its locked sentences (with word times) in its ``--json`` file. ``--sentences`` takes such a file
instead of streaming: the cues are built again from the same sentences (the streaming figures are the file's), so
that two ways of cutting and timing cues compare on the same words; with ``--no-cut`` the engine does not even
start (seconds instead of minutes). The recording's arguments (``--minutes``, ``--groups``, ``--gap-s``) must be
the saved run's for the cut-and-decode check and the word sides to mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import html
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import srt as srt_lib
import webvtt

from app.rooms.store import SentenceRecord
from app.transcripts import exports
from app.transcripts.cues import PAUSE_MS, SPEAKER_STYLES, Cue, CueRules, build_cues, sentence_words
from bench.lib.recording import GAP_S, GROUPS, SR, Piece, build_recording, group_of, reference_words
from engine.asr.align_service import AlignService
from engine.asr.transcriber import DecodeRequest, Priority
from engine.config import EngineConfig, TranscriberConfig
from engine.protocol import Sentence, Word
from engine.stream.engine import CaptionEngine
from engine.stream.runner import stream_audio
from speechdata.corpus import audio, manifest
from speechdata.wer import normalise, word_errors


def word_sides(sentences: list[Sentence], pieces: list[Piece]) -> dict[str, Any]:
    """Of the hypothesis words matched to reference words, the share whose middle lies inside its own clip (its
    pauses halved); counted overall and for words of sentences that hold the end of one clip and the start of the
    next (a change of reader inside one segment)."""
    ref, owner = reference_words(pieces)
    hyp: list[tuple[str, float, int]] = []  # (normalised word, middle s, sentence index)
    for i, s in enumerate(sentences):
        for w in s.words:
            for part in normalise(w.w):
                hyp.append((part, (w.start_ms + w.end_ms) / 2000, i))
    matcher = difflib.SequenceMatcher(a=[h[0] for h in hyp], b=ref, autojunk=False)
    inside = total = joined_inside = joined_total = 0
    sentence_clips: dict[int, set[int]] = {}
    matches: list[tuple[int, int]] = []
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            matches.append((block.a + k, owner[block.b + k]))
            sentence_clips.setdefault(hyp[block.a + k][2], set()).add(owner[block.b + k])
    errors_ms: list[float] = []
    for h, clip in matches:
        _, mid, sentence = hyp[h]
        p = pieces[clip]
        ok = p.start_s - p.gap_before_s / 2 <= mid <= p.end_s + p.gap_after_s / 2
        inside += ok
        total += 1
        if len(sentence_clips[sentence]) > 1:
            joined_inside += ok
            joined_total += 1
            if not ok:
                edge = p.start_s if mid < p.start_s else p.end_s
                errors_ms.append(abs(mid - edge) * 1000)
    return {
        "matched_words": total,
        "inside_own_clip": inside / max(1, total),
        "joined_words": joined_total,
        "joined_inside_own_clip": joined_inside / max(1, joined_total),
        "joined_wrong_side_p50_ms": statistics.median(errors_ms) if errors_ms else 0.0,
    }


def cue_targets(cues: list[Cue], rules: CueRules) -> dict[str, Any]:
    n = max(1, len(cues))
    durations = [c.end_ms - c.start_ms for c in cues]
    cps = [c.chars * 1000 / max(1, d) for c, d in zip(cues, durations, strict=True)]
    over = [x > rules.max_cps + 1e-9 for x in cps]
    # How fast the speech itself is: the cue's characters over the time from its first word to the next cue's first
    # word (words, not display times, so that every timing rule is measured against the same room); and over the
    # most any timing may give it: from as early as it may start (its lead-in, after the previous cue's words and
    # the gap) to the next cue's first word less the gap.
    speech_over, reach_over = [], []
    for k, c in enumerate(cues):
        first = c.words[0].start_ms
        follow = cues[k + 1].words[0].start_ms if k + 1 < len(cues) else first + rules.max_ms
        speech_over.append(c.chars * 1000 / max(1, min(follow - first, rules.max_ms)) > rules.max_cps + 1e-9)
        earliest = min(first, max(first - rules.lead_ms, cues[k - 1].words[-1].end_ms + rules.gap_ms if k else 0))
        latest = follow - rules.gap_ms if k + 1 < len(cues) else earliest + rules.max_ms
        reach_over.append(c.chars * 1000 / max(1, min(latest - earliest, rules.max_ms)) > rules.max_cps + 1e-9)
    others = [o for o, fast in zip(over, speech_over, strict=True) if not fast]
    return {
        "cues": len(cues),
        "at_most_max_lines": sum(len(c.lines) <= rules.max_lines for c in cues) / n,
        "lines_at_most_max_chars": sum(all(len(line) <= rules.max_chars for line in c.lines) for c in cues) / n,
        "longest_line": max((len(line) for c in cues for line in c.lines), default=0),
        "duration_in_range": sum(rules.min_ms <= d <= rules.max_ms for d in durations) / n,
        "longest_cue_s": max(durations, default=0) / 1000,
        "shortest_cue_s": min(durations, default=0) / 1000,
        "at_most_max_cps": sum(not o for o in over) / n,
        "speech_faster_than_max_cps": sum(speech_over),
        "at_most_max_cps_of_others": sum(not o for o in others) / max(1, len(others)),
        "out_of_reach_of_max_cps": sum(reach_over),
        "lead_in_cues": sum(c.start_ms < c.words[0].start_ms for c in cues),
        "lead_in_p50_ms": statistics.median(
            [c.words[0].start_ms - c.start_ms for c in cues if c.start_ms < c.words[0].start_ms] or [0]
        ),
        "cues_over_max_cps_p50": statistics.median([x for x, o in zip(cps, over, strict=True) if o] or [0.0]),
    }


def same_cues_in_both_files(records: list[SentenceRecord], options: exports.ExportOptions) -> bool:
    srt_cues = list(srt_lib.parse(exports.to_srt(records, options)))
    with tempfile.NamedTemporaryFile("w", suffix=".vtt", encoding="utf-8", delete=False) as f:
        f.write(exports.to_vtt(records, options))
    try:
        vtt_cues = webvtt.read(f.name).captions
    finally:
        Path(f.name).unlink()
    if len(srt_cues) != len(vtt_cues):
        return False
    return all(
        abs(a.start.total_seconds() - _seconds(b.start)) < 1e-3
        and abs(a.end.total_seconds() - _seconds(b.end)) < 1e-3
        and a.content == html.unescape(b.text)
        for a, b in zip(srt_cues, vtt_cues, strict=True)
    )


def _seconds(clock: str) -> float:
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


async def cut_and_decode(
    engine: CaptionEngine, recording: np.ndarray, cues: list[Cue], tag: str, pieces: list[Piece]
) -> dict[str, Any]:
    """Each cue's audio [start, end) decoded alone against the cue's text (labels removed): WER, overall, by the
    group of the clip the cue's middle falls in, and by where the cue's ends are: in a pause (at least
    ``PAUSE_MS`` of silence between its edge word and the next) or inside continuous speech."""
    errors = words = 0
    by_group: dict[str, list[int]] = {}
    by_ends: dict[str, list[int]] = {}
    worst: list[tuple[float, str, str]] = []
    t: Any = engine.transcriber
    for k, c in enumerate(cues):
        a = recording[int(c.start_ms * SR / 1000) : int(c.end_ms * SR / 1000)]
        text = " ".join(w.w for w in c.words)
        if a.size < SR // 10:
            e, n = word_errors(text, "")
        else:
            r = await t.transcribe(DecodeRequest(f"cut-{tag}-{k}", a, Priority.FINAL))
            e, n = word_errors(text, r.text)
            if n and e / n > 0.3:
                worst.append((e / n, text, r.text))
        errors += e
        words += n
        mid = (c.start_ms + c.end_ms) / 2000
        group = next((group_of(p.clip) for p in pieces if p.start_s - p.gap_before_s <= mid < p.end_s), "read")
        before = c.words[0].start_ms - cues[k - 1].words[-1].end_ms if k else PAUSE_MS
        after = cues[k + 1].words[0].start_ms - c.words[-1].end_ms if k + 1 < len(cues) else PAUSE_MS
        ends = "/".join("pause" if gap >= PAUSE_MS else "speech" for gap in (before, after))
        for table, key in ((by_group, group), (by_ends, ends)):
            table.setdefault(key, [0, 0])
            table[key][0] += e
            table[key][1] += n
    worst.sort(reverse=True)
    return {
        "wer": errors / max(1, words),
        "words": words,
        "worst": worst[:8],
        "wer_by_group": {g: e / max(1, n) for g, (e, n) in sorted(by_group.items())},
        "wer_by_ends": {g: {"wer": e / max(1, n), "words": n} for g, (e, n) in sorted(by_ends.items())},
    }


def records_of(sentences: list[Sentence]) -> list[SentenceRecord]:
    return [SentenceRecord(s.id, "bench", s.text, s.start_ms, s.end_ms, s.spk, s.words) for s in sentences]


def saved_sentences(path: Path) -> dict[str, tuple[dict[str, Any], list[Sentence]]]:
    """Per mode of a ``--json`` file: its row (the streaming figures) and its locked sentences."""
    out = {}
    for mode, row in json.loads(path.read_text())["modes"].items():
        sentences = [
            Sentence(
                s["id"],
                s["text"],
                s["start"],
                s["end"],
                s["spk"],
                words=tuple(Word(w["w"], w["start_ms"], w["end_ms"]) for w in s.get("words", ())),
            )
            for s in row["sentence_records"]
        ]
        out[mode] = (row, sentences)
    return out


def cue_rows(records: list[SentenceRecord], options: exports.ExportOptions) -> tuple[list[Cue], dict[str, Any]]:
    """The subtitle cues of ``records`` and their targets, with the one-cue-per-sentence baseline's."""
    cues = build_cues(records, options.rules, options.speakers)
    said = [w.w for r in records for w in r.words]
    return cues, {
        "targets": cue_targets(cues, options.rules),
        "words_in_order": [w.w for c in cues for w in c.words] == said,
        "srt_vtt_same_cues": same_cues_in_both_files(records, options),
        "sentence_cues": cue_targets(sentence_cues(records), options.rules),
        "speakers": options.speakers,
    }


def sentence_cues(records: list[SentenceRecord]) -> list[Cue]:
    """Today's one cue per sentence, with its words, for the baseline's cut-and-decode."""
    return [
        Cue(r.start_ms, max(r.end_ms, r.start_ms + 1), (r.text,), r.spk, r.session, tuple(sentence_words(r)))
        for r in records
    ]


async def decode_cost(engine: CaptionEngine, rounds: int = 2) -> dict[str, Any]:
    """Every English clip of at most 25 s with a reference decoded whole, as a final, without and with timestamp
    tokens, alternating which goes first: WER, decode seconds and tokens of each (continuations included)."""
    t: Any = engine.transcriber
    clips = sorted(c for c, e in manifest().items() if e["lang"] == "en" and e["text"] and e["duration_s"] <= 25)
    rows = {mode: {"errors": 0, "words": 0, "decode_s": 0.0, "tokens": 0} for mode in ("plain", "timestamps")}
    for r in range(rounds):
        for k, clip in enumerate(clips):
            order = ("plain", "timestamps") if (k + r) % 2 == 0 else ("timestamps", "plain")
            for mode in order:
                res = await t.transcribe(
                    DecodeRequest(
                        f"cost-{r}-{clip}-{mode}", audio(clip), Priority.FINAL, timestamps=mode == "timestamps"
                    )
                )
                e, n = word_errors(manifest()[clip]["text"], res.text)
                row = rows[mode]
                row["errors"] += e
                row["words"] += n
                row["decode_s"] += res.decode_s
                row["tokens"] += res.tokens
    return {
        "clips": len(clips),
        "rounds": rounds,
        **{
            m: {"wer": r["errors"] / max(1, r["words"]), "decode_s": r["decode_s"], "tokens": r["tokens"]}
            for m, r in rows.items()
        },
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.cost_only:
        engine = CaptionEngine(EngineConfig(transcriber=TranscriberConfig(model=args.model), speakers=False))
        await engine.start()
        try:
            return {"cost": await decode_cost(engine)}
        finally:
            await engine.close()
    recording, pieces = build_recording(args.minutes, tuple(args.groups), gap_s=tuple(args.gap_s))
    print(
        f"recording: {recording.size / SR / 60:.1f} min, {len(pieces)} clips, "
        f"{len({p.clip for p in pieces})} distinct ({', '.join(args.groups)})",
        flush=True,
    )
    out: dict[str, Any] = {
        "minutes": recording.size / SR / 60,
        "clips": len(pieces),
        "distinct_clips": len({p.clip for p in pieces}),
        "groups": args.groups,
        "modes": {},
    }
    options = exports.ExportOptions(speakers=args.speakers)
    saved = saved_sentences(args.sentences) if args.sentences else None
    if saved is not None and args.no_cut:
        for mode in args.modes:
            if mode in saved:
                out["modes"][mode] = _saved_row(saved[mode], options, mode, args)
        return out
    for mode in args.modes:
        if saved is not None and mode not in saved:
            continue
        engine = mode_engine(args.model, mode)
        await engine.start()
        try:
            if saved is not None:
                row = _saved_row(saved[mode], options, mode, args)
                records = records_of(saved[mode][1])
            else:
                row, sentences = await _streamed_row(engine, recording, pieces, mode, options)
                records = records_of(sentences)
            out["modes"][mode] = row
            if not args.no_cut:
                cues = build_cues(records, options.rules, options.speakers)
                row["cut_decode"] = await cut_and_decode(engine, recording, cues, mode, pieces)
                row["cut_decode_sentence_cues"] = await cut_and_decode(
                    engine, recording, sentence_cues(records), f"{mode}-s", pieces
                )
            if args.samples:
                row["sample_srt"] = exports.to_srt(records[:6], options)
        finally:
            await engine.close()
    return out


def mode_engine(model: str | None, mode: str) -> CaptionEngine:
    """An engine (not started) whose sessions take word times in ``mode``: ``align`` (Whisper's cross-attention,
    ``EngineConfig.word_align``), ``timestamps`` (the decoder's timestamp tokens, ``TranscriberConfig.timestamps``)
    or ``vad`` (the VAD alone). The recording streams ~10x faster than real time, so sentences lock in bursts and the
    recognizer is always busy, which a live session (a sentence every few seconds) never makes: the aligner never
    skips a sentence, as the question here is where it puts words, not when it skips them."""
    config = EngineConfig(
        transcriber=TranscriberConfig(model=model, timestamps=mode == "timestamps"), word_align=mode == "align"
    )
    return CaptionEngine(config, aligner=AlignService(skip_when_behind=False))


async def _streamed_row(
    engine: CaptionEngine, recording: np.ndarray, pieces: list[Piece], mode: str, options: exports.ExportOptions
) -> tuple[dict[str, Any], list[Sentence]]:
    """Stream the recording once in word-time ``mode``: the row of figures and the locked sentences."""
    t: Any = engine.transcriber  # (a fresh engine: its window counters are this stream's)
    aligner = engine.aligner
    align_cpu = aligner.cpu_s if aligner is not None else 0.0
    skipped = aligner.skipped if aligner is not None else 0
    t0 = time.monotonic()
    result = await stream_audio(engine, recording, realtime=False)
    wall = time.monotonic() - t0
    align_cpu = (aligner.cpu_s if aligner is not None else 0.0) - align_cpu
    skipped = (aligner.skipped if aligner is not None else 0) - skipped
    sentences = result.sentences()
    reference = " ".join(manifest()[p.clip]["text"] for p in pieces)
    e, n = word_errors(reference, result.text())
    decode_s = sum(w["decode_s"] for w in t.windows.as_list())
    cues, cue_figures = cue_rows(records_of(sentences), options)
    row: dict[str, Any] = {
        "sentences": len(sentences),
        "locked_wer": e / max(1, n),
        "stream_wall_s": wall,
        "align_cpu_s": align_cpu,
        "align_skipped": skipped if mode == "align" else None,
        "speech_s": sum(s.end_ms - s.start_ms for s in sentences) / 1000,
        "decode_s": decode_s,
        "decodes": sum(w["decodes"] for w in t.windows.as_list()),
        "sides": word_sides(sentences, pieces),
        **cue_figures,
        "sentence_records": [s.wire(words=True) for s in sentences],  # to build cues again without streaming
    }
    print(
        f"{mode}: streamed in {wall:.0f} s, decode {decode_s:.0f} s, align CPU {align_cpu:.1f} s "
        f"({skipped if mode == 'align' else '-'} sentences skipped), "
        f"locked WER {row['locked_wer']:.2%}, {len(cues)} cues",
        flush=True,
    )
    return row, sentences


def _saved_row(
    saved: tuple[dict[str, Any], list[Sentence]], options: exports.ExportOptions, mode: str, args: argparse.Namespace
) -> dict[str, Any]:
    """A saved run's row with its cue figures built again from its sentences."""
    row, sentences = saved
    cues, cue_figures = cue_rows(records_of(sentences), options)
    print(f"{mode}: {len(sentences)} sentences from {args.sentences}, {len(cues)} cues", flush=True)
    kept = {k: v for k, v in row.items() if k not in ("cut_decode", "cut_decode_sentence_cues", "sample_srt")}
    return {**kept, **cue_figures}


def print_ends(out: dict[str, Any]) -> None:
    """Subtitle cues' cut-and-decode WER by where their two ends fall (pause or continuous speech)."""
    rows = {m: r["cut_decode"]["wer_by_ends"] for m, r in out["modes"].items() if "cut_decode" in r}
    if not rows:
        return
    print("\n| mode | cue ends (start/end) | words | cut-and-decode WER |\n|---|---|---|---|")
    for mode, ends in rows.items():
        for key, v in ends.items():
            print(f"| {mode} | {key} | {v['words']} | {v['wer']:.1%} |")


def print_tables(out: dict[str, Any]) -> None:
    if "cost" in out:
        c = out["cost"]
        print(f"\n{c['clips']} clips decoded whole, {c['rounds']} rounds, order alternating\n")
        print("| decode | WER | decode s | tokens |\n|---|---|---|---|")
        for mode in ("plain", "timestamps"):
            print(f"| {mode} | {c[mode]['wer']:.2%} | {c[mode]['decode_s']:.1f} | {c[mode]['tokens']} |")
        return
    print(
        f"\n{out['minutes']:.1f} minutes, {out['clips']} clips ({out['distinct_clips']} distinct: "
        f"{', '.join(out['groups'])})\n"
    )
    print(
        "| mode | locked WER | decode s | align CPU s (of speech s) | stream s | words inside own clip | at joins "
        "| wrong side p50 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for mode, r in out["modes"].items():
        s = r["sides"]
        print(
            f"| {mode} | {r['locked_wer']:.2%} | {r['decode_s']:.0f} | "
            f"{r['align_cpu_s']:.1f} ({r['speech_s']:.0f}) | {r['stream_wall_s']:.0f} | "
            f"{s['inside_own_clip']:.1%} of {s['matched_words']} | {s['joined_inside_own_clip']:.1%} of "
            f"{s['joined_words']} | {s['joined_wrong_side_p50_ms']:.0f} |"
        )
    print(
        "\n| mode | cues | <= 2 lines | lines <= 42 | longest line | 0.83-7 s | shortest/longest s | <= 20 cps "
        "| speech > 20 cps (out of reach) | <= 20 cps of the others | lead-ins (p50 ms) | words in order "
        "| SRT = VTT | cut-and-decode WER |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mode, r in out["modes"].items():
        for name, tg, cut in (
            ("subtitle", r["targets"], r.get("cut_decode")),
            ("sentence", r["sentence_cues"], r.get("cut_decode_sentence_cues")),
        ):
            cut_wer = (
                "-"
                if cut is None
                else (f"{cut['wer']:.2%} ({', '.join(f'{g} {x:.1%}' for g, x in cut['wer_by_group'].items())})")
            )
            print(
                f"| {mode}/{name} | {tg['cues']} | {tg['at_most_max_lines']:.0%} | "
                f"{tg['lines_at_most_max_chars']:.0%} | {tg['longest_line']} | {tg['duration_in_range']:.0%} | "
                f"{tg['shortest_cue_s']:.2f}/{tg['longest_cue_s']:.1f} | {tg['at_most_max_cps']:.1%} | "
                f"{tg['speech_faster_than_max_cps']} ({tg.get('out_of_reach_of_max_cps', '-')}) | "
                f"{tg.get('at_most_max_cps_of_others', float('nan')):.1%} | "
                f"{tg.get('lead_in_cues', '-')} ({tg.get('lead_in_p50_ms', 0):.0f}) | {r['words_in_order']} | "
                f"{r['srt_vtt_same_cues']} | {cut_wer} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=["align", "vad"], choices=["align", "vad", "timestamps"])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument(
        "--groups",
        nargs="+",
        default=["read", "noisy", "dialogue"],
        choices=GROUPS,
        help="which clips make the recording (meeting: the AMI clips, whose references Whisper misses by a third)",
    )
    parser.add_argument(
        "--gap-s",
        type=float,
        nargs=2,
        default=list(GAP_S),
        metavar=("MIN", "MAX"),
        help="pauses between clips drawn from [MIN, MAX] seconds (1.2 1.2: fixed pauses)",
    )
    parser.add_argument("--model", default=None)
    parser.add_argument("--samples", action="store_true", help="keep a sample SRT per mode in the JSON")
    parser.add_argument("--no-cut", action="store_true", help="skip the cut-and-decode check (stream and cues only)")
    parser.add_argument(
        "--cost-only",
        action="store_true",
        help="only what timestamp tokens cost: whole clips decoded with and without them",
    )
    parser.add_argument(
        "--speakers",
        default="dash",
        choices=SPEAKER_STYLES,
        help="how the cue text marks a change of speaker (?speakers= of the transcript routes)",
    )
    parser.add_argument(
        "--sentences",
        type=Path,
        help="a --json file of an earlier run: build cues again from its locked sentences instead "
        "of streaming (with --no-cut the engine does not start)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out = asyncio.run(run(args))
    print_tables(out)
    if "modes" in out:
        print_ends(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
