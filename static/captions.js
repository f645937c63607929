/**
 * Live captions page: wires the controls, the state badge and the transcript view to the captioning
 * controller (js/controller.js). Protocol handling lives in js/protocol.js, rendering in js/view.js.
 *
 * URL parameters: `room=<id>` publishes this page's captions into that room (viewers, kiosks and widgets of
 * the room see them; see docs/usage.md, "Rooms"); `key=<token>` is the server's auth token when it requires one.
 *
 * ── Test hook ──────────────────────────────────────────────────────────────────────────────────────────
 * `window.liveCaptions` (an EventTarget) lets browser tests drive and observe the page:
 *   .state                 "idle" | "loading" | "connecting" | "live" | "reconnecting" | "full" | "stopping" |
 *                          "error" ("full": the server refused the session as full; the page tries again by itself)
 *                          (the badge shows the same value as its data-state attribute)
 *   .detail                plain-language text shown for the current state ("" when none)
 *   .transcript()          {sentences: [{id, text, start, end, spk, session}], partial, stable}; times in ms on
 *                          the page's timeline (equal to the server's times within the first session); spk is the
 *                          server's 0-based speaker index or null, shown as "Speaker <spk + 1>"; stable: how many
 *                          leading words of partial (split on white space) are settled (they lock as shown)
 *   .start(options?)       start captioning; options {language: code | null, hotwords: [..] | "a, b",
 *                          processing: bool}, missing fields taken from the page's controls. Resolves once
 *                          live, rejects if the run fails or is stopped first.
 *   .stop()                send `stop`, wait for the final caption and `stopped`; resolves once idle
 *   .messages              every server message received, in order, as decoded JSON
 *   .receive(message)      handle a server message as if it came from the data channel (object or JSON text)
 *   .exportAs(format)      Promise of the transcript as "txt" | "srt" | "vtt" | "json" text, as the download
 *                          buttons save it (rendered by the server)
 *   .session, .model, .language, .latencyMs   from the latest `ready` / `caption` messages
 *   events (CustomEvent, read event.detail):
 *     "state"     {state, previous, detail}
 *     "caption"   {seq, sentences: [newly locked records], partial, stable, partialSpk, isFinal, latencyMs}
 *     "sentence"  one newly locked record {id, text, start, end, spk, session}
 *     "words"     {seq, record}: better word times arrived for a locked record (its `words` were replaced)
 *     "speakers"  {seq, changed: [relabelled records]}
 *     "correction" {seq, changed: [records], deleted: [ids], removed: [records], names, editor}: a room's editor
 *                 corrected this session's sentences (already applied; see js/controller.js)
 *     "stopped"   {session}
 *     "error"     {code, message, detail}
 *     "ready"     {session, model, language}
 * DOM: each locked sentence is `[data-sentence-id][data-spk]` (data-spk "" while the speaker is unknown);
 * the partial line is `[data-partial]` (empty when there is no open segment; its text is the server's partial,
 * after a speaker label when one is shown); inside it `[data-stable]` holds the settled words (shown like locked
 * text, only ever growing) and `[data-tentative]` the rest (shown quieter). See js/view.js. A sentence a room's
 * editor just corrected has the class `corrected` for two seconds.
 * ───────────────────────────────────────────────────────────────────────────────────────────────────────
 */

import { CaptionController, State } from "./js/controller.js";
import { Follow } from "./js/follow.js";
import { TranscriptView } from "./js/view.js";

const BADGE_TEXT = {
  [State.IDLE]: "Idle",
  [State.LOADING]: "Loading model…",
  [State.CONNECTING]: "Connecting…",
  [State.LIVE]: "Live",
  [State.RECONNECTING]: "Reconnecting…",
  [State.FULL]: "Server full · retrying…",
  [State.STOPPING]: "Stopping…",
  [State.ERROR]: "Error",
};

const $ = (id) => document.getElementById(id);
const ui = {
  badge: $("badge"),
  badgeText: $("badge-text"),
  latency: $("latency"),
  latencyValue: $("latency-value"),
  form: $("controls"),
  language: $("language"),
  hotwords: $("hotwords"),
  processing: $("processing"),
  toggle: $("toggle"),
  optionsToggle: $("options-toggle"),
  options: $("options"),
  notice: $("notice"),
  stage: $("stage"),
  transcript: $("transcript"),
  partial: $("partial"),
  jump: $("jump"),
  clear: $("clear"),
};
const config = document.body.dataset;
let storageWarning = ""; // set while the server cannot save the captions (see the "storage" listener)
// `/?room=<id>&key=<server token>` publishes this page's captions into that room (see docs/usage.md, "Rooms").
const pageQuery = new URLSearchParams(location.search);
const offerFields = Object.fromEntries(
  [["room", pageQuery.get("room")], ["token", pageQuery.get("key")]].filter(([, value]) => value),
);

