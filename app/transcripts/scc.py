"""Captions as an SCC file (Scenarist Closed Caption): CEA-608 byte pairs on SMPTE timecode, for broadcast
encoders and post-production tools.

The file is the line ``Scenarist_SCC V1.0``, a blank line, then lines ``HH:MM:SS;FF<TAB>9420 9420 ...`` separated
by blank lines: at each timecode the hex byte pairs that follow go to the decoder one pair per video frame, on
caption channel 1 (CC1, field 1). Each byte has odd parity in its top bit (``parity``), as on the wire.

Timecode is 29.97 fps drop-frame (``timecode``): a cue at ``t`` ms belongs to video frame ``round(t * 30 / 1001)``
(``frame_of``), named with the drop-frame label of that frame, which stays within 2 frames of the wall clock.

Captions are **pop-on**, the broadcast form for prepared captions: each cue is written into the decoder's hidden
(non-displayed) memory ahead of time and shown whole at its start by one command, without words appearing one by
one. Per cue (``load_pairs``):

- RCL (resume caption loading): pop-on mode, so that what follows goes to non-displayed memory;
- ENM (erase non-displayed memory): the hidden memory still holds the caption the previous flip took off the
  screen;
- per row, a PAC (preamble address code): the row and the indent where its characters go; a PAC's indent also
  resets the style to white, not italic, not underlined, so no mid-row code is needed;
- the characters, two a pair (a lone one padded with a null byte);
- EOC (end of caption), at the cue's start: swaps the memories, showing the caption;
- EDM (erase displayed memory), at the cue's end, unless the next cue's EOC replaces it within EDM's own two frames.

Control codes are sent twice in a row (the redundancy CEA-608 prescribes for field 1: a decoder acts on the first
copy that arrives intact and ignores an identical second one); so are the two-byte special and extended
characters, which decoders treat the same way. An extended character (``É``, ``ü``, ``ß``...) moves the cursor back
one column before it is drawn, so a plain fallback letter goes first (``E``): an old decoder without the extended
set shows that.

A cue can only be loaded once the one before it has gone up (the hidden memory is one), at a frame a pair: where
a long cue follows a short one too closely for its load, the short one goes up earlier (``schedule``); cues are
never shown late, but at the very start of the file, where no earlier frame exists.

Text: at most 4 rows of at most 32 characters (``rules_for``), only characters CEA-608 can show (``app.cea608``:
its basic set, ASCII with ``á é í ó ú ç ÷ Ñ ñ`` in place of ``* \\ ^ _ ` { | } ~``, which the extended sets carry,
its special and its extended sets). ``caption_text`` maps everything else to a close form (curly quotes to
straight, dashes to ``-``, other accented letters to their base letter) or drops it, before the cues are cut, so
that what is measured against 32 columns is what is shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.protocol import Word

from ..cea608 import COLUMNS, shown_form
from ..rooms import SentenceRecord
from .cues import Cue, CueRules, build_cues

HEADER = "Scenarist_SCC V1.0"
ROWS = 4  # at most this many rows a caption (the usual limit of pop-on captions)
BOTTOM_ROW = 15  # the screen's last row (rows are 1-15): captions sit at the bottom

Pair = tuple[int, int]  # two 7-bit bytes, before parity

# Miscellaneous control codes, channel 1 (first byte 0x14 on field 1).
RCL: Pair = (0x14, 0x20)  # resume caption loading: pop-on mode
EDM: Pair = (0x14, 0x2C)  # erase displayed memory
ENM: Pair = (0x14, 0x2E)  # erase non-displayed memory
EOC: Pair = (0x14, 0x2F)  # end of caption: swap displayed and non-displayed memory
_NULL = 0x00  # pads a pair holding one character

# Channel 1's PAC first byte and row base for the rows a caption may take (CEA-608's row table); the second byte
# is base + 0x10 + indent / 2 (indent in columns, a multiple of 4, white, not underlined).
_PAC_ROWS: dict[int, Pair] = {12: (0x13, 0x40), 13: (0x13, 0x60), 14: (0x14, 0x40), 15: (0x14, 0x60)}

# The basic set is ASCII but for these code points, which CEA-608 gives to letters.
_BASIC_608 = {0x2A: "á", 0x5C: "é", 0x5E: "í", 0x5F: "ó", 0x60: "ú", 0x7B: "ç", 0x7C: "÷", 0x7D: "Ñ", 0x7E: "ñ"}
_BASIC: dict[str, int] = {chr(b): b for b in range(0x20, 0x7F) if b not in _BASIC_608}
_BASIC.update({ch: b for b, ch in _BASIC_608.items()})

# Special characters (channel 1: 0x11, 0x30-0x3F): one column each, no backspace. 0x39 (transparent space) unused.
_SPECIAL: dict[str, Pair] = {ch: (0x11, 0x30 + i) for i, ch in enumerate("®°½¿™¢£♪à\0èâêîôû") if ch != "\0"}

# Extended characters (channel 1: 0x12 and 0x13, 0x20 onwards), each with the basic character sent before it (the
# decoder backs over it); "--" holds the place of one this encoder does not send: the quote marks (sent in their
# straight forms), the box-drawing characters and the vertical bars (tables disagree on which of 0x132E and 0x1337
# is the broken one).
_EXTENDED_12 = (
    'ÁA ÉE ÓO ÚU ÜU üu -- ¡! *. -- -- ©c -- •. -- -- ÀA ÂA ÇC ÈE ÊE ËE ëe ÎI ÏI ïi ÔO ÙU ùu ÛU «" »"'
).split()
_EXTENDED_13 = "ÃA ãa ÍI ÌI ìi ÒO òo ÕO õo {( }) \\/ ^' _- -- ~- ÄA äa ÖO öo ßs ¥Y -- -- ÅA åa ØO øo".split()
_EXTENDED: dict[str, tuple[Pair, int]] = {}
for _hi, _table in ((0x12, _EXTENDED_12), (0x13, _EXTENDED_13)):
    for _lo, _entry in enumerate(_table, 0x20):
        if _entry != "--":
            _EXTENDED[_entry[0]] = ((_hi, _lo), _BASIC[_entry[1]])

_DEFAULT_RULES = CueRules()  # the SRT's; ``rules_for`` clamps them


def parity(byte: int) -> int:
    """``byte`` (7 bits, 0-127) with CEA-608's odd parity bit on top: bit 7 set when the low 7 bits hold an even
    number of ones. Raises ``ValueError`` outside 0-127."""
    if not 0 <= byte < 0x80:
        raise ValueError(f"a CEA-608 byte has 7 bits, not {byte:#x}")
    return byte | (0x80 if bin(byte).count("1") % 2 == 0 else 0)


def caption_text(text: str) -> str:
    """``text`` in characters CEA-608 shows (``app.cea608.shown_form``: all in ``SHOWN``, which are the characters
    ``encode_row`` takes). Whitespace becomes a space. The result may be shorter or longer than ``text``.

    A special character right after the same one (``♪♪``) gets a space between: its code would be sent four times
    in a row, and decoders differ on whether the second pair of copies is a new character (pycaption) or more
    redundancy (ffmpeg's)."""
    out: list[str] = []
    for ch in text:
        piece = shown_form(ch)
        if piece and piece[0] in _SPECIAL and out and out[-1][-1] == piece[0]:
            out.append(" ")
        if piece:
            out.append(piece)
    return "".join(out)


def encode_row(text: str) -> list[Pair]:
    """The byte pairs (7-bit, before parity) that draw ``text`` at the cursor: basic characters two a pair, a
    special character's pair twice, an extended character's fallback then its pair twice; a lone basic character
    before a two-byte code, or at the end, is padded with a null byte (two-byte codes start a pair). Raises
    ``ValueError`` for a character not in ``SHOWN`` (pass text through ``caption_text`` first)."""
    pairs: list[Pair] = []
    pending: list[int] = []

    def flush() -> None:
        if pending:
            pairs.append((pending[0], pending[1] if len(pending) > 1 else _NULL))
            pending.clear()

    for ch in text:
        if ch in _BASIC:
            pending.append(_BASIC[ch])
            if len(pending) == 2:
                flush()
            continue
        if ch in _SPECIAL:
            code = _SPECIAL[ch]
        elif ch in _EXTENDED:
            code, fallback = _EXTENDED[ch]
            pending.append(fallback)
        else:
            raise ValueError(f"CEA-608 has no character {ch!r}")
        flush()
        pairs += [code, code]
    flush()
    return pairs


def pac(row: int, indent: int) -> Pair:
    """The preamble address code (channel 1) that puts the cursor on ``row`` (12-15) at column ``indent`` (0-28,
    a multiple of 4), in white. Raises ``ValueError`` for other rows or indents."""
    if row not in _PAC_ROWS or indent % 4 or not 0 <= indent <= 28:
        raise ValueError(f"no PAC for row {row}, indent {indent}")
    first, base = _PAC_ROWS[row]
    return first, base + 0x10 + indent // 2


def load_pairs(lines: Sequence[str]) -> list[Pair]:
    """Everything that loads one pop-on caption of ``lines`` (1-4 rows of at most 32 characters in ``SHOWN``)
    into non-displayed memory, in order: RCL and ENM, then for each row its PAC and its characters, control codes
    doubled. The rows end at row 15; all start at one indent, the multiple of 4 that centres the longest (a block
    of left-aligned lines, as broadcast captions are laid out). The EOC that shows it is not included."""
    if not 1 <= len(lines) <= ROWS or any(len(line) > COLUMNS for line in lines):
        raise ValueError(f"a caption has 1-{ROWS} rows of at most {COLUMNS} characters")
    width = max(len(line) for line in lines)
    indent = (COLUMNS - width) // 2 // 4 * 4
    pairs = [RCL, RCL, ENM, ENM]
    for row, line in enumerate(lines, BOTTOM_ROW + 1 - len(lines)):
        code = pac(row, indent)
        pairs += [code, code, *encode_row(line)]
    return pairs


def frame_of(ms: float) -> int:
    """The 29.97 fps video frame (30000/1001 per second, from 0) showing at ``ms`` milliseconds: the nearest frame
    start, so at most half a frame (16.7 ms) off. Negative times are frame 0."""
    return max(0, round(ms * 30 / 1001))


def timecode(frame: int) -> str:
    """The SMPTE drop-frame label ``HH:MM:SS;FF`` of 29.97 fps video frame ``frame`` (>= 0): labels count 30 a
    second but skip frame numbers 0 and 1 at the start of every minute except every tenth, so that 10 minutes are
    17,982 frames and the label keeps to the wall clock. Hours count on past 23."""
    if frame < 0:
        raise ValueError("frames start at 0")
    tens, rest = divmod(frame, 17_982)  # frames in 10 minutes: 9 of its minutes drop 2 labels each
    skipped = 18 * tens + (2 * ((rest - 2) // 1798) if rest >= 2 else 0)  # 1798 frames a minute after the first
    label = frame + skipped
    ff = label % 30
    ss = label // 30 % 60
    mm = label // 1800 % 60
    hh = label // 108_000
    return f"{hh:02d}:{mm:02d}:{ss:02d};{ff:02d}"


def frame_of_timecode(label: str) -> int:
    """The frame a drop-frame label names (the inverse of ``timecode``). Raises ``ValueError`` for a malformed
    label or one that drop-frame skips (``00:01:00;00``)."""
    try:
        hh, mm, ss, ff = (int(part) for part in label.replace(";", ":").split(":"))
    except ValueError:
        raise ValueError(f"not a timecode: {label!r}") from None
    minutes = 60 * hh + mm
    if not (0 <= mm < 60 and 0 <= ss < 60 and 0 <= ff < 30) or (ss == 0 and ff < 2 and mm % 10):
        raise ValueError(f"not a drop-frame timecode: {label!r}")
    return ((minutes * 60 + ss) * 30 + ff) - 2 * (minutes - minutes // 10)


@dataclass(frozen=True)
class Slot:
    """When one cue's codes go out (video frames): its load starts at ``load`` and ends before ``eoc``, EOC at
    ``eoc`` (two frames), EDM at ``edm`` (two frames) or None when the next cue's EOC replaces the caption."""

    load: int
    eoc: int
    edm: int | None


def schedule(times: Sequence[tuple[int, int, int]]) -> list[Slot]:
    """Frames for cues given as ``(start frame, end frame, load length in pairs)``, in time order.

    Contract: no two slots' codes share a frame (one pair per frame); each cue's load lies between the previous
    cue's EOC and its own; EOC is at the cue's start frame, or earlier where the next cue's load needs the room
    (loads need a frame a pair, and a cue can only be loaded after the previous one went up: the hidden memory is
    one); only where the file's start leaves no room for the first loads does an EOC come late. EDM is at the end
    frame, moved only as far as the next load needs; it is left out when the next EOC comes within two frames of
    the end (the EOC replaces the caption anyway)."""
    n = len(times)
    starts = [s for s, _, _ in times]
    ends = [max(e, s + 2) for s, e, _ in times]  # the EOC's second copy comes first
    loads = [length for _, _, length in times]
    eoc = [0] * n
    edm = [True] * n
    # Backward: each EOC at its start, or as early as the next cue's load and this cue's EDM need.
    for i in reversed(range(n)):
        if i == n - 1:
            eoc[i] = starts[i]
            continue
        edm[i] = eoc[i + 1] >= ends[i] + 2
        eoc[i] = min(starts[i], eoc[i + 1] - loads[i + 1] - 2 - (2 if edm[i] else 0))
    # Forward: the file starts at frame 0, so the first loads may push EOCs later (and the cues after them).
    for i in range(n):
        floor = loads[0] if i == 0 else eoc[i - 1] + 2 + loads[i]
        eoc[i] = max(eoc[i], floor)
        if i > 0:
            edm[i - 1] = eoc[i] >= max(ends[i - 1], eoc[i - 1] + 2) + 2
            if edm[i - 1]:
                eoc[i] = max(eoc[i], floor + 2)
    slots: list[Slot] = []
    for i in range(n):
        load = eoc[i] - loads[i]  # by default right before its EOC
        if i > 0 and edm[i - 1]:
            # Place the previous cue's EDM as near its end as the load allows: before the load, or after it.
            low = eoc[i - 1] + 2
            before = (low, eoc[i] - loads[i] - 2)  # EDM, then the load right before this EOC
            after = (low + loads[i], eoc[i] - 2)  # the load, then EDM
            want = ends[i - 1]
            at_before = min(max(want, before[0]), before[1])
            at_after = min(max(want, after[0]), after[1])
            d = at_before if abs(at_before - want) <= abs(at_after - want) else at_after
            if d == at_after and d != at_before:
                load = d - loads[i]
            slots[-1] = dataclasses.replace(slots[-1], edm=d)
        slots.append(Slot(load, eoc[i], None))
    if n:
        slots[-1] = dataclasses.replace(slots[-1], edm=max(ends[-1], eoc[-1] + 2))
    return slots


def encode(cues: Sequence[Cue]) -> str:
    """The SCC file of ``cues`` (time order, no two at once, lines already within ``rules_for``'s limits and in
    ``SHOWN``): ``HEADER``, then a line for each load, EOC and EDM (``schedule``), timecodes strictly increasing,
    each line's pairs done before the next line's timecode."""
    loads = [load_pairs(c.lines) for c in cues]
    slots = schedule([(frame_of(c.start_ms), frame_of(c.end_ms), len(p)) for c, p in zip(cues, loads, strict=True)])
    lines: list[tuple[int, list[Pair]]] = []
    for slot, pairs in zip(slots, loads, strict=True):
        lines += [(slot.load, pairs), (slot.eoc, [EOC, EOC])]
        if slot.edm is not None:
            lines.append((slot.edm, [EDM, EDM]))
    lines.sort(key=lambda line: line[0])
    blocks = [HEADER + "\n"]  # the header, then a blank line (joined below), also with no captions
    for frame, pairs in lines:
        hexes = " ".join(f"{parity(a):02x}{parity(b):02x}" for a, b in pairs)
        blocks.append(f"{timecode(frame)}\t{hexes}\n")
    return "\n".join(blocks) if lines else HEADER + "\n\n"


def rules_for(rules: CueRules) -> CueRules:
    """``rules`` within CEA-608's limits: at most ``COLUMNS`` characters a row and ``ROWS`` rows."""
    return dataclasses.replace(rules, max_chars=min(rules.max_chars, COLUMNS), max_lines=min(rules.max_lines, ROWS))


def shown_sentences(sentences: Sequence[SentenceRecord]) -> list[SentenceRecord]:
    """The sentences with their text and words in ``caption_text`` form (words left empty are dropped), so that
    cues are cut to the characters the decoder will show."""
    out = []
    for s in sentences:
        words = tuple(Word(text, w.start_ms, w.end_ms) for w in s.words if (text := caption_text(w.w).strip()))
        out.append(dataclasses.replace(s, text=caption_text(s.text), words=words))
    return out


def to_scc(
    sentences: Sequence[SentenceRecord],
    rules: CueRules = _DEFAULT_RULES,
    speakers: str = "dash",
    names: Mapping[int, str] | None = None,
) -> str:
    """The SCC file of a transcript: the SRT's subtitle cues (``build_cues``, speaker marks of ``speakers``) cut
    within ``rules_for(rules)`` from the sentences' ``caption_text``, as pop-on captions (``encode``)."""
    shown_names = {k: caption_text(v) for k, v in (names or {}).items()}
    return encode(build_cues(shown_sentences(sentences), rules_for(rules), speakers, shown_names))
