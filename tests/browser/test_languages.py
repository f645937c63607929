"""A translated room in a real browser (Debian's Chromium through Playwright, loopback only): the phone viewer picks
a language by keyboard and its page, its captions and its files follow; a bilingual kiosk (``lang=en,es``) shows
both columns aligned by sentence, a correction reaching both; the widget in a language; axe-core on each; a room
spoken in Spanish reads in Spanish on every page, and in English where asked.

Sentences are committed straight into the room as a publisher's are, the translator is the named fake
(``FakeTranslations``: "[es] " or "[en] " and the text upper-cased): what is tested is what each page shows, not a
model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from playwright.async_api import Browser, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from app.rooms.keys import ROOMS
from engine import CaptionEngine
from engine.protocol import Caption
from tests.support.api import call, new_room
from tests.support.browser import check_axe, open_page
from tests.support.fake_translations import FakeTranslations
from tests.support.publishing import lock
from tests.support.servers import running_server

pytestmark = pytest.mark.e2e

TOKEN = "server-token-for-translated-pages"
SAID = [
    "Good morning, everyone, and welcome to the council.",
    "We begin with the budget.",
    "The library asks for a longer opening on Saturdays, which we shall discuss after the vote.",
]


def spanish(text: str) -> str:
    return f"[es] {text.upper()}"


@pytest.fixture
async def served(fake_engine: CaptionEngine) -> AsyncIterator[tuple[str, web.Application]]:
    async with running_server(fake_engine, auth_token=TOKEN, translator=FakeTranslations()) as served:
        yield served


async def shown(page: Page, root: str = "") -> list[str]:
    return [" ".join(t.split()) for t in await page.locator(f"{root} [data-sentence-id]".strip()).all_inner_texts()]


async def wait_texts(page: Page, texts: list[str], root: str = "") -> None:
    """Until the sentences shown (inside ``root``, a selector) read ``texts``, in order."""
    await wait_texts_at(page, f"{root} [data-sentence-id]".strip(), texts)


async def test_the_phone_viewer_switches_language_by_keyboard_and_its_page_follows(
    served: tuple[str, web.Application], browser: Browser, shots: Path
) -> None:
    url, app = served
    made = await new_room(url, TOKEN, languages=["es", "ca"])
    room_id = made["room"]
    await lock(app, room_id, *SAID[:2])
    phone = await open_page(browser, f"{url}/view?room={room_id}", 390, 760, mobile=True)
    await wait_texts(phone, SAID[:2])
    assert await phone.evaluate("document.documentElement.lang") == "en"
    picker = phone.locator("#language")
    assert await picker.is_visible()
    assert await picker.locator("option").all_inner_texts() == ["English", "Español", "Català"]

    # By keyboard: Tab reaches the picker, an arrow picks the next language.
    for _ in range(10):
        if await phone.evaluate("document.activeElement?.id") == "language":
            break
        await phone.keyboard.press("Tab")
    assert await phone.evaluate("document.activeElement?.id") == "language", "the picker is reachable by Tab"
    await phone.keyboard.press("ArrowDown")
    await wait_texts(phone, [spanish(t) for t in SAID[:2]])
    assert await phone.evaluate("document.documentElement.lang") == "es"
    assert "lang=es" in phone.url, "a reload or a shared link keeps the language"
    assert await phone.locator("[data-format=srt]").get_attribute("href") == f"/rooms/{room_id}/transcript.srt?lang=es"

    # New sentences arrive translated; the open text is the speaker's words, quieter, in their language.
    room = await app[ROOMS].get(room_id)
    assert room is not None
    publisher = room.join("speaker-session")
    await publisher.publish(Caption([], "The library asks", stable=2))
    partial = phone.locator("[data-partial]")
    await partial.filter(has_text="The library asks").wait_for(timeout=10_000)
    assert await partial.get_attribute("lang") == "en" and "foreign" in (await partial.get_attribute("class") or "")
    await lock(app, room_id, SAID[2], start_ms=10_000)
    await wait_texts(phone, [spanish(t) for t in SAID])
    await check_axe(phone, "the phone viewer in Spanish")
    await phone.screenshot(path=str(shots / "viewer-spanish.png"))

    # An editor's fix is re-translated and replaces the sentence where it stands.
    [first] = [
        s
        for s in (await call("GET", f"{url}/rooms/{room_id}/transcript.json", TOKEN))[1]["sentences"]
        if s["text"] == SAID[1]
    ]
    fixed = "We begin with the annual budget."
    assert (await call("PUT", f"{url}/rooms/{room_id}/sentences/{first['id']}", made["editor_token"], {"text": fixed}))[
        0
    ] == 200
    await wait_texts(phone, [spanish(SAID[0]), spanish(fixed), spanish(SAID[2])])

    # Reloaded with ?lang=es, the page opens in Spanish; back to English by keyboard.
    await phone.reload()
    await wait_texts(phone, [spanish(SAID[0]), spanish(fixed), spanish(SAID[2])])
    await picker.focus()
    await phone.keyboard.press("ArrowUp")
    await wait_texts(phone, [SAID[0], fixed, SAID[2]])
    assert await phone.evaluate("document.documentElement.lang") == "en" and "lang=" not in phone.url
    await phone.close()


async def test_a_bilingual_kiosk_aligns_each_sentence_with_its_translation(
    served: tuple[str, web.Application], browser: Browser, shots: Path
) -> None:
    url, app = served
    made = await new_room(url, TOKEN, languages=["es"])
    room_id = made["room"]
    kiosk = await open_page(browser, f"{url}/kiosk?room={room_id}&lang=en,es&lines=6&qr=0")
    await kiosk.wait_for_selector(".status[data-state=waiting]", timeout=20_000)
    await lock(app, room_id, *SAID[:2])
    await lock(app, room_id, SAID[2], start_ms=10_000)
    await wait_texts(kiosk, SAID, ".cell[lang=en]")
    await wait_texts(kiosk, [spanish(t) for t in SAID], ".cell[lang=es]")
    rows = await kiosk.evaluate("""() => [...document.querySelectorAll('.pair[data-pair-id]')].map((row) => {
        const [left, right] = [...row.querySelectorAll('.sentence')].map((s) => s.getBoundingClientRect());
        return {top: [left.top, right.top], x: [left.left, right.left]};
    })""")
    assert len(rows) == 3
    for row in rows:
        assert abs(row["top"][0] - row["top"][1]) < 2, f"a sentence and its translation start level: {rows}"
        assert row["x"][1] > row["x"][0] + 200, "the translation is in the column beside it"
    assert await kiosk.evaluate("document.documentElement.lang") == "en"
    assert await kiosk.locator(".cell[lang=es]").count() >= 3
    await check_axe(kiosk, "the bilingual kiosk")
    await kiosk.screenshot(path=str(shots / "kiosk-bilingual.png"))

    [second] = [
        s
        for s in (await call("GET", f"{url}/rooms/{room_id}/transcript.json", TOKEN))[1]["sentences"]
        if s["text"] == SAID[1]
    ]
    fixed = "We begin with the annual budget."
    assert (
        await call("PUT", f"{url}/rooms/{room_id}/sentences/{second['id']}", made["editor_token"], {"text": fixed})
    )[0] == 200
    await wait_texts(kiosk, [SAID[0], fixed, SAID[2]], ".cell[lang=en]")
    await wait_texts(kiosk, [spanish(SAID[0]), spanish(fixed), spanish(SAID[2])], ".cell[lang=es]")

    # One language, and one the room lacks (left out: the spoken one shows).
    single = await open_page(browser, f"{url}/kiosk?room={room_id}&lang=es&qr=0")
    await wait_texts(single, [spanish(SAID[0]), spanish(fixed), spanish(SAID[2])])
    assert await single.evaluate("document.documentElement.lang") == "es"
    missing = await open_page(browser, f"{url}/kiosk?room={room_id}&lang=fr&qr=0")
    await wait_texts(missing, [SAID[0], fixed, SAID[2]])
    widget = await open_page(browser, f"{url}/embed?room={room_id}&lang=es&lines=3", 480, 200)
    await wait_texts(widget, [spanish(SAID[0]), spanish(fixed), spanish(SAID[2])])
    assert await widget.evaluate("document.documentElement.lang") == "es"
    for page in (kiosk, single, missing, widget):
        await page.close()


async def test_a_room_spoken_in_spanish_reads_in_spanish_on_every_page_and_in_english_when_asked(
    served: tuple[str, web.Application], browser: Browser
) -> None:
    url, app = served
    made = await new_room(url, TOKEN, language="es", languages=["en"])
    room_id = made["room"]
    said = ["Buenos días a todos.", "Empezamos con el presupuesto."]
    await lock(app, room_id, *said)
    english = [f"[en] {t.upper()}" for t in said]
    pages = {
        "phone": f"/view?room={room_id}",
        "kiosk": f"/kiosk?room={room_id}&qr=0",
        "widget": f"/embed?room={room_id}&lines=3",
    }
    for name, path in pages.items():
        page = await open_page(browser, url + path)
        await wait_texts(page, said)
        try:
            await page.wait_for_function("document.documentElement.lang === 'es'", timeout=10_000)
        except PlaywrightTimeout:
            pytest.fail(f"the {name} page reads as {await page.evaluate('document.documentElement.lang')!r}")
        await page.close()
    kiosk = await open_page(browser, f"{url}/kiosk?room={room_id}&lang=es,en&qr=0")
    await wait_texts(kiosk, said, ".cell[lang=es]")
    await wait_texts(kiosk, english, ".cell[lang=en]")
    assert await kiosk.evaluate("document.documentElement.lang") == "es"
    phone = await open_page(browser, f"{url}/view?room={room_id}&lang=en")
    await wait_texts(phone, english)
    assert await phone.evaluate("document.documentElement.lang") == "en"
    for page in (kiosk, phone):
        await page.close()


async def test_the_editor_shows_a_room_language_under_each_line_and_its_retranslation(
    served: tuple[str, web.Application], browser: Browser, shots: Path
) -> None:
    url, app = served
    made = await new_room(url, TOKEN, languages=["es", "ca"])
    room_id = made["room"]
    records = await lock(app, room_id, *SAID[:2])  # before the editor opens: its catch-up brings the translations
    editor = await open_page(browser, made["links"]["edit"])
    await editor.wait_for_function("document.querySelectorAll('li.line').length === 2", timeout=20_000)
    picker = editor.locator("#translation-language")
    await picker.wait_for(state="visible", timeout=10_000)
    assert await picker.locator("option").all_inner_texts() == ["None", "Español (es)", "Català (ca)"]
    assert await editor.locator("[data-translation]").count() == 0, "none until one is picked"
    await picker.focus()
    await editor.keyboard.press("ArrowDown")
    await wait_texts_at(editor, "[data-translation]", [spanish(t) for t in SAID[:2]])
    assert await editor.locator("[data-translation]").first.get_attribute("lang") == "es"

    await lock(app, room_id, SAID[2], start_ms=10_000)
    await wait_texts_at(editor, "[data-translation]", [spanish(t) for t in SAID])
    fixed = "We begin with the annual budget."
    assert (
        await call("PUT", f"{url}/rooms/{room_id}/sentences/{records[1].id}", made["editor_token"], {"text": fixed})
    )[0] == 200
    await wait_texts_at(editor, "[data-translation]", [spanish(SAID[0]), spanish(fixed), spanish(SAID[2])])
    await check_axe(editor, "the editor with a room language")
    await editor.screenshot(path=str(shots / "editor-translation.png"))
    await editor.close()


async def wait_texts_at(page: Page, selector: str, texts: list[str]) -> None:
    """Until the elements ``selector`` finds read ``texts`` (white space folded: the kiosk breaks lines), in order."""
    await page.wait_for_function(
        """([selector, want]) => {
            const got = [...document.querySelectorAll(selector)]
                .map((el) => el.textContent.split(/\\s+/).filter(Boolean).join(" "));
            return JSON.stringify(got) === JSON.stringify(want);
        }""",
        arg=[selector, texts],
        timeout=20_000,
    )


@pytest.mark.slow  # the kiosk's microphone plays Chromium's looped file in real time: about 14 s
async def test_a_kiosk_microphone_of_the_translate_task_captions_english_and_keeps_the_words_said(
    served: tuple[str, web.Application], browser: Browser
) -> None:
    """``mic-task=translate``: the kiosk's microphone starts with Whisper's translate task in ``mic-lang``; its lines
    are English (the fake's text for that task ends "in English") and the room keeps the words said as its German."""
    url, _app = served
    room_id = (await new_room(url, TOKEN))["room"]
    kiosk = await open_page(
        browser, f"{url}/kiosk?room={room_id}&mic=1&key={TOKEN}&mic-task=translate&mic-lang=de&qr=0"
    )
    await kiosk.wait_for_function(
        "[...document.querySelectorAll('[data-sentence-id]')].some(e => e.textContent.includes('in English'))",
        timeout=60_000,
    )
    for _ in range(100):
        status, state = await call("GET", f"{url}/rooms/{room_id}", TOKEN)
        if state.get("languages"):
            break
        await kiosk.wait_for_timeout(200)
    assert status == 200 and state["language"] == "en" and state["languages"] == ["de"]
    status, doc = await call("GET", f"{url}/rooms/{room_id}/transcript.json", TOKEN)
    kept = [s for s in doc["sentences"] if "de" in s.get("translations", {})]
    assert kept and all(
        s["text"].endswith("in English") and not s["translations"]["de"].endswith("in English") for s in kept
    )
    await kiosk.close()
