"""A room spoken in a language other than English, without a model: the language kept by both stores, translations
from it, the streams, files and playlists that start from it, and publishers that decode it (a WebRTC session that
names another is refused; a Deepgram stream that names none takes it). The recognizer is the fake engine and the
translator a fake (``FakeTranslations``), each named as one: what is tested is the rooms and the way in, not a
model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from app.rooms.keys import ROOMS
from app.rooms.store import SentenceRecord, open_store
from engine import CaptionEngine, Session, SessionOptions
from engine.protocol import Caption
from speechdata.corpus import audio, pad
from tests.support.api import call, new_room
from tests.support.fake_translations import FakeTranslations, in_language, translating_server
from tests.support.live_clients import pcm16, stream_deepgram, stream_realtime
from tests.support.publishing import lock, until
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server
from tests.support.sse import SseReader

TOKEN = "server-token-for-spoken-languages"


async def test_a_rooms_spoken_language_is_stored_and_survives_reopening(store_target: str) -> None:
    store = await open_store(store_target)
    await store.create_room("room-in-spanish-abc", "Sesión", language="es", languages=("en",))
    await store.create_room("room-in-english-abc", "Session")
    a = SentenceRecord(0, "s", "buenos días", 0, 900, 0)
    await store.append("room-in-spanish-abc", Caption([a.sentence()], "", seq=1), [a])
    await store.close()
    again = await open_store(store_target)
    spanish, english = await again.room("room-in-spanish-abc"), await again.room("room-in-english-abc")
    assert spanish is not None and (spanish.language, spanish.languages) == ("es", ("en",))
    assert english is not None and (english.language, english.languages) == ("en", ())
    await again.close()


@pytest.fixture
async def served(
    fake_engine: CaptionEngine, tmp_path: Path
) -> AsyncIterator[tuple[str, web.Application, FakeTranslations]]:
    async with translating_server(fake_engine, TOKEN, tmp_path) as served:
        yield served


async def test_a_room_spoken_in_spanish_is_translated_from_spanish_and_its_files_start_from_it(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, app, fake = served
    for bad in ("xx", "", 7, "spanish"):
        status, body = await call("POST", f"{url}/rooms", TOKEN, {"language": bad})
        assert status == 400 and "language" in body["error"]["message"], bad
    status, body = await call("POST", f"{url}/rooms", TOKEN, {"language": "es", "languages": ["ca"]})
    assert status == 400 and "'es' into 'ca'" in body["error"]["message"] and "into: en" in body["error"]["message"]
    assert (await call("GET", f"{url}/languages?source=es", None))[1]["languages"] == ["en"]
    assert (await call("GET", f"{url}/languages?source=zz", None))[0] == 400
    made = await new_room(url, TOKEN, language="es", languages=["en", "es-ES"])
    room = made["room"]
    assert (made["language"], made["languages"]) == ("es", ["en"]), "the spoken language is no translation"
    status, state = await call("GET", f"{url}/rooms/{room}", None)
    assert status == 200 and (state["language"], state["languages"]) == ("es", ["en"])
    async with (
        SseReader(f"{url}/rooms/{room}/events?lang=en") as english,
        SseReader(f"{url}/rooms/{room}/events?lang=es-MX") as spanish,
    ):
        await until(lambda: all(any(m["type"] == "room" for _, m in r.events) for r in (english, spanish)))
        [a] = await lock(app, room, "buenos días a todos")
        await until(lambda: a.id in in_language(english.events))
        assert in_language(english.events) == {a.id: "[en] BUENOS DÍAS A TODOS"}
        assert in_language(spanish.events) == {a.id: "buenos días a todos"}, "Spanish asked of it: its own text"
        assert {(c.source, c.target) for c in fake.calls} == {("es", "en")}
    status, body = await call("GET", f"{url}/rooms/{room}/events?lang=ca", None)
    assert status == 400 and "es, en" in body["error"]["message"]
    status, doc = await call("GET", f"{url}/rooms/{room}/transcript.json", None)
    assert status == 200 and doc["language"] == "es"
    status, master = await call("GET", f"{url}/rooms/{room}/captions/master.m3u8?video=video.m3u8", None)
    assert status == 200
    text = master["text"]
    spoken = [line for line in text.splitlines() if 'LANGUAGE="es"' in line]
    assert spoken and "DEFAULT=YES" in spoken[0], text
    assert any('LANGUAGE="en"' in line and "lang=en" in line for line in text.splitlines()), text


def _ready(client: CaptionClient) -> list[dict[str, object]]:
    return [m for m in client.messages if m["type"] == "ready"]


async def test_a_publisher_in_a_room_decodes_its_language_and_one_that_names_another_is_refused(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, _app, _fake = served
    room = (await new_room(url, TOKEN, language="es"))["room"]
    clip = pad(audio("ls_1988-24833-0000")[:16000], 0.3, 0.5)
    client = CaptionClient(url, clip)
    await client.connect(start={"type": "start", "language": "fr"}, offer={"room": room, "token": TOKEN})
    await until(lambda: any(m["type"] == "error" for m in client.messages))
    [error] = [m for m in client.messages if m["type"] == "error"]
    assert error["code"] == "bad_message" and "spoken in es" in error["message"] and not _ready(client)
    client.send(json.dumps({"type": "start", "language": "en", "task": "translate"}))
    await until(lambda: len([m for m in client.messages if m["type"] == "error"]) == 2)
    assert "translate" in client.messages[-1]["message"] and not _ready(client)
    client.send(json.dumps({"type": "start", "language": None}))  # none named (the pages' auto): the room's
    await until(lambda: bool(_ready(client)))
    assert _ready(client)[0]["language"] == "es"
    await client.close()

    english = (await new_room(url, TOKEN))["room"]
    listener = CaptionClient(url, clip)  # Whisper's translate task: English captions of Spanish speech
    await listener.connect(
        start={"type": "start", "language": "es", "task": "translate"}, offer={"room": english, "token": TOKEN}
    )
    await until(lambda: bool(_ready(listener)))
    await listener.close()

    own = CaptionClient(url, clip)  # a session's own room is spoken in the language its offer names
    await own.connect(start={"type": "start", "language": "de"}, offer={"token": TOKEN, "language": "de"})
    await until(lambda: bool(_ready(own)))
    assert _ready(own)[0]["language"] == "de"
    status, state = await call("GET", f"{url}/rooms/{own.room}", TOKEN)
    assert status == 200 and state["language"] == "de"
    await own.close()


async def test_a_compatible_stream_into_a_room_decodes_its_language_and_one_naming_another_is_refused(
    fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deepgram's clients name a language or leave it to the server: in a room, the room's; one that names another
    is refused (OpenAI Realtime's too, by an error event)."""
    opened: list[str | None] = []
    open_session = fake_engine.open_session

    def spy(options: SessionOptions | None = None) -> Session:
        opened.append(options.language if options is not None else None)
        return open_session(options)

    monkeypatch.setattr(fake_engine, "open_session", spy)
    data = pcm16(audio("ls_1988-24833-0000")[:16000])
    async with running_server(fake_engine) as (url, app):
        room = (await app[ROOMS].create(language="es")).room
        await stream_deepgram(url, data, speed=0, encoding="linear16", sample_rate=16000, room=room.id)
        # One that names another language is refused before the upgrade, as Deepgram refuses a bad parameter.
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                await http.ws_connect(f"{url}/v1/listen?room={room.id}&language=en&encoding=linear16&sample_rate=16000")
        assert err.value.status == 400
        await stream_deepgram(url, data, speed=0, encoding="linear16", sample_rate=16000)
        # OpenAI Realtime: a session.update naming another language is an error event; the session goes on.
        run = await stream_realtime(
            url, pcm16(audio("ls_1988-24833-0000")[:16000], 24000), speed=0, query=f"room={room.id}", settle_s=1.0
        )
        errors = [e for e in run.events if e.type == "error"]
        assert errors and errors[0].error.code == "unsupported_language" and "spoken in es" in errors[0].error.message
    assert opened == ["es", "en", "es"]


