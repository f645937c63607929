/**
 * The editor page, `/rooms/{id}/edit?token=<editor token>`: a captioner corrects a room's captions live, with the
 * keyboard alone (docs/protocol.md "Correcting a room live: the editor").
 *
 * It follows the editor's stream (js/room-feed.js with `editor`: the room at once, whatever its delay) and shows
 * every locked sentence as a row (js/edit-rows.js), the open text below them. Keys (also shown on the page):
 *   ↑ ↓  previous / next line        Home End  first / newest line (End follows the newest again)
 *   PgUp PgDn  ten lines             Enter or F2  edit the line
 *   while editing: Enter save · Esc cancel · Ctrl+Enter split the line at the cursor (the words before it stay)
 *   Delete twice  delete the line    N  name the line's speaker for the whole room
 *   V  the vocabulary box (Ctrl+Enter saves it, Esc comes back)
 *
 * Nothing typed is lost: a row open for editing is never redrawn (a fix of it by someone else is noted beside it
 * and the text shows once it closes), edits go to the server through one ordered queue (js/edit-queue.js) that
 * retries across dropped connections, each row says "saving…", "saved" or what went wrong, and a text the server
 * refused stays on offer the next time the row opens. The answer to an edit is applied at once, so the row never
 * shows the old text in between; the stream's copy of it then changes nothing.
 *
 * Rows the audience does not have yet (a room with a hold-back delay) are flagged: a sentence whose caption seq is
 * past the status's `released`, or whose latest fix is. A first connection's sentences all carry the seq of its
 * snapshot, so right after opening the page, in a delay room, a few sentences already out may be flagged until the
 * audience catches up with that seq (at most the delay).
 *
 * A translated room (docs/protocol.md "Rooms in other languages") offers its languages in a side panel: the one
 * picked shows under each line, as its audience reads it, and follows every re-translation.
 *
 * Test hook: `window.liveCaptions` is the RoomFeed; `window.liveCaptions.queue` the EditQueue.
 * DOM: rows `li.line[data-sentence-id]` (see js/edit-rows.js), `#open` the open text, `#status[data-state]`,
 * `#meter` the counts, `#announce` the polite live region saying what each action did, `#translation-language` the
 * language shown under each line (`[data-translation]`).
 */

import { EditQueue } from "./js/edit-queue.js";
import { Rows } from "./js/edit-rows.js";
import { Follow } from "./js/follow.js";
import { codes, languageName } from "./js/languages.js";
import { FeedState, RoomFeed } from "./js/room-feed.js";

const ARM_MS = 4000; // the second Delete must come this soon after the first
const SAVED_MS = 3000; // how long "saved" stays beside a row
const MAX_TERMS = 100;
const MAX_TERM_CHARS = 64;
const MAX_EDITOR_CHARS = 40;
const NAME_KEY = "live-captions-editor-name";

const $ = (id) => document.getElementById(id);
const room = decodeURIComponent(location.pathname.split("/")[2] ?? "");
const token = new URLSearchParams(location.search).get("token") ?? "";
const feed = new RoomFeed({ room, token, editor: true });
const queue = new EditQueue({ token });
const rows = new Rows($("lines"), { help: "help" });
const follow = new Follow($("scroller"), $("jump"));

const own = new Set(); // seqs of this page's own edits
const suspects = new Map(); // id -> corrections seen while the row was open and an edit of ours was under way
const drafts = new Map(); // id -> text the server refused, offered when the row opens again
const sending = new Map(); // id -> text being saved (the row shows it meanwhile)
const savedTimers = new Map();
const heldIds = new Set();
let armed = null; // {id, timer}: the row whose Delete was pressed once
let vocabularyDirty = false;

const api = (path) => `/rooms/${encodeURIComponent(room)}${path}`;
const target = (id) => `sentence:${id}`;

// ── The stream ────────────────────────────────────────────────────────────────────────────────────────────────

feed.addEventListener("sentence", ({ detail }) => {
  rows.show(detail);
  showTranslation(detail.id);
  checkHeld(detail.id);
});
// Counts of what waits for the audience change with every event and tick with the clock (see `waiting`).
for (const type of ["caption", "correction", "speakers", "vocabulary"]) feed.addEventListener(type, () => showMeter());
setInterval(() => (feed.status.delayS ?? 0) > 0 && showMeter(), 1000);

