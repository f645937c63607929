/**
 * The /join page's entry: a person at a meeting-room table joins the room with their own phone or laptop
 * (`/join?room=<id>`, what the kiosk's QR code opens). They give a name, press Join, allow the microphone, and then
 * read the room's captions with their own lines marked "(you)". Their microphone publishes into the room exactly as
 * the main page's does with `?room=` (js/controller.js), with `name` in the offer: the server names this person's
 * voice after it on every screen. The captions are the room's (js/room-feed.js, as /view reads them), shown with
 * the viewer's transcript view (js/view.js); they show before joining too.
 *
 * URL parameters: `room=<id>` (required), `token=<viewer token>` for a private room, `key=<server token>` when the
 * server needs one to publish (never in the kiosk's QR code), `lang=<code>` the microphone's language (default: the
 * room's; another is refused by the server), `task=translate` English captions of the microphone's speech in `lang`
 * (Whisper's translate task; a room spoken in English), the words said kept as the room's version in their language.
 *
 * Test hook: `window.liveCaptions` is the RoomFeed (state, detail, transcript(), messages, events), with
 * `.mic`: the CaptionController of the current or last join (null before the first), and `.mine`: the set of this
 * page's session ids (each reconnect is a new session; its lines are this person's too).
 * DOM: as /view (`[data-sentence-id][data-spk]`, `[data-partial]`, `#badge[data-state]`); the person's own turns
 * (`section.turn.mine`), their sentences (`[data-sentence-id].mine`) and their open line (`[data-partial].mine`, or
 * any open line element with `data-session`) are marked, with a "(you)" text (`.you`) at the start of each: in the
 * turn's head, and first inside the open line (so the open line's textContent then starts with "(you) ").
 * `body[data-joined]` is "true" from Join until the person has left or the join failed.
 */

import { CaptionController, State } from "./js/controller.js";
import { CaptionError, plainLanguage } from "./js/errors.js";
import { Follow } from "./js/follow.js";
import { FeedState, RoomFeed } from "./js/room-feed.js";
import { TranscriptView } from "./js/view.js";

/*
 * Capture for a phone lying on a meeting table, among other phones. Measured with bench/capture_settings.py (Chromium
 * playing real read speech over a real background, as received at the server; docs/benchmarks.md, "A phone on a
 * meeting table"):
 * - autoGainControl off. The room decides which microphone a voice belongs to by comparing its level at each of
 *   them (a voice is loudest at its own). Gain control lifts a quiet microphone towards full level: a voice 12 dB
 *   quieter at the neighbour's phone than at its own arrived 0.1-0.9 dB quieter once the gain had adapted (12 dB
 *   without), and the background rose 11-17 dB. That is the room's choice of microphone gone.
 * - echoCancellation off. This page plays no sound: there is no echo to cancel. Turned on, it only runs the
 *   browser's processing chain, which reshapes the waveform (correlation with the source 0.76 against 0.96).
 * - noiseSuppression off. It lowered the background by only 2.5-4 dB and left the speech levels and the margin
 *   alone, with the same reshaping, and it hurt the recognizer: over a street background 10 dB under the speech,
 *   Whisper base wrote 46.7 % WER with it against 28.9 % without (one 45-word recording; clean speech 2.2 against
 *   0 %). The server gates the recognizer by voice detection anyway, and Whisper is trained on noisy speech.
 * - channelCount 1: the server captions mono.
 */
const CAPTURE = Object.freeze({
  echoCancellation: false,
  noiseSuppression: false,
  autoGainControl: false,
  channelCount: 1,
});
const NAME_KEY = "live-captions.join.name"; // localStorage: the name, filled in next time
const MAX_NAME_CHARS = 64; // the server's limit (code points), as the input's maxlength
const CONTROL = /\p{C}/u; // as the server: no control, format or unassigned characters anywhere

