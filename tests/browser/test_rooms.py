"""Rooms in a real browser (Debian's Chromium through Playwright, loopback only): the embeddable widget in a host
page on another origin talking postMessage, the kiosk showing another session's captions, a late phone viewer,
and a kiosk that recovers by itself from a server restart with the transcript intact.

The publisher is the aiortc client speaking recorded speech, or the page itself with Chromium's fake microphone
playing it; the recognizer is the real engine shared by the test run. Assertions compare what each display shows
with what the publisher locked, so they hold whatever the model writes.

Screenshots go to ``$LIVE_CAPTIONS_SCREENSHOTS`` (a folder) when set, else to the test's temporary folder.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from playwright.async_api import Browser, ConsoleMessage, Page

from app.rooms import Room, SentenceRecord
from app.rooms.keys import ROOMS
from engine.protocol import Caption, Sentence
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, pad, reference
from speechdata.wer import word_errors
from tests.support.browser import SPEECH_CLIP, open_page
from tests.support.rtc_client import CaptionClient
from tests.support.servers import running_server, serving

# Four of these run on the named fake recognizer (what they check is delivery, not the words); the two that
# caption Chromium's microphone judge real speech and need the model.
pytestmark = pytest.mark.e2e

CLIP = "ls_1988-24833-0000"


async def new_room(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json={"title": "Test room"}) as r:
        assert r.status == 201
        return str((await r.json())["room"])


async def publish(url: str, room: str, clip: str = CLIP) -> CaptionClient:
    """Another session (a browserless WebRTC client) speaks a clip into the room, then stops."""
    client = CaptionClient(url, pad(audio(clip), 0.3, 2.5))
    await client.connect(offer={"room": room})
    await client.until_played()
    await client.stop()
    await client.close()
    assert client.sentences(), "the publisher got no captions"
    return client


async def shown_sentences(page: Page) -> list[str]:
    """The sentences' text as shown, one string each (the kiosk and widget break lines inside them)."""
    return [" ".join(t.split()) for t in await page.locator("[data-sentence-id]").all_inner_texts()]