feed.addEventListener("caption", ({ detail }) => {
  const open = $("open");
  if (open.textContent !== detail.partial) open.textContent = detail.partial;
  open.hidden = !detail.partial;
  if (detail.sentences.length || detail.partial) followUnlessEditing();
});

feed.addEventListener("speakers", ({ detail }) => {
  for (const record of detail.changed) rows.show(record, null, sending.get(record.id) ?? null);
});

feed.addEventListener("correction", ({ detail }) => {
  if (Object.keys(detail.names).length) rows.setNames(feed.names);
  const order = feed.sentences.map((r) => r.id);
  const who = detail.editor || "Another editor";
  for (const record of detail.changed) {
    const open = rows.isOpen(record.id);
    rows.show(record, order, sending.get(record.id) ?? null);
    checkHeld(record.id);
    if (!open) rows.mark(record.id);
    else if (!own.has(detail.seq)) foreign(record.id, detail.seq, `${who} changed this line while you were editing: “${
      record.text}” Enter saves yours over it; Esc keeps theirs.`);
  }
  for (const record of detail.removed) {
    if (rows.isOpen(record.id)) {
      rows.setNote(record.id, `${who} deleted this line while you were editing it. Esc closes it; what you typed ` +
        "is not saved.");
    } else {
      rows.remove(record.id);
      heldIds.delete(record.id);
    }
  }
  if (!own.has(detail.seq) && (detail.changed.length || detail.removed.length)) {
    const lines = detail.changed.length + detail.removed.length;
    say(`${who} corrected ${lines === 1 ? "a line" : `${lines} lines`}.`);
  }
  followUnlessEditing();
});

feed.addEventListener("vocabulary", ({ detail }) => showVocabulary(detail));

// ── A room language beside the source ─────────────────────────────────────────────────────────────────────────────
// A translated room's lines can show one of its languages under each line, so that the captioner sees what the
// audience of that language reads (and that a fix was translated again).
let shownLanguage = "";

function showTranslation(id) {
  rows.translate(id, shownLanguage, shownLanguage ? feed.translations.get(id)?.[shownLanguage] ?? "" : "");
}

function offerLanguages(languages) {
  const picker = $("translation-language");
  const options = [new Option("None", ""), ...languages.map((code) => {
    const option = new Option(`${languageName(code)} (${code})`, code);
    option.lang = code;
    return option;
  })];
  picker.replaceChildren(...options);
  picker.value = languages.includes(shownLanguage) ? shownLanguage : "";
  $("languages-panel").hidden = !languages.length;
}

$("translation-language").addEventListener("change", () => {
  shownLanguage = $("translation-language").value;
  for (const id of rows.ids) showTranslation(id);
});
feed.addEventListener("translation", ({ detail }) => {
  if (detail.lang !== shownLanguage) return;
  for (const id of detail.ids) showTranslation(id);
});
feed.addEventListener("languages", ({ detail }) => offerLanguages(detail.languages));
feed.addEventListener("status", () => {
  for (const id of [...heldIds]) checkHeld(id);
  showMeter();
});
feed.addEventListener("state", showState);
let queueDetail = "";
queue.addEventListener("change", ({ detail }) => {
  queueDetail = detail.detail;
  showMeter();
});

/** Keep the newest line in view, unless the person is typing in a row (then the view stays where it is). */
function followUnlessEditing() {
  if (!document.activeElement?.closest?.("[data-editbox], [data-nameform]")) follow.update();
}

/** A fix of an open row that may be someone else's: ours if one of our edits of it answers with that seq. */
function foreign(id, seq, note) {
  if (queue.pendingFor(target(id))) {
    suspects.set(id, [...(suspects.get(id) ?? []), { seq, note }]);
  } else {
    rows.setNote(id, note);
  }
}

function settleSuspects(id) {
  if (queue.pendingFor(target(id))) return;
  for (const { seq, note } of suspects.get(id) ?? []) if (!own.has(seq) && rows.isOpen(id)) rows.setNote(id, note);
  suspects.delete(id);
}