const FEED_TEXT = {
  [FeedState.CONNECTING]: "Connecting…",
  [FeedState.LIVE]: "Live",
  [FeedState.WAITING]: "Waiting for a speaker",
  [FeedState.RECONNECTING]: "Reconnecting…",
  [FeedState.STOPPED]: "Stopped",
  [FeedState.ERROR]: "Error",
};
const MIC_TEXT = {
  [State.LOADING]: "Speech model loading…",
  [State.CONNECTING]: "Joining…",
  [State.LIVE]: "Live · microphone on",
  [State.RECONNECTING]: "Reconnecting…",
  [State.FULL]: "Server full · retrying…",
  [State.STOPPING]: "Leaving…",
};
// captions.css colours the badge for the main page's states; map the feed's onto them ("muted": join.css).
const BADGE_STATE = { [FeedState.WAITING]: "idle", [FeedState.STOPPED]: "idle" };
// What this page says instead of the shared wording, where the shared wording names another page's buttons.
const JOIN_TEXT = {
  no_room: "This meeting room does not exist (any more). Check the link, or scan the room's code again.",
  unauthorized: "This server asks for its access key before anyone may use a microphone. Ask whoever runs the " +
    "captions for the join link with the key in it.",
  "mic-denied": "Microphone access is blocked. Allow the microphone for this page (see the icon in the address " +
    "bar), then press Join.",
  "mic-missing": "No microphone was found. Connect one, then press Join.",
  "mic-ended": "The microphone stopped sending sound. Press Join to join again.",
};

const $ = (id) => document.getElementById(id);
const ui = {
  badge: $("badge"),
  badgeText: $("badge-text"),
  form: $("join-form"),
  roomTitle: $("room-title"),
  name: $("name"),
  nameError: $("name-error"),
  join: $("join"),
  joined: $("joined"),
  joinedName: $("joined-name"),
  mute: $("mute"),
  leave: $("leave"),
  notice: $("notice"),
  transcript: $("transcript"),
  partial: $("partial"),
  viewLink: $("view-link"),
};
const query = new URLSearchParams(location.search);
const room = query.get("room") ?? "";
const viewerToken = query.get("token") ?? "";
const serverKey = query.get("key") ?? "";

const feed = new RoomFeed({ room, token: viewerToken });
const view = new TranscriptView({ log: ui.transcript, partial: ui.partial, follow: new Follow($("stage"), $("jump")) });
const mine = new Set();
let controller = null;
// What the page says besides the states, until the next Join: why joining failed or cannot work, or that the person
// left. `{text, tone}` or null.
let note = null;
let wasLive = false; // the current join got as far as live

feed.addEventListener("sentence", ({ detail }) => {
  view.add(detail);
  markTurn(ui.transcript.querySelector(".turn:last-of-type"));
});
feed.addEventListener("caption", ({ detail }) => {
  view.setPartial(detail.partial, detail.partialSpk, detail.partialSession, detail.stable, detail.open);
  markOpen();
});
feed.addEventListener("speakers", () => {
  view.render(feed.sentences, feed.partial, feed.partialSpk, feed.partialSession, feed.stable, feed.open);
  markAll();
});
// An editor's fix replaces the sentence where it stands (marked for a moment); named speakers show by name.
feed.addEventListener("correction", ({ detail }) => {
  if (Object.keys(detail.names).length) view.setNames(feed.names);
  view.correct(detail, feed.sentences);
  markAll();
});
feed.addEventListener("state", showState);

ui.form.addEventListener("submit", (event) => {
  event.preventDefault();
  const name = checkName(ui.name.value);
  if (name === null) {
    ui.name.focus();
    return;
  }
  remember(name);
  join(name);
});
ui.name.addEventListener("input", () => ui.name.getAttribute("aria-invalid") && showNameError(""));
ui.mute.addEventListener("click", () => {
  if (!controller) return;
  controller.muted = !controller.muted;
  ui.mute.setAttribute("aria-pressed", String(controller.muted));
  showState();
});
ui.leave.addEventListener("click", () => controller?.stop());