async def test_an_english_only_model_refuses_rooms_sessions_and_files_in_other_languages(
    fake_engine: CaptionEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A server on an English-only checkpoint (named as whisper-tiny.en is) writes English whatever is said: a room
    spoken in another language, a session that names one or asks for the translate task, and a file to translate
    are refused, each saying why; English works as before."""
    monkeypatch.setattr(fake_engine.transcriber, "name", "whisper-tiny.en")
    assert fake_engine.english_only and fake_engine.cannot_caption("en") == ""
    async with translating_server(fake_engine, TOKEN, tmp_path) as (url, _app, _fake):
        status, body = await call("POST", f"{url}/rooms", TOKEN, {"language": "es"})
        assert status == 400 and "English-only" in body["error"]["message"]
        status, body = await call("POST", f"{url}/offer", TOKEN, {"sdp": "v=0", "type": "offer", "language": "de"})
        assert status == 400 and "English-only" in body["error"]["message"]
        english = (await new_room(url, TOKEN))["room"]
        clip = pad(audio("ls_1988-24833-0000")[:16000], 0.3, 0.5)
        client = CaptionClient(url, clip)
        await client.connect(
            start={"type": "start", "language": "zh", "task": "translate"}, offer={"room": english, "token": TOKEN}
        )
        await until(lambda: any(m["type"] == "error" for m in client.messages))
        assert "no translate task" in client.messages[-1]["message"] and not _ready(client)
        client.send(json.dumps({"type": "start", "language": "en"}))
        await until(lambda: bool(_ready(client)))
        await client.close()
        form = aiohttp.FormData()
        form.add_field("model", "whisper-1")
        form.add_field("file", b"RIFF", filename="a.wav", content_type="audio/wav")
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{url}/v1/audio/translations", data=form, headers={"Authorization": f"Bearer {TOKEN}"}) as r,
        ):
            answer = await r.json()
        assert r.status == 400 and answer["error"]["code"] == "unsupported_task"
