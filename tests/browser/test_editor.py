"""A room's editor in a real browser (Debian's Chromium through Playwright, loopback only), keyboard only: a captioner
fixes a word while a microphone page captions the room, names a speaker, splits and deletes lines; the kiosk, the
phone viewer and the microphone page show each fix in place, and the room's transcript files carry it. In a room
with a hold-back delay the audience never sees the version the editor corrected. axe-core checks the editor page.

The recognizer is the named fake (its text says how long the audio was: "audio of 2.43 seconds"): what is checked is
where corrections go, not what the recognizer heard. Every action on the editor page is a key press: no clicks.

Screenshots go to ``$LIVE_CAPTIONS_SCREENSHOTS`` (a folder) when set, else to the test's temporary folder.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page

from app.rooms import SentenceRecord
from app.rooms.keys import ROOMS
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server

pytestmark = pytest.mark.e2e

CLIP = "ls_1988-24833-0000"

# Records, from the first moment of the page, every text each sentence element ever showed and which elements were
# marked as corrected: a MutationObserver's callback runs before the browser paints, so nothing shown escapes it.
RECORDER = """
window.__seen = {};
window.__marked = [];
window.__elements = {};
const record = () => {
  for (const el of document.querySelectorAll("[data-sentence-id]")) {
    const id = el.dataset.sentenceId;
    const text = el.textContent.replace(/\\s+/g, " ").trim();
    const seen = (window.__seen[id] ??= []);
    if (seen.at(-1) !== text) seen.push(text);
    (window.__elements[id] ??= new Set()).add(el);
    if (el.classList.contains("corrected") && !window.__marked.includes(id)) window.__marked.push(id);
  }
};
new MutationObserver(record).observe(document, {subtree: true, childList: true, characterData: true,
                                                attributes: true, attributeFilter: ["class"]});
"""


async def new_room(url: str, **fields: Any) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json={"title": "Editor test", **fields}) as r:
        assert r.status == 201, await r.text()
        body: dict[str, Any] = await r.json()
    assert body["editor_token"] and body["links"]["edit"].endswith(
        f"/rooms/{body['room']}/edit?token={body['editor_token']}"
    )
    return body


async def open_editor(browser: Browser, link: str) -> Page:
    editor = await browser.new_page(viewport={"width": 1200, "height": 800})
    await editor.goto(link)
    await editor.wait_for_selector("#status[data-state=waiting], #status[data-state=live]", timeout=20_000)
    return editor


async def open_recorded(browser: Browser, url: str, width: int = 1280, height: int = 720) -> Page:
    page = await browser.new_page(viewport={"width": width, "height": height})
    await page.add_init_script(RECORDER)
    await page.goto(url)
    return page


async def focus_line(editor: Page, index: int) -> str:
    """With the keyboard alone: Tab into the list, Home to the first line, then down `index` lines. Returns the
    focused line's sentence id."""
    if not await editor.evaluate("!!document.activeElement?.matches('li.line')"):
        await editor.keyboard.press("Tab")
    assert await editor.evaluate("document.activeElement.matches('li.line')"), "Tab did not reach a line"
    await editor.keyboard.press("Home")
    for _ in range(index):
        await editor.keyboard.press("ArrowDown")
    sid = await editor.evaluate("document.activeElement.dataset.sentenceId")
    assert sid is not None
    return str(sid)


async def line_text(page: Page, sid: str) -> str:
    return " ".join((await page.locator(f"[data-sentence-id='{sid}'] [data-text]").inner_text()).split())


async def replace_word(editor: Page, old: str, new: str) -> None:
    """In the open line's text box: select the first `old` with the arrow keys and type `new` over it."""
    value = await editor.evaluate("document.activeElement.value")
    at = value.index(old)
    await editor.keyboard.press("Home")
    for _ in range(at):
        await editor.keyboard.press("ArrowRight")
    for _ in range(len(old)):
        await editor.keyboard.press("Shift+ArrowRight")
    await editor.keyboard.type(new)


