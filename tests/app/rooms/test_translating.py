"""A room's sentences in its languages, without a model: translation events through both stores, the hold-back
delay on a fake clock, re-translation after a correction, a failing engine, the refusal of a language no engine
produces, the streams and files in a language. The engine is a fake named as one (``FakeTranslations``): what is
tested is the rooms, not a translator (tests/engine/translate/test_apertium.py runs the real ones)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from app.rooms import translating
from app.rooms.holdback import Holdback, empty
from app.rooms.keys import ROOMS
from app.rooms.store import Edits, SentenceRecord, open_store
from engine import CaptionEngine
from engine.protocol import Caption, Correction, Languages, Sentence, Translation
from tests.support.api import call, new_room
from tests.support.fake_translations import FakeTranslations, in_language, translating_server
from tests.support.publishing import lock, until
from tests.support.sse import SseReader

TOKEN = "server-token-for-translations"
ROOM = "room-translated-abc"


# ---- the hold-back delay, on a fake clock -----------------------------------------------------------------------
def test_a_retranslation_within_the_delay_is_the_only_translation_the_audience_gets() -> None:
    hold = Holdback(5.0)
    source = Sentence(0, "welcome to the counsel", 0, 900, 0)
    hold.add(1, Caption([source], ""), committed_s=0.0)
    hold.add(2, Translation("es", (Sentence(0, "bienvenidos al consejero", 0, 900, 0),)), committed_s=0.3)
    hold.add(3, Correction((Sentence(0, "welcome to the council", 0, 900, 0),)), committed_s=3.0)
    later = Translation("es", (Sentence(0, "bienvenidos al consejo", 0, 900, 0),), update=True)
    hold.add(4, later, committed_s=3.3)
    assert [seq for seq, _ in hold.due(5.0)] == [1], "a translation is held as long as its caption"
    out = hold.due(5.3)
    assert [seq for seq, _ in out] == [2, 3, 4]
    first = out[0][1]
    assert isinstance(first, Translation) and [s.text for s in first.sentences] == ["bienvenidos al consejo"]
    assert empty(out[2][1]), "the re-translation went into the held one: its seq alone"


def test_a_sentence_deleted_within_the_delay_leaves_its_held_translations() -> None:
    hold = Holdback(5.0)
    hold.add(1, Caption([Sentence(0, "uh", 0, 300, 0)], ""), committed_s=0.0)
    hold.add(2, Translation("es", (Sentence(0, "eh", 0, 300, 0),)), committed_s=0.2)
    hold.add(3, Correction((), (0,)), committed_s=1.0)
    out = dict(hold.due(10.0))
    held = out[2]
    assert isinstance(held, Translation) and not held.sentences and empty(held)


# ---- both stores -------------------------------------------------------------------------------------------------
async def test_translations_and_languages_are_stored_and_survive_reopening(store_target: str) -> None:
    store = await open_store(store_target)
    await store.create_room(ROOM, "t", languages=("es",))
    a = SentenceRecord(0, "s", "good morning", 0, 900, 0)
    await store.append(ROOM, Caption([a.sentence()], "", seq=1), [a])
    await store.append(
        ROOM,
        Translation("es", (Sentence(0, "buenos días", 0, 900, 0),), seq=2),
        edits=Edits(translations={0: {"es": "buenos días"}}),
    )
    await store.append(ROOM, Languages(("es", "ca"), seq=3), edits=Edits(languages=("es", "ca")))
    await store.append(
        ROOM,
        Translation("ca", (Sentence(0, "bon dia", 0, 900, 0),), seq=4),
        edits=Edits(translations={0: {"ca": "bon dia"}}),
    )
    await store.close()
    again = await open_store(store_target)
    record = await again.room(ROOM)
    assert record is not None and record.languages == ("es", "ca")
    [s] = (await again.snapshot(ROOM)).sentences
    assert s.translations == {"es": "buenos días", "ca": "bon dia"} and s.text == "good morning"
    assert s.translated("ca").text == "bon dia" and s.translated("fr").text == "good morning"
    kinds = [type(m).__name__ for _, m in await again.events_after(ROOM, 0)]
    assert kinds == ["Caption", "Translation", "Languages", "Translation"]
    await again.close()


# ---- a room with a fake engine, over HTTP ------------------------------------------------------------------------
@pytest.fixture
async def served(
    fake_engine: CaptionEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, web.Application, FakeTranslations]]:
    monkeypatch.setattr(translating, "RETRY_S", (0.2, 0.2))
    async with translating_server(fake_engine, TOKEN, tmp_path) as served:
        yield served


async def test_a_room_refuses_a_language_no_engine_produces_and_names_those_it_can(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, _app, fake = served
    status, body = await call("POST", f"{url}/rooms", TOKEN, {"languages": ["es", "fr"]})
    assert status == 400 and "'fr'" in body["error"]["message"] and "ca, es" in body["error"]["message"]
    for bad in (["not a code!"], "es", [1], ["es"] * 7):
        status, body = await call("POST", f"{url}/rooms", TOKEN, {"languages": bad})
        assert status == 400 and body["error"]["code"] == "bad_message", bad
    status, body = await call("GET", f"{url}/languages", None)
    assert status == 200 and body == {"source": "en", "languages": ["ca", "es"], "engines": ["fake"]}
    made = await new_room(url, TOKEN, languages=["es-ES", "en"])
    assert made["languages"] == ["es-ES"], "the spoken language is no translation"
    await until(lambda: fake.warmed == [("en", "es-ES")])  # its engine started with the room, not the server
    status, body = await call("GET", f"{url}/rooms/{made['room']}/events?lang=ca", None)
    assert status == 400 and "en, es-ES" in body["error"]["message"]


async def test_each_locked_sentence_reaches_each_language_and_a_correction_retranslates_it(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, app, fake = served
    made = await new_room(url, TOKEN, languages=["es", "ca"])
    room, editor = made["room"], made["editor_token"]
    async with (
        SseReader(f"{url}/rooms/{room}/events?lang=es") as spanish,
        SseReader(f"{url}/rooms/{room}/events") as english,
    ):
        await until(lambda: any(m["type"] == "room" for _, m in spanish.events))
        a, b = await lock(app, room, "welcome to the counsel", "we begin")
        await until(lambda: len(in_language(spanish.events)) == 2)
        assert in_language(spanish.events) == {a.id: "[es] WELCOME TO THE COUNSEL", b.id: "[es] WE BEGIN"}
        assert not any(m["type"] == "translation" for _, m in english.events), "no translations in the source's"
        assert not any(m["sentences"] for _, m in spanish.events if m["type"] == "caption"), "no source text"
        assert {(c.target, c.texts) for c in fake.calls} >= {("es", (a.text, b.text)), ("ca", (a.text, b.text))}
        assert (await call("PUT", f"{url}/rooms/{room}/sentences/{a.id}", editor, {"text": "Welcome to the council."}))[
            0
        ] == 200
        await until(lambda: in_language(spanish.events)[a.id] == "[es] WELCOME TO THE COUNCIL.")
        update = [m for _, m in spanish.events if m["type"] == "translation" and m["update"]]
        assert update and update[0]["sentences"][0]["id"] == a.id
        # An editor corrects a translation itself.
        status, body = await call(
            "PUT", f"{url}/rooms/{room}/sentences/{b.id}/translations/es", editor, {"text": "Empezamos."}
        )
        assert status == 200 and body["sentence"]["text"] == "Empezamos."
        await until(lambda: in_language(spanish.events)[b.id] == "Empezamos.")
        assert (await call("PUT", f"{url}/rooms/{room}/sentences/{b.id}/translations/fr", editor, {"text": "x"}))[
            0
        ] == 400
    async with SseReader(f"{url}/rooms/{room}/events?lang=es") as late:
        await until(lambda: any(m["type"] == "room" for _, m in late.events))
        assert in_language(late.events) == {a.id: "[es] WELCOME TO THE COUNCIL.", b.id: "Empezamos."}
    status, catalan = await call("GET", f"{url}/rooms/{room}/transcript.txt?lang=ca", None)
    assert status == 200 and "[ca] WELCOME TO THE COUNCIL." in catalan["text"] and "council" not in catalan["text"]


async def test_a_failing_engine_shows_the_source_marked_missing_then_the_retry_translates_it(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, app, fake = served
    made = await new_room(url, TOKEN, languages=["es"])
    room = made["room"]
    fake.fail = 1
    async with SseReader(f"{url}/rooms/{room}/events?lang=es") as spanish:
        await until(lambda: any(m["type"] == "room" for _, m in spanish.events))
        locked_at = time.monotonic()
        [a] = await lock(app, room, "the engine fails once")
        await until(lambda: in_language(spanish.events).get(a.id) == "[es] THE ENGINE FAILS ONCE")
        first = next(m for _, m in spanish.events if m["type"] == "translation")
        assert first["missing"] == [a.id] and first["sentences"][0]["text"] == "the engine fails once"
        assert time.monotonic() - locked_at < 5.0
    _, status = await call("GET", f"{url}/rooms/{room}", TOKEN)
    assert status["translations_waiting"] == 0
    assert app[ROOMS].translation_stats.missing == 1 and app[ROOMS].translation_stats.failures == 1
    metrics = (await call("GET", f"{url}/metrics", TOKEN))[1]["text"]
    for line in (
        "live_captions_translation_failures_total 1.0",
        "live_captions_translations_missing_total 1.0",
        "live_captions_translations_total 1.0",
        "live_captions_translations_waiting 0.0",
    ):
        assert line in metrics, (line, [m for m in metrics.splitlines() if "translat" in m])


async def test_a_language_added_during_the_event_gets_the_sentences_so_far(
    served: tuple[str, web.Application, FakeTranslations],
) -> None:
    url, app, _fake = served
    made = await new_room(url, TOKEN)
    room, editor = made["room"], made["editor_token"]
    a, b = await lock(app, room, "said before", "also before")
    status, body = await call("PUT", f"{url}/rooms/{room}/languages", editor, {"languages": ["ca"]})
    assert status == 200 and body["languages"] == ["ca"]
    assert (await call("PUT", f"{url}/rooms/{room}/languages", editor, {"languages": ["xx"]}))[0] == 400
    async with SseReader(f"{url}/rooms/{room}/events?lang=ca") as catalan:
        await until(
            lambda: (
                len(in_language(catalan.events)) == 2
                and all(t.startswith("[ca]") for t in in_language(catalan.events).values())
            )
        )
    assert in_language(catalan.events) == {a.id: "[ca] SAID BEFORE", b.id: "[ca] ALSO BEFORE"}


async def test_translation_never_holds_a_caption_back(served: tuple[str, web.Application, FakeTranslations]) -> None:
    url, app, fake = served
    fake.delay_s = 2.0
    made = await new_room(url, TOKEN, languages=["es"])
    room = made["room"]
    async with SseReader(f"{url}/rooms/{room}/events") as english:
        await until(lambda: any(m["type"] == "room" for _, m in english.events))
        started = time.monotonic()
        await lock(app, room, "a slow engine")
        assert time.monotonic() - started < 0.5, "the commit did not wait for the translation"
        await until(lambda: any(m["type"] == "caption" and m["sentences"] for _, m in english.events), 1.0)
