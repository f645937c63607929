"""A room's captions as a live HLS WebVTT subtitle playlist: which segments exist, the playlist's text and each
segment's WebVTT. Pure: the handlers (``hls_routes``) read the room, the store and the clock, and pass them in.

Times are milliseconds on the room's timeline (since the room was created) unless a name says otherwise. Segment
``n`` covers ``[n * D, (n + 1) * D)``, ``D = SEGMENT_MS``.

When a segment is listed: once no caption can normally still be added to it, that is when the room's timeline,
as the audience is at it (the clock minus the room's hold-back delay), has passed the segment's end by
``SETTLE_MS`` (``Timing.listed_at``). Sentences lock 1-2 s after their speech ends, so a sentence that ended a
little before the segment's end, or started in it and lasted up to about ``SETTLE_MS - 2 s``, is there by then.

What it holds (``segment_cues``): each listed segment is frozen. Segment ``k`` is cut from the sentences committed
when it was listed, as if they were the whole room, so it is the same whenever and on whichever front end it is
fetched (editors' later corrections aside). It sends the cues of that cut that start in it, the ones that started
earlier and reach into it as an earlier segment sent them (the same cue twice: players keep one, hls.js by its
times and text, ffmpeg drops the duplicate event), and the cues of earlier segments that hold words no segment
sent yet. A sentence that locks later than the rule allows (a long one, up to the endpointer's 25 s cap, or a slow
recognizer) is thus never lost: its cues go into the first segment listed after it locked, with their real times
(a player that is behind live shows them; ffmpeg sorts them in). Where a late sentence changes a cut already sent
(the cue that joined two sentences of one speaker), the words already sent are not sent again: the rest of that
cue goes as a cue of its own. Where sentences lock in time, the cues are exactly the room's WebVTT file's
(``cues.build_cues`` with the default rules, with its text, voice spans and speaker names).

A sentence reaches the audience ``delay`` after it is committed, and segments are listed ``delay`` late too, so
the delay changes nothing of what a segment holds, only when it is listed: a listed segment never holds a caption
the audience does not have yet. Cues carry no identifier: a per-file number would differ between two segments.

The playlist is a sliding window of the last ``WINDOW_SEGMENTS`` listed segments while the room is live. Once the
room ended (``ended_ms``) and the audience has passed the end by ``END_GRACE_MS`` (``closes_at``), it closes: it
lists the segments up to the one holding the last cue's end (of the sentences committed by then), at least one
more than were listed by time (for a caption that locked too late for the others), and ``#EXT-X-ENDLIST``. The
window still applies after the end (a playlist only ever loses segments at its start: RFC 8216, 6.2.1); the whole
room is ``transcript.vtt``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.protocol import Word

from ..rooms import SentenceRecord
from .cues import Cue, CueRules, build_cues, speaker_name
from .exports import _cue_line, _vtt_escape, clock_time
from .line_breaks import break_lines

# 4 s segments: a segment is listed only after it ends, so D is latency added (up to D, D/2 on average) and players
# reload the playlist about once per target duration: 4 s keeps both small (a request every 4 s per viewer) and is
# no longer than common live video segments (2-6 s; Apple's authoring spec says 6 s), so the subtitle playlist never
# reloads slower than the video's. A cue (at most 7 s) spans at most 3 segments.
SEGMENT_MS = 4000
# 10 s after a segment's end: sentences lock 1-2 s after their speech ends, so sentences of up to ~8 s (those that
# start in the segment: ~8-12 s) are in place when it is listed. Captions for time t are then listed by t + 14 s,
# still ahead of a player at the default live edge of 6 s video segments (3 target durations: 18 s behind).
SETTLE_MS = 10_000
# One minute of segments: RFC 8216 asks for at least three target durations in a live playlist; a minute lets a
# player that stalled or joined late catch up, and keeps the playlist about 1.5 KB. Segments stay fetchable after
# they leave the window (RFC 8216, 6.2.2: players that read the playlist just before may still ask).
WINDOW_SEGMENTS = 15
# How long after the end (as the audience is at it) the playlist closes: a front end learns of an end written by
# another one within ``hls_routes.ENDED_RECHECK_S``, and must not have listed more segments by then than the closed
# playlist holds.
END_GRACE_MS = 5000
# Cues are cut from the sentences of the last minute before a segment (and before a late sentence) only: cutting
# a whole long room for each segment costs about a second per two hours. A cut a minute back does not change the
# cues of now (a cue is at most 7 s, a pause over 1.5 s always ends one; tests compare with the whole file's).
CONTEXT_MS = 60_000
# Each segment's X-TIMESTAMP-MAP: the room's time 0 is MPEG-TS time 900000 (10 s at 90 kHz, the value segmenters
# commonly write). A video whose MPEG-TS timestamps are the room's time plus 10 s lines up with the cues in players
# that apply the map (hls.js, Safari); readers that ignore it (ffmpeg 5.1's WebVTT demuxer) see the room's times.
MPEGTS_AT_ZERO = 900_000

PLAYLIST_MIME = "application/vnd.apple.mpegurl"
SEGMENT_MIME = "text/vtt"

_NEVER = -math.inf  # committed before anything the caller looked at


@dataclass(frozen=True)
class Timing:
    """The playlist's shape: ``segment_ms`` per segment, listed ``settle_ms`` after its end, ``window`` segments
    listed while live, closed ``end_grace_ms`` after the end."""

    segment_ms: int = SEGMENT_MS
    settle_ms: int = SETTLE_MS
    window: int = WINDOW_SEGMENTS
    end_grace_ms: int = END_GRACE_MS

    @classmethod
    def current(cls) -> Timing:
        """From this module's constants as they are now (a test may change them)."""
        return cls(SEGMENT_MS, SETTLE_MS, WINDOW_SEGMENTS, END_GRACE_MS)

    def listed_at(self, n: int) -> int:
        """The audience's room time at which segment ``n`` is listed (live)."""
        return (n + 1) * self.segment_ms + self.settle_ms

    def count_at(self, now_ms: float) -> int:
        """How many segments (0, 1, ...) are listed when the audience is at room time ``now_ms``."""
        return max(0, math.floor((now_ms - self.settle_ms) / self.segment_ms))

    def closes_at(self, ended_ms: int) -> int:
        """The audience's room time at which the playlist of a room ended at ``ended_ms`` closes."""
        return ended_ms + self.end_grace_ms


