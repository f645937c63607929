/**
 * A room, read-only: follows `GET /rooms/{id}/events` (server-sent events) and keeps the room's transcript.
 * Used by the phone viewer, the embeddable widget and the kiosk. Knows nothing about the DOM.
 *
 * Staying connected: EventSource reconnects by itself after a drop and sends `Last-Event-ID` (the room seq), so
 * the server replays exactly what was missed. When the browser gives up (an HTTP error while the server restarts
 * behind a proxy, say) or the stream goes silent past the server's heartbeat, the feed opens a new EventSource
 * with `?after=<last seq>` after a backoff, for ever. A 404 or 403 ends it with state `error`.
 *
 * States (the `state` event's detail.state):
 *   connecting    opening the stream for the first time
 *   live          connected and someone is publishing into the room
 *   waiting       connected; nobody is publishing right now (captions appear when someone starts)
 *   reconnecting  the connection dropped; retrying; the text so far stays
 *   stopped       stop() was called
 *   error         the room does not exist, needs a viewer token, or (a feed in a language) is not in that
 *                 language; detail says which
 *
 * Events (CustomEvent, `detail` as listed):
 *   state     {state, previous, detail}
 *   caption   {seq, sentences: [records newly added], partial, stable, partialSpk, partialSession, open}   for
 *             every caption message (even partial-only); stable: how many leading words of partial are settled (they
 *             lock as shown; only the rest may change); partialSpk/partialSession: the voice now speaking (label and
 *             publishing session) when the server names it, else null; open: the same open text one line per
 *             speaking publisher, in the order they started, `[{session, text, stable, spk}]` (spk null when not
 *             known), or null from a server that does not send it (then partial is all there is)
 *   sentence  one newly added record {id, text, start, end, spk, session}
 *   speakers  {seq, changed: [records]}
 *   correction  {seq, changed: [records], deleted: [ids], removed: [records], names, editor}   an editor corrected
 *             the room (a `correction` message, docs/protocol.md "Correcting a room live"): `changed` holds the
 *             records whose text, times or speaker changed (already updated in place; a record not held before is a
 *             new sentence from a split, already inserted in order of start, then id), `deleted` the ids removed
 *             (`removed`: their records, as they were), `names` the speaker names that changed (`{"<spk>": name}`,
 *             "" = back to "Speaker N"; the feed's `names` holds them all). A correction that changes nothing (a
 *             replay, or one the feed already applied) dispatches nothing; a first connection gets the room's names
 *             as a `correction` with names only.
 *   vocabulary  {seq, terms, learned}   the room's vocabulary (the editor's stream only)
 *   translation {lang, ids, update}   (an editor's feed) sentences `ids` have a new translation into `lang`, now in
 *             `translations`
 *   languages {seq, languages}   the room's languages changed (an editor added or removed one); `languages` holds
 *             the codes the room is translated into, besides the one spoken in it
 *   status    {live, publishers, viewers, delayS, held, behindMs, released}   the last four: the room's hold-back
 *             delay in seconds, how many events wait for it and how long the oldest has (ms), and (editor stream
 *             only) the newest seq the audience has; null when the server does not say
 * Records: `id` is the room-wide sentence id; `start`/`end` are ms since the room was created; `spk` 0-based.
 * A feed in a room language (`lang`, say "es": `GET /rooms/{id}/events?lang=es`, docs/protocol.md "Rooms in other
 * languages") holds the room's sentences in that language: the stream's `translation` messages bring them. A new
 * sentence's translation dispatches `sentence` and `caption` as a caption's sentence does; a translation that
 * replaces one shown (an editor's fix re-translated, a translation corrected, a missing one retried, or a catch-up
 * that had the source text while the translation was on its way) dispatches `correction` with the records it
 * changed. The open text (`partial`, `open`) stays the speaker's own words: nothing is translated before it locks.
 * Other message types (`words` for viewers that asked for word times, types a newer server adds) are kept in
 * `messages` and otherwise ignored.
 *
 * Corrections apply in seq order per sentence: one older than what the feed holds for that sentence (a replay, or
 * the answer to this page's own edit arriving after a newer edit of someone else's) is ignored, and a deleted id
 * never comes back.
 */