async def wait_shown(page: Page, count: int, timeout_ms: int = 30_000) -> None:
    await page.wait_for_function(
        f"document.querySelectorAll('[data-sentence-id]').length >= {count}", timeout=timeout_ms
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HOST_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Host page</title>
<style>body{{font:16px system-ui;margin:24px;max-width:760px;color:#222}} .video{{position:relative;
background:linear-gradient(135deg,#2b3a55,#0f1522);height:220px;border-radius:8px}} .video iframe{{position:absolute;
bottom:8px;left:0}} h2{{font-size:15px;margin:18px 0 6px;color:#555}}</style></head><body>
<h1>Weekly all-hands</h1>
<h2>theme=transparent over a video</h2>
<div class="video"><script src="{server}/embed.js" data-room="{room}" data-id="w-transparent" data-font="22"
  data-lines="2"></script></div>
<h2>theme=dark, speakers on</h2>
<script src="{server}/embed.js" data-room="{room}" data-id="w-dark" data-theme="dark" data-font="20"
  data-lines="2" data-speakers="1"></script>
<h2>theme=light, fg=1d5fb8, 3 lines</h2>
<script src="{server}/embed.js" data-room="{room}" data-id="w-light" data-theme="light" data-fg="1d5fb8"
  data-font="18" data-lines="3"></script>
<script>
  window.received = [];
  window.addEventListener("message", (event) => {{
    if (event.origin !== "{server}" || event.data?.source !== "live-captions") return;
    const frame = [...document.querySelectorAll("iframe")].find((f) => f.contentWindow === event.source);
    window.received.push({{frame: frame?.id, ...event.data}});
  }});
  window.command = (id, message) => document.getElementById(id).contentWindow.postMessage(
    {{source: "live-captions", ...message}}, "{server}");
</script></body></html>"""


@pytest.mark.slow
async def test_host_page_embeds_the_widget_and_gets_captions_by_postmessage(
    fake_engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    page_info: dict[str, str] = {}

    async def host_page(request: web.Request) -> web.Response:
        return web.Response(text=HOST_PAGE.format(**page_info), content_type="text/html")

    host = web.Application()
    host.router.add_get("/", host_page)
    async with serving(host) as host_url:
        async with running_server(fake_engine, embed_origins=(host_url,)) as (url, _):
            page_info.update(server=url, room=await new_room(url))
            page = await open_page(browser, host_url, 820, 760)
            await page.wait_for_function(
                "['w-transparent','w-dark','w-light'].every((id) => window.received.some("
                "(m) => m.frame === id && m.type === 'state' && m.state === 'waiting'))",
                timeout=20_000,
            )
            client = await publish(url, page_info["room"])
            texts = [s["text"] for s in client.sentences()]
            await page.wait_for_function(
                f"window.received.filter((m) => m.frame === 'w-dark' && m.type === 'caption')"
                f".flatMap((m) => m.sentences).length >= {len(texts)}",
                timeout=20_000,
            )
            received = await page.evaluate("window.received")
            dark = [m for m in received if m["frame"] == "w-dark"]
            assert dark[0]["type"] == "ready" and dark[0]["mode"] == "viewer" and dark[0]["version"] == 1
            got = [s["text"] for m in dark if m["type"] == "caption" for s in m["sentences"]]
            assert got == texts
            assert any(m["type"] == "caption" and m["partial"] for m in dark), "no partial reached the host"
            assert await page.frame_locator("#w-dark").locator("[data-sentence-id]").all_inner_texts() == texts
            await page.screenshot(path=str(shots / "embed-themes.png"))

            # Host -> widget: stop and start are obeyed; set-language is refused for a viewer, politely.
            await page.evaluate("window.command('w-light', {type: 'stop'})")
            await page.wait_for_function(
                "window.received.some((m) => m.frame === 'w-light' && m.type === 'state' && m.state === 'stopped')",
                timeout=10_000,
            )
            await page.evaluate("window.command('w-light', {type: 'set-language', language: 'de'})")
            await page.evaluate("window.command('w-light', {type: 'start'})")
            await page.wait_for_function(
                "window.received.filter((m) => m.frame === 'w-light' && m.type === 'state' "
                "&& m.state === 'waiting').length >= 2",
                timeout=10_000,
            )
            light = [m for m in await page.evaluate("window.received") if m["frame"] == "w-light"]
            assert any(m["type"] == "error" and m["code"] == "unsupported" for m in light)

            # A host that is not on the allow-list cannot frame the widget (CSP frame-ancestors).
            # Chromium says so on the console when it refuses: wait for that, then check nothing rendered.
            other = await browser.new_page()
            refused: asyncio.Future[ConsoleMessage] = asyncio.get_running_loop().create_future()

            def on_console(m: ConsoleMessage) -> None:
                if "frame-ancestors" in m.text and not refused.done():
                    refused.set_result(m)

            other.on("console", on_console)
            await other.set_content(f'<iframe id="f" src="{url}/embed?room={page_info["room"]}"></iframe>')
            await asyncio.wait_for(refused, 10)
            framed = other.frame_locator("#f")
            assert await framed.locator(".captions").count() == 0


@pytest.mark.slow
async def test_kiosk_shows_another_sessions_captions_and_a_late_viewer_sees_them_all(
    fake_engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    async with running_server(fake_engine) as (url, _):
        room = await new_room(url)
        kiosk = await open_page(browser, f"{url}/kiosk?room={room}&lines=3")
        await kiosk.wait_for_selector(".status[data-state=waiting]", timeout=20_000)
        await kiosk.wait_for_selector("#qr-box:not([hidden])", timeout=5_000)
        await kiosk.screenshot(path=str(shots / "kiosk-waiting.png"))

        first = await publish(url, room)
        texts = [s["text"] for s in first.sentences()]
        await wait_shown(kiosk, len(texts))
        assert await shown_sentences(kiosk) == texts
        assert await kiosk.locator(".status").get_attribute("data-state") == "waiting"  # the publisher left

        # A phone that opens the room now from the QR code (its join page) sees every sentence so far, and so does
        # the read-only viewer page.
        qr_target = await kiosk.evaluate(
            "fetch(document.getElementById('qr').src).then(r => r.headers.get('X-Join-Url'))"
        )
        assert qr_target == f"{url}/join?room={room}"
        for target in (qr_target, f"{url}/view?room={room}"):
            phone = await open_page(browser, target, 390, 760, mobile=True)
            await wait_shown(phone, len(texts))
            assert await shown_sentences(phone) == texts
        await phone.screenshot(path=str(shots / "phone-viewer.png"))
        await kiosk.screenshot(path=str(shots / "kiosk.png"))


@pytest.mark.slow
async def test_kiosk_recovers_from_a_server_restart_and_the_transcript_keeps_every_sentence(
    fake_engine: CaptionEngine, browser: Browser, tmp_path: Path
) -> None:
    db, port = str(tmp_path / "captions.db"), free_port()
    async with running_server(fake_engine, db_path=db, port=port) as (url, _):
        room = await new_room(url)
        kiosk = await open_page(browser, f"{url}/kiosk?room={room}")
        await kiosk.wait_for_selector(".status[data-state=waiting]", timeout=20_000)
        before = [s["text"] for s in (await publish(url, room)).sentences()]
        await wait_shown(kiosk, len(before))
    # The server is gone: the kiosk says so plainly and keeps the text on screen.
    await kiosk.wait_for_selector(".status[data-state=reconnecting]", timeout=10_000)
    assert "reconnecting" in (await kiosk.locator("#status-text").inner_text()).lower()
    assert len(await shown_sentences(kiosk)) == len(before)
    await asyncio.sleep(2.0)

    async with running_server(fake_engine, db_path=db, port=port) as (url2, _):
        assert url2 == url
        await kiosk.wait_for_selector(".status[data-state=waiting]", timeout=30_000)  # back by itself
        async with aiohttp.ClientSession() as http, http.get(f"{url}/rooms/{room}/transcript.json") as r:
            exported = [s["text"] for s in (await r.json())["sentences"]]
        assert exported == before, "a sentence locked before the restart is missing from the transcript"
        after = [s["text"] for s in (await publish(url, room)).sentences()]
        await wait_shown(kiosk, len(before) + len(after))
        ids = [
            int(i)
            for i in await kiosk.locator("[data-sentence-id]").evaluate_all("els => els.map(e => e.dataset.sentenceId)")
        ]
        assert ids == list(range(len(before) + len(after))), "duplicated or missing sentences after the restart"
        assert await shown_sentences(kiosk) == before + after
        async with aiohttp.ClientSession() as http, http.get(f"{url}/rooms/{room}/transcript.srt") as r:
            srt = await r.text()
        assert srt.count(" --> ") == len(before) + len(after) and ",1000" not in srt


@pytest.mark.heavy
async def test_kiosk_as_the_rooms_microphone_captions_real_speech(
    engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    async with running_server(engine) as (url, _):
        room = await new_room(url)
        phone = await open_page(browser, f"{url}/view?room={room}", 390, 760, mobile=True)
        kiosk = await open_page(browser, f"{url}/kiosk?room={room}&mic=1")
        await kiosk.wait_for_selector(".status[data-state=live]", timeout=120_000)
        await asyncio.sleep(audio(SPEECH_CLIP).size / 16000 + 5.0)
        await kiosk.evaluate("window.liveCaptions.mic.stop()")
        await phone.wait_for_function("document.querySelectorAll('[data-sentence-id]').length > 0", timeout=60_000)
        await asyncio.sleep(2.0)
        await kiosk.screenshot(path=str(shots / "kiosk-mic.png"))
        text = " ".join(await shown_sentences(phone))
        errors, words = word_errors(reference(SPEECH_CLIP), text)
        assert errors / words < 0.2, text
        assert " ".join(await shown_sentences(kiosk)) == text


async def seed_room(
    app: web.Application, room_id: str, sentences: list[tuple[int, str]], start_ms: int, ms_per_word: int, gap_ms: int
) -> Room:
    """Commit ``(speaker, text)`` sentences straight into a room, one after another, as a publisher would."""
    room = await app[ROOMS].get(room_id)
    assert room is not None
    t = start_ms
    for spk, text in sentences:
        end = t + ms_per_word * len(text.split())
        await room.commit_sentences([SentenceRecord(-1, "demo-session", text, t, end, spk)])
        t = end + gap_ms
    return room


CONVERSATION = [
    (0, "Good morning, everyone. Let's start with the release."),
    (0, "The build went out on Tuesday and the rollout is at forty percent."),
    (1, "Support saw two tickets about the new login page, both fixed."),
    (0, "Great. Anything blocking the rest of the rollout?"),
    (2, "Only the database migration, which finishes tonight."),
]


async def test_a_conversation_with_speakers_and_a_relabel_on_every_display(
    fake_engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    """Sentences seeded straight into the room (as a publisher would post them), then a speaker relabel: the
    kiosk, the phone viewer and both widget themes show the text with the corrected speaker. Screenshots."""
    async with running_server(fake_engine) as (url, app):
        room_id = await new_room(url)
        kiosk = await open_page(browser, f"{url}/kiosk?room={room_id}&lines=4")
        top = await open_page(browser, f"{url}/kiosk?room={room_id}&lines=2&position=top&theme=light&qr=0")
        phone = await open_page(browser, f"{url}/view?room={room_id}", 390, 760, mobile=True)
        widgets = await browser.new_page(viewport={"width": 720, "height": 330})
        await widgets.goto(f"{url}/health")  # a document of the server's own origin, which may frame the widget
        await widgets.set_content(
            f'<body style="margin:16px;background:#e9e7e1;font:14px system-ui">'
            f'<p>theme=dark, speakers=1</p><iframe id="d" style="border:0;width:100%;height:110px" '
            f'src="{url}/embed?room={room_id}&theme=dark&speakers=1&font=20&lines=3"></iframe>'
            f'<p>theme=light, fg=1d5fb8, font=18</p><iframe id="l" style="border:0;width:100%;height:100px" '
            f'src="{url}/embed?room={room_id}&theme=light&fg=1d5fb8&font=18&lines=3"></iframe></body>'
        )
        await kiosk.wait_for_selector(".status[data-state=waiting]", timeout=20_000)
        room = await seed_room(app, room_id, CONVERSATION, start_ms=2000, ms_per_word=250, gap_ms=400)
        await room.commit_relabel({3: 2})  # the re-clustering at stop decided sentence 3 was speaker 3
        room.publishers.clear()
        await wait_shown(kiosk, len(CONVERSATION))
        await wait_shown(phone, len(CONVERSATION))
        await kiosk.wait_for_selector("[data-sentence-id='3'][data-spk='2']", timeout=10_000)
        await phone.wait_for_selector("[data-sentence-id='3'][data-spk='2']", timeout=10_000)
        for frame in ("#d", "#l"):
            await widgets.frame_locator(frame).locator("[data-sentence-id='3'][data-spk='2']").wait_for(timeout=10_000)
        assert await shown_sentences(kiosk) == [text for _, text in CONVERSATION]
        await kiosk.screenshot(path=str(shots / "kiosk.png"))
        await wait_shown(top, len(CONVERSATION))
        box = await top.locator("#captions").bounding_box()
        assert box is not None and box["y"] < 200, "position=top placed the captions elsewhere"
        assert not await top.locator("#qr-box").is_visible()
        await top.screenshot(path=str(shots / "kiosk-top-light.png"))
        await phone.screenshot(path=str(shots / "phone-viewer.png"))
        await widgets.screenshot(path=str(shots / "embed-dark-light.png"))
        # A new voice speaks before its sentence locks: every display names it before the open text (a room-wide
        # label of its own), and only while it is not the speaker of the last sentence.
        talker = room.join("demo-session")
        await talker.publish(Caption([], "and one more thing", partial_spk=1))
        label = talker.partial_spk
        assert label is not None and label > 2  # above every label the room's sentences use
        who = f"[data-partial-who][data-who-spk='{label}']"
        await kiosk.wait_for_selector(who, timeout=10_000)
        assert (await kiosk.locator(who).text_content()) == f"Speaker {label + 1}:"
        await widgets.frame_locator("#d").locator(who).wait_for(timeout=10_000)
        await phone.wait_for_selector(f"[data-partial][data-spk='{label}']", timeout=10_000)
        # Its sentence locks; its next words are the last sentence's speaker's, so no name before them.
        await talker.publish(Caption([Sentence(0, "And one more thing.", 9000, 10_000, 1)], "", is_final=False))
        await talker.publish(Caption([], "and then", partial_spk=1))
        await kiosk.wait_for_selector("[data-partial-who]", state="detached", timeout=10_000)
        assert (await kiosk.locator("span[data-partial]").text_content()) == "and then"
        talker.leave()


@pytest.mark.heavy
async def test_host_page_starts_and_stops_a_microphone_widget_by_postmessage(
    engine: CaptionEngine, browser: Browser
) -> None:
    """`mic=1`: the host page says `start` with a language, the widget captions the microphone (Chromium playing
    recorded speech) into the room and reports state and captions; `stop` ends it."""
    page_info: dict[str, str] = {}

    async def host_page(request: web.Request) -> web.Response:
        return web.Response(
            content_type="text/html",
            text=(
                f'<!doctype html><body><script src="{page_info["server"]}/embed.js" data-room="{page_info["room"]}" '
                f'data-mic="1" data-theme="dark"></script><script>window.received = [];'
                f'window.addEventListener("message", (e) => {{ if (e.origin === "{page_info["server"]}") '
                f"window.received.push(e.data); }});</script></body>"
            ),
        )

    host = web.Application()
    host.router.add_get("/", host_page)
    async with serving(host) as host_url:
        async with running_server(engine, embed_origins=(host_url,)) as (url, _):
            page_info.update(server=url, room=await new_room(url))
            page = await browser.new_page()
            await page.goto(host_url)
            await page.wait_for_function("window.received.some((m) => m.type === 'ready')", timeout=20_000)
            ready = next(m for m in await page.evaluate("window.received") if m["type"] == "ready")
            assert ready["mode"] == "microphone" and ready["room"] == page_info["room"]
            assert await page.get_attribute("iframe", "allow") == "microphone"
            await page.evaluate(
                f"document.querySelector('iframe').contentWindow.postMessage("
                f"{{source: 'live-captions', type: 'start', language: 'en'}}, '{url}')"
            )
            await page.wait_for_function(
                "window.received.some((m) => m.type === 'state' && m.state === 'live')", timeout=30_000
            )
            await page.wait_for_function(
                "window.received.some((m) => m.type === 'caption' && m.sentences.length)", timeout=60_000
            )
            await page.evaluate(
                f"document.querySelector('iframe').contentWindow.postMessage("
                f"{{source: 'live-captions', type: 'stop'}}, '{url}')"
            )
            await page.wait_for_function(
                "window.received.some((m) => m.type === 'state' && m.state === 'idle')", timeout=30_000
            )
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{url}/rooms/{page_info['room']}/transcript.json") as r,
            ):
                stored = [s["text"] for s in (await r.json())["sentences"]]
            shown = [
                s["text"]
                for m in await page.evaluate("window.received")
                if m["type"] == "caption"
                for s in m["sentences"]
            ]
            assert stored and shown == stored


LINE_BOXES = """flow => {
    const range = document.createRange();
    range.selectNodeContents(flow);
    const tops = [...range.getClientRects()].filter(r => r.width > 0).map(r => r.top).sort((a, b) => a - b);
    const boxes = tops.filter((top, i) => i === 0 || top - tops[i - 1] > 4).length;  // spans on one line share it
    return {lines: flow.innerText.split("\\n").map(l => l.trim()).filter(Boolean), boxes};
}"""


async def test_kiosk_and_widget_break_their_lines_as_subtitles_do(
    fake_engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    """Long sentences on a wide kiosk and in a narrow widget: every line at most 42 characters (and the width),
    the browser wraps nothing by itself, and no line ends with an article or a preposition."""
    long = [
        (
            0,
            "As you know, and as I have given you proof, I have the greatest admiration for the work of "
            "the committee and for all of the people who made this evening possible.",
        ),
        (
            1,
            "Thank you. I hope that we shall both remember the rest of the story in the morning, when the "
            "fog over the river has lifted and the boats come back to the harbour.",
        ),
    ]
    async with running_server(fake_engine) as (url, app):
        room_id = await new_room(url)
        kiosk = await open_page(browser, f"{url}/kiosk?room={room_id}&lines=4&qr=0")
        widget = await open_page(browser, f"{url}/embed?room={room_id}&font=18&lines=3&speakers=1", 360, 200)
        await kiosk.wait_for_selector(".status[data-state=waiting]", timeout=20_000)
        await seed_room(app, room_id, long, start_ms=1000, ms_per_word=300, gap_ms=500)
        for page in (kiosk, widget):
            await wait_shown(page, len(long))
            assert await shown_sentences(page) == [text for _, text in long]
            got = await page.locator(".flow").evaluate(LINE_BOXES)
            lines = got["lines"]
            assert len(lines) >= 4 and all(len(line) <= 42 for line in lines), lines
            assert got["boxes"] == len(lines), f"the browser wrapped a line itself: {got}"
            assert not any(line.split()[-1].lower() in ("a", "an", "the", "of", "to", "for") for line in lines), lines
        await kiosk.screenshot(path=str(shots / "kiosk-lines.png"))
        await widget.screenshot(path=str(shots / "widget-lines.png"))
