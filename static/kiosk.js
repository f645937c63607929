/**
 * Meeting-room kiosk: `/kiosk?room=<id>` shows the room's captions full-screen and needs no keyboard or mouse.
 * It starts by itself, shows its connection state in plain words, reconnects by itself (the room's text is kept
 * and the server replays what was missed), and shows a QR code: by default it opens the room's join page, where a
 * person at the table joins with a name and their phone's microphone (their lines then carry their name here).
 *
 * URL parameters (display ones in js/display-options.js; defaults here: dark theme, 3 lines at the bottom,
 * speaker names on, font about 1/14 of the screen height):
 *   room=<id>      the room (required)         token=<viewer token>   for a private room
 *   mic=1          also be the room's microphone (captions this device's microphone into the room)
 *   key=<token>    the server's auth token, needed with mic=1 when the server has one
 *   lang=<code>    the room language to show (one the room is translated into, docs/protocol.md "Rooms in other
 *                  languages"), or two side by side, `lang=en,es`, one row per sentence (js/bilingual-lines.js);
 *                  a language the room lacks is left out. The open text stays the speaker's words until its
 *                  sentence is translated, quieter (`.partial.foreign`). With mic=1 and one language, also the
 *                  language spoken into the microphone unless mic-lang says it
 *   mic-lang=<code>  language of the microphone session (default: lang, else the server's)
 *   mic-task=translate  English captions of the microphone's speech (Whisper's translate task; a room spoken in
 *                  English), the words said kept as the room's version in their language
 *   qr=view        the QR code opens the read-only phone viewer instead (an audience that only reads)
 *   qr=0           hide the QR code
 *
 * Test hook: `window.liveCaptions` is the RoomFeed (state, detail, transcript(), messages, events; of the first
 * column when there are two: `window.liveCaptions.columns` has both); `window.liveCaptions.mic` is the
 * microphone's CaptionController with mic=1, else null. Until the room's languages are known, it is undefined.
 * DOM: `.status[data-state]`, `[data-sentence-id][data-spk]`, `[data-partial]` (inside it `[data-stable]`: the
 * settled words, shown like locked text; `[data-tentative]`: the rest, quieter; see js/caption-lines.js); while
 * several publishers speak, each one after the first has its own `[data-open-line][data-session]` after it. A
 * sentence an editor just corrected has the class `corrected` for two seconds.
 */

import { BilingualLines } from "./js/bilingual-lines.js";
import { CaptionLines } from "./js/caption-lines.js";
import { CaptionController, State } from "./js/controller.js";
import { applyOptions, readOptions } from "./js/display-options.js";
import { matching, requested, roomLanguages, setPageLanguage } from "./js/languages.js";
import { FeedState, RoomFeed } from "./js/room-feed.js";

const MIC_RETRY_MS = 10000;
const query = new URLSearchParams(location.search);
const options = readOptions(location.search, {
  theme: "dark", font: null, lines: 3, position: "bottom", speakers: true,
});
if (options.theme === "transparent") options.theme = "dark";
applyOptions(options);
if (options.font === null) document.documentElement.style.removeProperty("--font");

const $ = (id) => document.getElementById(id);
const room = query.get("room") ?? "";
const token = query.get("token") ?? "";
const asked = requested(query.get("lang"), 2);
const mic = query.get("mic") === "1" ? microphone() : null;
let feed = new RoomFeed({ room, token, keep: 200 }); // replaced once the room's languages are known

/** One language: the room's text flowing as broadcast captions, in `lang` ("" = the spoken one). */
function single(lang, spoken) {
  const lines = new CaptionLines($("captions"), { speakers: options.speakers });
  const shown = new RoomFeed({ room, token, keep: 200, lang });
  lines.setOpenLanguage(lang ? spoken : "");
  shown.addEventListener("sentence", ({ detail }) => lines.add(detail));
  shown.addEventListener("caption", ({ detail }) => lines.setPartial(detail.partial, detail.partialSpk,
                                                                    detail.partialSession, detail.stable,
                                                                    detail.open));
  shown.addEventListener("speakers", () => lines.render(shown.sentences, shown.partial, shown.partialSpk,
                                                       shown.partialSession, shown.stable, shown.open));
  // An editor's fix replaces the sentence where it stands (marked for a moment); named speakers show by name.
  shown.addEventListener("correction", ({ detail }) => {
    if (Object.keys(detail.names).length) lines.setNames(shown.names);
    lines.correct(detail, shown.sentences);
  });
  return [shown];
}

