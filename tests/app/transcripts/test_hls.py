"""HLS captions (``GET /rooms/{id}/captions.m3u8``): a room's captions as a live WebVTT subtitle playlist.

First the pure pieces on a fake clock (``app.transcripts.hls``): when a segment is listed, the sliding window, what
a segment holds (the room file's cues overlapping it, with their room times, under the timestamp map), a sentence
that locks too late for its segments, and the playlist closing once the room ended. Then over HTTP: who may read
it, the headers, a delayed audience. Last, Debian's ffmpeg follows the playlist while sentences lock in a room,
stops when the room ends, and writes the room's words at the room file's times. Sentences come from the room's
own commit path (the named fake recognizer is the server's engine): what is tested is the playlist, not the model.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import random
import shutil
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import pytest
import webvtt
from aiohttp import web

from app.rooms import Room, SentenceRecord
from app.rooms.keys import ROOMS
from app.transcripts import hls, to_vtt
from app.transcripts.cues import Cue
from app.transcripts.exports import ExportOptions
from engine import CaptionEngine
from engine.protocol import Word
from speechdata.wer import word_errors
from tests.support.caption_readers import follow_hls, until_listed, vtt_blocks, vtt_cues
from tests.support.servers import running_server

T = hls.Timing(segment_ms=4000, settle_ms=10_000, window=15, end_grace_ms=5000)


def _said(text: str, start: int, step: int = 320) -> tuple[Word, ...]:
    return tuple(Word(w, start + i * step, start + (i + 1) * step - 40) for i, w in enumerate(text.split()))


def _sentence(sid: int, text: str, start: int, spk: int | None = 0) -> SentenceRecord:
    words = _said(text, start)
    return SentenceRecord(sid, "s", text, start, words[-1].end_ms, spk, words)


def _segments(
    sentences: list[SentenceRecord],
    committed: Mapping[int, float],
    schedule: hls.Schedule,
    names: dict[int, str] | None = None,
) -> list[list[Cue]]:
    return [hls.segment_cues(n, sentences, committed, schedule, names) for n in range(schedule.count)]


# ---- which segments exist --------------------------------------------------------------------------------------
def test_a_segment_is_listed_once_the_audience_is_past_its_end_by_the_settling_time_and_the_window_slides() -> None:
    assert hls.live_schedule(T, 13_999).count == 0
    assert hls.live_schedule(T, 14_000).count == 1, "segment 0 ends at 4 s, listed 10 s later"
    assert T.listed_at(0) == 14_000 and T.listed_at(4) == 30_000
    live = hls.live_schedule(T, 10_000 + 20 * 4000 + 3999)
    assert (live.count, live.first, live.closed_ms) == (20, 5, None), "the last 15 of 20"
    created = 1_700_000_000_000
    text = hls.playlist(live, created, lambda n: f"captions/{n}.vtt?token=abc")
    lines = text.splitlines()
    assert lines[:4] == ["#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-TARGETDURATION:4", "#EXT-X-MEDIA-SEQUENCE:5"]
    assert [line for line in lines if not line.startswith("#")] == [f"captions/{n}.vtt?token=abc" for n in range(5, 20)]
    assert lines.count("#EXTINF:4.000,") == 15 and "#EXT-X-ENDLIST" not in lines
    assert lines[4] == "#EXT-X-PROGRAM-DATE-TIME:2023-11-14T22:13:40.000Z", "segment 5 starts 20 s after creation"
    assert text.endswith("\n")
    assert hls.playlist(hls.live_schedule(T, 0), created, str).splitlines()[-1] == "#EXT-X-MEDIA-SEQUENCE:0"
    odd = hls.Timing(segment_ms=1500, settle_ms=0)
    assert "#EXT-X-TARGETDURATION:2" in hls.playlist(hls.live_schedule(odd, 4500), 0, str)
    assert "#EXTINF:1.500," in hls.playlist(hls.live_schedule(odd, 4500), 0, str)


def test_a_segment_holds_the_cues_overlapping_it_with_room_times_under_the_timestamp_map() -> None:
    sentences = [
        _sentence(0, "Good evening and welcome to the meeting.", 1000),
        _sentence(1, "We have a full agenda tonight, so let us begin with the library.", 3200, spk=1),
    ]
    committed = {s.id: s.end_ms + 1500 for s in sentences}
    schedule = hls.live_schedule(T, 60_000)
    segments = _segments(sentences, committed, schedule, {1: "Dr. Lee"})
    texts = [hls.segment_vtt(cues, {1: "Dr. Lee"}) for cues in segments]
    for text in texts:
        assert text.startswith("WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:900000,LOCAL:00:00:00.000\n\n")
        parsed = webvtt.from_buffer(io.StringIO(text))  # a third-party parser reads every segment
        assert all(c.start_in_seconds < c.end_in_seconds for c in parsed.captions)
    for n, cues in enumerate(segments):
        assert all(c.start_ms < (n + 1) * 4000 and c.end_ms > n * 4000 for c in cues), n
    file = to_vtt(sentences, ExportOptions(names={1: "Dr. Lee"}))
    seen = list(dict.fromkeys(b for text in texts for b in vtt_blocks(text)))
    assert seen == vtt_blocks(file), "together, the segments are the room's WebVTT file, repeats dropped"
    spanning = [b for b in seen if sum(b in vtt_blocks(t) for t in texts) > 1]
    assert spanning, "a cue across a boundary is in both segments, the same"
    assert "<v Dr. Lee>-We have" in "".join(texts), "the file's voice span, name and dialogue dash"
    assert texts[6] == "WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:900000,LOCAL:00:00:00.000\n\n", "a segment without cues"
    assert all(text.endswith("\n\n") for text in texts), "a blank line last: segments read back to back"


def test_segments_are_the_rooms_webvtt_file_over_a_long_room_when_sentences_lock_in_time() -> None:
    """Six minutes of two speakers, sentences of up to 5 s each locked 0.5-2 s after they end: the segments, each
    cut from the sentences committed by its listing and the minute before it, give the file's cues."""
    rng = random.Random(7)
    vocabulary = (
        "the council meeting on future of riverside library plan adds forty spaces behind old post "
        "office and work starts in spring Dashwood said that we should wait"
    ).split()
    sentences: list[SentenceRecord] = []
    t = 800
    while t < 6 * 60_000:
        count = rng.randint(2, 14)
        text = " ".join(rng.choice(vocabulary) for _ in range(count)) + rng.choice((".", ",", "?"))
        step = rng.randint(250, 360)
        sentences.append(
            SentenceRecord(
                len(sentences), "s", text, t, t + count * step - 40, rng.choice((0, 0, 1)), _said(text, t, step)
            )
        )
        t = sentences[-1].end_ms + rng.choice((150, 300, 600, 1200, 2500, 9000))
    committed = {s.id: s.end_ms + rng.randint(500, 2000) for s in sentences}
    schedule = hls.live_schedule(T, t + 30_000)
    segments = _segments(sentences, committed, schedule)
    seen = list(dict.fromkeys(b for cues in segments for b in vtt_blocks(hls.segment_vtt(cues))))
    assert seen == vtt_blocks(to_vtt(sentences))