/** Publish this person's microphone into the room under `name`. */
function join(name) {
  note = null;
  wasLive = false;
  const offerFields = { room, name, ...(serverKey ? { token: serverKey } : {}) };
  const mic = new CaptionController({
    offerFields,
    microphone: CAPTURE,
    defaults: () => ({ language: query.get("lang") ?? "", hotwords: [],
      task: query.get("task") === "translate" ? "translate" : "transcribe" }),
  });
  controller = mic;
  feed.mic = mic;
  mic.addEventListener("ready", ({ detail }) => {
    mine.add(String(detail.session));
    markAll();
  });
  mic.addEventListener("state", ({ detail }) => mic === controller && onMicState(detail));
  mic.addEventListener("error", ({ detail }) => mic === controller && mic.state === State.ERROR && onFailed(detail));
  ui.joinedName.textContent = name;
  ui.mute.setAttribute("aria-pressed", "false");
  showJoined(true);
  ui.mute.focus();
  mic.start().catch(() => {}); // the outcome arrives as state events
}

function onMicState({ state, previous }) {
  if (state === State.LIVE) wasLive = true;
  if (state === State.IDLE && previous !== State.IDLE) {
    showJoined(false);
    const text = wasLive ? "You left the meeting. What you said stays in the room's transcript."
      : "You stopped joining. Press Join to try again.";
    note = { text, tone: "info" };
    ui.join.focus();
  }
  showState();
}

/** The join ended in an error that trying again cannot fix: say why, where it can be fixed. */
function onFailed({ code, message, detail }) {
  showJoined(false);
  if (code === "bad_message") {
    // The name is what this page sends that the person typed: the server refused it.
    note = null;
    showNameError(`The server did not accept this name${message ? ` (${message})` : ""}. Try it another way.`);
    showState();
    ui.name.focus();
    return;
  }
  note = { text: JOIN_TEXT[code] ?? detail ?? plainLanguage(new CaptionError(code, message)), tone: "error" };
  showState();
  ui.join.focus();
}

/** The trimmed name, or null (and the field says why) when the server would refuse it. */
function checkName(raw) {
  const name = raw.trim();
  let problem = "";
  if (!name) problem = "Enter your name: it labels what you say for everyone in the room.";
  else if ([...name].length > MAX_NAME_CHARS) problem = `Use at most ${MAX_NAME_CHARS} characters.`;
  else if (CONTROL.test(name)) problem = "Use letters, digits, spaces and punctuation only.";
  showNameError(problem);
  return problem ? null : name;
}

function showNameError(text) {
  ui.nameError.textContent = text;
  ui.nameError.hidden = !text;
  if (text) ui.name.setAttribute("aria-invalid", "true");
  else ui.name.removeAttribute("aria-invalid");
}

function showJoined(joined) {
  document.body.dataset.joined = String(joined);
  ui.form.hidden = joined;
  ui.joined.hidden = !joined;
}

/** The badge and the notice: the microphone's state while joined, else the room's. */
function showState() {
  const mic = controller;
  const active = mic !== null && (mic.running || mic.state === State.STOPPING);
  let state = BADGE_STATE[feed.state] ?? feed.state;
  let text = FEED_TEXT[feed.state] ?? feed.state;
  if (active && feed.state !== FeedState.ERROR) {
    state = mic.state;
    text = MIC_TEXT[mic.state] ?? mic.state;
    if (mic.state === State.LIVE && mic.muted) {
      state = "muted";
      text = "Live · microphone muted";
    }
  } else if (!active && note?.tone === "error") {
    state = State.ERROR;
    text = "Not joined";
  }
  ui.badge.dataset.state = state;
  ui.badgeText.textContent = text;
  document.body.dataset.state = state;

  if (feed.state === FeedState.ERROR) {
    showNotice(feed.detail, "error");
    ui.join.disabled = true;
  } else if (active) {
    showNotice(mic.detail, mic.state === State.FULL ? "warn" : "info");
  } else if (note) {
    showNotice(note.text, note.tone);
  } else {
    showNotice(feed.detail, "info");
  }
}