/** Two languages side by side (`codes`, each the spoken one or a room language), one row per sentence. */
function bilingual(codes, spoken) {
  document.documentElement.dataset.columns = "2";
  const rows = new BilingualLines($("captions"), { languages: codes, speakers: options.speakers });
  const feeds = codes.map((code) => new RoomFeed({ room, token, keep: 200, lang: code === spoken ? "" : code }));
  feeds.forEach((shown, column) => {
    shown.addEventListener("sentence", ({ detail }) => rows.add(column, detail));
    shown.addEventListener("correction", ({ detail }) => {
      if (column === 0 && Object.keys(detail.names).length) rows.setNames(shown.names);
      rows.correct(column, detail);
    });
  });
  feeds[0].addEventListener("caption", ({ detail }) => rows.setPartial(detail.partial,
                                                                       codes[0] === spoken ? "" : spoken));
  feeds[0].addEventListener("speakers", ({ detail }) => rows.relabel(detail.changed));
  return feeds;
}

roomLanguages(feed).then(({ spoken, languages }) => {
  // Each asked language as the room spells it ("es-mx" asked of a room in "es-MX" or "es"); one it lacks is left out.
  const codes = asked.map((code) => matching(code, [spoken, ...languages])).filter(Boolean);
  const feeds = codes.length === 2 ? bilingual(codes, spoken) : single(codes[0] === spoken ? "" : codes[0] ?? "", spoken);
  setPageLanguage(codes[0] ?? spoken);
  feed = feeds[0];
  feed.columns = feeds;
  feed.mic = mic;
  feed.addEventListener("state", showStatus);
  window.liveCaptions = feed;
  showStatus();
  for (const shown of feeds) shown.start();
});
mic?.addEventListener("state", showStatus);

const QR = {
  join: { alt: "QR code that opens the page to join this meeting from a phone", caption: "Scan to join with your phone" },
  view: { alt: "QR code that opens these captions on a phone", caption: "Captions on your phone" },
};
if (query.get("qr") !== "0" && feed.room) {
  const target = query.get("qr") === "view" ? "view" : "join";
  const src = new URL(feed.url("/qr.svg"), location.href);
  src.searchParams.set("page", target);
  $("qr").alt = QR[target].alt;
  $("qr-caption").textContent = QR[target].caption;
  $("qr").src = src.pathname + src.search;
  $("qr").addEventListener("load", () => ($("qr-box").hidden = false));
}

function microphone() {
  const token = query.get("key");
  const controller = new CaptionController({
    offerFields: { room: query.get("room") ?? "", ...(token ? { token } : {}) },
    // No language named: the server decodes the room's own (a `lang=` here is what the screen shows, not what is
    // spoken into it).
    defaults: () => ({ language: query.get("mic-lang") ?? "", hotwords: [], processing: false,
      task: query.get("mic-task") === "translate" ? "translate" : "transcribe" }),
  });
  // The controller reconnects by itself after a drop; a run that ends in error (no microphone, refused
  // token, server down at start) is tried again a little later, for ever: nobody is there to press Start.
  let timer = 0;
  const run = () => {
    timer = 0;
    controller.start().catch(() => {}); // failures arrive as the `error` state below
  };
  controller.addEventListener("state", ({ detail }) => {
    if (detail.state === State.ERROR && !timer) timer = setTimeout(run, MIC_RETRY_MS);
  });
  run();
  return controller;
}

const FEED_TEXT = {
  [FeedState.CONNECTING]: "Connecting…",
  [FeedState.LIVE]: "Live",
  [FeedState.WAITING]: "Connected · waiting for a speaker",
  [FeedState.RECONNECTING]: "Connection lost · reconnecting…",
  [FeedState.STOPPED]: "Stopped",
  [FeedState.ERROR]: "Error",
};

function showStatus() {
  const feedState = window.liveCaptions ? feed.state : FeedState.CONNECTING; // before: the room's languages
  let state = feedState;
  let text = feedState === FeedState.ERROR ? feed.detail : FEED_TEXT[feedState];
  if (mic && feedState !== FeedState.ERROR && feedState !== FeedState.RECONNECTING) {
    if (mic.state === State.IDLE || mic.state === State.STOPPING) {
      text = `${text} · microphone off`;
    } else if (mic.state === State.LIVE) {
      state = FeedState.LIVE;
      text = "Live · microphone on";
    } else if (mic.state === State.ERROR) {
      state = FeedState.ERROR;
      text = `Microphone: ${mic.detail || "error"} Trying again shortly.`;
    } else if (mic.state === State.FULL) {
      state = State.FULL;
      text = mic.detail || "The server is full; trying again by itself.";
    } else {
      state = FeedState.CONNECTING;
      text = mic.state === State.LOADING ? "Speech model loading…" : "Starting the microphone…";
    }
  }
  const status = $("status");
  status.dataset.state = state;
  $("status-text").textContent = text;
  document.body.dataset.state = state;
}

showStatus();