import { orderedIndex } from "./corrections.js";
import { mergeNames } from "./labels.js";
import { matching } from "./languages.js";
import { decodeCorrection, decodeOpenLines } from "./protocol.js";
import { stableCount } from "./stable.js";

const BACKOFF_MS = [1000, 2000, 4000, 8000, 15000];
// The server sends a `ping` every 15 s: three missed ones mean the connection is dead without saying so.
const SILENCE_MS = 45000;

export const FeedState = Object.freeze({
  CONNECTING: "connecting",
  LIVE: "live",
  WAITING: "waiting",
  RECONNECTING: "reconnecting",
  STOPPED: "stopped",
  ERROR: "error",
});

export class RoomFeed extends EventTarget {
  /** Every message received (decoded JSON), in order; for tests and the embed API. */
  messages = [];
  partial = "";
  /** How many leading words of `partial` are settled. */
  stable = 0;
  partialSpk = null;
  partialSession = null;
  /** Each speaking publisher's open text, `[{session, text, stable, spk}]` in the order they started (or null). */
  open = null;
  lastSeq = null;
  status = { live: false, publishers: 0, viewers: 0, delayS: null, held: null, behindMs: null, released: null };
  /** The room's speaker names, `{"<spk>": name}` (labels without a name are absent). */
  names = {};
  /** An editor's feed: each sentence's newest translations, `id -> {lang: text}` (a live object; do not modify). */
  translations = new Map();
  /** The room's languages besides its spoken one, from its `languages` messages (null until one comes). */
  languages = null;

  #room;
  #token;
  #source = null;
  #state = FeedState.STOPPED;
  #detail = "";
  #records = new Map();
  #seqs = new Map(); // sentence id -> {seq: of the caption that brought it, edit: of its latest version}
  #gone = new Set(); // ids of deleted sentences
  #attempt = 0;
  #retryTimer = 0;
  #silenceTimer = 0;
  #keep;
  #editor;
  #lang;

  /**
   * @param {{room: string, token?: string, keep?: number, editor?: boolean}} options
   *   keep: how many most recent sentences to hold (older ones are dropped; 0 = all); editor: follow the editor's
   *   stream (`?editor=1`: everything at once whatever the room's delay, partials, `vocabulary`, `released`), for
   *   which `token` must be the room's editor token or the server's; lang: one of the room's languages to follow
   *   the room in ("" = the language spoken in it)
   */
  constructor({ room, token = "", keep = 0, editor = false, lang = "" }) {
    super();
    this.#room = room;
    this.#token = token;
    this.#keep = keep;
    this.#editor = editor;
    this.#lang = lang;
  }

  /** The room language this feed follows ("" = the one spoken). */
  get lang() {
    return this.#lang;
  }

  get state() {
    return this.#state;
  }

  get detail() {
    return this.#detail;
  }

  get room() {
    return this.#room;
  }

