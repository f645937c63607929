/**
 * The embeddable caption widget (`/embed?...`, usually inserted by the one-line snippet `/embed.js`).
 *
 * URL parameters: the display ones of js/display-options.js (defaults: theme=transparent, font=20, lines=2,
 * position=bottom, speakers=0), and
 *   room=<id>       show this room's captions (viewer; no microphone, no model work)
 *   token=<t>       the room's viewer token (private rooms)
 *   mic=1           caption this browser's microphone (needs `allow="microphone"` on the iframe); with a room
 *                   the captions are published into it
 *   key=<t>         the server's auth token, for mic=1 when the server requires one
 *   lang=<code>     with mic=1, the language spoken into the microphone; as a viewer, one of the room's languages
 *                   to show its captions in (docs/protocol.md "Rooms in other languages"; the page's `lang` follows,
 *                   and the open text stays the speaker's words until translated, quieter: `.partial.foreign`)
 *   autostart=0|1   start at once (default 1 for a viewer, 0 with mic=1: the host sends `start`)
 *
 * postMessage API (both directions: objects with `source: "live-captions"`; the widget only talks to its
 * parent window, only if the parent's origin is allowed to embed it (--embed-origin), and posts with that exact
 * target origin; it ignores messages from any other window or origin):
 *   host → widget   {type: "start", language?}   {type: "stop"}   {type: "set-language", language}
 *   widget → host   {type: "ready", version: 1, mode: "viewer" | "microphone", room}
 *                   {type: "state", state, detail}
 *                   {type: "caption", seq, sentences: [{id, text, start, end, spk, session}], partial, stable,
 *                    partialSpk, open: [{session, text, stable, spk}] | null}
 *                   {type: "speakers", relabel: {id: spk}}
 *                   {type: "correction", seq, sentences: [{id, text, start, end, spk, session}], deleted: [ids],
 *                    names: {spk: name}}   a room's editor corrected sentences (replace by id; an id not seen
 *                    before is a new sentence from a split, in order of start), deleted some, or named speakers
 *                   {type: "error", code, message}
 * `caption` carries only newly locked sentences plus the whole current partial text (as on the data channel);
 * `stable` is how many leading words of `partial` (split on white space) are settled: they lock exactly as shown and
 * never change, only the words after them may (0 when none is). The widget shows the settled words like locked
 * text and the rest quieter (`[data-stable]` and `[data-tentative]` inside `[data-partial]`, js/caption-lines.js).
 * `open` (a room's, else null) is the same open text one line per speaking publisher, in the order they started
 * (`spk` null when not known); the widget shows each publisher after the first on a line of its own.
 */

import { CaptionLines } from "./js/caption-lines.js";
import { CaptionController, State } from "./js/controller.js";
import { applyOptions, readOptions } from "./js/display-options.js";
import { requested, roomLanguages, setPageLanguage } from "./js/languages.js";
import { FeedState, RoomFeed } from "./js/room-feed.js";

const SOURCE = "live-captions";
const query = new URLSearchParams(location.search);
const options = readOptions(location.search, {
  theme: "transparent", font: 20, lines: 2, position: "bottom", speakers: false,
});
applyOptions(options);

const room = query.get("room") ?? "";
const micMode = query.get("mic") === "1";
let language = query.get("lang") ?? "";
const parentOrigin = allowedParentOrigin(JSON.parse(document.body.dataset.embedOrigins || "[]"));

// A viewer's `lang` is the room language it shows; a microphone's is the language spoken into it (the room's
// captions then show in the language spoken).
const shownLanguage = micMode ? "" : requested(language, 1)[0] ?? "";
const feed = room ? new RoomFeed({ room, token: query.get("token") ?? "", keep: 100, lang: shownLanguage }) : null;
const mic = micMode ? microphone() : null;
// What is shown: the room when there is one (also in microphone mode: one path, survives reconnects), else the
// microphone session's own captions.
const shown = feed ?? mic;
const lines = new CaptionLines(document.getElementById("captions"), { speakers: options.speakers, keep: 60 });