@dataclass(frozen=True)
class Schedule:
    """The segments of a room at one moment: 0 .. ``count`` - 1 are listed; ``closed_ms``: the room time at which
    the playlist closed (None: live)."""

    timing: Timing
    count: int
    closed_ms: int | None = None

    @property
    def first(self) -> int:
        """The first segment the playlist shows (its media sequence number)."""
        return max(0, self.count - self.timing.window)

    def listed_at(self, n: int) -> float:
        """When segment ``n`` was listed (room time; ``-inf`` before segment 0): a segment listed because the
        playlist closed was listed at the close."""
        if n < 0:
            return _NEVER
        at = self.timing.listed_at(n)
        return at if self.closed_ms is None else min(at, self.closed_ms)


def live_schedule(timing: Timing, now_ms: float) -> Schedule:
    """The segments listed when the audience is at room time ``now_ms`` (the clock minus the room's delay)."""
    return Schedule(timing, timing.count_at(now_ms))


def closed_schedule(timing: Timing, closed_ms: int, last_end_ms: int | None) -> Schedule:
    """The segments of a playlist that closed at room time ``closed_ms`` (``Timing.closes_at``), whose last cue
    ends at ``last_end_ms`` (``last_cue_end``; None: no cue): those listed by then, one more, and up to the one
    holding the last cue's end."""
    count = timing.count_at(closed_ms) + 1
    if last_end_ms is not None:
        count = max(count, (last_end_ms - 1) // timing.segment_ms + 1)
    return Schedule(timing, count, closed_ms)


def committed_by(
    sentences: Sequence[SentenceRecord], committed: Mapping[int, float], at_ms: float
) -> list[SentenceRecord]:
    """The sentences committed by room time ``at_ms``. ``committed``: sentence id -> room time of its commit, for
    the sentences committed since some time; a sentence not in it was committed before that."""
    return [s for s in sentences if committed.get(s.id, _NEVER) <= at_ms]


def segment_cues(
    n: int,
    sentences: Sequence[SentenceRecord],
    committed: Mapping[int, float],
    schedule: Schedule,
    names: Mapping[int, str] | None = None,
) -> list[Cue]:
    """The cues of listed segment ``n``, in start order. ``sentences``: the room's, in reading order;
    ``committed``: see ``committed_by`` (it must cover every commit after ``commits_needed_after(n, schedule)``);
    ``names``: speaker names.

    Each listed segment ``k`` is cut from the sentences committed when it was listed (``listed_at(k)``): its cut
    ``B(k)``, of which the cues that start by segment ``k`` count. Segment ``k`` sends those of them that hold a
    word not sent before (that is, in no counted cue of the cuts before), without the words sent before (``E(k)``):
    the cues that start in it, and the earlier ones of a sentence that locked too late for its segments. Segment
    ``n`` holds ``E(n)`` and, as they were sent, the cues of ``E(k)``, ``k < n``, that reach into it (the same
    cue, dropped by players as a repeat). So a player that follows the playlist gets every word once: in the room
    file's cue where sentences locked in time, in what is left of it where a later sentence changed a cut that
    was sent already (a cue across two sentences of one speaker), and never twice."""
    segments = _Segments(n, sentences, committed, schedule, names)
    out = set(segments.sent(n))
    for k in range(max(0, n - segments.spread), n):
        out.update(c for c in segments.sent(k) if (c.end_ms - 1) // schedule.timing.segment_ms >= n)
    return sorted(out, key=lambda c: (c.start_ms, c.end_ms, c.lines))


def commits_needed_after(n: int, schedule: Schedule) -> float:
    """The room time after which ``segment_cues(n, ...)`` needs to know when each sentence was committed."""
    return schedule.listed_at(_first_cut(n, schedule.timing) - 1)


def _spread(timing: Timing) -> int:
    """How many segments before its last one a cue can start in (a cue is on screen at most ``max_ms``)."""
    return -(-CueRules().max_ms // timing.segment_ms)


def _first_cut(n: int, timing: Timing) -> int:
    """The earliest cut that segment ``n``'s cues depend on: ``E(n - spread)`` needs the cuts ``spread`` before."""
    return n - 2 * _spread(timing) - 1


class _Segments:
    """The cuts and sent cues of the segments that segment ``n`` depends on (``segment_cues``), each made once."""

    def __init__(
        self,
        n: int,
        sentences: Sequence[SentenceRecord],
        committed: Mapping[int, float],
        schedule: Schedule,
        names: Mapping[int, str] | None,
    ) -> None:
        self.size = schedule.timing.segment_ms
        self.spread = _spread(schedule.timing)
        self.committed = committed
        self.schedule = schedule
        self.names = names
        first = _first_cut(n, schedule.timing)
        late = [s.start_ms for s in sentences if committed.get(s.id, _NEVER) > schedule.listed_at(first - 1)]
        self.context = _context(sentences, min([first * self.size, *late]) - CONTEXT_MS)
        self._counted: dict[int, list[Cue]] = {}
        self._sent: dict[int, list[Cue]] = {}

    def counted(self, k: int) -> list[Cue]:
        """The cues of ``B(k)`` that start by segment ``k``."""
        if k < 0:
            return []
        if k not in self._counted:
            cues = build_cues(committed_by(self.context, self.committed, self.schedule.listed_at(k)), names=self.names)
            self._counted[k] = [c for c in cues if c.start_ms // self.size <= k]
        return self._counted[k]

    def sent(self, k: int) -> list[Cue]:
        """``E(k)``: what segment ``k`` sends of its own."""
        if k not in self._sent:
            # Every word of a counted cue is sent by that segment (by induction). A word stays counted in every cut
            # after (its cue starts at or before it), so the words sent before that can be in this cut are those of
            # the cuts back to the earliest one whose cues can reach this segment.
            before = {_word(w) for j in range(k - 1 - self.spread, k) for c in self.counted(j) for w in c.words}
            out = []
            for c in self.counted(k):
                fresh = [w for w in c.words if _word(w) not in before]
                if len(fresh) == len(c.words):
                    out.append(c)
                elif fresh:
                    out.append(_without_sent(c, fresh))
            self._sent[k] = out
        return self._sent[k]


def _without_sent(c: Cue, fresh: list[Word]) -> Cue:
    """Cue ``c`` with only its words ``fresh``, the others having been sent in a cue cut before: its lines broken
    again (a speaker mark stays if its first word does), on screen from its first fresh word (or its own start) to
    its end."""
    rules = CueRules()
    texts = [w.w for w in fresh]
    if fresh[0] == c.words[0]:
        at = c.lines[0].find(texts[0])
        texts[0] = c.lines[0][: max(at, 0)] + texts[0]
    lines = break_lines(texts, rules.max_chars, rules.max_lines) or [" ".join(texts)]
    start = c.start_ms if fresh[0] == c.words[0] else max(c.start_ms, fresh[0].start_ms)
    return Cue(start, max(c.end_ms, start + 1), tuple(lines), c.spk, c.session, tuple(fresh))


def _word(w: Word) -> tuple[str, int, int]:
    return w.w, w.start_ms, w.end_ms


def last_cue_end(
    sentences: Sequence[SentenceRecord],
    committed: Mapping[int, float],
    at_ms: float,
    names: Mapping[int, str] | None = None,
) -> int | None:
    """Where the last cue of the sentences committed by room time ``at_ms`` ends (None: no cue)."""
    now = committed_by(sentences, committed, at_ms)
    if not now:
        return None
    cues = build_cues(_context(now, max(s.end_ms for s in now) - CONTEXT_MS), names=names)
    return max((c.end_ms for c in cues), default=None)


def _context(sentences: Sequence[SentenceRecord], from_ms: float) -> list[SentenceRecord]:
    return [s for s in sentences if s.end_ms >= from_ms]


def playlist(schedule: Schedule, created_ms: int, segment_url: Callable[[int], str]) -> str:
    """The media playlist: the window of listed segments, each with its wall-clock start
    (``#EXT-X-PROGRAM-DATE-TIME``, from ``created_ms``: the room's creation, ms since the Unix epoch, which players
    use to line renditions up) and its URI (``segment_url(n)``), then ``#EXT-X-ENDLIST`` once closed."""
    size = schedule.timing.segment_ms
    lines = [
        "#EXTM3U",
        "#EXT-X-VERSION:3",
        f"#EXT-X-TARGETDURATION:{math.ceil(size / 1000)}",
        f"#EXT-X-MEDIA-SEQUENCE:{schedule.first}",
    ]
    for n in range(schedule.first, schedule.count):
        lines += [
            f"#EXT-X-PROGRAM-DATE-TIME:{_date(created_ms + n * size)}",
            f"#EXTINF:{size / 1000:.3f},",
            segment_url(n),
        ]
    if schedule.closed_ms is not None:
        lines.append("#EXT-X-ENDLIST")
    return "\n".join(lines) + "\n"


def _date(epoch_ms: int) -> str:
    """ISO 8601 in UTC with milliseconds, as HLS wants a program date (``2025-01-31T09:00:04.000Z``)."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def segment_vtt(cues: Sequence[Cue], names: Mapping[int, str] | None = None) -> str:
    """One segment's WebVTT: the header with the timestamp map, then ``cues`` (in start order, from
    ``segment_cues``) with their room times and the text the room's ``transcript.vtt`` gives them; it ends with a
    blank line, so that segments read back to back as one file (ffmpeg 5.1 does) keep each header out of the cue
    before it."""
    blocks = [f"WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:{MPEGTS_AT_ZERO},LOCAL:00:00:00.000\n"]
    for c in cues:
        blocks.append(f"{clock_time(c.start_ms, '.')} --> {clock_time(c.end_ms, '.')}\n{_cue_text(c, names)}\n")
    return "\n".join(blocks) + "\n"


def _cue_text(c: Cue, names: Mapping[int, str] | None) -> str:
    # The WebVTT file's own helpers (``exports.to_vtt``), so that a segment's cue and the file's never differ.
    lines = [_vtt_escape(_cue_line(line)) for line in c.lines]
    if c.spk is not None and lines:
        lines[0] = f"<v {_vtt_escape(speaker_name(c.spk, names))}>{lines[0]}"
    return "\n".join(lines)
