"""Per-session caption metrics from what a client saw, against the reference sentences of its clip.

Times are client wall-clock (``time.monotonic()``): when a piece of source audio left the client (the packet log
of ``TimedTrack``) and when a data-channel message arrived. Session audio time on the server (a sentence's
``start``/``end`` in ms) equals source media time: audio starts at the first packet and nothing is lost on
loopback.

- first partial: from the moment a sentence's first speech left the client to the first message showing new text
  for it (a partial that was not on screen before the onset, or a locked sentence overlapping it);
- first correct word: from the same moment to the first message showing a word of that sentence's reference
  (after ``speechdata.wer.normalise``) that was not on screen before the onset. By word counts: the words of the
  message's partial and of its locked sentences overlapping the sentence, less the words of the partial shown just
  before the onset (less, in turn, those of them locked since as other sentences), must include a reference word.
  So neither the previous sentence's tail left on screen nor a wrong first guess scores, and a word the reference
  says twice scores once shown again. Messages count up to the sentence's (last) lock or, if it never locks, up to
  the next sentence's onset; a sentence with no right word by then counts in ``no_correct``. A word the previous
  sentence only gains after the onset (a lagging partial, its final decode) may score if this sentence says it
  too: partials carry no word times to tell;
- lock: from the moment its last speech left the client to the arrival of the locked sentence(s) covering it;
  ``lock_over_silence`` subtracts the endpoint silence the preset waits for at that sentence length, which is
  the part of the lock latency that is policy, not processing;
- display lag: the server's ``latency_ms`` on each partial update (how far the text being shown trails the live
  audio while someone speaks); messages that lock sentences are left out, because their ``latency_ms`` runs from
  the end of the sentence and so includes the endpoint's silence wait, which the lock latency already reports;
- lost: reference sentences no locked sentence overlaps;
- WER of all locked text against the reference (``speechdata.wer``'s normalisation);
- flicker: tentative words shown that the next screen changed or dropped, and stable words withdrawn
  (``bench.lib.churn.flicker``).

A fresh server is slow on its first decodes (vLLM's are several times slower after start): ``session_metrics(...,
cold=k)`` measures the first ``k`` sentences of the session apart, their first partial, first correct word and lock
in the ``cold_*`` lists instead of the others, and leaves their lock over silence and label times out, so that every
other latency list is the warm server's. Counts (sentences, lost, no partial, no correct word), display lag, WER, churn
and flicker stay those of the whole session.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.lib.churn import flicker, partial_churn
from bench.lib.client import BenchClient
from bench.lib.clips import SessionClip, Utterance
from engine.config import EndpointConfig
from speechdata.wer import normalise, word_errors

_SLOP_S = 0.3  # VAD edges vs reference edges


@dataclass
class SessionMetrics:
    first_partial_s: list[float] = field(default_factory=list)
    first_correct_s: list[float] = field(default_factory=list)  # first word of the reference shown (s)
    lock_s: list[float] = field(default_factory=list)
    lock_over_silence_s: list[float] = field(default_factory=list)
    lag_s: list[float] = field(default_factory=list)
    sentences: int = 0  # reference sentences
    lost: int = 0
    no_partial: int = 0  # sentences that showed no text before they locked (or never)
    no_correct: int = 0  # sentences that showed no word of their reference before they locked (or never)
    errors: int = 0  # word errors
    words: int = 0  # reference words
    overloaded: int = 0  # "overloaded" error messages (the server skipped audio)
    churned: int = 0  # words shown in partials that the locked text then changed (bench.lib.churn)
    partial_words: int = 0  # words shown in partials
    flickered: int = 0  # tentative words shown that the next screen changed or dropped (bench.lib.churn.flicker)
    tentative_words: int = 0  # tentative words shown
    withdrawn: int = 0  # stable words a later screen changed or dropped (must be 0)
    # Seconds from a sentence's end of speech to its speaker label as final while live: its lock, or a ``speakers``
    # correction after it (engine.stream.labels), whichever came last; the re-clustering at stop is not counted.
    label_s: list[float] = field(default_factory=list)
    relabelled: int = 0  # locked sentences whose label a ``speakers`` message changed while live
    # The first sentences of a session on a fresh server (``session_metrics``' ``cold``), measured apart: seconds.
    cold: int = 0  # reference sentences measured as cold (also counted in ``sentences``)
    cold_first_partial_s: list[float] = field(default_factory=list)
    cold_first_correct_s: list[float] = field(default_factory=list)
    cold_lock_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _overlaps(s: dict[str, Any], start_s: float, end_s: float) -> bool:
    return bool(s["start"] / 1000 < end_s + _SLOP_S and s["end"] / 1000 > start_s - _SLOP_S)


def partial_lags(captions: list[dict[str, Any]]) -> list[float]:
    """Display lag in seconds of every caption message that updates the partial text and locks nothing."""
    return [
        msg["latency_ms"] / 1000
        for msg in captions
        if msg.get("latency_ms") is not None and msg["partial"] and not msg["sentences"]
    ]


def live_relabels(messages: list[tuple[float, dict[str, Any]]]) -> tuple[dict[int, float], int]:
    """When a ``speakers`` message last changed each locked sentence's label before the final caption (sentence id:
    arrival time), and how many sentence labels such messages changed."""
    labels: dict[int, int | None] = {}
    changed_at: dict[int, float] = {}
    changes = 0
    for t, msg in messages:
        if msg["type"] == "caption":
            if msg.get("is_final"):
                break
            labels.update((s["id"], s.get("spk")) for s in msg["sentences"])
        elif msg["type"] == "speakers":
            for key, spk in msg["relabel"].items():
                sid = int(key)
                if sid in labels and labels[sid] != spk:
                    labels[sid] = spk
                    changed_at[sid] = t
                    changes += 1
    return changed_at, changes


def first_correct(
    captions: list[tuple[float, dict[str, Any]]], u: Utterance, onset: float, until: float = math.inf
) -> float | None:
    """Arrival time of the first caption message from ``onset`` to ``until`` (monotonic s, both included) that shows
    a word of ``u``'s reference that was not on screen before the onset (the module's docstring: first correct
    word), or None. ``captions``: (arrival, caption message) in arrival order."""
    reference = set(normalise(u.text))
    before = [msg.get("partial") or "" for t, msg in captions if t < onset]
    on_screen = Counter(normalise(before[-1] if before else ""))
    for t, msg in captions:
        if t < onset:
            continue
        if t > until:
            break
        ours = Counter[str]()
        for s in msg["sentences"]:
            if _overlaps(s, u.speech_start_s, u.speech_end_s):
                ours.update(normalise(s["text"]))
            else:
                # The text on screen before the onset leaves the partial as its sentences lock: once locked, the
                # same words in the partial are new ones.
                on_screen -= Counter(normalise(s["text"]))
        shown = Counter(normalise(msg.get("partial") or "")) + ours
        if any(w in reference for w in shown - on_screen):
            return t
    return None


def session_metrics(client: BenchClient, clip: SessionClip, endpoint: EndpointConfig, cold: int = 0) -> SessionMetrics:
    """``client``'s session against ``clip``'s reference sentences (the module's docstring). ``cold``: the first
    this many sentences are measured apart (``SessionMetrics.cold_*``), the others' latencies are the warm ones."""
    m = SessionMetrics(sentences=len(clip.utterances), cold=min(cold, len(clip.utterances)))
    if client.error:
        m.failures.append(client.error)
    if not client.track.wall_s:
        m.lost = m.sentences
        m.failures.append("no audio was sent")
        return m
    captions = [(t, msg) for t, msg in client.messages if msg["type"] == "caption"]
    locked = [(t, s) for t, msg in captions for s in msg["sentences"]]
    m.overloaded = sum(1 for _, msg in client.messages if msg.get("code") == "overloaded")
    m.lag_s = partial_lags([msg for _, msg in captions])
    m.churned, m.partial_words = partial_churn(msg for _, msg in captions)
    m.flickered, m.tentative_words, m.withdrawn = flicker(msg for _, msg in captions)
    labelled_at, m.relabelled = live_relabels(client.messages)
    for i, u in enumerate(clip.utterances):
        is_cold = i < cold
        onset = client.sent_at(u.speech_start_s)
        before = [msg["partial"] for t, msg in captions if t < onset]
        shown_before = before[-1] if before else ""
        first = next(
            (
                t
                for t, msg in captions
                if t >= onset
                and (
                    (msg["partial"] and msg["partial"] not in shown_before)
                    or any(_overlaps(s, u.speech_start_s, u.speech_end_s) for s in msg["sentences"])
                )
            ),
            None,
        )
        if first is None:
            m.no_partial += 1
        else:
            (m.cold_first_partial_s if is_cold else m.first_partial_s).append(first - onset)
        covering = [t for t, s in locked if _overlaps(s, u.speech_start_s, u.speech_end_s)]
        # A right word counts until the sentence is locked; one never locked, until the next sentence starts.
        if covering:
            until = max(covering)
        elif i + 1 < len(clip.utterances):
            until = client.sent_at(clip.utterances[i + 1].speech_start_s)
        else:
            until = math.inf
        correct = first_correct(captions, u, onset, until)
        if correct is None:
            m.no_correct += 1
        else:
            (m.cold_first_correct_s if is_cold else m.first_correct_s).append(correct - onset)
        if not covering:
            m.lost += 1
            continue
        lock = max(covering) - client.sent_at(u.speech_end_s)
        if is_cold:
            m.cold_lock_s.append(lock)
            continue
        m.lock_s.append(lock)
        labelled = [labelled_at.get(s["id"], t) for t, s in locked if _overlaps(s, u.speech_start_s, u.speech_end_s)]
        m.label_s.append(max(labelled) - client.sent_at(u.speech_end_s))
        silence_s = endpoint.silence_for(int((u.speech_end_s - u.speech_start_s) * 1000)) / 1000
        m.lock_over_silence_s.append(lock - silence_s)
    text = " ".join(s["text"] for _, s in sorted(locked, key=lambda ts: ts[1]["id"]))
    m.errors, m.words = word_errors(clip.reference, text)
    return m


def merge(items: list[SessionMetrics]) -> SessionMetrics:
    out = SessionMetrics()
    for m in items:
        out.first_partial_s += m.first_partial_s
        out.first_correct_s += m.first_correct_s
        out.lock_s += m.lock_s
        out.lock_over_silence_s += m.lock_over_silence_s
        out.lag_s += m.lag_s
        out.sentences += m.sentences
        out.lost += m.lost
        out.no_partial += m.no_partial
        out.no_correct += m.no_correct
        out.errors += m.errors
        out.words += m.words
        out.overloaded += m.overloaded
        out.churned += m.churned
        out.partial_words += m.partial_words
        out.flickered += m.flickered
        out.tentative_words += m.tentative_words
        out.withdrawn += m.withdrawn
        out.label_s += m.label_s
        out.relabelled += m.relabelled
        out.cold += m.cold
        out.cold_first_partial_s += m.cold_first_partial_s
        out.cold_first_correct_s += m.cold_first_correct_s
        out.cold_lock_s += m.cold_lock_s
        out.failures += m.failures
    return out


Column = tuple[str, str, str]  # (row key, header, format spec); a NaN value prints as "-"


def print_markdown_table(columns: list[Column], rows: list[dict[str, Any]]) -> None:
    """Print ``rows`` as a Markdown table with the given columns."""
    print("| " + " | ".join(h for _, h, _ in columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print(
            "| "
            + " | ".join("-" if isinstance(r[k], float) and math.isnan(r[k]) else f.format(r[k]) for k, _, f in columns)
            + " |"
        )