  /** Sentence records in order (live objects; do not modify). */
  get sentences() {
    return [...this.#records.values()];
  }

  /** Record of sentence `id`, or null (a live object; do not modify). */
  sentence(id) {
    return this.#records.get(id) ?? null;
  }

  /**
   * `{seq, edit}` of sentence `id`: the seq of the caption that brought it (for a first connection, the seq its
   * whole snapshot reflects) and of its latest version (a correction's); null for a sentence not held.
   */
  seqOf(id) {
    const seqs = this.#seqs.get(id);
    return seqs ? { ...seqs } : null;
  }

  /**
   * Apply a correction known by other means than the stream (the answer to the editor's own request, shaped as the
   * `correction` message: `{seq, sentences, deleted, names, editor}`), exactly as if it had come on the stream; the
   * stream's copy of it then changes nothing. Returns the `correction` event's detail, or null when nothing changed.
   */
  applyCorrection(message) {
    return this.#onCorrection({ type: "correction", ...message });
  }

  /** `{sentences: [...copies], partial, stable}` */
  transcript() {
    return { sentences: this.sentences.map((s) => ({ ...s })), partial: this.partial, stable: this.stable };
  }

  /** URL of a server resource of this room, with the viewer token if there is one. */
  url(path) {
    const query = this.#token ? `?token=${encodeURIComponent(this.#token)}` : "";
    return `/rooms/${encodeURIComponent(this.#room)}${path}${query}`;
  }

  start() {
    if (this.#source || this.#state === FeedState.ERROR) return;
    if (!this.#room) {
      this.#setState(FeedState.ERROR, "No room given: add ?room=<id> to the address.");
      return;
    }
    this.#setState(this.lastSeq === null ? FeedState.CONNECTING : FeedState.RECONNECTING);
    this.#open();
  }

  stop() {
    this.#close();
    clearTimeout(this.#retryTimer);
    this.#setState(FeedState.STOPPED);
  }

  #open() {
    const params = new URLSearchParams();
    if (this.#editor) params.set("editor", "1");
    if (this.#token) params.set("token", this.#token);
    if (this.#lang) params.set("lang", this.#lang);
    if (this.lastSeq !== null) params.set("after", String(this.lastSeq));
    const query = params.toString();
    const source = new EventSource(`/rooms/${encodeURIComponent(this.#room)}/events${query ? `?${query}` : ""}`);
    this.#source = source;
    source.addEventListener("message", (event) => this.#onMessage(event));
    source.addEventListener("ping", () => this.#armSilenceTimer());
    source.addEventListener("open", () => this.#armSilenceTimer());
    source.addEventListener("error", () => this.#onError(source));
  }

  #close() {
    clearTimeout(this.#silenceTimer);
    this.#source?.close();
    this.#source = null;
  }

  #armSilenceTimer() {
    clearTimeout(this.#silenceTimer);
    this.#silenceTimer = setTimeout(() => this.#retry(), SILENCE_MS);
  }

  #onError(source) {
    if (source !== this.#source) return;
    clearTimeout(this.#silenceTimer);
    if (this.#state !== FeedState.CONNECTING) this.#setState(FeedState.RECONNECTING);
    // CONNECTING: the browser retries by itself (it sends Last-Event-ID). CLOSED: it gave up; we go on.
    if (source.readyState === EventSource.CLOSED) this.#retry();
  }

  async #retry() {
    this.#close();
    clearTimeout(this.#retryTimer);
    if (this.#state === FeedState.STOPPED || this.#state === FeedState.ERROR) return;
    this.#setState(FeedState.RECONNECTING);
    // Tell a missing room or a wrong token apart from a server that is down: the first cannot heal. (An editor's
    // token is checked where only an editor may read: an open room's status answers anyone.)
    try {
      const response = await fetch(this.url(this.#editor ? "/vocabulary" : ""), { cache: "no-store" });
      if (response.status === 404) return this.#fail("This room does not exist (check the address).");
      if (this.#editor && (response.status === 401 || response.status === 403)) {
        return this.#fail("This editor link was refused: its token is not this room's editor token.");
      }
      if (response.status === 403) return this.#fail("This room needs its viewer token in the address.");
      // A stream in a language the room does not have is refused (400): say so rather than retry for ever.
      if (this.#lang && response.ok && !(await hasLanguage(response, this.#lang))) {
        return this.#fail(`This room is not captioned in the language asked for (${this.#lang}).`);
      }
    } catch {
      // The server is unreachable: keep trying.
    }
    const base = BACKOFF_MS[Math.min(this.#attempt++, BACKOFF_MS.length - 1)];
    this.#retryTimer = setTimeout(() => this.#state !== FeedState.STOPPED && this.#open(), jitter(base));
  }

  #fail(detail) {
    this.#close();
    this.#setState(FeedState.ERROR, detail);
  }

  #onMessage(event) {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    if (!message || typeof message !== "object") return;
    this.messages.push(message);
    this.#attempt = 0;
    this.#armSilenceTimer();
    if (event.lastEventId) this.lastSeq = Number(event.lastEventId);
    switch (message.type) {
      case "room":
        this.status = {
          live: message.live === true,
          publishers: Number(message.publishers) || 0,
          viewers: Number(message.viewers) || 0,
          delayS: finiteOr(message.delay_s),
          held: finiteOr(message.held),
          behindMs: finiteOr(message.behind_ms),
          released: finiteOr(message.released),
        };
        this.dispatchEvent(new CustomEvent("status", { detail: { ...this.status } }));
        this.#setState(this.status.live ? FeedState.LIVE : FeedState.WAITING);
        break;
      case "caption":
        this.#onCaption(message);
        break;
      case "speakers":
        this.#onSpeakers(message);
        break;
      case "correction":
        this.#onCorrection(message);
        break;
      case "translation":
        // A stream in a language carries that language's translations only (the server's answer to `es-MX` is
        // the room's `es`): each is this feed's.
        if (this.#lang) this.#onTranslation(message);
        else if (this.#editor) this.#keepTranslation(message);
        break;
      case "languages":
        if (Array.isArray(message.languages)) {
          this.languages = message.languages.filter((code) => typeof code === "string");
          const detail = { seq: finiteOr(message.seq), languages: [...this.languages] };
          this.dispatchEvent(new CustomEvent("languages", { detail }));
        }
        break;
      case "vocabulary": {
        const list = (value) => (Array.isArray(value) ? value.filter((t) => typeof t === "string") : []);
        const detail = { seq: finiteOr(message.seq), terms: list(message.terms), learned: list(message.learned) };
        this.dispatchEvent(new CustomEvent("vocabulary", { detail }));
        break;
      }
    }
  }

  #onCaption(message) {
    const seq = Number.isFinite(message.seq) ? message.seq : null;
    const added = this.#add(Array.isArray(message.sentences) ? message.sentences : [], seq);
    this.partial = typeof message.partial === "string" ? message.partial : "";
    this.stable = stableCount(message.stable, this.partial);
    this.partialSpk = this.partial && Number.isInteger(message.partial_spk) ? message.partial_spk : null;
    this.partialSession = this.partialSpk !== null && typeof message.partial_session === "string"
      ? message.partial_session : null;
    this.open = decodeOpenLines(message.open);
    this.#announce(seq, added);
  }

  /** Hold the records of `sentences` not held yet (a replay after a reconnect has some); returns them. */
  #add(sentences, seq) {
    const added = [];
    for (const raw of sentences) {
      const record = toRecord(raw);
      if (!record || this.#records.has(record.id) || this.#gone.has(record.id)) continue;
      this.#records.set(record.id, record);
      this.#seqs.set(record.id, { seq, edit: seq });
      added.push(record);
    }
    this.#trim();
    return added;
  }

  #announce(seq, added) {
    for (const record of added) this.dispatchEvent(new CustomEvent("sentence", { detail: record }));
    const { partial, stable, partialSpk, partialSession, open } = this;
    this.dispatchEvent(new CustomEvent("caption", {
      detail: { seq, sentences: added, partial, stable, partialSpk, partialSession, open },
    }));
  }

  /**
   * A `translation` into this feed's language: sentences after everything held are new (as a caption's); the
   * others replace a sentence's text where it stands, or go in their place in order, as a correction's do.
   */
  #onTranslation(message) {
    const seq = Number.isFinite(message.seq) ? message.seq : null;
    const fresh = [];
    const rest = [];
    let last = [...this.#records.values()].at(-1) ?? null;
    for (const raw of Array.isArray(message.sentences) ? message.sentences : []) {
      const record = toRecord(raw);
      if (!record) continue;
      const held = this.#records.has(record.id) || this.#gone.has(record.id);
      if (!held && (!last || orderedIndex([last], record) > 0)) {
        fresh.push(raw);
        last = record;
      } else {
        rest.push(raw);
      }
    }
    if (rest.length) this.#onCorrection({ type: "correction", seq, sentences: rest, editor: message.editor ?? "" });
    const added = this.#add(fresh, seq);
    if (added.length) this.#announce(seq, added);
  }

  /** An editor's feed keeps every language's translations, and says which sentences one changed. */
  #keepTranslation(message) {
    if (typeof message.lang !== "string") return;
    const ids = [];
    for (const raw of Array.isArray(message.sentences) ? message.sentences : []) {
      const record = toRecord(raw);
      if (!record || this.#gone.has(record.id)) continue;
      this.translations.set(record.id, { ...this.translations.get(record.id), [message.lang]: record.text });
      ids.push(record.id);
    }
    if (ids.length) {
      this.dispatchEvent(new CustomEvent("translation", { detail: { lang: message.lang, ids,
                                                                    update: message.update === true } }));
    }
  }

  #onSpeakers(message) {
    const changed = [];
    for (const [id, spk] of Object.entries(message.relabel ?? {})) {
      const record = this.#records.get(Number(id));
      if (!record || !Number.isInteger(spk) || record.spk === spk) continue;
      record.spk = spk;
      changed.push(record);
    }
    if (changed.length) this.dispatchEvent(new CustomEvent("speakers", { detail: { seq: message.seq, changed } }));
  }

  #onCorrection(raw) {
    const message = decodeCorrection(raw);
    const { seq } = message;
    const changed = [];
    const deleted = [];
    const removed = [];
    for (const id of message.deleted) {
      if (this.#gone.has(id)) continue;
      this.#gone.add(id);
      const record = this.#records.get(id);
      if (record) {
        this.#records.delete(id);
        deleted.push(id);
        removed.push(record);
      }
      this.#seqs.delete(id);
    }
    for (const sentence of message.sentences) {
      const record = toRecord(sentence);
      if (!record || this.#gone.has(record.id)) continue;
      const held = this.#records.get(record.id);
      const seqs = this.#seqs.get(record.id);
      if (held) {
        if (seq !== null && seqs?.edit !== null && seqs?.edit !== undefined && seqs.edit >= seq) continue; // stale
        if (seqs) seqs.edit = seq;
        if (!sentence.session) record.session = held.session; // a data-channel shape without one: it did not move
        if (sameRecord(held, record)) continue;
        Object.assign(held, record);
        changed.push(held);
      } else {
        const list = [...this.#records.values()];
        const at = orderedIndex(list, record);
        // With `keep`, a sentence older than everything held is one trimmed away, not a split to show.
        if (this.#keep > 0 && at === 0 && list.length >= this.#keep) continue;
        list.splice(at, 0, record);
        this.#records = new Map(list.map((r) => [r.id, r]));
        this.#seqs.set(record.id, { seq, edit: seq });
        changed.push(record);
      }
    }
    this.#trim();
    const names = {};
    for (const [spk, name] of Object.entries(message.names)) {
      if (mergeNames(this.names, { [spk]: name })) names[spk] = name;
    }
    if (!changed.length && !deleted.length && !Object.keys(names).length) return null;
    const detail = { seq, changed: changed.filter((r) => this.#records.has(r.id)), deleted, removed, names,
                     editor: message.editor };
    this.dispatchEvent(new CustomEvent("correction", { detail }));
    return detail;
  }

  #trim() {
    if (this.#keep <= 0) return;
    for (const id of this.#records.keys()) {
      if (this.#records.size <= this.#keep) break;
      this.#records.delete(id);
      this.#seqs.delete(id);
    }
  }

  #setState(state, detail = "") {
    const previous = this.#state;
    if (previous === state && this.#detail === detail) return;
    this.#state = state;
    this.#detail = detail;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, previous, detail } }));
  }
}

/** Whether the room status `response` (`GET /rooms/{id}`) lists language `lang`, spoken or translated. */
async function hasLanguage(response, lang) {
  try {
    const status = await response.json();
    const has = [status.language, ...(Array.isArray(status.languages) ? status.languages : [])];
    return matching(lang, has.filter((code) => typeof code === "string")) !== undefined;
  } catch {
    return true; // not a status we can read: keep trying
  }
}

function toRecord(raw) {
  if (!raw || !Number.isInteger(raw.id) || typeof raw.text !== "string" || !raw.text.trim()) return null;
  const start = Number.isFinite(raw.start) ? Math.max(0, raw.start) : 0;
  return {
    id: raw.id,
    text: raw.text.trim(),
    start,
    end: Number.isFinite(raw.end) ? Math.max(start, raw.end) : start,
    spk: Number.isInteger(raw.spk) && raw.spk >= 0 ? raw.spk : null,
    session: typeof raw.session === "string" ? raw.session : "",
  };
}

function sameRecord(a, b) {
  return a.text === b.text && a.start === b.start && a.end === b.end && a.spk === b.spk && a.session === b.session;
}

function finiteOr(value, fallback = null) {
  return typeof value === "number" && Number.isFinite(value) ? value : fallback;
}

function jitter(ms) {
  return Math.round(ms * (0.8 + Math.random() * 0.4));
}