const controller = new CaptionController({
  readyUrl: config.readyUrl,
  offerUrl: config.offerUrl,
  maxHotwords: Number(config.maxHotwords) || 0,
  model: config.model,
  offerFields,
  defaults: () => ({
    language: ui.language.value,
    hotwords: ui.hotwords?.value ?? "",
    processing: ui.processing.checked,
  }),
});
const follow = new Follow(ui.stage, ui.jump);
const view = new TranscriptView({ log: ui.transcript, partial: ui.partial, follow });

controller.addEventListener("state", ({ detail }) => showState(detail.state, detail.detail));
controller.addEventListener("sentence", ({ detail }) => view.add(detail));
let partialSpk = null; // the voice now speaking, as the last caption named it
controller.addEventListener("caption", ({ detail }) => {
  partialSpk = detail.partialSpk ?? null;
  view.setPartial(detail.partial, partialSpk, null, detail.stable);
  showLatency();
});
controller.addEventListener("speakers", () => rerender());
// A room's editor corrected this session's sentences: each is replaced where it stands (marked for a moment), and the
// downloads carry the corrected text (the controller's transcript holds it).
controller.addEventListener("correction", ({ detail }) => {
  if (Object.keys(detail.names).length) view.setNames(controller.names);
  view.correct(detail, controller.sentences);
});
controller.addEventListener("error", ({ detail }) => {
  // A failure that ended the run is already explained by the `error` state; this is for server notices.
  if (controller.state !== State.ERROR) showNotice(detail.detail, "warn");
});

// Captions keep coming either way; what changes is whether the server keeps them. The warning stays up (state
// changes do not clear it) until the server says everything was saved.
controller.addEventListener("storage", ({ detail }) => {
  storageWarning = detail.saving ? "" : "Captions are not being saved on the server right now (its storage " +
    "fails). They still appear here and for viewers; download them to keep a copy.";
  if (detail.saving) showNotice("Captions are being saved again; nothing was lost.", "info");
  else showNotice(storageWarning, "warn");
});

ui.form.addEventListener("submit", (event) => {
  event.preventDefault();
  if (controller.running) controller.stop();
  // The outcome is shown through state events; the returned promise is for scripts that await it.
  else controller.start().catch(() => {});
});

ui.optionsToggle.addEventListener("click", () => {
  const open = ui.options.hidden;
  ui.options.hidden = !open;
  ui.optionsToggle.setAttribute("aria-expanded", String(open));
});

for (const button of document.querySelectorAll("[data-format]")) {
  button.addEventListener("click", () => download(button.dataset.format));
}

ui.clear.addEventListener("click", () => {
  if (!controller.sentences.length && !controller.transcript().partial) return;
  if (!confirm("Clear the captions shown on this page? Download them first if you want to keep them.")) return;
  controller.clear();
  rerender();
});

function rerender() {
  const { partial, stable } = controller.transcript();
  view.render(controller.sentences, partial, partialSpk, null, stable);
}

function showState(state, detail) {
  ui.badge.dataset.state = state;
  ui.badgeText.textContent = BADGE_TEXT[state] ?? state;
  document.body.dataset.state = state;

  const running = controller.running;
  ui.toggle.textContent = state === State.STOPPING ? "Stopping…" : running ? "Stop" : "Start";
  ui.toggle.classList.toggle("stop", running);
  ui.toggle.disabled = state === State.STOPPING;
  // Language and hotwords are sent once, when a session starts: lock them while captioning.
  for (const input of [ui.language, ui.hotwords, ui.processing]) if (input) input.disabled = running;

  if (!detail && storageWarning) showNotice(storageWarning, "warn");
  else showNotice(detail, state === State.ERROR ? "error" : "info");
  showLatency();
}

function showNotice(text, tone) {
  ui.notice.hidden = !text;
  ui.notice.textContent = text;
  ui.notice.dataset.tone = tone;
  // Errors interrupt a screen reader; progress messages wait their turn.
  ui.notice.setAttribute("role", tone === "error" ? "alert" : "status");
}

function showLatency() {
  const ms = controller.latencyMs;
  const visible = controller.state === State.LIVE && ms !== null;
  ui.latency.hidden = !visible;
  if (visible) ui.latencyValue.textContent = `${(ms / 1000).toFixed(1)} s`;
}

async function download(format) {
  let blob;
  try {
    blob = await controller.exportFile(format);
  } catch (err) {
    showNotice(`Could not prepare the download: ${err.message}. The captions are still on this page.`, "error");
    return;
  }
  const url = URL.createObjectURL(blob);
  const link = Object.assign(document.createElement("a"), { href: url, download: fileName(format) });
  document.body.append(link);
  link.click();
  link.remove();
  // The download has its own reference to the blob by now; revoking frees the page's copy.
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function fileName(format) {
  const now = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  const stamp = `${now.getFullYear()}-${pad(now.getMonth() + 1)}-${pad(now.getDate())}-${pad(now.getHours())}${pad(now.getMinutes())}`;
  return `captions-${stamp}.${format}`;
}

window.liveCaptions = controller;
showState(controller.state, controller.detail);
controller.watchReadiness();