def test_a_sentence_that_locks_late_goes_to_the_first_segment_listed_after_and_listed_ones_stay() -> None:
    early = _sentence(0, "Short one first.", 500)
    long = _sentence(1, " ".join(["and then the long sentence goes on"] * 8) + ".", 2600)  # 17.9 s long
    after = _sentence(2, "Then a short reply.", long.end_ms + 2000)
    sentences = [early, long, after]
    assert long.end_ms > T.listed_at(0) + 2000
    committed = {0: early.end_ms + 1000, 1: long.end_ms + 1500, 2: after.end_ms + 1000}  # 22.0 s: after segment 1
    before = hls.live_schedule(T, 21_000)
    assert before.count == 2
    listed = [hls.segment_vtt(cues) for cues in _segments([early], {0: committed[0]}, before)]
    schedule = hls.live_schedule(T, 60_000)
    texts = [hls.segment_vtt(cues) for cues in _segments(sentences, committed, schedule)]
    assert texts[:2] == listed, "a listed segment never changes"
    assert "long sentence" not in texts[0] + texts[1], "segments 0 and 1 were listed before it locked"
    at = next(n for n in range(schedule.count) if schedule.listed_at(n) >= committed[1])
    assert at == 2 and "long sentence" in texts[2]
    first = vtt_blocks(texts[2])[0]
    assert first.startswith("00:00:02."), "its first cue keeps its real time, and comes first in the segment"
    seen = list(dict.fromkeys(b for text in texts for b in vtt_blocks(text)))
    assert sorted(seen) == sorted(vtt_blocks(to_vtt(sentences))), "nothing lost, nothing repeated"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_follower_gets_every_word_once_however_late_sentences_lock(seed: int) -> None:
    """Two publishers, speakers changing, no pauses to long ones, sentences locking 0.3-30 s after they end (a
    slow recognizer, the endpointer's 25 s cap): every word is in exactly one of the cues the segments send
    (identical repeats counted once), every segment is valid WebVTT, and cues keep their room times."""
    rng = random.Random(seed)
    vocabulary = "we should wait for the council to plan the library, said Dashwood. fine".split()
    sentences: list[SentenceRecord] = []
    t = 300
    while t < 2 * 60_000:
        step = rng.randint(150, 380)
        count = max(1, int(rng.uniform(300, 25_000) / step))
        text = " ".join(rng.choice(vocabulary) for _ in range(count))
        sentences.append(
            SentenceRecord(
                len(sentences),
                rng.choice("aab"),
                text,
                t,
                t + count * step - 40,
                rng.choice((0, 0, 1, None)),
                _said(text, t, step),
            )
        )
        t = sentences[-1].end_ms + rng.choice((0, 100, 400, 800, 1500, 3000, 10_000))
    committed = {s.id: s.end_ms + rng.randint(300, 30_000) for s in sentences}
    schedule = hls.live_schedule(T, max(committed.values()) + 10_000)
    segments = _segments(sentences, committed, schedule)
    sent = {c for cues in segments for c in cues}
    said = sorted((w.start_ms, w.w) for s in sentences for w in s.words)
    assert sorted((w.start_ms, w.w) for c in sent for w in c.words) == said
    for n, cues in enumerate(segments):
        assert [(c.start_ms, c.end_ms) for c in cues] == sorted((c.start_ms, c.end_ms) for c in cues)
        assert all(c.words[0].start_ms - 2000 <= c.start_ms < c.end_ms for c in cues), n
        assert len(webvtt.from_buffer(io.StringIO(hls.segment_vtt(cues))).captions) == len(cues)


