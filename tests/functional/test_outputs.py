"""A room's outputs, YouTube Live's caption ingestion first: the API (who may, what bodies), every locked sentence
posted once and in order in the documented format, retries that lose and double nothing, dead destinations that
cost the room's viewers nothing, a restart, a delay room's corrected text, the end of a room, and the metrics.

YouTube is played by a stand-in on loopback (``StandInIngestion``, tests/support/youtube_stand_in.py): nothing leaves
the machine. Sentences are committed through the room's own commit path; the recognizer is the named fake (the room is
what is tested)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from app.outputs import OUTPUTS, OutgoingCaption, runner
from app.outputs.backoff import Backoff, RetryLater
from app.outputs.layout import Layout, frames
from app.outputs.pending import PendingCaptions
from app.outputs.spec import OutputSpec, Progress, SpecError, parse, redacted_url
from app.outputs.target import Target
from app.outputs.youtube import YouTubeTarget
from app.rooms import MEMORY, Room, RoomRegistry, SentenceRecord, Viewer, open_store
from app.rooms.keys import ROOMS, STORE
from app.rooms.viewer import Queued
from app.transcripts import break_lines, speaker_name
from engine import CaptionEngine
from engine.protocol import Caption, Correction, Sentence, Speakers, Word
from tests.support.api import call, new_room
from tests.support.disk import disk_full
from tests.support.servers import running_server
from tests.support.sse import SseReader
from tests.support.youtube_stand_in import post_entries, stand_in

TOKEN = "server-token-for-outputs"
LOOPBACK_ALLOWED = ("127.0.0.1",)  # --output-allow: the stand-ins listen on loopback, which outputs may not reach else


# ---- destinations that never take a post ----------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """A loopback port that takes connections and never answers (a destination that hangs)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/closedcaption?cid=silent"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def refused_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/closedcaption?cid=refused"


# ---- helpers ---------------------------------------------------------------------------------------------------------
@pytest.fixture
async def server(fake_engine: CaptionEngine, tmp_path: Path) -> AsyncIterator[tuple[str, web.Application]]:
    async with running_server(
        fake_engine, auth_token=TOKEN, db_path=str(tmp_path / "o.db"), output_allow=LOOPBACK_ALLOWED
    ) as served:
        yield served


