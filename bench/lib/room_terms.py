"""A room's vocabulary on recognised text (``bench.vocabulary``): the clips whose references hold the terms, each
term's occurrences and what a text wrote for them, an editor's corrections and what the room learns from them
(``app.rooms.edits.learned_fixes``), the stretches a ``Corrector`` rewrites, and one clip through a live session.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from collections import Counter
from dataclasses import dataclass, field

import jiwer
import numpy as np

from app.rooms.edits import learned_fixes, merged_entries
from app.rooms.vocabulary import Corrector, Fix
from engine import CHUNK_SAMPLES, SAMPLE_RATE, CaptionEngine, SessionOptions, SessionState, protocol
from engine.stream.runner import StreamResult
from speechdata.corpus import audio, manifest, pad
from speechdata.wer import normalise

DEFAULT_TERMS = ("Dashwood", "Quilter", "Frere", "Claflin", "Abbie", "Concord", "Kate's")
NO_TEXT_PREFIXES = ("dns_street_mobile_",)  # clips without a reference that still count for hallucinated terms
LEAD_S = 1.0  # silence before each clip: its first word is not cut
TAIL_S = 2.5  # silence after: the last sentence closes by its endpoint, not by the stop
_EDGES = ".,;:!?\"'()[]{}«»“”‘’…"


@dataclass(frozen=True)
class Clip:
    """One clip of the shared corpus as the bench streams it."""

    clip_id: str
    kind: str  # the manifest's kind: read, noisy, conversational
    text: str | None  # the human reference; None for a clip without one (noise)
    samples: np.ndarray  # 16 kHz float32, the silence around it included
    terms: tuple[str, ...]  # the vocabulary's terms its reference holds
    components: tuple[str, ...]  # the manifest clips it is made of (derived clips), else ()

    @property
    def audio_s(self) -> float:
        return self.samples.size / SAMPLE_RATE


@dataclass(frozen=True)
class Occurrence:
    """One occurrence of a term in a clip's reference and what a text wrote for it."""

    term: str
    clip_id: str
    right: bool
    heard: str  # the words aligned to it (normalised); "" where the text left it out


@dataclass(frozen=True)
class Edit:
    """The simulated editor's correction of one term in one sentence, and what the room learned from it."""

    term: str
    clip_id: str
    shown: str  # the sentence as the room showed it
    corrected: str  # ... as the editor left it
    fixes: tuple[str, ...]  # the learned entries, "heard → meant" (none: the correction taught nothing)


@dataclass
class Run:
    """One session's outcome: its locked sentences and how long it took (wall seconds, the feed included)."""

    sentences: list[str]
    wall_s: float
    dropped: dict[str, int]  # segments the hallucination guard dropped, by why
    errors: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def term_key(term: str) -> str:
    """The term as the scoring sees it: its one normalised word. Raises ``ValueError`` for a term of several."""
    words = normalise(term)
    if len(words) != 1:
        raise ValueError(f"term {term!r} normalises to {len(words)} words {words}; give one word per term")
    return words[0]


def occurrences(reference: str, hypothesis: str, terms: tuple[str, ...], clip_id: str) -> list[Occurrence]:
    """Every occurrence of ``terms`` in ``reference`` in its order, right where the word alignment (jiwer's, after
    ``normalise``) pairs it with the same word of ``hypothesis``. ``heard`` is the hypothesis word substituted for
    it, with the words inserted right beside it ("dash wood" for "dashwood"), or "" where it was deleted."""
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
    entries = manifest()
    out = []
    for clip_id, e in entries.items():
        if e["lang"] != "en" or clip_id.startswith(tuple(exclude)):
            continue
        if only and not clip_id.startswith(tuple(only)):
            continue
        if not e["text"] and not clip_id.startswith(NO_TEXT_PREFIXES):
            continue
        held = tuple(dict.fromkeys(keys[w] for w in normalise(e["text"] or "") if w in keys))
        parts = tuple(p if p in entries else f"ls_{p}" for p in e.get("components") or ())
        out.append(
            Clip(
                clip_id,
                e["kind"],
                e["text"] or None,
                pad(audio(clip_id), LEAD_S, TAIL_S),
                held,
                tuple(p for p in parts if p in entries),
            )
        )
    return out


def recording(clip: Clip, term: str, nth: int) -> str:
    """The recording the ``nth`` occurrence (from 0) of ``term`` in ``clip``'s reference was spoken in: the
    component whose reference holds it (a derived clip: reverberated, mixed, concatenated), else the clip."""
    key = term_key(term)
    held = [p for p in clip.components for w in normalise(manifest()[p]["text"] or "") if w == key]
    return held[nth] if nth < len(held) else clip.clip_id


def respelt(corrector: Corrector, sentences: list[str]) -> list[str]:
    """``sentences`` as a room with ``corrector`` locks them, one by one (``app.rooms.publisher``)."""
    return [corrector.apply(s) for s in sentences]