function checkHeld(id) {
  const released = feed.status.released;
  const seqs = feed.seqOf(id);
  let held = "";
  if (released !== null && seqs) {
    if (seqs.seq !== null && seqs.seq > released) held = "sentence";
    else if (seqs.edit !== null && seqs.edit > released) held = "fix";
  }
  rows.setHeld(id, held);
  if (held) heldIds.add(id);
  else heldIds.delete(id);
}

// ── Edits ─────────────────────────────────────────────────────────────────────────────────────────────────────

function withEditor(body) {
  const name = $("editor-name").value.trim().slice(0, MAX_EDITOR_CHARS);
  return name ? { ...body, editor: name } : body;
}

function saving(id) {
  clearTimeout(savedTimers.get(id));
  const retrying = queue.retrying;
  rows.setSave(id, retrying ? "retrying" : "saving", retrying ? "saving… (offline, retrying)" : "saving…");
}

function saved(id, words = "saved") {
  if (queue.pendingFor(target(id))) return saving(id);
  rows.setSave(id, "saved", words);
  clearTimeout(savedTimers.get(id));
  savedTimers.set(id, setTimeout(() => rows.saveState(id) === "saved" && rows.setSave(id, ""), SAVED_MS));
}

function failed(id, what, error, text = null) {
  if (text !== null) drafts.set(id, text);
  const keep = text !== null ? " Enter opens your text again." : "";
  rows.setSave(id, "error", `${what}: ${error.message}.${keep}`);
  say(`${what}: ${error.message}.`);
  if (error.status === 401 || error.status === 403) {
    notice("This editor link may not change this room (the server refused it). Ask for the room's editor link.");
  }
}

/** Apply what the server answered to one of our edits (and remember its seq as ours). */
function applyAnswer(body, change) {
  if (body && Number.isFinite(body.seq)) own.add(body.seq);
  feed.applyCorrection({ seq: body?.seq ?? null, sentences: [], deleted: [], names: {}, ...change });
}

function saveText(id, typed) {
  const record = feed.sentence(id);
  const text = typed.trim().replace(/\s+/g, " ");
  if (!record) return;
  if (!text) {
    drafts.set(id, typed);
    rows.setSave(id, "error", "A line needs words: to remove it, press Delete twice.");
    return;
  }
  if (text === (sending.get(id) ?? record.text)) {
    drafts.delete(id);
    return;
  }
  sending.set(id, text);
  drafts.delete(id);
  rows.show(record, null, text);
  saving(id);
  queue.push({ method: "PUT", path: api(`/sentences/${id}`), body: withEditor({ text }), target: target(id) })
    .then((body) => {
      if (sending.get(id) === text) sending.delete(id);
      applyAnswer(body, { sentences: [body.sentence] });
      const now = feed.sentence(id);
      if (now) rows.show(now, null, sending.get(id) ?? null);
      saved(id);
      settleSuspects(id);
    })
    .catch((error) => {
      if (sending.get(id) === text) sending.delete(id);
      const now = feed.sentence(id);
      if (now) rows.show(now, null, sending.get(id) ?? null);
      failed(id, "Not saved", error, typed);
      settleSuspects(id);
    });
}

function splitAt(id, typed, caret) {
  const words = typed.trim().split(/\s+/).filter(Boolean);
  const at = wordsBefore(typed, caret);
  if (!(at > 0 && at < words.length)) {
    rows.setSave(id, "error", "To split, put the cursor between two words.");
    say("To split, put the cursor between two words.");
    return false;
  }
  saveText(id, typed);
  saving(id);
  queue.push({
    method: "POST", path: api(`/sentences/${id}/split`), body: withEditor({ at }), target: target(id),
    // A first try whose answer was lost may have split it already: then it has exactly the words before the cut.
    doneIf: () => feed.sentence(id)?.text.split(/\s+/).length === at,
  }).then((body) => {
    if (body) applyAnswer(body, { sentences: body.sentences });
    saved(id, "split");
    say("Line split.");
  }).catch((error) => failed(id, "Not split", error));
  return true;
}