function showNotice(text, tone) {
  ui.notice.hidden = !text;
  ui.notice.textContent = text;
  ui.notice.dataset.tone = tone;
  // Errors interrupt a screen reader; progress messages wait their turn (as on the main page).
  ui.notice.setAttribute("role", tone === "error" ? "alert" : "status");
}

// ── The person's own lines ─────────────────────────────────────────────────────────────────────────────────────

function markAll() {
  for (const turn of ui.transcript.querySelectorAll(".turn")) markTurn(turn);
  markOpen();
}

/** A turn holds consecutive sentences of one voice from one session (js/view.js): all or none are this person's. */
function markTurn(turn) {
  if (!turn) return;
  const spans = turn.querySelectorAll("[data-sentence-id]");
  const record = spans.length ? feed.sentence(Number(spans[0].dataset.sentenceId)) : null;
  const own = record !== null && mine.has(record.session);
  turn.classList.toggle("mine", own);
  for (const span of spans) span.classList.toggle("mine", own);
  const head = turn.querySelector(".turn-head .who");
  const tag = turn.querySelector(".turn-head .you");
  if (own && !tag && head) head.after(" ", youTag());
  else if (!own && tag) tag.remove();
}

/** The open line: the joined partial when the room names its session, and any open line that carries its own. */
function markOpen() {
  // With a room's open lines, the first line is the first entry's (the view draws them in that order).
  const first = feed.open?.length ? feed.open[0].session : feed.partialSession;
  markLine(ui.partial, Boolean(ui.partial.textContent) && mine.has(first ?? ""));
  for (const line of document.querySelectorAll("#stage [data-session]")) {
    if (line !== ui.partial) markLine(line, Boolean(line.textContent) && mine.has(line.dataset.session));
  }
}

function markLine(line, own) {
  line.classList.toggle("mine", own);
  const tag = line.firstElementChild?.classList.contains("you") ? line.firstElementChild : null;
  if (own && !tag) line.prepend(youTag(), " ");
  else if (!own && tag) {
    if (tag.nextSibling?.nodeType === Node.TEXT_NODE && tag.nextSibling.data === " ") tag.nextSibling.remove();
    tag.remove();
  }
}

function youTag() {
  return Object.assign(document.createElement("span"), { className: "you", textContent: "(you)" });
}

// ── Start ──────────────────────────────────────────────────────────────────────────────────────────────────────

function remember(name) {
  try {
    localStorage.setItem(NAME_KEY, name);
  } catch {
    // Storage refused (a private window): the name is only not filled in next time.
  }
}

function remembered() {
  try {
    return localStorage.getItem(NAME_KEY) ?? "";
  } catch {
    return "";
  }
}

/** The room's title, and whether it exists, before anyone types a name. */
async function describeRoom() {
  let response;
  try {
    response = await fetch(feed.url(""), { cache: "no-store" });
  } catch {
    return; // the server is unreachable: the feed says so and keeps trying
  }
  if (response.status === 404 || response.status === 403) {
    const text = response.status === 404 ? JOIN_TEXT.no_room
      : "This room is private: its link needs the room's viewer token (token=…). Scan the room's code again.";
    note = { text, tone: "error" };
    ui.join.disabled = true;
    showState();
    return;
  }
  if (!response.ok) return;
  const body = await response.json().catch(() => ({}));
  if (typeof body.title === "string" && body.title.trim()) {
    ui.roomTitle.textContent = `Meeting: ${body.title.trim()}`;
    ui.roomTitle.hidden = false;
  }
}

for (const link of document.querySelectorAll("[data-format]")) {
  link.href = feed.url(`/transcript.${link.dataset.format}`);
  link.download = `captions.${link.dataset.format}`;
}
const readOnly = new URLSearchParams({ room, ...(viewerToken ? { token: viewerToken } : {}) });
ui.viewLink.href = `/view?${readOnly}`;
ui.name.value = remembered();

window.liveCaptions = feed;
feed.mic = null;
feed.mine = mine;
showState();
feed.start();
if (room) describeRoom();
else ui.join.disabled = true;
