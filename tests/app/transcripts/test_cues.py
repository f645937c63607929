"""Subtitle cues (app/transcripts/cues.py) and line breaks (app/transcripts/line_breaks.py) on hand-made sentences
with word times.

Property tests (hypothesis) check the limits for any input and every way of marking a change of speaker: every line
at most ``max_chars``, at most ``max_lines`` lines, cues in order and never overlapping, every cue on screen at least
``min_ms`` where the following cue allows it and at most ``max_ms``, every cue at most ``max_cps`` unless its
neighbours leave it no more time (it then has all they leave, and its lead-in), and the words come back in order,
none lost. The files load in third-party parsers (``srt``, ``webvtt-py``) and convert with Debian's ffmpeg.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import srt as srt_lib
import webvtt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.rooms.store import SentenceRecord
from app.transcripts import exports
from app.transcripts.cues import SPEAKER_STYLES, Cue, CueRules, build_cues
from app.transcripts.line_breaks import break_lines
from engine.protocol import Word
from tests.support.paths import ROOT

WORDS = (
    "the",
    "a",
    "and",
    "of",
    "to",
    "Holmes",
    "Sherlock",
    "said,",
    "remarkable",
    "evening.",
    "we",
    "shall",
    "London",
    "because",
    "it",
    "was",
    "quite",
    "extraordinary",
    "in",
    "I",
    "never",
    "saw",
    "anything",
    "like",
    "it.",
    "Yes?",
    "no",
    "Watson",
    "questions;",
    "supercalifragilisticexpialidocious-and-then-some",
)


def _sentence(
    sid: int, text: str, start: int, spk: int | None, session: str = "s", ms_per_char: int = 60, gap_ms: int = 0
) -> SentenceRecord:
    """A sentence whose words are said one after another, ``ms_per_char`` per letter."""
    words, t = [], start
    for w in text.split():
        words.append(Word(w, t, t + ms_per_char * len(w)))
        t += ms_per_char * len(w) + gap_ms
    return SentenceRecord(sid, session, text, start, t, spk, tuple(words))


MARK = re.compile(r"^(Speaker \d+: ?|-|>> ?)")


def _check(sentences: list[SentenceRecord], rules: CueRules, speakers: str = "dash") -> list[Cue]:
    cues = build_cues(sentences, rules, speakers)
    # Nothing lost or reordered: the cues' words are the sentences' words (a word longer than a line is cut into
    # line-long pieces; its letters stay in order).
    said = "".join(w.w for s in sentences for w in s.words)
    shown = "".join(w.w for c in cues for w in c.words)
    assert shown == said
    marked = [bool(MARK.match(c.lines[0])) and not MARK.match(c.words[0].w) for c in cues]
    assert "".join(
        (MARK.sub("", "".join(c.lines)) if m else "".join(c.lines)).replace(" ", "")
        for c, m in zip(cues, marked, strict=True)
    ) == said.replace(" ", "")
    if speakers == "none":
        assert not any(marked)
    for k, c in enumerate(cues):
        assert 1 <= len(c.lines) <= rules.max_lines
        assert all(0 < len(line) <= rules.max_chars for line in c.lines), c.lines
        assert c.start_ms < c.end_ms <= c.start_ms + rules.max_ms
        if k:
            assert cues[k - 1].end_ms <= c.start_ms, "cues overlap"
        room_after = (cues[k + 1].start_ms if k + 1 < len(cues) else c.start_ms + rules.max_ms) - (
            cues[k - 1].end_ms if k else 0
        )
        if room_after >= rules.min_ms + 2 * rules.gap_ms:
            assert c.end_ms - c.start_ms >= rules.min_ms, (c, room_after)
        # A cue is up while its words are said (one word said for longer than max_ms: as long as allowed).
        one_long_word = len(c.words) == 1 and c.words[0].end_ms - c.words[0].start_ms > rules.max_ms
        assert c.start_ms <= c.words[0].start_ms and (c.words[-1].end_ms <= c.end_ms or one_long_word)
        # Too fast to read only when boxed in: it appears as early as it may (its lead-in, the previous cue gone,
        # its words still within max_ms) and stays as long as it may (the next cue less the gap, or max_ms).
        if c.chars * 1000 / (c.end_ms - c.start_ms) > rules.max_cps + 1e-9:
            earliest = max(
                c.words[0].start_ms - rules.lead_ms,
                cues[k - 1].end_ms + rules.gap_ms if k else 0,
                c.words[-1].end_ms - rules.max_ms,
            )
            assert c.start_ms <= max(earliest, cues[k - 1].end_ms if k else 0), (c, earliest)
            latest = min(
                cues[k + 1].start_ms - rules.gap_ms if k + 1 < len(cues) else c.end_ms, c.start_ms + rules.max_ms
            )
            assert c.end_ms >= latest or (k + 1 < len(cues) and c.end_ms == cues[k + 1].start_ms), (c, latest)
    return cues


sentence_texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join)


@st.composite
def transcripts(draw: st.DrawFn) -> list[SentenceRecord]:
    out, t = [], draw(st.integers(0, 5000))
    for sid in range(draw(st.integers(1, 8))):
        s = _sentence(
            sid,
            draw(sentence_texts),
            t,
            draw(st.sampled_from([0, 1, 2, None])),
            draw(st.sampled_from(["a", "b"])),
            draw(st.integers(5, 150)),
            draw(st.integers(0, 900)),
        )
        out.append(s)
        t = s.end_ms + draw(st.integers(0, 3000))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    transcripts(),
    st.integers(10, 80),
    st.integers(1, 3),
    st.sampled_from(SPEAKER_STYLES),
    st.sampled_from([0, 300, 1000, 2000]),
    st.sampled_from([0, 83, 500]),
)
def test_every_limit_holds_and_no_word_is_lost(
    sentences: list[SentenceRecord], max_chars: int, max_lines: int, speakers: str, lead_ms: int, gap_ms: int
) -> None:
    _check(sentences, CueRules(max_chars=max_chars, max_lines=max_lines, lead_ms=lead_ms, gap_ms=gap_ms), speakers)


@settings(max_examples=100, deadline=None)
@given(transcripts(), st.sampled_from(SPEAKER_STYLES))
def test_the_shipped_defaults_hold_for_any_transcript(sentences: list[SentenceRecord], speakers: str) -> None:
    _check(sentences, CueRules(), speakers)


def test_a_long_sentence_becomes_readable_cues_cut_at_its_clauses() -> None:
    text = (
        "As you know, and as I have given you proof, I have the greatest admiration for Mr Sherlock Holmes. "
        "I hope that we shall both forget the rest of the story in the morning, when the fog lifts."
    )
    cues = build_cues([_sentence(0, text, 1000, 0)])
    lines = [c.lines for c in cues]
    assert lines[0][0].startswith("As you know,"), "the first speaker needs no mark"
    assert all(len(line) <= 42 for ls in lines for line in ls) and all(len(ls) <= 2 for ls in lines)
    ends = [ls[-1].split()[-1] for ls in lines]
    assert ends.count("Holmes.") == 1 and ends[-1] == "lifts.", "cues end at the ends of sentences"
    assert not any(line.endswith((" the", " a", " of", " Mr")) for ls in lines for line in ls)
    assert not any(line.startswith("Holmes") or line.endswith("Sherlock") for ls in lines for line in ls)


def _meeting() -> list[SentenceRecord]:
    a = _sentence(0, "We should start the meeting now.", 0, 0)
    b = _sentence(1, "Agreed.", a.end_ms + 300, 1)
    c = _sentence(2, "Let me share the agenda first.", b.end_ms + 2000, 1)
    return [a, b, c, _sentence(3, "Thanks.", c.end_ms + 400, 0)]


def test_a_change_of_speaker_opens_with_a_dialogue_dash_and_no_name() -> None:
    cues = build_cues(_meeting())
    assert [c.lines[0] for c in cues] == [
        "We should start the meeting now.",
        "-Agreed.",
        "Let me share the agenda first.",
        "-Thanks.",
    ]
    assert not any("Speaker" in line for c in cues for line in c.lines)
    assert cues[1].end_ms - cues[1].start_ms >= 833, "a one-word cue stays up long enough to read"
    # A change of publisher in a room is a change of voice too, even for two unknown speakers.
    two = [_sentence(0, "Hello there.", 0, None, session="a"), _sentence(1, "Hi.", 2000, None, session="b")]
    assert [c.lines[0] for c in build_cues(two)] == ["Hello there.", "-Hi."]


def test_chevrons_and_labels_are_a_parameter_away() -> None:
    chevrons = build_cues(_meeting(), speakers="chevrons")
    assert [c.lines[0] for c in chevrons][:2] == ["We should start the meeting now.", ">> Agreed."]
    labels = build_cues(_meeting(), speakers="label")
    assert [c.lines[0] for c in labels][1:] == [
        "Speaker 2: Agreed.",
        "Let me share the agenda first.",
        "Speaker 1: Thanks.",
    ]
    assert labels[0].lines == ("Speaker 1: We should", "start the meeting now."), "the label counts: two lines"
    assert all(c.lines[0] == c.lines[0].lstrip("->") for c in build_cues(_meeting(), speakers="none"))
    options = exports.parse_options({"speakers": "label"})
    assert options.speakers == "label" and exports.parse_options({}).speakers == "dash"
    srt = exports.to_srt(_meeting(), options)
    assert "\nSpeaker 1: We should\n" in srt and "\nSpeaker 2: Agreed.\n" in srt
    assert "\n>> Agreed.\n" in exports.to_srt(_meeting(), exports.ExportOptions(speakers="chevrons"))
    # One cue per sentence: the same marks.
    per_sentence = exports.to_srt(_meeting(), exports.ExportOptions(cues="sentence"))
    assert "\nWe should start the meeting now.\n" in per_sentence and "\n-Agreed.\n" in per_sentence
    assert "\nLet me share the agenda first.\n" in per_sentence
    labelled = exports.to_srt(_meeting(), exports.ExportOptions(cues="sentence", speakers="label"))
    assert "\nSpeaker 2: Let me share the agenda first.\n" in labelled, "a label names every sentence, as before"


def test_the_webvtt_voice_span_keeps_the_name_whatever_the_mark() -> None:
    for speakers, second in (
        ("dash", "-Agreed."),
        ("chevrons", "&gt;&gt; Agreed."),
        ("none", "Agreed."),
        ("label", "Speaker 2: Agreed."),
    ):
        vtt = exports.to_vtt(_meeting(), exports.ExportOptions(speakers=speakers))
        assert "\n<v Speaker 1>We should" in vtt or "\n<v Speaker 1>Speaker 1: We should" in vtt, speakers
        assert f"\n<v Speaker 2>{second}\n" in vtt, (speakers, vtt)
        assert "\n<v Speaker 2>Let me share the agenda first.\n" in vtt


def test_a_mark_counts_toward_the_line_and_the_reading_speed() -> None:
    a = _sentence(0, "Hello.", 0, 0)
    # 42 characters: alone on one line; the dash makes 43, so the line breaks in two.
    b = _sentence(1, "Everything I said was said before, really.", 3000, 1)
    assert len(b.text) == 42
    cues = build_cues([a, b])
    assert cues[1].lines == ("-Everything I said was said before,", "really.") and cues[1].chars == 42
    assert build_cues([a, b], speakers="none")[1].lines == (b.text,)


def test_reading_speed_is_met_by_staying_into_the_pause() -> None:
    fast = _sentence(0, "Quick words said fast.", 0, None, ms_per_char=20)  # 18 letters in 0.36 s
    later = _sentence(1, "Then a long pause came.", 5000, None)
    first = build_cues([fast, later])[0]
    assert first.start_ms == 0, "the pause after is enough: no lead-in"
    assert first.end_ms - first.start_ms >= len("Quick words said fast.") * 50


def test_reading_speed_is_met_by_a_lead_in_when_the_pause_after_is_short() -> None:
    # 45 characters on two lines said in 1.37 s, the next speaker 0.5 s later: 2.25 s needed, so the cue appears
    # 0.46 s early (the speaker was silent 3 s before).
    fast = _sentence(0, "I really cannot say more than that, can I now?", 3000, 0, ms_per_char=37)
    reply = _sentence(1, "No.", fast.end_ms + 500, 1)
    cue = build_cues([fast, reply])[0]
    assert cue.chars == 45 and cue.words[0].start_ms - cue.start_ms > 0
    assert cue.words[0].start_ms - cue.start_ms <= CueRules().lead_ms
    assert cue.chars * 1000 / (cue.end_ms - cue.start_ms) <= 20
    # Never more than lead_ms ahead of the speech: with no lead-in allowed, the cue reads too fast.
    tight = build_cues([fast, reply], CueRules(lead_ms=0))[0]
    assert tight.start_ms == fast.words[0].start_ms and tight.chars * 1000 / (tight.end_ms - tight.start_ms) > 20


def test_neighbours_share_a_pause() -> None:
    """A cue that can take its reading time from the pause before it leaves the pause after to the next cue."""
    rules = CueRules()
    # 44 characters said in 1.1 s, a pause of 1.2 s, 41 more (and the dash) in 1 s, 0.8 s before a third speaker:
    # the second needs 0.4 s of the pause before it, the first more than the rest.
    a = _sentence(0, "Said quickly after a long silence, this one.", 4000, 0, ms_per_char=30)
    b = _sentence(1, "And so is this one, said right after it.", a.end_ms + 1200, 1, ms_per_char=30)
    c = _sentence(2, "Then the third.", b.end_ms + 800, 0)
    first, second, _ = build_cues([a, b, c], rules)
    for cue in (first, second):
        assert cue.chars * 1000 / (cue.end_ms - cue.start_ms) <= rules.max_cps, cue
    assert first.start_ms < a.start_ms, "the first cue leads in so that the second has the pause between them"
    assert second.start_ms < b.start_ms and second.start_ms - first.end_ms >= rules.gap_ms


def test_cues_sentence_keeps_one_cue_per_sentence() -> None:
    s = [_sentence(0, "One sentence, " * 10, 0, 0)]
    srt = exports.to_srt(s, exports.ExportOptions(cues="sentence"))
    assert srt.count(" --> ") == 1 and len(srt.splitlines()[2]) > 100
    assert exports.to_srt(s).count(" --> ") == 2  # 140 characters: two cues of two lines


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"max_chars": "3"}, "max_chars"),
        ({"max_chars": "x"}, "max_chars"),
        ({"max_lines": "0"}, "max_lines"),
        ({"max_cps": "nan"}, "max_cps"),
        ({"cues": "words"}, "cues"),
        ({"min_ms": "8000", "max_ms": "7000"}, "min_ms"),
        ({"speakers": "names"}, "speakers"),
        ({"lead_ms": "-1"}, "lead_ms"),
    ],
)
def test_bad_cue_options_name_the_parameter(query: dict[str, str], param: str) -> None:
    with pytest.raises(exports.OptionError) as err:
        exports.parse_options(query)
    assert err.value.param == param
    assert exports.parse_options({"max_chars": "32", "max_lines": "3", "max_cps": "17.5"}).rules == CueRules(
        max_chars=32, max_lines=3, max_cps=17.5
    )


def test_line_breaks_follow_the_broadcast_rules() -> None:
    assert break_lines("Hello there.".split(), 42, 2) == ["Hello there."]
    assert break_lines("I went to the market, and then I saw Sherlock Holmes there.".split(), 42, 2) == [
        "I went to the market,",
        "and then I saw Sherlock Holmes there.",
    ]
    two = break_lines("She gave the letter to Sherlock Holmes in the hall of the house".split(), 42, 2)
    assert two is not None and not two[0].endswith(("the", "to", "of", "Sherlock"))
    assert break_lines(["x" * 43], 42, 2) is None
    assert break_lines("a b c d e f g h i j".split(), 3, 2) is None


def _transcript() -> list[SentenceRecord]:
    a = _sentence(0, "As you know, and as I have given you proof, I have the greatest admiration for him.", 500, 0)
    b = _sentence(1, "Thank you. <b>Bold</b> & ampersands --> stay text.", a.end_ms + 400, 1)
    return [a, b, _sentence(2, "No label here at all.", b.end_ms + 1500, None)]


def test_srt_and_vtt_carry_the_same_cues_and_load_in_third_party_parsers(tmp_path: Path) -> None:
    sentences = _transcript()
    srt_text = exports.to_srt(sentences)
    vtt_text = exports.to_vtt(sentences)
    parsed_srt = list(srt_lib.parse(srt_text))
    path = tmp_path / "captions.vtt"
    path.write_text(vtt_text, encoding="utf-8")
    parsed_vtt = webvtt.read(str(path)).captions
    assert len(parsed_srt) == len(parsed_vtt) == len(build_cues(sentences)) >= 4
    for a, b in zip(parsed_srt, parsed_vtt, strict=True):
        assert abs(a.start.total_seconds() - _seconds(b.start)) < 1e-6
        assert abs(a.end.total_seconds() - _seconds(b.end)) < 1e-6
        assert a.content == html.unescape(b.text)  # the voice span is markup, not text
    assert any(c.content.startswith("-Thank you.") for c in parsed_srt) and "&amp;" in vtt_text
    assert "<v Speaker 2>-Thank you." in vtt_text and "Speaker 2:" not in srt_text


def _seconds(clock: str) -> float:
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


@pytest.mark.skipif(
    shutil.which("ffmpeg") is None, reason="Debian's ffmpeg is not installed (scripts/setup.sh --tests installs it)"
)
def test_ffmpeg_converts_the_files(tmp_path: Path) -> None:
    sentences = _transcript()
    for fmt, text in (("vtt", exports.to_vtt(sentences)), ("srt", exports.to_srt(sentences))):
        src = tmp_path / f"captions.{fmt}"
        src.write_text(text, encoding="utf-8")
        out = tmp_path / f"captions-{fmt}.ass"
        subprocess.run(
            ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(src), str(out)], check=True, timeout=30
        )
        dialogue = [line for line in out.read_text(encoding="utf-8").splitlines() if line.startswith("Dialogue:")]
        assert len(dialogue) == len(build_cues(sentences)), fmt
        assert "greatest admiration" in "".join(dialogue).replace("\\N", " ")


def test_the_screens_break_lines_by_the_same_word_lists_as_the_files() -> None:
    """static/js/line-breaks.js (kiosk and widget) and app/transcripts/line_breaks.py (SRT, WebVTT) share their
    rules."""
    from app.transcripts import line_breaks

    js = (ROOT / "static" / "js" / "line-breaks.js").read_text(encoding="utf-8")
    for name in ("BREAK_BEFORE", "NO_BREAK_AFTER"):
        match = re.search(rf"export const {name} = new Set\(\s*\((.*?)\)\.split", js, re.S)
        assert match, name
        words = "".join(re.findall(r'"([^"]*)"', match.group(1))).split()
        assert set(words) == getattr(line_breaks, name), name
    for cost in (
        "COST_SENTENCE",
        "COST_CLAUSE",
        "COST_BEFORE_CONJUNCTION",
        "COST_PLAIN",
        "COST_DANGLING",
        "COST_IN_NAME",
    ):
        match = re.search(rf"const {cost} = ([\d.]+);", js)
        assert match and float(match.group(1)) == getattr(line_breaks, cost), cost
