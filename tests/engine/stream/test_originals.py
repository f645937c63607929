"""English captions of speech in another language, with the words said kept beside them: a publisher of Whisper's
translate task sends an ``original`` of each sentence after its lock, and its room keeps it as the sentence in that
language (a room language of its own, which viewers, files and editors see; no engine's translation replaces it).
The recognizer is the fake engine (its text for the translate task ends "in English", and its language is the one
it was told) and
the translator a fake (``FakeTranslations``), each named as one: what is tested is the way the second text goes,
not a model (``tests/functional/test_translate_speech.py`` has the real one)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from app.rooms.keys import ROOMS
from engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.api import call, new_room
from tests.support.fake_translations import FakeTranslations, in_language, translating_server
from tests.support.publishing import lock, until
from tests.support.rtc_client import CaptionClient
from tests.support.sse import SseReader

TOKEN = "server-token-for-originals"


@pytest.fixture
async def served(
    fake_engine: CaptionEngine, tmp_path: Path
) -> AsyncIterator[tuple[str, web.Application, FakeTranslations]]:
    async with translating_server(fake_engine, TOKEN, tmp_path) as served:
        yield served


def _of(client: CaptionClient, kind: str) -> list[dict[str, Any]]:
    return [m for m in client.messages if m["type"] == kind]


async def test_a_translating_publisher_keeps_the_words_said_as_the_rooms_version_in_their_language(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, _app, _fake = served
    room = (await new_room(url, TOKEN, languages=["ca"]))["room"]
    clip = pad(audio("ls_1988-24833-0000")[:16000], 0.3, 1.5)
    client = CaptionClient(url, clip)
    await client.connect(
        start={"type": "start", "language": "es", "task": "translate"}, offer={"room": room, "token": TOKEN}
    )
    await until(lambda: bool(_of(client, "original")), timeout_s=30)
    [original] = _of(client, "original")
    [sentence] = client.sentences()
    assert (original["id"], original["lang"]) == (sentence["id"], "es")
    # (the same audio, transcribed: the final may have been a partial that heard a little less of it)
    assert sentence["text"].endswith(" in English") and re.fullmatch(r"audio of [0-9.]+ seconds", original["text"])
    status, state = await call("GET", f"{url}/rooms/{room}", TOKEN)
    assert status == 200 and state["language"] == "en" and state["languages"] == ["ca", "es"]

    async with (
        SseReader(f"{url}/rooms/{room}/events?lang=es") as spanish,
        SseReader(f"{url}/rooms/{room}/events?lang=ca") as catalan,
    ):
        await spanish.wait_for(lambda r: bool(in_language(r.events)))
        await catalan.wait_for(lambda r: any(t.startswith("[ca]") for t in in_language(r.events).values()))
    # The Spanish is the words said, never the engine's Spanish of the English (the fake makes that too).
    assert list(in_language(spanish.events).values()) == [original["text"]]
    status, transcript = await call("GET", f"{url}/rooms/{room}/transcript.json", TOKEN)
    assert status == 200
    [kept] = transcript["sentences"]
    assert kept["text"] == sentence["text"] and kept["translations"]["es"] == original["text"]
    # The room's editor may keep the language the speech gave, which no engine here makes from English ("es" is
    # made by the fake, so this checks the list's other rule: one it cannot make, "de", is still refused).
    status, body = await call("PUT", f"{url}/rooms/{room}/languages", TOKEN, {"languages": ["ca", "es", "de"]})
    assert status == 400 and "'de'" in body["error"]["message"]
    await client.close()


async def test_an_engines_translation_never_replaces_the_words_said_and_a_language_only_speech_gives_is_kept(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, app, fake = served
    made = await new_room(url, TOKEN, languages=["es"])
    room = await app[ROOMS].get(made["room"])
    assert room is not None
    first, second = await lock(app, room.id, "good morning", "thank you all")
    await until(lambda: room.translating is not None and not room.translating.busy and bool(fake.calls))
    # The words said of the second sentence come after the engine's Spanish of it: they replace it, and an
    # engine's later translation (a retry, a correction) of it is left out.
    await room.commit_original(second.id, "es", "gracias a todos")
    await room.commit_translation("es", {second.id: "[es] THANK YOU ALL"}, {second.id: second.text})
    # A language no engine makes from English ("de"): the room has it, and engines are never asked for it.
    await room.commit_original(first.id, "de", "guten Morgen")
    assert room.languages == ("es", "de")
    calls = len(fake.calls)
    await lock(app, room.id, "and welcome")
    await until(lambda: len(fake.calls) > calls)
    await until(lambda: room.translating is not None and not room.translating.busy)
    assert {c.target for c in fake.calls} == {"es"}
    status, transcript = await call("GET", f"{url}/rooms/{room.id}/transcript.json", TOKEN)
    assert status == 200
    by_id = {s["id"]: s["translations"] for s in transcript["sentences"]}
    assert by_id[second.id]["es"] == "gracias a todos" and by_id[first.id]["de"] == "guten Morgen"
    assert by_id[first.id]["es"] == "[es] GOOD MORNING"
    status, body = await call("PUT", f"{url}/rooms/{room.id}/languages", TOKEN, {"languages": ["es", "de"]})
    assert status == 200 and body["languages"] == ["es", "de"]
    # Speech in the room's own language has no other version; an editor may still correct the words said.
    await room.commit_original(first.id, "en", "good morning")
    assert room.languages == ("es", "de")
    status, _ = await call(
        "PUT", f"{url}/rooms/{room.id}/sentences/{first.id}/translations/de", TOKEN, {"text": "Guten Morgen!"}
    )
    assert status == 200


async def test_a_translating_sessions_own_room_is_english_whatever_is_spoken(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, _app, _fake = served
    clip = pad(audio("ls_1988-24833-0000")[:16000], 0.3, 0.5)
    status, body = await call("POST", f"{url}/offer", TOKEN, {"sdp": "v=0", "type": "offer", "task": "sing"})
    assert status == 400 and '"task"' in body["error"]["message"]
    own = CaptionClient(url, clip)
    await own.connect(
        start={"type": "start", "language": "zh", "task": "translate"},
        offer={"token": TOKEN, "language": "zh", "task": "translate"},
    )
    await until(lambda: bool(_of(own, "ready")))
    status, state = await call("GET", f"{url}/rooms/{own.room}", TOKEN)
    assert status == 200 and state["language"] == "en"
    own.send(json.dumps({"type": "stop"}))
    await own.close()


async def test_english_speech_of_the_translate_task_is_not_decoded_twice(
    served: tuple[str, web.Application, FakeTranslations], fake_engine: CaptionEngine
) -> None:
    url, _app, _fake = served
    clip = pad(audio("ls_1988-24833-0000")[:16000], 0.3, 1.5)
    client = CaptionClient(url, clip)
    await client.connect(start={"type": "start", "language": "en", "task": "translate"}, offer={"token": TOKEN})
    await client.until_played()
    await client.stop()
    await client.close()
    assert client.sentences() and not _of(client, "original")
    assert not any(rid.endswith("-o0") for rid, _, _ in fake_engine.transcriber.started)  # type: ignore[attr-defined]