function deleteLine(id) {
  disarm();
  rows.setSave(id, "saving", "deleting…");
  const query = $("editor-name").value.trim() ? `?editor=${encodeURIComponent($("editor-name").value.trim())}` : "";
  queue.push({ method: "DELETE", path: api(`/sentences/${id}${query}`), target: target(id) })
    .then((body) => {
      applyAnswer(body, { deleted: [id] });
      say("Line deleted.");
    })
    .catch((error) => failed(id, "Not deleted", error));
}

function nameSpeaker(id, spk, typed) {
  const name = typed.trim().replace(/\s+/g, " ");
  if (name === rows.givenName(spk)) return;
  rows.setSave(id, "saving", "naming…");
  queue.push({ method: "PUT", path: api(`/speakers/${spk}`), body: withEditor({ name }), target: `speaker:${spk}` })
    .then((body) => {
      applyAnswer(body, { names: { ...(body?.names ?? {}), [spk]: name } });
      rows.setSave(id, "saved", "named");
      say(name ? `Speaker ${spk + 1} is now ${name}.` : `Speaker ${spk + 1} has no name now.`);
      setTimeout(() => rows.saveState(id) === "saved" && rows.setSave(id, ""), SAVED_MS);
    })
    .catch((error) => failed(id, "Not named", error));
}

/** How many whole words come before `caret` in `text` (a word the caret is inside does not count). */
function wordsBefore(text, caret) {
  const before = text.slice(0, caret);
  const words = before.split(/\s+/).filter(Boolean);
  const inside = /\S$/.test(before) && /^\S/.test(text.slice(caret));
  return words.length - (inside ? 1 : 0);
}

// ── Keys ──────────────────────────────────────────────────────────────────────────────────────────────────────

document.addEventListener("keydown", (event) => {
  const t = event.target;
  if (t.matches?.("[data-editbox]")) editKeys(event, rows.idOf(t), t);
  else if (t.closest?.("[data-nameform]")) nameKeys(event, rows.idOf(t), t);
  else if (t.matches?.("li.line")) lineKeys(event, rows.idOf(t));
  else if (t === $("terms")) termsKeys(event);
  else if ((t === document.body || t === $("scroller")) && ["ArrowUp", "ArrowDown"].includes(event.key)) {
    const id = rows.current ?? rows.step(null, 1);
    if (id !== null) {
      event.preventDefault();
      rows.focus(id);
    }
  }
});

function lineKeys(event, id) {
  if (event.altKey || event.ctrlKey || event.metaKey) return;
  const key = event.key;
  if (key !== "Delete") disarm();
  const moves = { ArrowUp: -1, ArrowDown: 1, PageUp: -10, PageDown: 10, Home: -Infinity, End: Infinity };
  if (key in moves) {
    event.preventDefault();
    const next = rows.step(id, moves[key]);
    rows.focus(next);
    if (next === rows.ids.at(-1)) follow.jump(); // at the newest line: follow the room again
    return;
  }
  if (key === "Enter" || key === "F2") {
    event.preventDefault();
    openEditor(id);
  } else if (key === "Delete") {
    event.preventDefault();
    if (armed?.id === id) deleteLine(id);
    else arm(id);
  } else if (key === "n" || key === "N") {
    event.preventDefault();
    openName(id);
  } else if (key === "v" || key === "V") {
    event.preventDefault();
    $("terms").focus();
  }
}

function editKeys(event, id, box) {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    const text = box.value;
    const caret = box.selectionStart;
    if (splitAt(id, text, caret)) closeEditor(id, null);
  } else if (event.key === "Enter" && !event.altKey) {
    event.preventDefault(); // a line is one line: Enter saves
    closeEditor(id, box.value);
  } else if (event.key === "Escape") {
    event.preventDefault();
    drafts.delete(id);
    closeEditor(id, null);
  }
}

function nameKeys(event, id, input) {
  if (event.key === "Enter") {
    event.preventDefault();
    const spk = feed.sentence(id)?.spk;
    const name = input.value;
    rows.close(id);
    if (Number.isInteger(spk)) nameSpeaker(id, spk, name);
  } else if (event.key === "Escape") {
    event.preventDefault();
    rows.close(id);
  }
}

function termsKeys(event) {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    saveVocabulary();
  } else if (event.key === "Escape") {
    event.preventDefault();
    const id = rows.current;
    if (id !== null) rows.focus(id);
  }
}