if (feed) {
  // The page reads in the language shown: a room language asked for, else the one spoken in the room.
  if (shownLanguage) setPageLanguage(shownLanguage);
  roomLanguages(feed).then(({ spoken }) => {
    if (!shownLanguage) setPageLanguage(spoken);
    else lines.setOpenLanguage(spoken === shownLanguage ? "" : spoken);
  });
}
if (shown) {
  shown.addEventListener("sentence", ({ detail }) => lines.add(detail));
  shown.addEventListener("caption", ({ detail }) => {
    const stable = detail.stable ?? 0;
    const open = detail.open ?? null;
    lines.setPartial(detail.partial, detail.partialSpk ?? null, detail.partialSession ?? null, stable, open);
    post({ type: "caption", seq: detail.seq ?? null, sentences: detail.sentences, partial: detail.partial, stable,
           partialSpk: detail.partialSpk ?? null, open });
  });
  shown.addEventListener("speakers", ({ detail }) => {
    const { partial, stable } = shown.transcript();
    lines.render(shown.sentences, partial, shown.partialSpk ?? null, shown.partialSession ?? null, stable,
                 shown.open ?? null);
    post({ type: "speakers", relabel: Object.fromEntries(detail.changed.map((r) => [r.id, r.spk])) });
  });
  // An editor's fix replaces the sentence where it stands (marked for a moment); named speakers show by name.
  shown.addEventListener("correction", ({ detail }) => {
    if (Object.keys(detail.names).length) lines.setNames(shown.names);
    lines.correct(detail, shown.sentences);
    post({ type: "correction", seq: detail.seq ?? null, sentences: detail.changed.map(copy), deleted: detail.deleted,
           names: detail.names });
  });
}
for (const source of [feed, mic]) {
  source?.addEventListener("state", () => showState());
}
mic?.addEventListener("error", ({ detail }) => post({ type: "error", code: detail.code, message: detail.message }));

window.addEventListener("message", (event) => {
  if (event.source !== window.parent || event.origin !== parentOrigin) return;
  const message = event.data;
  if (!message || typeof message !== "object" || message.source !== SOURCE) return;
  control(message);
});

function microphone() {
  const token = query.get("key");
  return new CaptionController({
    offerFields: { ...(room ? { room } : {}), ...(token ? { token } : {}) },
    defaults: () => ({ language, hotwords: [], processing: false }),
  });
}

async function control(message) {
  switch (message.type) {
    case "start":
      if (typeof message.language === "string" || message.language === null) language = message.language ?? "";
      if (mic) mic.start({ language }).catch(() => {}); // failures arrive as `state` and `error` messages
      else feed?.start();
      return;
    case "stop":
      if (mic) await mic.stop();
      else feed?.stop();
      return;
    case "set-language":
      if (!mic) return post({ type: "error", code: "unsupported", message: "a viewer shows the room's language" });
      if (typeof message.language !== "string" && message.language !== null) {
        return post({ type: "error", code: "bad_message", message: "language must be a code or null" });
      }
      language = message.language ?? "";
      // The language is fixed per session: a running microphone restarts with the new one.
      if (mic.running) {
        await mic.stop();
        mic.start({ language }).catch(() => {});
      }
      return;
    default:
      post({ type: "error", code: "bad_message", message: `unknown message type ${String(message.type)}` });
  }
}

function showState() {
  const source = mic ?? feed;
  const state = source ? source.state : FeedState.ERROR;
  const detail = source ? source.detail : "No room given: add room=<id> (or mic=1) to the widget's address.";
  const badge = document.getElementById("state");
  const quiet = [FeedState.LIVE, FeedState.WAITING, State.IDLE, FeedState.STOPPED].includes(state);
  badge.hidden = quiet;
  const says = state === FeedState.ERROR || state === State.FULL;  // what happened, and that it retries by itself
  badge.textContent = says ? detail || "Error" : `${state[0].toUpperCase()}${state.slice(1)}…`;
  document.body.dataset.state = state;
  post({ type: "state", state, detail });
}

/** The parent's origin if this page is framed by an allowed origin; null otherwise (then nothing is posted). */
function allowedParentOrigin(allowed) {
  if (window.parent === window) return null;
  const origin = location.ancestorOrigins?.[0] ?? originOf(document.referrer);
  if (!origin) return null;
  if (origin === location.origin || allowed.includes("*") || allowed.includes(origin)) return origin;
  console.warn(`live captions: ${origin} is not an allowed host (--embed-origin); postMessage is off`);
  return null;
}

function originOf(url) {
  try {
    return new URL(url).origin;
  } catch {
    return null;
  }
}

/** A sentence as the host gets it (the fields of docs/protocol.md, nothing the page keeps besides). */
function copy({ id, text, start, end, spk, session }) {
  return { id, text, start, end, spk, session };
}

function post(message) {
  if (parentOrigin) window.parent.postMessage({ source: SOURCE, ...message }, parentOrigin);
}

window.liveCaptions = shown;
post({ type: "ready", version: 1, mode: mic ? "microphone" : "viewer", room });
showState();
const autostart = query.has("autostart") ? query.get("autostart") === "1" : !mic;
if (autostart) control({ type: "start" });
if (mic && !autostart) mic.watchReadiness();
if (mic && feed) feed.start(); // the room's text shows whether or not this microphone is on
