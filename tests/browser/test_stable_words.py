"""Stable words on every screen that shows open text, in real Chromium: the settled words of a partial (the caption's
``stable`` count) look like locked text, only the tentative tail after them is quieter, and a settled word never
changes on screen: the settled text only ever grows by whole words until its sentence locks (and the sentence then
begins with it), and an update that changes only the tail does not touch it at all.

The captions are a scripted sequence (growing ``stable`` counts, a changing tail, locks), fed to the microphone page
through its test hook (``window.liveCaptions.receive``, the data channel's path) and to the room screens (kiosk, phone
viewer, widget) as the room's event stream; a MutationObserver in the page records every state of the DOM. No model
and no recognizer are involved: the server only serves the pages (and the room, whose events are scripted here).

Screenshots go to ``$LIVE_CAPTIONS_SCREENSHOTS`` (a folder) when set, else to the test's temporary folder.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from playwright.async_api import Browser, Frame, Page, Route

from engine.stream.engine import CaptionEngine
from tests.support.browser import chromium, write_wav
from tests.support.servers import running_server

pytestmark = pytest.mark.e2e

# (newly locked sentences, partial, stable): a fox sentence that settles word by word while its tail is rewritten,
# tail-only updates (stable unchanged), a segment that settles completely while the next one begins, two locks.
SCRIPT: list[tuple[list[str], str, int]] = [
    ([], "the quick", 0),
    ([], "the quick brown fax", 1),
    ([], "the quick brown fox jumps", 3),
    ([], "the quick brown fox jumped over", 4),
    ([], "the quick brown fox jumped over a", 4),  # only the tail changes
    ([], "the quick brown fox jumped over the lazy", 6),
    ([], "the quick brown fox jumped over the lazy dog while the farmer", 8),
    ([], "the quick brown fox jumped over the lazy dog while the farmer slept", 8),  # only the tail changes
    (["the quick brown fox jumped over the lazy dog while the farmer slept."], "", 0),
    ([], "And then", 0),
    ([], "And then it", 2),
    ([], "And then it rained", 2),  # only the tail changes
    ([], "And then it rained on the roof.", 7),  # every word settled: no tail
    ([], "And then it rained on the roof. Later that", 7),
    (["And then it rained on the roof."], "Later that day we", 2),  # locks while the next text has settled words
]
LOCKED = [s for sentences, _, _ in SCRIPT for s in sentences]

# Installed in the page (or the widget's frame): every DOM change batch records what the open text shows.
OBSERVE = """() => {
    window.__states = [];
    window.__stableElements = new Set();
    const text = (selector) => document.querySelector(selector)?.textContent ?? null;
    new MutationObserver((records) => {
        const stable = document.querySelector("[data-stable]");
        if (stable) window.__stableElements.add(stable);
        window.__states.push({
            partial: text("[data-partial]"),
            stable: stable ? stable.textContent : null,
            tentative: text("[data-tentative]"),
            sentences: [...document.querySelectorAll("[data-sentence-id]")]
                .map((e) => e.textContent.replace(/\\s+/g, " ").trim()),
            touched: Boolean(stable) && records.some((r) => r.target === stable || stable.contains(r.target)),
        });
    }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""

STYLES = """async () => {
    const arriving = [...document.querySelectorAll("[data-sentence-id]")].flatMap((e) => e.getAnimations());
    await Promise.all(arriving.map((a) => a.finished));  // a new sentence fades in
    const look = (selector) => {
        const style = getComputedStyle(document.querySelector(selector));
        return {color: style.color, weight: style.fontWeight, italic: style.fontStyle === "italic",
                opacity: style.opacity};
    };
    return {sentence: look("[data-sentence-id]"), stable: look("[data-stable]"),
            tentative: look("[data-tentative]")};
}"""


def caption(seq: int, sentences: list[dict[str, Any]], partial: str, stable: int) -> dict[str, Any]:
    """A caption message as the server sends it (``stable`` left out when 0, as the server leaves it out)."""
    message: dict[str, Any] = {
        "type": "caption",
        "seq": seq,
        "sentences": sentences,
        "partial": partial,
        "is_final": False,
    }
    if stable:
        message["stable"] = stable
        message["stable_words"] = [{"w": w, "start_ms": 0, "end_ms": 0} for w in partial.split()[:stable]]
    return message


def scripted(room: str | None = None) -> list[dict[str, Any]]:
    """The script as server messages: the data channel's (``room`` None) or a room's event stream's. A `words` message
    and a message type no page knows come along: every screen must ignore what it does not use."""
    out: list[dict[str, Any]] = []
    sentence_id = 0
    t = 1000
    for sentences, partial, stable in SCRIPT:
        locked = []
        for text in sentences:
            record: dict[str, Any] = {
                "id": sentence_id,
                "text": text,
                "start": t,
                "end": t + 300 * len(text.split()),
                "spk": None,
            }
            if room is not None:
                record["session"] = "publisher-1"
            locked.append(record)
            sentence_id += 1
            t = record["end"] + 500
        out.append(caption(0, locked, partial, stable))
        if locked:
            words = [
                {"w": w, "start_ms": locked[0]["start"] + 300 * i, "end_ms": locked[0]["start"] + 300 * i + 250}
                for i, w in enumerate(locked[0]["text"].split())
            ]
            out.append({"type": "words", "seq": 0, "id": locked[0]["id"], "words": words})
    out.insert(10, {"type": "a-type-from-a-newer-server", "seq": 0, "anything": [1, 2]})
    for seq, message in enumerate(out, start=1):
        message["seq"] = seq
    return out


def expected_states() -> list[tuple[str, str | None]]:
    """(partial, settled text) after each caption, consecutive repeats dropped; settled None while there is none."""
    out: list[tuple[str, str | None]] = []
    for _, partial, stable in SCRIPT:
        state = (partial, " ".join(partial.split()[:stable]) if partial else None)
        if not out or out[-1] != state:
            out.append(state)
    return out


def check_states(states: list[dict[str, Any]], elements: int) -> None:
    """What every recorded state must satisfy, and the order of states the script must have produced."""
    assert elements == 1, f"the settled span was re-created ({elements} different elements)"
    seen: list[tuple[str, str | None]] = []
    last_settled = ""  # the settled text of the open text so far ("" after a lock)
    locked_then: list[str] = []  # the sentences shown when last_settled was last seen
    for i, state in enumerate(states):
        partial, stable, tentative = state["partial"] or "", state["stable"], state["tentative"]
        if not partial:
            assert stable is None and not tentative, f"state {i}: settled or tentative text without a partial: {state}"
        else:
            assert stable is not None and tentative is not None, f"state {i}: no settled/tentative spans: {state}"
            assert partial.startswith(stable) and partial[len(stable) :].lstrip() == tentative, (
                f"state {i}: [data-partial] is not [data-stable] + [data-tentative]: {state}"
            )
            assert stable == stable.strip() and tentative == tentative.strip(), f"state {i}: loose space: {state}"
            before, now = last_settled.split(), stable.split()
            if now == before:
                assert not state["touched"], (
                    f"state {i}: the settled text was rewritten while only the tail changed: {state}"
                )
            elif now[: len(before)] != before:
                # A settled word left the open text: only by locking, and the sentence begins with it exactly.
                added = " ".join(state["sentences"][len(locked_then) :]).split()
                assert added[: len(before)] == before, (
                    f"state {i}: settled words {before} changed to {now} without locking as shown: {state}"
                )
            last_settled, locked_then = stable, state["sentences"]
        key = (partial, stable if partial else None)
        if not seen or seen[-1] != key:
            seen.append(key)
    got = [s for s in seen if s != ("", None)]
    want = [s for s in expected_states() if s != ("", None)]
    assert got == want, "the screen did not show each caption of the script in turn"
    assert states[-1]["sentences"] == LOCKED


def check_looks(styles: dict[str, dict[str, Any]]) -> None:
    """Settled words look like locked text; the tentative tail does not (another colour, or fainter)."""
    sentence, stable, tentative = styles["sentence"], styles["stable"], styles["tentative"]
    assert (stable["color"], stable["weight"], stable["italic"], stable["opacity"]) == (
        sentence["color"],
        sentence["weight"],
        sentence["italic"],
        sentence["opacity"],
    ), styles
    assert tentative["color"] != sentence["color"] or float(tentative["opacity"]) < 1.0, styles


def sse(messages: list[dict[str, Any]], room: str) -> str:
    """A room's event stream (app/rooms/routes.py's format) carrying ``messages``; the browser waits long before it
    reconnects once the body ends."""
    status = {"type": "room", "seq": 0, "room": room, "live": True, "publishers": 1, "viewers": 1, "saving": True}
    events = ["retry: 600000\n\n", f"data: {json.dumps(status)}\n\n"]
    events += [f"id: {m['seq']}\ndata: {json.dumps(m)}\n\n" for m in messages]
    return "".join(events)


@pytest.fixture(scope="module")
async def chromium_silent(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Browser]:
    """One Chromium for the module (no test here uses the microphone)."""
    silence = write_wav(tmp_path_factory.mktemp("mic") / "silence.wav", np.zeros(16_000, np.float32))
    async with chromium(silence) as browser:
        yield browser


@pytest.fixture
async def browser(chromium_silent: Browser) -> AsyncIterator[Browser]:
    """The module's Chromium; every page a test opened (each in a context of its own) closes after it."""
    yield chromium_silent
    for context in chromium_silent.contexts:
        await context.close()


async def test_microphone_page_shows_settled_words_as_locked_and_only_the_tail_tentative(
    fake_engine: CaptionEngine, browser: Browser, shots: Path
) -> None:
    messages = scripted()
    async with running_server(fake_engine) as (url, _):
        page = await browser.new_page(viewport={"width": 900, "height": 640})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(url)
        await page.wait_for_function("window.liveCaptions && window.liveCaptions.state === 'idle'")
        await page.evaluate(OBSERVE)
        await page.evaluate(
            "window.__events = []; window.liveCaptions.addEventListener('caption', "
            "(e) => window.__events.push([e.detail.partial, e.detail.stable]))"
        )
        for message in messages:
            await page.evaluate("(m) => window.liveCaptions.receive(m)", message)
        check_states(await page.evaluate("window.__states"), await page.evaluate("window.__stableElements.size"))
        events = await page.evaluate("window.__events")
        assert [tuple(e) for e in events] == [(p, s) for _, p, s in SCRIPT]
        transcript = await page.evaluate("window.liveCaptions.transcript()")
        assert (transcript["partial"], transcript["stable"]) == (SCRIPT[-1][1], SCRIPT[-1][2])
        # The `words` message replaced the first sentence's word times (the downloads cut cues at them).
        first = transcript["sentences"][0]
        assert [w["w"] for w in first["words"]] == LOCKED[0].split()
        assert first["words"][1]["start_ms"] == first["start"] + 300
        check_looks(await page.evaluate(STYLES))
        await page.screenshot(path=str(shots / "stable-words.png"))
        assert not errors, errors


ROOM_SCREENS = {
    "kiosk": "/kiosk?room={room}&qr=0&lines=4",
    "view": "/view?room={room}",
    "embed": "/embed?room={room}&theme=dark&font=20&lines=3",
}


@pytest.mark.parametrize("screen", list(ROOM_SCREENS))
async def test_room_screens_show_settled_words_as_locked_and_only_the_tail_tentative(
    fake_engine: CaptionEngine, browser: Browser, shots: Path, screen: str
) -> None:
    async with running_server(fake_engine) as (url, _):
        async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json={"title": "Stable"}) as r:
            room = (await r.json())["room"]
        messages = scripted(room)
        body = sse(messages, room)
        page = await browser.new_page(viewport={"width": 1280, "height": 720})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        released = asyncio.Event()

        async def events(route: Route) -> None:
            # The room's stream, scripted: held until the observer is in place, then the whole script at once.
            await released.wait()
            await route.fulfill(
                status=200, body=body, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
            )

        await page.route(f"**/rooms/{room}/events**", events)
        target = url + ROOM_SCREENS[screen].format(room=room)
        frame: Page | Frame = page
        if screen == "embed":
            # Framed by a page of the server's own origin (allowed to embed it), which collects its postMessages.
            await page.goto(f"{url}/health")
            await page.set_content(
                '<body style="margin:0;background:#2b3a55"><iframe style="border:0;width:720px;height:160px" '
                f'src="{target}"></iframe><script>window.received = []; window.addEventListener("message", '
                '(e) => e.data?.source === "live-captions" && window.received.push(e.data));</script></body>'
            )
            element = await page.wait_for_selector("iframe")
            assert element is not None
            content = await element.content_frame()
            assert content is not None
            frame = content
        else:
            await page.goto(target)
        await frame.wait_for_function("window.liveCaptions !== undefined")
        await frame.evaluate(OBSERVE)
        released.set()
        await frame.wait_for_function(f"window.liveCaptions.messages.length >= {len(messages) + 1}", timeout=20_000)
        check_states(await frame.evaluate("window.__states"), await frame.evaluate("window.__stableElements.size"))
        assert await frame.evaluate("document.querySelectorAll('[data-partial]').length") == 1
        transcript = await frame.evaluate("window.liveCaptions.transcript()")
        assert (transcript["partial"], transcript["stable"]) == (SCRIPT[-1][1], SCRIPT[-1][2])
        check_looks(await frame.evaluate(STYLES))
        if screen == "embed":
            posted = [m for m in await page.evaluate("window.received") if m["type"] == "caption"]
            assert [(m["partial"], m["stable"]) for m in posted] == [(p, s) for _, p, s in SCRIPT]
        await page.screenshot(path=str(shots / f"stable-words-{screen}.png"))
        assert not errors, errors


# Two publishers speaking at once (the room caption's `open`): a starts, b starts while a goes on, both grow, then
# a's sentence locks while b goes on. (session, text, stable, spk) per line.
OPEN_SCRIPT: list[tuple[list[str], list[tuple[str, str, int, int]]]] = [
    ([], [("pub-a", "so the plan", 1, 0)]),
    ([], [("pub-a", "so the plan is", 2, 0), ("pub-b", "wait", 0, 1)]),
    ([], [("pub-a", "so the plan is to ship", 4, 0), ("pub-b", "wait what about", 1, 1)]),
    (["So the plan is to ship."], [("pub-b", "wait what about the", 3, 1)]),
]
OPEN_SCREENS = {
    "kiosk": "/kiosk?room={room}&qr=0&lines=4",
    "view": "/view?room={room}",
    "embed": "/embed?room={room}&theme=dark&font=20&lines=3&speakers=1",
}

# Every DOM change batch records the open lines shown, in order: their session (the first line, `[data-partial]`,
# has none), text without a leading speaker name, the name shown with it, and where the line starts on screen.
OBSERVE_OPEN = """() => {
    window.__open = [];
    const name = /^Speaker \\d+:? /;
    const read = () => [...document.querySelectorAll("[data-partial], [data-open-line]")]
        .filter((el) => el.textContent.trim())
        .map((el) => {
            const text = el.textContent.replace(/\\s+/g, " ").trim();
            const who = el.querySelector(".who") ?? (el.previousElementSibling?.matches("[data-partial-who]")
                ? el.previousElementSibling : null);
            return {session: el.dataset.session ?? null, text: text.replace(name, ""),
                    who: who ? who.textContent.replace(/:$/, "") : null,
                    top: Math.round((who ?? el).getClientRects()[0]?.top ?? -1)};
        });
    new MutationObserver(() => window.__open.push(read()))
        .observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def open_messages(room: str) -> list[dict[str, Any]]:
    """OPEN_SCRIPT as the room's event stream: `open` with the joined `partial` beside it, as the server sends."""
    out: list[dict[str, Any]] = []
    for seq, (locked, lines) in enumerate(OPEN_SCRIPT, start=1):
        sentences = [
            {"id": i, "text": text, "start": 1000, "end": 2500, "spk": 0, "session": "pub-a"}
            for i, text in enumerate(locked)
        ]
        out.append(
            {
                "type": "caption",
                "seq": seq,
                "sentences": sentences,
                "is_final": False,
                "partial": " ".join(text for _, text, _, _ in lines),
                "stable": lines[0][2],
                "open": [{"session": s, "text": t, "stable": n, "spk": spk} for s, t, n, spk in lines],
            }
        )
    return out


@pytest.mark.parametrize("screen", list(OPEN_SCREENS))
async def test_room_screens_show_each_speaking_publisher_on_a_line_of_its_own(
    fake_engine: CaptionEngine, browser: Browser, shots: Path, screen: str
) -> None:
    async with running_server(fake_engine) as (url, _):
        async with aiohttp.ClientSession() as http, http.post(f"{url}/rooms", json={"title": "Two"}) as r:
            room = (await r.json())["room"]
        messages = open_messages(room)
        page = await browser.new_page(viewport={"width": 1280, "height": 720})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        released = asyncio.Event()

        async def events(route: Route) -> None:
            await released.wait()
            await route.fulfill(
                status=200,
                body=sse(messages, room),
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
            )

        await page.route(f"**/rooms/{room}/events**", events)
        await page.goto(url + OPEN_SCREENS[screen].format(room=room))
        await page.wait_for_function("window.liveCaptions !== undefined")
        await page.evaluate(OBSERVE_OPEN)
        released.set()
        await page.wait_for_function(f"window.liveCaptions.messages.length >= {len(messages) + 1}", timeout=20_000)
        states = [
            [(line["session"], line["text"], line["who"]) for line in state]
            for state in await page.evaluate("window.__open")
        ]
        # Both talking: a first (it started first), b on its own line under a's, named by its voice; never the two
        # texts run together into one line.
        both = [(None, "so the plan is to ship", "Speaker 1"), ("pub-b", "wait what about", "Speaker 2")]
        assert both in states, states
        assert not any(line[1].startswith("so the plan is wait") for state in states for line in state), states
        two = next(s for s in await page.evaluate("window.__open") if len(s) == 2 and s[1]["text"] == both[1][1])
        assert two[1]["top"] > two[0]["top"], f"b's line is not under a's: {two}"
        # a's sentence locked: its line goes, b's open text is the one open line (named: a spoke last).
        assert states[-1] == [(None, "wait what about the", "Speaker 2")], states[-1]
        assert await page.locator("[data-open-line]").count() == 0
        assert [" ".join(t.split()) for t in await page.locator("[data-sentence-id]").all_inner_texts()] == [
            "So the plan is to ship."
        ]
        await page.screenshot(path=str(shots / f"open-lines-{screen}.png"))
        assert not errors, errors