function openEditor(id) {
  const record = feed.sentence(id);
  if (!record) return;
  rows.setNote(id, "");
  rows.open(id, drafts.get(id) ?? sending.get(id) ?? record.text);
  if (rows.saveState(id) === "error") rows.setSave(id, "");
}

/** Close an open row: `typed` is saved (null: nothing is). What changed meanwhile shows now. */
function closeEditor(id, typed) {
  rows.close(id);
  rows.setNote(id, "");
  suspects.delete(id);
  const record = feed.sentence(id);
  if (!record) {
    rows.remove(id);
    if (typed !== null) say(`That line was deleted by another editor; your text was not saved: “${typed.trim()}”`);
  } else if (typed !== null) {
    saveText(id, typed);
  } else {
    rows.show(record, null, sending.get(id) ?? null);
  }
  follow.update();
}

function openName(id) {
  const record = feed.sentence(id);
  if (!record) return;
  if (record.spk === null) {
    say("This line has no speaker label to name.");
    return;
  }
  rows.openName(id)?.form?.addEventListener("submit", (event) => event.preventDefault());
}

function arm(id) {
  disarm();
  armed = { id, timer: setTimeout(disarm, ARM_MS) };
  rows.setSave(id, "arming", "press Delete again to delete this line");
  say("Press Delete again to delete this line.");
}

function disarm() {
  if (!armed) return;
  clearTimeout(armed.timer);
  if (rows.saveState(armed.id) === "arming") rows.setSave(armed.id, "");
  armed = null;
}

// ── Vocabulary ────────────────────────────────────────────────────────────────────────────────────────────────

$("vocabulary").addEventListener("submit", (event) => {
  event.preventDefault();
  saveVocabulary();
});
$("terms").addEventListener("input", () => (vocabularyDirty = true));

/** Terms typed one per line or separated by commas, blanks and repeats (any case) left out. */
function parseTerms(text) {
  const seen = new Set();
  const terms = [];
  for (const part of text.split(/[,\n]/)) {
    const term = part.trim().replace(/\s+/g, " ");
    if (!term || seen.has(term.toLowerCase())) continue;
    seen.add(term.toLowerCase());
    terms.push(term);
  }
  return terms;
}

function saveVocabulary() {
  const terms = parseTerms($("terms").value);
  const long = terms.find((t) => t.length > MAX_TERM_CHARS);
  if (terms.length > MAX_TERMS || long) {
    const why = long ? `“${long.slice(0, 20)}…” is longer than ${MAX_TERM_CHARS} characters`
      : `${terms.length} terms are more than ${MAX_TERMS}`;
    $("vocabulary-state").textContent = `Not saved: ${why}.`;
    return;
  }
  $("vocabulary-state").textContent = "Saving…";
  queue.push({ method: "PUT", path: api("/vocabulary"), body: { terms }, target: "vocabulary" })
    .then((body) => {
      vocabularyDirty = false;
      showVocabulary({ terms: body?.terms ?? terms, learned: body?.learned ?? null }, true);
      $("vocabulary-state").textContent = `Saved: ${terms.length === 1 ? "1 term" : `${terms.length} terms`}.`;
    })
    .catch((error) => ($("vocabulary-state").textContent = `Not saved: ${error.message}.`));
}

function showVocabulary({ terms, learned }, force = false) {
  const box = $("terms");
  if (Array.isArray(terms) && (force || (!vocabularyDirty && document.activeElement !== box))) {
    box.value = terms.join("\n");
  }
  if (!Array.isArray(learned)) return;
  const list = $("learned");
  list.replaceChildren(...learned.map((term) => Object.assign(document.createElement("li"), { textContent: term })));
  $("learned-none").hidden = learned.length > 0;
}

async function loadRoom() {
  const headers = { Authorization: `Bearer ${token}` };
  try {
    const response = await fetch(api(""), { headers, cache: "no-store" });
    const body = response.ok ? await response.json() : null;
    if (body?.title) {
      $("room-title").textContent = body.title;
      document.title = `Edit · ${body.title} · Live captions`;
    }
    if (body) offerLanguages(codes(body.languages));
  } catch {
    // The stream says whether the server can be reached.
  }
  try {
    const response = await fetch(api("/vocabulary"), { headers, cache: "no-store" });
    if (response.ok) showVocabulary(await response.json());
    if (response.status === 401 || response.status === 403) {
      notice("This editor link was refused: its token is not this room's editor token. Ask for the room's editor " +
             "link (it is given once, when the room is made).");
    }
  } catch {
    // The stream replays the vocabulary on connect.
  }
}

