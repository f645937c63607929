"""SCC files (app/transcripts/scc.py): a room's captions as CEA-608 pop-on captions on drop-frame timecode.

The pure pieces first: drop-frame labels around minute boundaries, odd parity, the characters CEA-608 can show,
a caption's load (doubled control codes, at most 4 rows of 32 columns) and the schedule of loads, EOCs and EDMs
(one pair a frame, nothing overlapping, each load done before its EOC, EOCs on time). Then a room's
``transcript.scc`` read back by two real decoders, pycaption's ``SCCReader`` and Debian's ffmpeg (its SCC demuxer and
``cc_dec``): the words are the room's, the captions are the SRT's cues within a frame or so, timecodes increase and
no row is over 32 characters. Sentences come from the room's own commit path, with the named fake recognizer as
the server's engine: what is tested is the file, not the model.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import srt as srt_lib
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cea608 import SHOWN
from app.rooms.keys import ROOMS
from app.rooms.store import SentenceRecord
from app.transcripts import scc
from app.transcripts.cues import CueRules
from engine import CaptionEngine
from engine.protocol import Word
from tests.support.caption_readers import pycaption_captions
from tests.support.servers import running_server

TIMECODE = re.compile(r"(\d\d):(\d\d):(\d\d);(\d\d)")


# ---- timecode ----------------------------------------------------------------------------------------------------
def test_drop_frame_labels_skip_frames_0_and_1_each_minute_except_every_tenth() -> None:
    assert scc.timecode(0) == "00:00:00;00"
    assert scc.timecode(29) == "00:00:00;29" and scc.timecode(30) == "00:00:01;00"
    assert scc.timecode(1799) == "00:00:59;29" and scc.timecode(1800) == "00:01:00;02", "minute 1 drops ;00 ;01"
    assert scc.timecode(3597) == "00:01:59;29" and scc.timecode(3598) == "00:02:00;02"
    assert scc.timecode(17_981) == "00:09:59;29" and scc.timecode(17_982) == "00:10:00;00", "minute 10 keeps them"
    assert scc.timecode(17_983) == "00:10:00;01" and scc.timecode(17_982 + 1800) == "00:11:00;02"
    assert scc.timecode(107_892) == "01:00:00;00", "an hour of 29.97 fps video is 107,892 frames"
    assert scc.timecode(24 * 107_892) == "24:00:00;00"
    with pytest.raises(ValueError):
        scc.frame_of_timecode("00:01:00;00")  # a label drop-frame never uses
    with pytest.raises(ValueError):
        scc.frame_of_timecode("00:00:00;30")


def test_timecodes_increase_frame_by_frame_and_read_back() -> None:
    previous: tuple[int, ...] = (-1,)
    for frame in range(0, 2 * 107_892 + 40):  # two hours, every frame
        label = scc.timecode(frame)
        hh, mm, ss, ff = (int(g) for g in TIMECODE.fullmatch(label).groups())  # type: ignore[union-attr]
        assert 0 <= ff < 30 and 0 <= ss < 60 and 0 <= mm < 60
        assert not (ss == 0 and ff < 2 and mm % 10), label
        assert (hh, mm, ss, ff) > previous, label
        assert scc.frame_of_timecode(label) == frame
        previous = (hh, mm, ss, ff)


def test_milliseconds_become_the_nearest_29_97_fps_frame() -> None:
    assert scc.frame_of(0) == 0 and scc.frame_of(-5) == 0
    assert scc.frame_of(1000) == 30  # 29.97 frames
    assert scc.frame_of(60_060) == 1800 and scc.timecode(scc.frame_of(60_060)) == "00:01:00;02"
    assert scc.frame_of(600_600) == 18_000 - 18 + 18  # ten minutes of frames at 30000/1001
    for ms in range(0, 100_000, 7):
        assert abs(scc.frame_of(ms) * 1001 / 30 - ms) <= 1001 / 60 + 1e-9, ms  # at most half a frame off
    # The label keeps to the wall clock within two frames (what the readers take it for).
    for frame in range(0, 107_892, 13):
        hh, mm, ss, ff = (int(g) for g in TIMECODE.fullmatch(scc.timecode(frame)).groups())  # type: ignore[union-attr]
        assert abs((hh * 3600 + mm * 60 + ss + ff / 30) - frame * 1001 / 30_000) < 2 / 30


# ---- bytes -------------------------------------------------------------------------------------------------------
def test_every_byte_has_odd_parity() -> None:
    for byte in range(128):
        coded = scc.parity(byte)
        assert coded & 0x7F == byte and bin(coded).count("1") % 2 == 1
    assert (scc.parity(0x14), scc.parity(0x20), scc.parity(0x2C), scc.parity(0x2E), scc.parity(0x2F)) == (
        0x94,
        0x20,
        0x2C,
        0xAE,
        0x2F,
    )  # RCL 9420, EDM 942c, ENM 94ae, EOC 942f as SCC files spell them
    assert scc.parity(0) == 0x80  # the pad of a lone character
    with pytest.raises(ValueError):
        scc.parity(0x80)


def test_text_is_mapped_to_the_characters_cea608_shows() -> None:
    assert scc.caption_text("Don’t say “never” – ever…") == 'Don\'t say "never" - ever...'
    assert scc.caption_text("café señor Élan naïve Über ß ♪ ½") == "café señor Élan naïve Über ß ♪ ½", "608 has them"
    assert scc.caption_text("Łódź Dvořák ﬁne 東京 x") == "Lódz Dvorák fine  x", "close forms, or dropped"
    assert scc.caption_text("♪♪") == "♪ ♪", "a special character's four copies would read as one in ffmpeg"
    assert scc.caption_text("a\tb\nc") == "a b c"
    # Characters CEA-608's basic set gives to letters are sent through its extended set, never as their ASCII byte.
    pairs = scc.encode_row("*_{}~\\^")
    assert all(a in (0x12, 0x13) or b in (0x12, 0x13) or a in b"(.)-/'" for a, b in pairs), pairs
    with pytest.raises(ValueError):
        scc.encode_row("東")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_encodes_to_valid_cea608_pairs(text: str) -> None:
    shown = scc.caption_text(text)
    assert set(shown) <= SHOWN
    pairs = scc.encode_row(shown)
    for i, (a, b) in enumerate(pairs):
        if 0x10 <= a <= 0x1F:
            # two-byte characters only: special (0x11) or extended (0x12, 0x13), never a control code
            assert (a == 0x11 and 0x30 <= b <= 0x3F) or (a in (0x12, 0x13) and 0x20 <= b <= 0x3F), (a, b)
            assert pairs[i - 1] == (a, b) or pairs[i + 1] == (a, b), "doubled"
        else:
            assert 0x20 <= a <= 0x7E and (b == 0 or 0x20 <= b <= 0x7E), (a, b)
    assert _columns(pairs) == len(shown), "one column a character"


def _columns(pairs: list[scc.Pair]) -> int:
    """Columns a row of pairs fills, as a decoder counts: a basic byte one, a special character one (its second
    copy ignored), an extended one none (it backs over its fallback)."""
    count, last = 0, None
    for a, b in pairs:
        if 0x10 <= a <= 0x1F:
            if (a, b) != last:
                count += 1 if a == 0x11 else 0
            last = (a, b) if (a, b) != last else None
            continue
        last = None
        count += (a != 0) + (b != 0)
    return count


def test_a_load_is_rcl_enm_then_a_pac_per_row_at_the_bottom_and_doubled_control_codes() -> None:
    pairs = scc.load_pairs(["Good evening,", "and welcome."])
    assert pairs[:4] == [scc.RCL, scc.RCL, scc.ENM, scc.ENM]
    indent = (32 - 13) // 2 // 4 * 4  # 8: the longest row centred, to a multiple of 4
    assert pairs[4:6] == [scc.pac(14, indent)] * 2 and scc.pac(14, 8) == (0x14, 0x54)
    row2 = pairs.index(scc.pac(15, indent))
    assert pairs[row2 + 1] == scc.pac(15, indent) and scc.pac(15, 0) == (0x14, 0x70)  # 9470: row 15, column 0
    assert scc.pac(12, 0) == (0x13, 0x50) and scc.pac(13, 28) == (0x13, 0x7E)
    assert len(scc.load_pairs(["x" * 32] * 4)) == 4 + 4 * (2 + 16)
    for bad in (["x" * 33], ["x"] * 5, []):
        with pytest.raises(ValueError):
            scc.load_pairs(bad)
    with pytest.raises(ValueError):
        scc.pac(11, 0)


# ---- schedule ----------------------------------------------------------------------------------------------------
def _check_slots(times: list[tuple[int, int, int]], slots: list[scc.Slot]) -> None:
    """The schedule's contract: one pair a frame (nothing overlaps), each load after the previous EOC and done
    before its own, EDM after its EOC and left out only where the next EOC comes within two frames."""
    spans = []
    for k, ((s, e, length), slot) in enumerate(zip(times, slots, strict=True)):
        spans += [(slot.load, slot.load + length), (slot.eoc, slot.eoc + 2)]
        assert slot.load >= 0 and slot.load + length <= slot.eoc
        if k:
            assert slot.load >= slots[k - 1].eoc + 2, "the hidden memory is one: load after the previous flip"
        if slot.edm is not None:
            spans.append((slot.edm, slot.edm + 2))
            assert slot.edm >= slot.eoc + 2
            assert k + 1 == len(slots) or slot.edm + 2 <= slots[k + 1].eoc
        else:
            # (a cue lasts at least the two frames of its EOC: its end is never before its start + 2)
            assert k + 1 < len(slots) and slots[k + 1].eoc < max(e, s + 2, slot.eoc + 2) + 2, "EDM left out only there"
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), "two pairs in one frame"


def test_each_eoc_is_at_its_cues_start_and_each_edm_at_its_end_when_there_is_room() -> None:
    times = [(100, 190, 30), (260, 400, 40), (402, 500, 20), (501, 600, 20)]
    slots = scc.schedule(times)
    _check_slots(times, slots)
    assert [s.eoc for s in slots] == [100, 260, 402, 501]
    assert [s.edm for s in slots] == [190, 400, None, 600], "the third is replaced at once: no EDM"
    # Loads end right before their EOC, or right before the EDM that comes between (the third's).
    assert [s.load for s in slots] == [70, 220, 400 - 20, 481]


def test_a_load_with_no_room_moves_earlier_and_never_the_eoc_later() -> None:
    # A short cue, then one whose 40 pairs do not fit in its 25 frames: the short one goes up earlier.
    times = [(100, 125, 10), (127, 300, 40)]
    slots = scc.schedule(times)
    _check_slots(times, slots)
    assert slots[1].eoc == 127 and slots[0].eoc == 127 - 40 - 2 - 2 and slots[0].edm is not None
    # An EDM that would fall inside the next load goes where it fits nearest to the cue's end.
    times = [(100, 150, 10), (160, 300, 50)]
    slots = scc.schedule(times)
    _check_slots(times, slots)
    assert slots[1].eoc == 160 and slots[0].edm == 102 + 50 and slots[1].load == 102, "load first, then EDM"
    # Only at the start of the file, where no earlier frame exists, is a cue late.
    slots = scc.schedule([(5, 100, 20)])
    assert slots == [scc.Slot(0, 20, 100)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(1, 300), st.integers(7, 76)), min_size=1, max_size=12),
    st.integers(0, 2000),
)
def test_any_schedule_keeps_its_contract(cues: list[tuple[int, int, int]], lead: int) -> None:
    times, t = [], lead
    for gap, length, load in cues:
        times.append((t + gap, t + gap + length, load))
        t += gap + length
    slots = scc.schedule(times)
    _check_slots(times, slots)
    room = sum(load + 4 for _, _, load in times)
    if times[0][0] >= room:  # room enough before the first cue for every load: no EOC after its start
        assert all(slot.eoc <= s for slot, (s, _, _) in zip(slots, times, strict=True))
    for slot, (s, _, _) in zip(slots, times, strict=True):
        assert slot.eoc <= max(s, sum(load + 4 for _, _, load in times)), "late only for want of frames"


def test_an_empty_transcript_is_a_header_and_a_blank_line() -> None:
    assert scc.to_scc([]) == "Scenarist_SCC V1.0\n\n"
    assert scc.to_scc([SentenceRecord(0, "s", "東京", 1000, 2000, 0)]) == "Scenarist_SCC V1.0\n\n", "nothing shown"


# ---- files -------------------------------------------------------------------------------------------------------
def _parse(text: str) -> list[tuple[int, list[str]]]:
    """The file's lines as (frame, hex pairs), checking the layout: the header, a blank line, then lines
    separated by blank lines; timecodes strictly increasing, each line's pairs (one a frame) done before the
    next line starts; every byte with odd parity."""
    assert text.startswith("Scenarist_SCC V1.0\n\n") and text.endswith("\n") and "\r" not in text
    blocks = text[len("Scenarist_SCC V1.0\n\n") :].split("\n\n")
    out: list[tuple[int, list[str]]] = []
    for block in blocks:
        label, _, hexes = block.rstrip("\n").partition("\t")
        assert TIMECODE.fullmatch(label) and "\n" not in hexes, block
        pairs = hexes.split(" ")
        assert all(re.fullmatch(r"[0-9a-f]{4}", p) for p in pairs), block
        for p in pairs:
            for byte in (int(p[:2], 16), int(p[2:], 16)):
                assert bin(byte).count("1") % 2 == 1, p
        frame = scc.frame_of_timecode(label)
        if out:
            assert frame >= out[-1][0] + len(out[-1][1]), f"{label} starts before the line before it is done"
        out.append((frame, pairs))
    return out


def _rows(lines: list[tuple[int, list[str]]]) -> list[list[int]]:
    """For each load, the columns each row reaches (indent plus characters), decoded here by the table of PACs."""
    pac_rows = {(0x13, 0x40): 12, (0x13, 0x60): 13, (0x14, 0x40): 14, (0x14, 0x60): 15}
    loads = []
    for _, pairs in lines:
        raw = [(int(p[:2], 16) & 0x7F, int(p[2:], 16) & 0x7F) for p in pairs]
        if raw[:4] != [scc.RCL, scc.RCL, scc.ENM, scc.ENM]:
            assert raw in ([scc.EOC, scc.EOC], [scc.EDM, scc.EDM]), pairs
            continue
        rows: list[tuple[int, int, list[scc.Pair]]] = []
        k = 4
        while k < len(raw):
            a, b = raw[k]
            if (a, b & 0x60) in pac_rows and b & 0x10:
                assert raw[k + 1] == (a, b), "PACs are doubled"
                rows.append((pac_rows[a, b & 0x60], (b & 0x0E) * 2, []))
                k += 2
                continue
            assert rows, "characters before a PAC"
            rows[-1][2].append((a, b))
            k += 1
        assert [r for r, _, _ in rows] == list(range(16 - len(rows), 16)), "consecutive rows ending at row 15"
        loads.append([indent + _columns(chars) for _, indent, chars in rows])
    return loads


def _early_cues(lines: list[tuple[int, list[str]]], cues: list[tuple[float, float, str]]) -> set[int]:
    """The cues whose EOC comes before their start frame, checking that each went up only as early as the next
    cue's load needs: every frame from its EOC to the next EOC carries a pair (the load, and an EDM if one comes
    between). No EOC comes after its start frame (the file starts well after frame 0)."""
    eocs = [k for k, (_, pairs) in enumerate(lines) if pairs == ["942f", "942f"]]
    assert len(eocs) == len(cues)
    early = set()
    for n, (k, (start, _, _)) in enumerate(zip(eocs, cues, strict=True)):
        frame, want = lines[k][0], scc.frame_of(start * 1000)
        assert frame <= want, "an EOC is never late"
        if frame < want:
            early.add(n)
            between = lines[k : eocs[n + 1]]
            assert sum(len(pairs) for _, pairs in between) == lines[eocs[n + 1]][0] - frame, "no spare frame"
    return early


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower().replace("’", "'"))


def _said(text: str, start_ms: int) -> tuple[Word, ...]:
    """Word times as a speaker says them: about 70 ms a letter, 110 ms between words, longer after a comma."""
    words, t = [], start_ms
    for w in text.split():
        length = 90 + 62 * len(w.strip(",.?!"))
        words.append(Word(w, t, t + length))
        t += length + (260 if w.endswith(",") else 110)
    return tuple(words)


# Two speakers, sentences long enough for 2 and 3 rows, one with accented letters (basic é and ñ, extended É),
# a curly apostrophe (sent as ') and a pause after each sentence.
SPOKEN = [
    (0, "Good evening, and welcome to the council meeting on the future of the riverside library."),
    (0, "We have a full agenda tonight, so let us begin."),
    (
        1,
        "Thank you. This morning I met the señora who runs the café on Élan Street, and she asked about "
        "parking for her customers.",
    ),
    (0, "That’s a fair question."),
    (1, "The plan adds forty spaces behind the old post office, and the work starts in the spring."),
]


def _sentences() -> list[SentenceRecord]:
    out: list[SentenceRecord] = []
    t = 2000
    for spk, text in SPOKEN:
        words = _said(text, t)
        out.append(SentenceRecord(-1, "s1", text, t, words[-1].end_ms, spk, words))
        t = words[-1].end_ms + 900
    return out


def _cue_times(srt_text: str) -> list[tuple[float, float, str]]:
    return [(c.start / timedelta(seconds=1), c.end / timedelta(seconds=1), c.content) for c in srt_lib.parse(srt_text)]


async def _ffmpeg_captions(scc_text: str, folder: Path) -> list[tuple[float, float, str]]:
    """What ffmpeg's SCC demuxer and CEA-608 decoder make of the file, as SRT cues (markup stripped)."""
    src, out = folder / "captions.scc", folder / "captions-from-scc.srt"
    src.write_text(scc_text, encoding="ascii")
    process = await asyncio.create_subprocess_exec(
        "ffmpeg",
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        "-f",
        "scc",
        "-i",
        str(src),
        str(out),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode(errors="replace")
    return [
        (a, b, re.sub(r"<[^>]*>|\{\\[^}]*\}", "", text)) for a, b, text in _cue_times(out.read_text(encoding="utf-8"))
    ]


@pytest.mark.skipif(
    shutil.which("ffmpeg") is None, reason="Debian's ffmpeg is not installed (scripts/setup.sh --tests installs it)"
)
async def test_a_rooms_scc_file_reads_back_in_pycaption_and_ffmpeg(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    async with running_server(fake_engine) as (url, app), aiohttp.ClientSession() as http:
        room = (await app[ROOMS].create()).room
        publisher = room.join("s1")
        await room.commit_sentences(_sentences())
        publisher.leave()
        base = f"{url}/rooms/{room.id}/transcript"
        async with http.get(f"{base}.json") as r:
            said = _words(" ".join(s["text"] for s in (await r.json())["sentences"]))
        assert "señora" in said and "élan" in said
        for lines in (2, 3):
            async with http.get(f"{base}.scc?max_lines={lines}") as r:
                assert r.status == 200 and r.content_type == "text/plain", r.content_type
                assert 'filename="captions-' in r.headers["Content-Disposition"]
                scc_text = await r.text()
            async with http.get(f"{base}.srt?max_chars=32&max_lines={lines}") as r:
                cues = _cue_times(await r.text())
            parsed = _parse(scc_text)
            rows = _rows(parsed)
            assert len(rows) == len(cues) and all(1 <= len(r) <= lines and max(r) <= 32 for r in rows), rows
            assert max(len(r) for r in rows) == lines, "the long sentences fill the rows they may"
            early = _early_cues(parsed, cues)
            assert len(early) < len(cues) / 2, "most cues go up at their start"
            for reader, captions in (
                ("pycaption", pycaption_captions(scc_text)),
                ("ffmpeg", await _ffmpeg_captions(scc_text, tmp_path)),
            ):
                assert _words(" ".join(text for _, _, text in captions)) == said, reader
                assert len(captions) == len(cues), (reader, captions)
                for k, ((start, end, text), (cue_start, cue_end, cue_text)) in enumerate(
                    zip(captions, cues, strict=True)
                ):
                    # The SRT's times, but where a cue went up early to make room for the next one's load: its EDM
                    # then goes where it fits around that load, and the cue before it ends when it goes up.
                    assert abs(start - cue_start) <= 0.1 or (k in early and start < cue_start), (reader, k, start)
                    assert abs(end - cue_end) <= 0.1 or ({k, k + 1} & early and end <= captions[k + 1][0]), (
                        reader,
                        k,
                        end,
                    )
                    assert _words(text) == _words(cue_text), reader
                    assert all(len(row.strip()) <= 32 for row in text.split("\n")) and text.count("\n") < lines
                assert all(a[0] < b[0] and a[1] <= b[0] for a, b in itertools.pairwise(captions))
        # Within CEA-608's limits whatever the query asks; ?cues=sentence has no one-line form here.
        async with http.get(f"{base}.scc?max_chars=80&max_lines=4") as r:
            wide = await r.text()
        assert all(len(r) <= 4 and max(r) <= 32 for r in _rows(_parse(wide)))
        async with http.get(f"{base}.scc?cues=sentence") as r:
            assert await r.text() == (await (await http.get(f"{base}.scc")).text())
        # The caption page's export gives the same file for the same sentences.
        body: dict[str, Any] = {
            "sentences": [
                {
                    "id": k,
                    "text": s.text,
                    "start": s.start_ms,
                    "end": s.end_ms,
                    "spk": s.spk,
                    "session": s.session,
                    "words": [w.wire() for w in s.words],
                }
                for k, s in enumerate(_sentences())
            ]
        }
        async with http.post(
            f"{url}/exports/transcript.scc",
            data=io.BytesIO(json.dumps(body).encode()),
            headers={"Content-Type": "application/json"},
        ) as r:
            assert r.status == 200 and 'filename="captions.scc"' in r.headers["Content-Disposition"]
            page_file = await r.text()
        async with http.get(f"{base}.scc") as r:
            assert await r.text() == page_file


async def test_special_and_extended_characters_read_back_in_both_readers(tmp_path: Path) -> None:
    """Every character the encoder sends comes back as itself from pycaption; ffmpeg's decoder too, but for the
    apostrophe, which it shows as ’."""
    text = "Ça va? Élan, naïve Über-cool ½ ♪ crème brûlée {x} *star* Øre ß"
    words = _said(text, 3000)
    file = scc.to_scc([SentenceRecord(0, "s", text, 3000, words[-1].end_ms, 0, words)], CueRules(max_lines=4))
    got = "\n".join(t for _, _, t in pycaption_captions(file))
    assert " ".join(got.split()) == text
    if shutil.which("ffmpeg"):
        ffmpeg = await _ffmpeg_captions(file, tmp_path)
        assert " ".join(" ".join(t for _, _, t in ffmpeg).split()) == text
