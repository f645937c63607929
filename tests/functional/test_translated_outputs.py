"""A room's languages in its HLS playlists and its outputs: ``captions.m3u8?lang=es`` and its segments, the master
playlist that pairs a video with a rendition per language, and a YouTube output that sends a room language. The
translator is the named fake (``FakeTranslations``), YouTube the stand-in (tests/support/youtube_stand_in.py), the
recognizer the named fake: what is tested is what each file and output carries, not a model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from app.outputs.pending import PendingCaptions
from app.outputs.spec import OutputSpec, Progress, SpecError, parse
from app.rooms import asked_language
from app.rooms.keys import ROOMS
from app.transcripts import hls
from engine import CaptionEngine
from engine.protocol import Caption, Sentence, Translation
from tests.support.api import call, new_room
from tests.support.caption_readers import until_listed
from tests.support.fake_translations import FakeTranslations
from tests.support.publishing import lock, until
from tests.support.servers import running_server
from tests.support.sse import SseReader
from tests.support.youtube_stand_in import stand_in

TOKEN = "server-token-for-translated-outputs"


def said(sid: int, text: str) -> Sentence:
    return Sentence(sid, text, 1000 * sid, 1000 * sid + 800, 0, "pub")


def named(spk: int | None, names: Mapping[int, str] | None) -> str:
    return f"Speaker {(spk or 0) + 1}"


# ---- pure pieces ----------------------------------------------------------------------------------------------------
def test_an_output_in_a_language_takes_its_translations_and_their_updates_not_the_source() -> None:
    queue = PendingCaptions(1000, named, Progress(0), lang="es")
    assert not queue.take(1, Caption([said(0, "good morning")], "", seq=1), {}), "the source brings nothing"
    assert queue.take(2, Translation("es", (said(0, "buenos días"),), seq=2), {})
    assert not queue.take(3, Translation("ca", (said(0, "bon dia"),), seq=3), {}), "another language's"
    queue.take(4, Translation("es", (said(0, "buenos días a todos"),), update=True, seq=4), {})
    assert [w.caption.text for w in queue] == ["buenos días a todos"]
    assert [w.caption.seq for w in queue] == [2], "progress counts the translation's event"
    spoken = PendingCaptions(1000, named, Progress(0))
    spoken.take(1, Caption([said(0, "good morning")], "", seq=1), {})
    assert not spoken.take(2, Translation("es", (said(0, "buenos días"),), seq=2), {})
    assert [w.caption.text for w in spoken] == ["good morning"]


def test_an_output_asks_for_one_of_the_rooms_languages() -> None:
    def languages(raw: str) -> str | None:
        return asked_language(raw, ("es",))

    youtube = {"kind": "youtube", "url": "https://upload.youtube.com/closedcaption?cid=abc"}
    made = parse({**youtube, "lang": "es-MX"}, 0, languages)
    assert made.lang == "es" and made.public()["lang"] == "es"
    assert OutputSpec.from_stored(made.stored()).lang == "es", "kept across a restart"
    assert parse({**youtube, "lang": "en"}, 0, languages).lang is None, "the spoken language"
    assert "lang" not in parse(youtube, 0, languages).public()
    for bad in ("fr", 42, "not a tag!"):
        with pytest.raises(SpecError) as refused:
            parse({**youtube, "lang": bad}, 0, languages)
        assert str(bad) not in str(refused.value), "a refusal never repeats the value"
    with pytest.raises(SpecError):
        parse({**youtube, "lang": "es"}, 0)  # a room with no languages


# ---- over HTTP ------------------------------------------------------------------------------------------------------
@pytest.fixture
async def served(
    monkeypatch: pytest.MonkeyPatch, fake_engine: CaptionEngine, tmp_path: Path
) -> AsyncIterator[tuple[str, web.Application]]:
    """1 s segments listed 0.5 s after their end (a test cannot wait minutes), the fake translator, loopback outputs."""
    monkeypatch.setattr(hls, "SEGMENT_MS", 1000)
    monkeypatch.setattr(hls, "SETTLE_MS", 500)
    async with running_server(
        fake_engine,
        auth_token=TOKEN,
        db_path=str(tmp_path / "t.db"),
        translator=FakeTranslations(),
        output_allow=("127.0.0.1",),
    ) as served:
        yield served


async def test_each_language_has_its_playlist_and_a_master_playlist_pairs_them_with_a_video(
    served: tuple[str, web.Application],
) -> None:
    url, app = served
    made = await new_room(url, TOKEN, languages=["es", "ca"], private=True)
    room_id, viewer = made["room"], made["viewer_token"]
    room = await app[ROOMS].get(room_id)
    assert room is not None
    await lock(app, room_id, "welcome to the meeting")
    await until(lambda: bool(room.translating and room.translating.waiting == 0 and room.seq >= 3))
    base = f"{url}/rooms/{room_id}/captions"
    async with aiohttp.ClientSession() as http:
        listing = await until_listed(http, f"{base}.m3u8?token={viewer}&lang=es", 2)
        uris = [line for line in listing.splitlines() if line.startswith("captions/")]
        assert uris[0] == f"captions/0.vtt?token={viewer}&lang=es"
        spanish = ""
        for uri in uris:
            async with http.get(f"{url}/rooms/{room_id}/{uri}") as r:
                assert r.status == 200
                spanish += await r.text()
        assert "[es] WELCOME TO THE MEETING" in spanish and "welcome to the meeting" not in spanish
        async with http.get(f"{base}/0.vtt?token={viewer}") as r:
            assert "[es]" not in await r.text(), "the spoken language's segments are the source's"
        async with http.get(f"{base}.m3u8?token={viewer}&lang=fr") as r:
            assert r.status == 400 and "fr" not in (await r.json())["error"]["message"]

        video = "https://video.example.org/live/stream.m3u8"
        async with http.get(
            f"{base}/master.m3u8", params={"token": viewer, "video": video, "resolution": "1280x720"}
        ) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("application/vnd.apple.mpegurl")
            master = (await r.text()).splitlines()
        media = [line for line in master if line.startswith("#EXT-X-MEDIA:")]
        assert len(media) == 3
        assert 'LANGUAGE="en"' in media[0] and "DEFAULT=YES" in media[0]
        assert f'URI="../captions.m3u8?token={viewer}"' in media[0]
        assert 'LANGUAGE="es"' in media[1] and 'NAME="Spanish"' in media[1] and "DEFAULT=NO" in media[1]
        assert f'URI="../captions.m3u8?token={viewer}&lang=es"' in media[1]
        assert all('TYPE=SUBTITLES,GROUP-ID="captions"' in line for line in media)
        stream = master.index(next(line for line in master if line.startswith("#EXT-X-STREAM-INF:")))
        assert 'SUBTITLES="captions"' in master[stream] and "RESOLUTION=1280x720" in master[stream]
        assert master[stream + 1] == video
        for bad in (
            {},
            {"video": 'a"b'},
            {"video": "x\nEXT-X-ENDLIST"},
            {"video": "javascript:alert(1)"},
            {"video": "//evil/x.m3u8"},
            {"video": video, "bandwidth": "lots"},
            {"video": video, "codecs": "a b"},
        ):
            async with http.get(f"{base}/master.m3u8", params={"token": viewer, **bad}) as r:
                body = await r.json()
                assert r.status == 400 and body["error"]["code"] == "bad_parameter", bad
                assert all(value not in body["error"]["message"] for value in bad.values() if value != video)
        async with http.get(f"{base}/master.m3u8", params={"video": video}) as r:
            assert r.status == 403, "a private room's master playlist needs its viewer token"


async def test_a_youtube_output_in_a_language_posts_each_translation(served: tuple[str, web.Application]) -> None:
    url, app = served
    made = await new_room(url, TOKEN, languages=["es"])
    room_id, editor = made["room"], made["editor_token"]
    async with stand_in() as youtube:
        status, out = await call(
            "POST",
            f"{url}/rooms/{room_id}/outputs",
            editor,
            {"kind": "youtube", "url": youtube.ingestion_url(), "lang": "es"},
        )
        assert status == 201 and out["lang"] == "es", out
        status, refused = await call(
            "POST",
            f"{url}/rooms/{room_id}/outputs",
            editor,
            {"kind": "youtube", "url": youtube.ingestion_url(), "lang": "ca"},
        )
        assert status == 400 and "en, es" in refused["error"]["message"]
        await lock(app, room_id, "good morning everyone", "the meeting starts now")
        await until(lambda: len(youtube.posts) == 2)
        assert [p.text for p in youtube.posts] == ["[es] GOOD MORNING EVERYONE", "[es] THE MEETING STARTS NOW"]


async def test_in_a_delay_room_a_fix_within_the_delay_is_the_only_translation_anyone_gets(
    served: tuple[str, web.Application],
) -> None:
    """A correction made within the hold-back delay: the Spanish viewers, the Spanish files and a Spanish output only
    ever have the translation of the corrected text, as the spoken language's audience has only the corrected text."""
    url, app = served
    made = await new_room(url, TOKEN, languages=["es"], delay_s=2)
    room_id, editor = made["room"], made["editor_token"]
    async with (
        stand_in() as youtube,
        SseReader(f"{url}/rooms/{room_id}/events?lang=es") as spanish,
        SseReader(f"{url}/rooms/{room_id}/events") as english,
    ):
        assert (
            await call(
                "POST",
                f"{url}/rooms/{room_id}/outputs",
                editor,
                {"kind": "youtube", "url": youtube.ingestion_url(), "lang": "es"},
            )
        )[0] == 201
        await until(lambda: any(m["type"] == "room" for _, m in spanish.events))
        [said] = await lock(app, room_id, "the counsel meets on tuesday")
        await asyncio.sleep(0.5)  # well within the delay
        fixed = "The council meets on Tuesday."
        assert (await call("PUT", f"{url}/rooms/{room_id}/sentences/{said.id}", editor, {"text": fixed}))[0] == 200
        await until(lambda: len(youtube.posts) == 1, timeout_s=15)
        await asyncio.sleep(0.5)  # anything late would have come by now
        texts = {s["text"] for _, m in spanish.events for s in m.get("sentences", ())}
        assert texts == {"[es] THE COUNCIL MEETS ON TUESDAY."}, spanish.events
        assert {s["text"] for _, m in english.events for s in m.get("sentences", ())} == {fixed}
        assert [p.text for p in youtube.posts] == ["[es] THE COUNCIL MEETS ON TUESDAY."]
    for fmt in ("txt", "srt", "vtt"):
        _, body = await call("GET", f"{url}/rooms/{room_id}/transcript.{fmt}?lang=es", None)
        assert "COUNCIL" in body["text"] and "COUNSEL" not in body["text"], (fmt, body)