def editor_correction(
    sentences: list[str], reference: str, term: str, nth: int, clip_id: str
) -> tuple[list[str], Edit] | None:
    """An editor's correction of the ``nth`` occurrence (from 0) of ``term`` in ``reference``, in ``sentences`` (the
    clip's sentences as the room shows them): the words aligned to it (difflib over ``normalise``d words; a
    stretch of several reference words spread evenly over the words written for it) replaced by the term in their
    sentence, their edge punctuation kept, or the term put in where nothing was written for it. Returns the
    corrected sentences and the ``Edit`` (its fixes: ``learned_fixes`` of the sentence before and after), or None
    where the alignment has the term already right."""
    tokens: list[str] = []
    owners: list[tuple[int, int]] = []  # (sentence, word) of each normalised token
    for s, sentence in enumerate(sentences):
        for w, word in enumerate(sentence.split()):
            for token in normalise(word):
                tokens.append(token)
                owners.append((s, w))
    ref = normalise(reference)
    i = [k for k, w in enumerate(ref) if w == term_key(term)][nth]
    matcher = difflib.SequenceMatcher(a=ref, b=tokens, autojunk=False)
    op, a0, a1, b0, b1 = next(o for o in matcher.get_opcodes() if o[1] <= i < o[2])
    if op == "equal" or not tokens:
        return None
    out = list(sentences)
    if b0 == b1:  # nothing written for it: put it in before the word that follows (after the last one)
        s, w = owners[b0] if b0 < len(owners) else (owners[-1][0], len(sentences[owners[-1][0]].split()))
        words = sentences[s].split()
        out[s] = " ".join([*words[:w], term, *words[w:]])
    else:
        lo = b0 + (i - a0) * (b1 - b0) // (a1 - a0)
        hi = max(lo + 1, b0 + (i - a0 + 1) * (b1 - b0) // (a1 - a0))
        s = owners[lo][0]
        stretch = [w for o, w in owners[lo:hi] if o == s]
        words = sentences[s].split()
        first, last = words[stretch[0]], words[stretch[-1]]
        lead, trail = first[: len(first) - len(first.lstrip(_EDGES))], last[len(last.rstrip(_EDGES)) :]
        out[s] = " ".join([*words[: stretch[0]], f"{lead}{term}{trail}", *words[stretch[-1] + 1 :]])
    fixes = tuple(f.wire() for f in learned_fixes(sentences[s], out[s]))
    return out, Edit(term, clip_id, sentences[s], out[s], fixes)


def simulate_room(
    clips: list[Clip], runs: dict[str, dict[str, Run]], terms: tuple[str, ...]
) -> tuple[dict[str, list[str]], list[Edit], tuple[str, ...]]:
    """The ``learned`` condition (see the module): each clip's sentences as the room showed them live (the fixes
    learned from earlier clips applied), the editor's corrections in order, and every entry learned."""
    learned: tuple[str, ...] = ()
    edited: set[str] = set()
    shown_sentences: dict[str, list[str]] = {}
    edits: list[Edit] = []
    for clip in clips:
        fixes = [f for f in (Fix.parse(e) for e in learned) if f is not None]
        room = Corrector([f.meant for f in fixes], learned)
        shown = shown_sentences[clip.clip_id] = respelt(room, runs[clip.clip_id]["without"].sentences)
        if not clip.text:
            continue
        seen: Counter[str] = Counter()
        for occ in occurrences(clip.text, " ".join(shown), terms, clip.clip_id):
            nth = seen[occ.term]
            seen[occ.term] += 1
            if occ.right or occ.term in edited:
                continue
            done = editor_correction(shown, clip.text, occ.term, nth, clip.clip_id)
            if done is None:
                continue
            shown, edit = done
            edited.add(occ.term)
            edits.append(edit)
            learned = merged_entries(learned, list(edit.fixes))
    return shown_sentences, edits, learned


def rewrites(before: list[str], after: list[str]) -> list[tuple[str, str]]:
    """The stretches a Corrector changed, sentence by sentence: ``(written, respelt)``."""
    out = []
    for old, new in zip(before, after, strict=True):
        a, b = old.split(), new.split()
        for op, a0, a1, b0, b1 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
            if op != "equal":
                out.append((" ".join(a[a0:a1]), " ".join(b[b0:b1])))
    return out


async def transcribe(
    engine: CaptionEngine,
    samples: np.ndarray,
    options: SessionOptions,
    *,
    realtime: bool,
    vad_backlog_s: float,
    pending: int,
) -> Run:
    """Stream ``samples`` (16 kHz float32) through one live session with ``options`` and return its locked
    sentences.

    Fed in 60 ms chunks, each once the session has caught up (``Session.caught_up(vad_backlog_s, pending)``) or,
    with ``realtime``, at its time as a microphone would. The session is closed on every way out."""
    session = engine.open_session(options)
    session.configure(options)
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
    return Run([s.text for s in result.sentences()], time.monotonic() - t0, dict(session.stats.dropped), errors)