def test_the_playlist_closes_after_the_end_with_every_segment_up_to_the_last_cue() -> None:
    ended = 30_000
    closes = T.closes_at(ended)
    assert closes == 35_000
    assert hls.live_schedule(T, closes - 1).count == 6
    last = _sentence(0, "The very last words before the end, said slowly.", 28_000)
    late = _sentence(1, "A late one.", 20_000)
    after = _sentence(2, "Said after the end.", 36_000)
    sentences = [late, last, after]
    committed = {0: last.end_ms + 1500, 1: 34_500, 2: 40_000}
    end = hls.last_cue_end(sentences, committed, closes)
    assert end is not None and 28_000 < end <= 32_000
    closed = hls.closed_schedule(T, closes, end)
    assert closed.count == (end - 1) // 4000 + 1 == 8 and closed.closed_ms == closes
    assert hls.closed_schedule(T, closes, None).count == 7, "one more than listed by time, even without cues"
    text = hls.playlist(closed, 0, lambda n: f"captions/{n}.vtt")
    assert text.endswith("captions/7.vtt\n#EXT-X-ENDLIST\n") and "#EXT-X-MEDIA-SEQUENCE:0" in text
    texts = [hls.segment_vtt(cues) for cues in _segments(sentences, committed, closed)]
    assert "A late one." in texts[6], "committed after segment 5 was listed: in the first segment after"
    assert not any("A late one." in t for t in texts[:6])
    assert "after the end" not in "".join(texts), "the playlist closed before it"
    assert "said slowly" in texts[-1]
    many = hls.closed_schedule(T, 200_000, None)
    assert (many.first, many.count) == (many.count - 15, 48) and "ENDLIST" in hls.playlist(many, 0, str)