async def get_text(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        assert r.status == 200, url
        return await r.text()


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        assert r.status == 200, url
        return await r.json()


@pytest.mark.slow
async def test_an_editor_fixes_a_word_by_keyboard_while_a_microphone_captions_the_room(
    fake_engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    async with running_server(fake_engine) as (url, _):
        made = await new_room(url)
        room = made["room"]
        kiosk = await open_recorded(browser, f"{url}/kiosk?room={room}&lines=4&qr=0")
        phone = await open_recorded(browser, f"{url}/view?room={room}", width=390, height=760)
        editor = await open_editor(browser, made["links"]["edit"])
        mic = await open_recorded(browser, f"{url}/?room={room}", width=900, height=700)
        await mic.evaluate("window.liveCaptions.start()")
        await editor.wait_for_selector("li.line", timeout=60_000)
        assert await mic.evaluate("window.liveCaptions.state") == "live", "the session ended before the fix"

        sid = await focus_line(editor, 0)
        before = await line_text(editor, sid)
        assert before.startswith("audio of "), before
        fixed = before.replace("audio", "speech", 1)
        await kiosk.wait_for_selector(f"[data-sentence-id='{sid}']", timeout=20_000)
        await editor.keyboard.press("Enter")
        assert await editor.evaluate("document.activeElement.matches('[data-editbox]')"), "Enter did not open it"
        await replace_word(editor, "audio", "speech")
        await editor.keyboard.press("Enter")
        await editor.wait_for_selector(f"li[data-sentence-id='{sid}'][data-state=saved]", timeout=20_000)
        assert await line_text(editor, sid) == fixed
        assert await editor.evaluate("document.activeElement.dataset.sentenceId") == sid, "focus left the line"

        # The kiosk and the phone show the fix in the element that showed the sentence, marked as corrected.
        for page in (kiosk, phone):
            await page.wait_for_function(f"(window.__seen['{sid}'] ?? []).at(-1) === {fixed!r}", timeout=20_000)
            assert (await page.evaluate(f"window.__seen['{sid}']"))[:1] == [before]
            assert await page.evaluate(f"window.__elements['{sid}'].size") == 1, "the sentence was redrawn"
            assert await page.evaluate(f"window.__marked.includes('{sid}')"), "the fix was not marked"
        await kiosk.screenshot(path=str(shots / "kiosk-corrected.png"))

        # The microphone page got the fix on its data channel (its own sentence ids), shows it, and downloads it.
        await mic.wait_for_function(
            f"window.liveCaptions.transcript().sentences.some((s) => s.text === {fixed!r})", timeout=20_000
        )
        await mic.wait_for_function(
            f"[...document.querySelectorAll('[data-sentence-id]')].some((e) => e.textContent === {fixed!r})",
            timeout=5_000,
        )
        assert await mic.evaluate("window.liveCaptions.messages.some((m) => m.type === 'correction')")
        await mic.evaluate("window.liveCaptions.stop()")
        exported = " ".join((await mic.evaluate("window.liveCaptions.exportAs('txt')")).split())
        assert fixed in exported and before not in exported, exported

        srt = " ".join((await get_text(f"{url}/rooms/{room}/transcript.srt")).split())
        assert fixed in srt and before not in srt, srt
        stored = await get_json(f"{url}/rooms/{room}/transcript.json")
        assert [s["text"] for s in stored["sentences"] if str(s["id"]) == sid] == [fixed]
        await editor.screenshot(path=str(shots / "editor.png"))


async def seed(app: web.Application, room_id: str, sentences: list[tuple[int, str]]) -> None:
    """Commit `(speaker, text)` sentences into the room as a publisher would, one after another."""
    room = await app[ROOMS].get(room_id)
    assert room is not None
    t = 1000
    for spk, text in sentences:
        end = t + 300 * len(text.split())
        await room.commit_sentences([SentenceRecord(-1, "demo-session", text, t, end, spk)])
        t = end + 500


MEETING = [
    (0, "Good morning and welcome to the review."),
    (1, "Thank you. The numbers for the quarter are in."),
    (0, "Um, sorry, one moment please."),
    (1, "Sales grew by four percent and costs fell by two percent."),
]


async def test_naming_a_speaker_splitting_and_deleting_lines_by_keyboard(
    fake_engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    async with running_server(fake_engine) as (url, app):
        made = await new_room(url)
        room = made["room"]
        kiosk = await open_recorded(browser, f"{url}/kiosk?room={room}&lines=5&qr=0")
        widget = await open_recorded(browser, f"{url}/embed?room={room}&speakers=1&lines=5&theme=dark", 720, 300)
        editor = await open_editor(browser, made["links"]["edit"])
        await kiosk.wait_for_selector(".status[data-state=waiting]", timeout=20_000)
        await seed(app, room, MEETING)
        await editor.wait_for_function(
            f"document.querySelectorAll('li.line').length === {len(MEETING)}", timeout=20_000
        )
        await kiosk.wait_for_function(
            f"document.querySelectorAll('[data-sentence-id]').length === {len(MEETING)}", timeout=20_000
        )
        ids = await editor.locator("li.line").evaluate_all("els => els.map((e) => e.dataset.sentenceId)")

        # N on a line of Speaker 2 names that label for the whole room.
        sid = await focus_line(editor, 1)
        assert await editor.locator(f"li[data-sentence-id='{sid}'] .who").inner_text() == "Speaker 2"
        await editor.keyboard.press("n")
        assert await editor.evaluate("document.activeElement.closest('[data-nameform]') !== null")
        await editor.keyboard.type("Dr. Lee")
        await editor.keyboard.press("Enter")
        await editor.wait_for_function(
            "[...document.querySelectorAll(\"li.line[data-spk='1'] .who\")].every((e) => e.textContent === 'Dr. Lee')",
            timeout=20_000,
        )
        for page in (kiosk, widget):
            await page.wait_for_function(
                "[...document.querySelectorAll(\"[data-who-spk='1']\")].map((e) => e.textContent).join() === "
                "'Dr. Lee:,Dr. Lee:'",
                timeout=20_000,
            )
        assert await editor.evaluate("document.activeElement.dataset.sentenceId") == sid

        # A late viewer gets the names with the room.
        phone = await open_recorded(browser, f"{url}/view?room={room}", width=390, height=760)
        await phone.wait_for_function(
            "[...document.querySelectorAll('.turn .who')].some((e) => e.textContent === 'Dr. Lee')", timeout=20_000
        )

        # Ctrl+Enter splits the line at the cursor: the words before it stay, the rest is a new line after it.
        sid = await focus_line(editor, 3)
        await editor.keyboard.press("F2")
        value = await editor.evaluate("document.activeElement.value")
        cut = value.index("and costs")
        await editor.keyboard.press("Home")
        for _ in range(cut):
            await editor.keyboard.press("ArrowRight")
        await editor.keyboard.press("Control+Enter")
        await editor.wait_for_function(
            f"document.querySelectorAll('li.line').length === {len(MEETING) + 1}", timeout=20_000
        )
        assert await line_text(editor, sid) == "Sales grew by four percent"
        for page in (kiosk, widget):
            await page.wait_for_function(
                f"document.querySelectorAll('[data-sentence-id]').length === {len(MEETING) + 1}", timeout=20_000
            )
            shown = [" ".join(t.split()) for t in await page.locator("[data-sentence-id]").all_inner_texts()]
            assert shown[-2:] == ["Sales grew by four percent", "and costs fell by two percent."], shown

        # Delete twice removes a line: once only asks.
        gone = ids[2]
        assert await focus_line(editor, 2) == gone
        await editor.keyboard.press("Delete")
        await editor.wait_for_selector(f"li[data-sentence-id='{gone}'][data-state=arming]", timeout=5_000)
        await asyncio.sleep(0.5)
        assert await kiosk.locator(f"[data-sentence-id='{gone}']").count() == 1, "one Delete deleted the line"
        await editor.keyboard.press("Delete")
        await editor.wait_for_selector(f"li[data-sentence-id='{gone}']", state="detached", timeout=20_000)
        for page in (kiosk, widget, phone):
            await page.wait_for_selector(f"[data-sentence-id='{gone}']", state="detached", timeout=20_000)
        # Lines 1 and 3 are both Dr. Lee's now, side by side: the kiosk names the speaker once.
        assert await kiosk.evaluate(
            "[...document.querySelectorAll('.flow > *')].map((e) => e.textContent).filter((t) => t.endsWith(':'))"
        ) == ["Speaker 1:", "Dr. Lee:"]
        assert await editor.evaluate("document.activeElement.matches('li.line')"), "the focus was lost"

        stored = await get_json(f"{url}/rooms/{room}/transcript.json")
        texts = [s["text"] for s in stored["sentences"]]
        assert texts == [
            MEETING[0][1],
            MEETING[1][1],
            "Sales grew by four percent",
            "and costs fell by two percent.",
        ], texts
        assert [s["speaker"] for s in stored["sentences"]][1] == "Dr. Lee"
        txt = await get_text(f"{url}/rooms/{room}/transcript.txt")
        assert "Dr. Lee" in txt and "one moment" not in txt, txt
        await kiosk.screenshot(path=str(shots / "kiosk-named.png"))
        await editor.screenshot(path=str(shots / "editor-named.png"))


@pytest.mark.slow
async def test_with_a_delay_the_audience_never_sees_what_the_editor_corrected(
    fake_engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    delay_s = 8
    async with running_server(fake_engine) as (url, _):
        made = await new_room(url, delay_s=delay_s)
        room = made["room"]
        kiosk = await open_recorded(browser, f"{url}/kiosk?room={room}&lines=4&qr=0")
        phone = await open_recorded(browser, f"{url}/view?room={room}", width=390, height=760)
        editor = await open_editor(browser, made["links"]["edit"])
        await kiosk.wait_for_selector(".status[data-state=waiting]", timeout=20_000)

        client = CaptionClient(url, pad(audio(CLIP), 0.3, 2.5))
        await client.connect(offer={"room": room})
        try:
            await editor.wait_for_selector("li.line", timeout=60_000)
            sid = await focus_line(editor, 0)
            before = await line_text(editor, sid)
            fixed = before.replace("audio", "speech", 1)
            await editor.keyboard.press("Enter")
            await replace_word(editor, "audio", "speech")
            await editor.keyboard.press("Enter")
            await editor.wait_for_selector(f"li[data-sentence-id='{sid}'][data-state=saved]", timeout=20_000)
            # It is still held back from the audience: the editor says so, and no viewer has it.
            assert await editor.locator(f"li[data-sentence-id='{sid}'][data-held]").count() == 1
            assert await kiosk.locator(f"[data-sentence-id='{sid}']").count() == 0
            await editor.wait_for_function(
                "/[1-9][0-9]* events? waiting to be published/.test(document.getElementById('meter').textContent)",
                timeout=5_000,
            )

            await client.until_played()
            await client.stop()
        finally:
            await client.close()
        texts = [s["text"] for s in client.sentences()]
        for page in (kiosk, phone):
            await page.wait_for_function(
                f"(window.__seen['{sid}'] ?? []).includes({fixed!r})", timeout=(delay_s + 20) * 1000
            )
            seen = await page.evaluate("window.__seen")
            assert seen[sid] == [fixed], f"the audience saw {seen[sid]}"
            await page.wait_for_function(
                f"document.querySelectorAll('[data-sentence-id]').length >= {len(texts)}", timeout=(delay_s + 20) * 1000
            )
        await editor.wait_for_selector(f"li[data-sentence-id='{sid}']:not([data-held])", timeout=20_000)
        srt = " ".join((await get_text(f"{url}/rooms/{room}/transcript.srt")).split())
        assert fixed in srt and before not in srt
        await kiosk.screenshot(path=str(shots / "kiosk-delayed.png"))


async def test_the_editor_page_passes_axe(fake_engine: CaptionEngine, browser: Browser, shots: Path) -> None:
    """axe-core (bundled with axe-playwright-python: injected from the package, nothing is fetched) finds nothing
    serious or critical on the editor page: with lines, with a line open for editing, and with a name form open."""
    async with running_server(fake_engine) as (url, app):
        made = await new_room(url, delay_s=3)
        room = made["room"]
        editor = await open_editor(browser, made["links"]["edit"])
        await seed(app, room, MEETING)
        await editor.wait_for_function(
            f"document.querySelectorAll('li.line').length === {len(MEETING)}", timeout=20_000
        )
        axe = Axe()

        async def check(state: str) -> None:
            results = await axe.run(editor)
            bad = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
            assert not bad, f"{state}: " + "; ".join(
                f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']]}" for v in bad
            )

        await check("lines")
        await focus_line(editor, 1)
        await editor.keyboard.press("Enter")
        await check("a line open")
        await editor.keyboard.press("Escape")
        await editor.keyboard.press("n")
        await check("a name form open")
        await editor.keyboard.press("Escape")
        await editor.emulate_media(color_scheme="dark")
        await check("dark")
        await editor.screenshot(path=str(shots / "editor-dark.png"))


async def test_a_refused_editor_link_is_said_plainly(fake_engine: CaptionEngine, browser: Browser) -> None:
    """A wrong token (here, the room's viewer token) opens no editing: the page says why instead of retrying."""
    async with running_server(fake_engine) as (url, _):
        made = await new_room(url, private=True)
        editor = await browser.new_page()
        await editor.goto(f"{url}/rooms/{made['room']}/edit?token={made['viewer_token']}")
        await editor.wait_for_selector("#notice:not([hidden])", timeout=20_000)
        assert "refused" in await editor.locator("#notice").inner_text()
        await editor.wait_for_selector("#status[data-state=error]", timeout=30_000)
        assert "editor link was refused" in await editor.locator("#status-text").inner_text()