async def add_output(url: str, room: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    status, made = await call("POST", f"{url}/rooms/{room}/outputs", token, body)
    assert status == 201, made
    return made


async def outputs(url: str, room: str, token: str = TOKEN) -> list[dict[str, Any]]:
    status, body = await call("GET", f"{url}/rooms/{room}/outputs", token)
    assert status == 200, body
    return list(body["outputs"])


async def lock(
    app: web.Application, room_id: str, *texts: str, start_ms: int = 0, session: str = "pub"
) -> list[SentenceRecord]:
    """Sentences locked in the room in one event, the way a publisher's are, from ``start_ms`` on the room's
    timeline (each word 300 ms, 500 ms between sentences)."""
    room: Room | None = await app[ROOMS].get(room_id)
    assert room is not None
    make: list[SentenceRecord] = []
    start = start_ms
    for text in texts:
        words = tuple(Word(w, start + i * 300, start + i * 300 + 280) for i, w in enumerate(text.split()))
        make.append(SentenceRecord(-1, session, text, start, words[-1].end_ms, 0, words))
        start = words[-1].end_ms + 500
    return await room.commit_sentences(make)


async def until(predicate: Any, timeout_s: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.02)


def plain(text: str) -> str:
    return " ".join(text.split())


# ---- pure pieces -----------------------------------------------------------------------------------------------------
def caption(
    text: str, start: int = 1_700_000_000_000, end: int | None = None, changed: bool = False
) -> OutgoingCaption:
    return OutgoingCaption(1, 0, text, start, end or start + 3000, 0, "Speaker 1", changed)


def test_a_post_body_is_time_lines_and_subtitle_lines_in_googles_format() -> None:
    target = YouTubeTarget("http://127.0.0.1:9/closedcaption?cid=x", break_lines)
    body = target.body(caption("Good morning, everyone.", start=1_700_000_000_123))
    assert body == "2023-11-14T22:13:20.123\nGood morning, everyone.\n"
    long = (
        "If the reader will excuse me, I will say nothing of my antecedents, nor of the circumstances which led "
        "me to leave my native country, for the narrative would be tedious to him and painful to myself."
    )
    entries = post_entries(target.body(caption(long, start=1_700_000_000_000, end=1_700_000_012_000, changed=True)))
    assert len(entries) >= 3
    assert all(len(lines) <= 2 and all(len(line) <= 42 for line in lines) for _, lines in entries)
    assert plain(" ".join(" ".join(lines) for _, lines in entries)) == ">> " + long
    times = [t for t, _ in entries]
    assert times[0] == 1_700_000_000_000 and times == sorted(times) and times[-1] < 1_700_000_012_000
    assert entries[0][1][0].startswith(">> ")
    assert [f.lines for f in frames("a" * 50, break_lines)] == [("a" * 42, "a" * 8)], "a word longer than a line"
    assert frames("", break_lines) == []


def test_urls_are_checked_strictly_and_shown_without_their_secrets() -> None:
    spec = parse({"kind": "youtube", "url": "http://upload.youtube.com/closedcaption?cid=abc-123"}, 1)
    assert spec.public()["url"] == "http://upload.youtube.com/closedcaption?cid=REDACTED"
    obs = parse({"kind": "obs", "url": "ws://127.0.0.1:4455", "password": "pw"}, 1)
    assert obs.public() == {
        "id": obs.id,
        "kind": "obs",
        "url": "ws://127.0.0.1:4455",
        "created_ms": 1,
        "password": True,
    }
    assert obs.stored()["password"] == "pw"
    assert redacted_url("https://user:pw@h/x?a=1&b=2") == "https://REDACTED@h/x?a=REDACTED&b=REDACTED"
    for bad in (
        {"kind": "youtube", "url": "ftp://h/x"},
        {"kind": "youtube", "url": "ws://h/x"},
        {"kind": "youtube", "url": "http://h/x?cid=1&seq=4"},
        {"kind": "youtube", "url": "http:///x"},
        {"kind": "youtube", "url": "http://h/x y"},
        {"kind": "youtube", "url": "http://h/x#frag"},
        {"kind": "youtube", "url": "http://h/x", "password": "p"},
        {"kind": "obs", "url": "http://h"},
        {"kind": "obs", "url": "ws://h", "password": 5},
        {"kind": "rtmp", "url": "rtmp://h"},
        {"url": "x"},
    ):
        with pytest.raises(SpecError):
            parse(bad, 1)


def test_the_backoff_doubles_to_30_s_and_honours_retry_after() -> None:
    backoff = Backoff()
    assert [backoff.next_s() for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    backoff.reset()
    assert backoff.next_s(RetryLater("busy", 7.0)) == 7.0 and backoff.next_s(RetryLater("busy", 0.1)) == 1.0
    assert backoff.next_s(RetryLater("typo", 86400)) == 300.0


def test_progress_counts_sentences_of_an_event_and_moves_past_it_with_the_last() -> None:
    p = Progress(4)
    assert p.covers(4, 0) and not p.covers(5, 9)
    p = p.after(5, 9, last=False).after(5, 10, last=False)
    assert p == Progress(4, frozenset({9, 10})) and p.covers(5, 9) and not p.covers(5, 11)
    assert p.after(5, 11, last=True) == Progress(5)
    assert p.after(8, 20, last=False) == Progress(7, frozenset({20})), "a later event starts afresh"
    assert Progress.from_wire(p.wire()) == p and Progress.from_wire("junk") is None


def test_what_waits_takes_corrections_and_what_went_out_does_not() -> None:
    queue = PendingCaptions(1000, speaker_name, Progress(1, frozenset({0})))
    s = [Sentence(i, f"sentence {i}", i * 1000, i * 1000 + 900, 0, "pub") for i in range(4)]
    assert queue.take(2, Caption(s[:3], ""), {}), "event 2: sentence 0 went out before the restart"
    assert [(w.caption.sentence_id, w.last) for w in queue] == [(1, False), (2, True)]
    assert not queue.take(2, Caption(s[:3], ""), {}), "an event taken once is not taken again"
    sent = queue.pop()
    assert sent.caption.text == "sentence 1" and sent.caption.start_wall_ms == 2000
    queue.take(
        3,
        Correction(
            (Sentence(1, "changed too late", 1000, 1900, 0, "pub"), Sentence(2, "Sentence two,", 2000, 2400, 1, "pub")),
            names={1: "Ann"},
        ),
        {1: "Ann"},
    )
    queue.take(4, Caption([s[3]], ""), {1: "Ann"})
    queue.take(
        5,
        Correction((Sentence(2, "Sentence", 2000, 2200, 1, "pub"), Sentence(7, "two,", 2200, 2400, 1, "pub"))),
        {1: "Ann"},
    )  # a split
    queue.take(6, Speakers({3: 1}), {1: "Ann"})
    out = [queue.pop().caption for _ in range(len(queue))]
    assert [(c.sentence_id, c.text, c.speaker) for c in out] == [
        (2, "Sentence", "Ann"),
        (7, "two,", "Ann"),
        (3, "sentence 3", "Ann"),
    ]
    assert [c.seq for c in out] == [2, 2, 4], "a split's new part counts in its first part's event"
    queue.take(7, Caption([Sentence(8, "gone soon", 9000, 9500, 0, "pub")], ""), {})
    queue.take(8, Correction(deleted=(8,)), {})
    assert len(queue) == 0


# ---- over HTTP -------------------------------------------------------------------------------------------------------
async def test_only_a_rooms_editor_manages_its_outputs_and_bodies_are_checked(
    server: tuple[str, web.Application],
) -> None:
    url, _ = server
    mine, other = await new_room(url, TOKEN, private=True), await new_room(url, TOKEN)
    room, editor = mine["room"], mine["editor_token"]
    base = f"{url}/rooms/{room}/outputs"
    good = {"kind": "youtube", "url": "http://127.0.0.1:9/closedcaption?cid=secret-key"}
    for token in (None, "nope", mine["viewer_token"], other["editor_token"]):
        for method, body in (("POST", good), ("GET", None)):
            status, answer = await call(method, base, token, body)
            assert status == 403 and answer["error"]["code"] == "unauthorized", (method, token)
        status, _ = await call("DELETE", f"{base}/abc", token)
        assert status == 403
    assert (await call("GET", f"{url}/rooms/nosuchroom0000/outputs", TOKEN))[0] == 404
    for bad in (
        {"kind": "youtube"},
        {"kind": "youtube", "url": "ftp://h/x"},
        {"kind": "youtube", "url": 5},
        {"kind": "youtube", "url": "http://h/x", "colour": "red"},
        {"kind": "tiktok", "url": "http://h"},
        {"kind": "obs", "url": "http://h:4455"},
        [good],
        "text",
    ):
        status, answer = await call("POST", base, editor, bad)
        assert status == 400 and answer["error"]["code"] == "bad_message", bad
    status, answer = await call("POST", base, editor, data=b"{not json")
    assert status == 400 and answer["error"]["code"] == "bad_message"
    status, answer = await call("POST", base, editor, {**good, "url": good["url"] + "x" * 5000})
    assert status == 413 and answer["error"]["code"] == "too_large"
    made = await add_output(url, room, editor, good)
    assert made["kind"] == "youtube" and made["url"] == "http://127.0.0.1:9/closedcaption?cid=REDACTED"
    assert "secret-key" not in json.dumps(await outputs(url, room, editor))
    for _ in range(7):
        await add_output(url, room, TOKEN, good)  # the server's token manages every room's outputs
    status, answer = await call("POST", base, editor, good)
    assert status == 409 and answer["error"]["code"] == "too_many_outputs"
    assert (await call("DELETE", f"{base}/{made['id']}", editor)) == (200, {"deleted": made["id"]})
    assert (await call("DELETE", f"{base}/{made['id']}", editor))[0] == 404
    assert len(await outputs(url, room, editor)) == 7


async def test_every_locked_sentence_is_posted_once_in_order_with_its_time(server: tuple[str, web.Application]) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    await lock(app, room, "This was said before the output existed.")
    async with stand_in() as youtube:
        out = await add_output(url, room, editor, {"kind": "youtube", "url": youtube.ingestion_url()})
        assert out["state"] in ("connected", "sending") and out["sent"] == 0
        records: list[SentenceRecord] = []
        records += await lock(app, room, "Good morning, everyone.", start_ms=5000)
        records += await lock(
            app,
            room,
            "Three sentences locked at once.",
            "The second one.",
            "And a third, which is longer than one screen of captions can hold, so it goes "
            "out as several screens within one post.",
            start_ms=9000,
        )
        for i in range(5):
            records += await lock(app, room, f"Sentence number {i + 1}.", start_ms=30_000 + i * 2000)
        await until(lambda: len(youtube.posts) == len(records), what="every sentence posted")
        assert not youtube.refused and youtube.repeats == 0
        assert [p.seq for p in youtube.posts] == list(range(1, len(records) + 1))
        assert [p.text for p in youtube.posts] == [r.text for r in records]
        created = (await call("GET", f"{url}/rooms/{room}", editor))[1]["created_ms"]
        for post, record in zip(youtube.posts, records, strict=True):
            assert abs(post.entries[0][0] - (created + record.start_ms)) <= 1000
            assert all(len(lines) <= 2 and all(len(line) <= 42 for line in lines) for _, lines in post.entries)
        assert len(youtube.posts[3].entries) > 1
        [listed] = await outputs(url, room, editor)
        assert listed["state"] == "connected" and listed["sent"] == len(records) and listed["behind"] == 0
        assert listed["status"] == {"seq": len(records)} and listed["last_error"] is None
        assert listed["last_sent_ms"] >= created
        metrics = (await call("GET", f"{url}/metrics", TOKEN))[1]["text"]
        assert f'live_captions_output_captions_sent_total{{kind="youtube"}} {float(len(records))}' in metrics
        assert 'live_captions_room_outputs{kind="youtube",state="connected"} 1.0' in metrics
        assert 'live_captions_output_send_errors_total{kind="youtube"} 0.0' in metrics


async def test_a_failing_destination_gets_every_caption_once_after_it_recovers(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    async with stand_in() as youtube:
        await add_output(url, room, editor, {"kind": "youtube", "url": youtube.ingestion_url()})
        youtube.fail(2)  # two retries, 0.5 s then 1 s later (the backoff doubles)
        first = await lock(app, room, "The first caption meets a failing server.")
        await until(lambda: youtube.attempts >= 1, what="the first attempt")
        await asyncio.sleep(0.2)
        [listed] = await outputs(url, room, editor)
        assert listed["state"] in ("retrying", "sending") and "503" in listed["last_error"]
        assert listed["behind"] == 1
        later = await lock(app, room, "A second one waits behind it.", start_ms=4000)
        await until(lambda: len(youtube.posts) == 2, timeout_s=15, what="both after the recovery")
        assert youtube.attempts == 4 and not youtube.refused and youtube.repeats == 0
        assert [(p.seq, p.text) for p in youtube.posts] == [(1, first[0].text), (2, later[0].text)]
        [listed] = await outputs(url, room, editor)
        assert listed["state"] == "connected" and listed["last_error"] is None and listed["sent"] == 2
        metrics = (await call("GET", f"{url}/metrics", TOKEN))[1]["text"]
        assert 'live_captions_output_send_errors_total{kind="youtube"} 2.0' in metrics


async def test_a_refused_url_stops_the_output_with_the_error(server: tuple[str, web.Application]) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    async with stand_in() as youtube:
        wrong = youtube.url + "/not-the-ingestion-path?cid=x"
        await add_output(url, room, editor, {"kind": "youtube", "url": wrong})
        await lock(app, room, "Nobody will read this one.")
        for _ in range(100):
            [listed] = await outputs(url, room, editor)
            if listed["state"] == "failed":
                break
            await asyncio.sleep(0.05)
        assert listed["state"] == "failed" and "404" in listed["last_error"] and "cid=x" not in listed["last_error"]


async def test_dead_destinations_do_not_delay_the_rooms_viewers(server: tuple[str, web.Application]) -> None:
    url, app = server
    plain_room, dead_room = await new_room(url, TOKEN), await new_room(url, TOKEN)
    async with silent_server() as silent:
        for target in (refused_url(), silent):
            await add_output(url, dead_room["room"], dead_room["editor_token"], {"kind": "youtube", "url": target})
        async with (
            SseReader(f"{url}/rooms/{plain_room['room']}/events") as a,
            SseReader(f"{url}/rooms/{dead_room['room']}/events") as b,
        ):
            await until(
                lambda: any(m["type"] == "room" for _, m in a.events) and any(m["type"] == "room" for _, m in b.events)
            )
            delays: dict[str, list[float]] = {"plain": [], "dead": []}
            for i in range(12):
                for name, made, reader in (("plain", plain_room, a), ("dead", dead_room, b)):
                    count = sum(bool(m.get("sentences")) for _, m in reader.events)
                    locked_at = time.monotonic()
                    await lock(app, made["room"], f"Sentence {i} of the {name} room.", start_ms=i * 3000)
                    await until(lambda r=reader, c=count: sum(bool(m.get("sentences")) for _, m in r.events) > c)
                    newest = max(k for k, (_, m) in enumerate(reader.events) if m.get("sentences"))
                    delays[name].append(reader.arrived[newest] - locked_at)
                await asyncio.sleep(0.05)
        listed = await outputs(url, dead_room["room"], dead_room["editor_token"])
        for output in listed:  # (left in place, they would hold the server's stop for its whole grace)
            deleted = await call(
                "DELETE", f"{url}/rooms/{dead_room['room']}/outputs/{output['id']}", dead_room["editor_token"]
            )
            assert deleted[0] == 200
    assert {o["state"] for o in listed} <= {"retrying", "sending"} and all(o["behind"] >= 10 for o in listed)
    assert all(o["sent"] == 0 for o in listed)
    # Generous: each arrival is milliseconds; what is ruled out is the room waiting for a 10 s post or a backoff.
    assert max(delays["dead"]) < max(delays["plain"]) + 0.5, delays
    assert sorted(delays["dead"])[len(delays["dead"]) // 2] < 0.25, delays


async def test_outputs_survive_a_restart_and_resend_nothing(fake_engine: CaptionEngine, tmp_path: Path) -> None:
    db = str(tmp_path / "restart.db")
    async with stand_in() as youtube:
        async with running_server(fake_engine, auth_token=TOKEN, db_path=db, output_allow=LOOPBACK_ALLOWED) as (
            url,
            app,
        ):
            made = await new_room(url, TOKEN)
            room, editor = made["room"], made["editor_token"]
            out = await add_output(url, room, editor, {"kind": "youtube", "url": youtube.ingestion_url()})
            before = await lock(app, room, "Before the restart, one.", "Before the restart, two.")
            await until(lambda: len(youtube.posts) == 2)
        async with running_server(fake_engine, auth_token=TOKEN, db_path=db, output_allow=LOOPBACK_ALLOWED) as (
            url,
            app,
        ):
            [listed] = await outputs(url, room, editor)
            assert listed["id"] == out["id"] and listed["state"] in ("connected", "sending")
            assert listed["status"] == {"seq": 2}, "YouTube's seq goes on where it stopped"
            after = await lock(app, room, "After the restart.", start_ms=9000)
            await until(lambda: len(youtube.posts) == 3)
            await asyncio.sleep(0.3)
    assert [(p.seq, p.text) for p in youtube.posts] == [(1, before[0].text), (2, before[1].text), (3, after[0].text)]
    assert not youtube.refused and youtube.repeats == 0


async def test_a_delay_room_posts_only_the_corrected_text(server: tuple[str, web.Application]) -> None:
    url, app = server
    made = await new_room(url, TOKEN, delay_s=1.5)
    room, editor = made["room"], made["editor_token"]
    async with stand_in() as youtube:
        await add_output(url, room, editor, {"kind": "youtube", "url": youtube.ingestion_url()})
        locked_at = time.monotonic()
        [s] = await lock(app, room, "welcome to the counsel meeting")
        status, _ = await call(
            "PUT", f"{url}/rooms/{room}/sentences/{s.id}", editor, {"text": "Welcome to the council meeting."}
        )
        assert status == 200
        await until(lambda: bool(youtube.posts))
        assert youtube.posts[0].arrived - locked_at >= 1.5, "not before the room's delay"
        await asyncio.sleep(0.5)
    assert [p.text for p in youtube.posts] == ["Welcome to the council meeting."]


async def test_deleting_an_output_stops_it_and_an_ended_room_sends_what_is_left(
    server: tuple[str, web.Application],
) -> None:
    url, app = server
    made = await new_room(url, TOKEN, delay_s=1.0)
    room, editor = made["room"], made["editor_token"]
    async with stand_in() as youtube:
        kept = await add_output(url, room, editor, {"kind": "youtube", "url": youtube.ingestion_url("kept")})
        dropped = await add_output(url, room, editor, {"kind": "youtube", "url": youtube.ingestion_url("dropped")})
        await lock(app, room, "Both outputs send this.")
        await until(lambda: len(youtube.posts) == 2)
        assert (await call("DELETE", f"{url}/rooms/{room}/outputs/{dropped['id']}", editor))[0] == 200
        await lock(app, room, "The last words, held by the delay when the room ends.", start_ms=3000)
        assert (await call("POST", f"{url}/rooms/{room}/end", editor))[0] == 200
        await until(lambda: len(youtube.posts) == 3, what="what the delay held, after the end")
        for _ in range(100):
            [listed] = await outputs(url, room, editor)
            if listed["state"] == "stopped":
                break
            await asyncio.sleep(0.05)
        assert listed["id"] == kept["id"] and listed["state"] == "stopped" and listed["sent"] == 2
        status, answer = await call(
            "POST", f"{url}/rooms/{room}/outputs", editor, {"kind": "youtube", "url": youtube.ingestion_url()}
        )
        assert status == 409 and answer["error"]["code"] == "room_ended"
    assert [p.text for p in youtube.posts][-1] == "The last words, held by the delay when the room ends."
    room_obj = app[ROOMS].loaded(room)
    assert room_obj is not None and len(await app[OUTPUTS].outputs(room)) == 1


async def test_an_output_far_behind_lets_go_of_the_room_and_reads_on_from_the_store(
    server: tuple[str, web.Application], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "MAX_WAITING", 5)  # as 512 captions, without locking 512 of them
    url, app = server
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    async with stand_in() as youtube:
        await add_output(url, room, editor, {"kind": "youtube", "url": youtube.ingestion_url()})
        youtube.open.clear()  # the destination stalls: the first post waits, the rest queue up
        records = [r for i in range(16) for r in await lock(app, room, f"Sentence {i}.", start_ms=i * 2000)]
        room_obj = app[ROOMS].loaded(room)
        assert room_obj is not None
        await until(lambda: not room_obj.viewers, what="the output let go of the room's stream")
        fixed = records[10]
        assert (
            await call("PUT", f"{url}/rooms/{room}/sentences/{fixed.id}", editor, {"text": "Sentence ten, corrected."})
        )[0] == 200
        assert (await call("DELETE", f"{url}/rooms/{room}/sentences/{records[12].id}", editor))[0] == 200
        [listed] = await outputs(url, room, editor)
        assert listed["behind"] == 6 and listed["state"] == "sending"
        youtube.open.set()
        await until(lambda: len(youtube.posts) == 15, what="everything but the deleted sentence")
        await asyncio.sleep(0.3)
        expected = [r.text for r in records]
        expected[10] = "Sentence ten, corrected."
        del expected[12]
        assert [p.text for p in youtube.posts] == expected
        assert [p.seq for p in youtube.posts] == list(range(1, 16)) and not youtube.refused
        assert len(room_obj.viewers) == 1, "following the room again"


async def test_an_obs_output_keeps_its_password_and_never_shows_it(server: tuple[str, web.Application]) -> None:
    url, app = server
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    body = {"kind": "obs", "url": refused_url().replace("http://", "ws://"), "password": "hunter2"}
    status, answer = await call("POST", f"{url}/rooms/{room}/outputs", editor, body)
    assert status == 201 and answer["password"] is True and "hunter2" not in json.dumps(answer)
    assert "hunter2" not in json.dumps(await outputs(url, room, editor))
    record = await app[STORE].room(room)
    assert record is not None and record.outputs[0]["password"] == "hunter2"


# ---- the reader waits on events, not on a clock ---------------------------------------------------------------------
async def test_a_quiet_output_takes_no_wake_ups_and_stops_as_soon_as_its_room_ends(
    server: tuple[str, web.Application], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle output once woke every 0.5 s to look whether its room had ended (20 rooms of 8 outputs: 2 % of a CPU
    idle); now its viewer tells it (``Audience.until_end``)."""
    gets: list[float | None] = []
    get = Viewer.get

    async def counted(self: Viewer, timeout_s: float | None) -> Queued | None:
        gets.append(timeout_s)
        return await get(self, timeout_s)

    monkeypatch.setattr(Viewer, "get", counted)
    url, app = server
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    async with stand_in() as youtube:
        await add_output(url, room, editor, {"kind": "youtube", "url": youtube.ingestion_url()})
        await lock(app, room, "One sentence, then quiet.")
        await until(lambda: len(youtube.posts) == 1)
        [out] = await app[OUTPUTS].outputs(room)
        await until(lambda: out.state is runner.OutputState.CONNECTED)
        before = len(gets)
        await asyncio.sleep(2.0)
        assert len(gets) == before, f"{len(gets) - before} wake-ups of a quiet output in 2 s"
        assert (await call("POST", f"{url}/rooms/{room}/end", editor))[0] == 200
        ended_at = time.monotonic()
        await until(lambda: out.state is runner.OutputState.STOPPED, what="the output stops with its room")
        assert time.monotonic() - ended_at < 0.25, "at once, not at the next look"
    assert [p.text for p in youtube.posts] == ["One sentence, then quiet."]


class Collected(Target):
    """A destination that takes every caption at once (what is tested is what the output reads)."""

    kind = "collected"

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def send(self, caption: OutgoingCaption) -> None:
        self.texts.append(caption.text)


class Unheard:
    def caption_sent(self, runner: runner.OutputRunner) -> None:
        pass

    def send_failed(self, runner: runner.OutputRunner) -> None:
        pass


async def commit(room: Room, text: str, start_ms: int) -> None:
    words = tuple(Word(w, start_ms + i * 300, start_ms + i * 300 + 280) for i, w in enumerate(text.split()))
    await room.commit_sentences([SentenceRecord(-1, "pub", text, start_ms, words[-1].end_ms, 0, words)])


async def test_an_event_the_store_takes_during_an_outputs_catch_up_is_not_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The catch-up reads through ``Room.read_events_after``, which takes the events not saved yet *before* it reads
    the store: an event flushed to the store while that read runs is in one or the other. (Store first, then what
    is unsaved, would find it in neither: the read began before the flush, and the flush emptied the list.)"""
    store = await open_store(MEMORY)
    rooms = RoomRegistry(store)
    room = (await rooms.create("catch-up")).room
    await commit(room, "Stored before the output starts.", 0)
    disk_full(store, True)
    await commit(room, "Kept in memory while the disk is full.", 3000)
    disk_full(store, False)
    assert len(room.unsaved) == 1
    read = store.events_after

    async def flushed_meanwhile(room_id: str, after_seq: int) -> list[tuple[int, Any]]:
        events = await read(room_id, after_seq)  # the store as it was when the read began...
        await room.retry_unsaved()  # ...and the flush that lands while the read runs
        return events

    monkeypatch.setattr(store, "events_after", flushed_meanwhile)
    target = Collected()
    spec = OutputSpec("o1", "collected", "http://captions.example/", 0, progress=Progress(0))  # resumes at seq 0
    out = runner.OutputRunner(room.id, spec, target, rooms, Layout(break_lines, speaker_name), Unheard())
    out.start()
    try:
        await until(lambda: len(target.texts) == 2, what="both sentences, the one flushed meanwhile too")
    finally:
        await out.close()
        rooms.close()
        await store.close()
    assert not room.unsaved and target.texts == [
        "Stored before the output starts.",
        "Kept in memory while the disk is full.",
    ]