# ---- over HTTP -------------------------------------------------------------------------------------------------
@pytest.fixture
async def quick(
    monkeypatch: pytest.MonkeyPatch, fake_engine: CaptionEngine, tmp_path: Path
) -> AsyncIterator[tuple[str, web.Application]]:
    """A server whose playlists have 1 s segments listed 0.5 s after their end (a test cannot wait minutes)."""
    monkeypatch.setattr(hls, "SEGMENT_MS", 1000)
    monkeypatch.setattr(hls, "SETTLE_MS", 500)
    monkeypatch.setattr(hls, "END_GRACE_MS", 500)
    async with running_server(fake_engine, db_path=str(tmp_path / "hls.db")) as served:
        yield served


def _room_ms(room: Room) -> int:
    return int(time.time() * 1000) - room.record.created_ms


async def _say(room: Room, text: str, start: int, spk: int | None = 0) -> None:
    """A sentence said from ``start`` (room ms), locked now, the way a publisher's are."""
    words = _said(text, start)
    await room.commit_sentences([SentenceRecord(-1, "pub", text, start, words[-1].end_ms, spk, words)])


async def test_the_playlist_and_its_segments_over_http(quick: tuple[str, web.Application]) -> None:
    url, app = quick
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/rooms", json={"private": True}) as r:
            made = await r.json()
        room_id, token = made["room"], made["viewer_token"]
        room = await app[ROOMS].get(room_id)
        assert room is not None
        await _say(room, "Hello and welcome, everyone.", max(0, _room_ms(room) - 900))
        base = f"{url}/rooms/{room_id}/captions"
        async with http.get(f"{base}.m3u8") as r:
            assert r.status == 403
        async with http.get(f"{base}/0.vtt") as r:
            assert r.status == 403
        text = await until_listed(http, f"{base}.m3u8?token={token}", 2)
        async with http.get(f"{base}.m3u8?token={token}") as r:
            assert r.headers["Content-Type"].startswith("application/vnd.apple.mpegurl")
            assert r.headers["Cache-Control"] == "max-age=1" and r.headers["Access-Control-Allow-Origin"] == "*"
        uris = [line for line in text.splitlines() if line.startswith("captions/")]
        assert uris[0] == f"captions/0.vtt?token={token}"
        got = ""
        for uri in uris:
            async with http.get(f"{url}/rooms/{room_id}/{uri}") as r:
                assert r.status == 200 and r.headers["Content-Type"].startswith("text/vtt")
                assert r.headers["Cache-Control"] == "max-age=15" and r.headers["Access-Control-Allow-Origin"] == "*"
                got += await r.text()
        assert "Hello and welcome, everyone." in got
        async with http.get(f"{base}/{len(uris) + 30}.vtt?token={token}") as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == "no_segment"
            assert r.headers["Cache-Control"] == "no-store"
        async with http.get(f"{url}/rooms/{room_id}/captions.m3u8", headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200 and "?token=" not in await r.text(), "no token asked with in the query"
        async with http.get(f"{url}/rooms/nosuchroomatall0/captions.m3u8") as r:
            assert r.status == 404


async def test_a_delayed_audience_gets_segments_a_delay_later(quick: tuple[str, web.Application]) -> None:
    url, app = quick
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/rooms", json={"delay_s": 1}) as r:
            room_id = (await r.json())["room"]
        room = await app[ROOMS].get(room_id)
        assert room is not None
        await asyncio.sleep(0.9)
        await _say(room, "First words.", 0)
        playlist = f"{url}/rooms/{room_id}/captions.m3u8"
        await until_listed(http, playlist, 1)
        assert _room_ms(room) >= 1000 + 500 + 1000 - 20, "segment 0 ends at 1 s, settles 0.5 s, then the delay"
        async with http.get(f"{url}/rooms/{room_id}/captions/0.vtt") as r:
            assert "First words." in await r.text()
        await asyncio.sleep(max(0, 3100 - _room_ms(room)) / 1000)
        # Committed at 3.1 s: too late for segment 1 (its cut was at 2.5 s), so in segment 2 (cut at 3.5 s), listed at
        # 4.5 s, by when the audience has it (4.1 s).
        await _say(room, "Held back a while.", 1500)
        async with http.get(f"{url}/rooms/{room_id}/captions.m3u8") as r:
            count = sum(1 for line in (await r.text()).splitlines() if line.startswith("captions/"))
        assert count == 1 and room.audience.lag().held == 1, "held, and not in any segment listed"
        for n in range(count):
            async with http.get(f"{url}/rooms/{room_id}/captions/{n}.vtt") as r:
                assert "Held back" not in await r.text()
        await until_listed(http, playlist, 3)
        assert room.audience.lag().held == 0, "released before its segment is listed"
        async with http.get(f"{url}/rooms/{room_id}/captions/2.vtt") as r:
            assert "Held back a while." in await r.text()


async def test_a_room_ended_on_another_front_end_closes_the_playlist_here_too(
    monkeypatch: pytest.MonkeyPatch, fake_engine: CaptionEngine, postgres_url: str
) -> None:
    """Two front ends on one PostgreSQL database: the room is in memory on B (its record says it runs) and ends on
    A; B reads the end from the store within a few seconds and closes its playlist."""
    monkeypatch.setattr(hls, "SEGMENT_MS", 1000)
    monkeypatch.setattr(hls, "SETTLE_MS", 500)
    monkeypatch.setattr(hls, "END_GRACE_MS", 3000)  # more than B's re-read interval (2 s)
    async with (
        running_server(fake_engine, db_path=postgres_url) as (url_a, _),
        running_server(fake_engine, db_path=postgres_url) as (url_b, app_b),
        aiohttp.ClientSession() as http,
    ):
        async with http.post(f"{url_a}/rooms") as r:
            made = await r.json()
        room_b = await app_b[ROOMS].get(made["room"])
        assert room_b is not None
        playlist = f"{url_b}/rooms/{made['room']}/captions.m3u8"
        async with http.get(playlist) as r:
            assert "#EXT-X-ENDLIST" not in await r.text()
        async with http.post(
            f"{url_a}/rooms/{made['room']}/end", headers={"Authorization": f"Bearer {made['editor_token']}"}
        ) as r:
            ended = (await r.json())["ended_ms"]
        deadline = time.monotonic() + 10
        while True:
            async with http.get(playlist) as r:
                text = await r.text()
            if "#EXT-X-ENDLIST" in text:
                break
            assert time.monotonic() < deadline, text
            await asyncio.sleep(0.2)
        assert time.time() * 1000 >= ended + 3000, "not before the grace after the end"
        assert room_b.record.ended_ms is None, "B's own record is stale: the end came from the store"
        assert text.splitlines()[-2] == f"captions/{(ended + 3000 - room_b.record.created_ms - 500) // 1000}.vtt"


# ---- ffmpeg follows a live room --------------------------------------------------------------------------------
SPOKEN = [
    "Good evening, and welcome to the council meeting on the future of the riverside library.",
    "We have a full agenda tonight, so let us begin.",
    "Thank you. This morning I met the woman who runs the cafe on Elm Street.",
    "She asked about parking for her customers.",
    "That is a fair question.",
    "The plan adds forty spaces behind the old post office.",
    "The work starts in the spring and ends before the summer.",
    "Are there any other questions from the floor?",
]


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("ffmpeg") is None, reason="Debian's ffmpeg is not installed (scripts/setup.sh --tests installs it)"
)
async def test_ffmpeg_follows_the_live_playlist_until_the_room_ends(
    quick: tuple[str, web.Application], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Sentences said one after another, each locked 0.4 s after its last word, and one that locks long after its
    segments were listed; ffmpeg follows the playlist from its first segment and stops at ``#EXT-X-ENDLIST`` once
    the room ended. What it writes is the room's words at the room's WebVTT file's times."""
    # Long enough for the next sentence to lock before a segment is listed (as 10 s is for most real speech), so
    # that cues are cut as the file cuts them.
    monkeypatch.setattr(hls, "SETTLE_MS", 9000)
    url, app = quick
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/rooms", json={"private": True}) as r:
            made = await r.json()
        room_id, token, editor = made["room"], made["viewer_token"], made["editor_token"]
        room = await app[ROOMS].get(room_id)
        assert room is not None
        late = "A late word from the back."
        gap = (0, 0)

        async def speak() -> None:
            nonlocal gap
            start = 300
            for k, text in enumerate(SPOKEN):
                words = _said(text, start, step=200)
                await asyncio.sleep(max(0, words[-1].end_ms + 400 - _room_ms(room)) / 1000)
                await room.commit_sentences(
                    [SentenceRecord(-1, "pub", text, start, words[-1].end_ms, k % 3 // 2, words)]
                )
                start = words[-1].end_ms + (600, 900, 1200)[k % 3]
                if k == 3:  # a pause of 5 s, where the late sentence was said
                    gap = (words[-1].end_ms, start + 5000)
                    start += 5000

        speaking = asyncio.create_task(speak())
        playlist = f"{url}/rooms/{room_id}/captions.m3u8?token={token}"
        await until_listed(http, playlist, 1)  # ffmpeg 5.1 gives up on a playlist without segments
        out = tmp_path / "out.vtt"
        ffmpeg = await follow_hls(playlist, out)
        try:
            await speaking
            words = _said(late, gap[0] + 2500, step=200)
            assert words[-1].end_ms // 1000 < hls.Timing.current().count_at(_room_ms(room)), "its segments are listed"
            await room.commit_sentences(
                [SentenceRecord(-1, "pub", late, words[0].start_ms, words[-1].end_ms, 0, words)]
            )
            await asyncio.sleep(0.5)
            async with http.post(f"{url}/rooms/{room_id}/end", headers={"Authorization": f"Bearer {editor}"}) as r:
                assert r.status == 200
            _, err = await asyncio.wait_for(ffmpeg.communicate(), 20)
        finally:
            speaking.cancel()
            if ffmpeg.returncode is None:
                ffmpeg.kill()
                await ffmpeg.wait()
        assert ffmpeg.returncode == 0, err.decode(errors="replace")
        async with http.get(f"{url}/rooms/{room_id}/transcript.vtt?token={token}") as r:
            file = vtt_cues(await r.text())
        async with http.get(f"{url}/rooms/{room_id}/transcript.txt?token={token}") as r:
            transcript = " ".join(line for line in (await r.text()).splitlines() if not line.startswith("["))
    got = vtt_cues(out.read_text(encoding="utf-8"))
    errors, said = word_errors(transcript, " ".join(text for _, _, text in got))
    assert said > 80 and errors <= said // 100, (errors, said, got)
    assert late in [text for _, _, text in got], "the late sentence got through, sorted in at its time"
    # ffmpeg 5.1 does not apply X-TIMESTAMP-MAP: the times it writes are the room's, as in transcript.vtt.
    by_text = {text: (a, b) for a, b, text in file}
    for a, b, text in got:
        assert text in by_text, (text, file)
        assert abs(a - by_text[text][0]) <= 0.5 and abs(b - by_text[text][1]) <= 0.5, (text, a, b, by_text[text])
    assert all(x[0] <= y[0] for x, y in itertools.pairwise(got)) and len(got) == len(file)