// ── Status ────────────────────────────────────────────────────────────────────────────────────────────────────

const STATE_TEXT = {
  [FeedState.CONNECTING]: "Connecting…",
  [FeedState.LIVE]: "Live",
  [FeedState.WAITING]: "Connected · nobody is speaking",
  [FeedState.RECONNECTING]: "Connection lost · reconnecting…",
  [FeedState.STOPPED]: "Stopped",
  [FeedState.ERROR]: "Error",
};

function showState() {
  const status = $("status");
  status.dataset.state = feed.state;
  $("status-text").textContent = feed.state === FeedState.ERROR ? feed.detail || "Error" : STATE_TEXT[feed.state];
}

/**
 * What waits for the audience. The `room` status says it when it is sent; between two of them the page counts for
 * itself: the editor's stream brings every durable event at once (one seq each), so the events past `released` are
 * the ones waiting, and the oldest has waited since it arrived here.
 */
const seenAt = new Map(); // seq -> when this page first saw the room at that seq (ms, performance.now())

function waiting() {
  const { held, behindMs, released } = feed.status;
  const newest = feed.lastSeq;
  if (newest !== null && !seenAt.has(newest)) seenAt.set(newest, performance.now());
  for (const seq of seenAt.keys()) if (released !== null && seq <= released) seenAt.delete(seq);
  let count = held ?? 0;
  let oldestMs = behindMs ?? 0;
  if (released !== null && newest !== null && newest > released) {
    count = Math.max(count, newest - released);
    const first = Math.min(...seenAt.values());
    if (Number.isFinite(first)) oldestMs = Math.max(oldestMs, performance.now() - first);
  }
  return { count, oldestMs };
}

function showMeter() {
  const { delayS, held } = feed.status;
  const parts = [];
  if (delayS !== null) parts.push(delayS > 0 ? `Delay ${delayS} s` : "No delay");
  if (held !== null || (delayS ?? 0) > 0) {
    const { count, oldestMs } = waiting();
    const wait = count && oldestMs ? ` (oldest ${(oldestMs / 1000).toFixed(1)} s)` : "";
    parts.push(`${count === 1 ? "1 event" : `${count} events`} waiting to be published${wait}`);
  }
  const pending = queue.pending;
  if (pending) parts.push(`${pending === 1 ? "1 change" : `${pending} changes`} ${queue.retrying ? "not saved yet" : "saving…"}`);
  $("meter").textContent = parts.join(" · ");
  const offline = $("offline");
  offline.hidden = !queue.retrying;
  if (queue.retrying) offline.textContent = `${queueDetail} Nothing is lost: they are sent as soon as the server answers.`;
  for (const id of sending.keys()) saving(id);
}

/** A message about the whole page (a refused token): stays until the page is reloaded. */
function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = false;
}

/** Tell a screen reader (and the status line) what an action did. */
function say(text) {
  const region = $("announce");
  region.textContent = "";
  // Emptied first, filled a moment later: the same words twice are announced twice.
  setTimeout(() => (region.textContent = text), 50);
}

// ── Start ─────────────────────────────────────────────────────────────────────────────────────────────────────

const nameInput = $("editor-name");
nameInput.value = localStorage.getItem(NAME_KEY) ?? "";
nameInput.addEventListener("change", () => localStorage.setItem(NAME_KEY, nameInput.value.trim()));
$("lines").addEventListener("focusin", (event) => {
  const id = rows.idOf(event.target);
  if (id !== null && event.target.matches("li.line")) rows.focus(id);
});

window.liveCaptions = feed;
feed.queue = queue;
if (!room || !token) {
  $("status").dataset.state = FeedState.ERROR;
  $("status-text").textContent = "This page needs the room's editor link (…/rooms/<id>/edit?token=…).";
} else {
  showState();
  showMeter();
  loadRoom();
  feed.start();
}
