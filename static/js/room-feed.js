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
 *   error         the room does not exist or needs a viewer token; detail says which
 *
 * Events (CustomEvent, `detail` as listed):
 *   state     {state, previous, detail}
 *   caption   {seq, sentences: [records newly added], partial, stable, partialSpk, partialSession}   for every
 *             caption message (even partial-only); stable: how many leading words of partial are settled (they
 *             lock as shown; only the rest may change); partialSpk/partialSession: the voice now speaking (label and
 *             publishing session) when the server names it, else null
 *   sentence  one newly added record {id, text, start, end, spk, session}
 *   speakers  {seq, changed: [records]}
 *   status    {live, publishers, viewers}
 * Records: `id` is the room-wide sentence id; `start`/`end` are ms since the room was created; `spk` 0-based.
 * Other message types (`words` for viewers that asked for word times, types a newer server adds) are kept in
 * `messages` and otherwise ignored.
 */

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
  lastSeq = null;
  status = { live: false, publishers: 0, viewers: 0 };

  #room;
  #token;
  #source = null;
  #state = FeedState.STOPPED;
  #detail = "";
  #records = new Map();
  #attempt = 0;
  #retryTimer = 0;
  #silenceTimer = 0;
  #keep;

  /**
   * @param {{room: string, token?: string, keep?: number}} options
   *   keep: how many most recent sentences to hold (older ones are dropped; 0 = all)
   */
  constructor({ room, token = "", keep = 0 }) {
    super();
    this.#room = room;
    this.#token = token;
    this.#keep = keep;
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
    if (this.#token) params.set("token", this.#token);
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
    // Tell a missing room or a wrong token apart from a server that is down: the first cannot heal.
    try {
      const response = await fetch(this.url(""), { cache: "no-store" });
      if (response.status === 404) return this.#fail("This room does not exist (check the address).");
      if (response.status === 403) return this.#fail("This room needs its viewer token in the address.");
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
    }
  }

  #onCaption(message) {
    const added = [];
    for (const raw of Array.isArray(message.sentences) ? message.sentences : []) {
      const record = toRecord(raw);
      if (!record || this.#records.has(record.id)) continue; // a replay after a reconnect: seen already
      this.#records.set(record.id, record);
      added.push(record);
    }
    if (this.#keep > 0) {
      for (const id of this.#records.keys()) {
        if (this.#records.size <= this.#keep) break;
        this.#records.delete(id);
      }
    }
    this.partial = typeof message.partial === "string" ? message.partial : "";
    this.stable = stableCount(message.stable, this.partial);
    this.partialSpk = this.partial && Number.isInteger(message.partial_spk) ? message.partial_spk : null;
    this.partialSession = this.partialSpk !== null && typeof message.partial_session === "string"
      ? message.partial_session : null;
    for (const record of added) this.dispatchEvent(new CustomEvent("sentence", { detail: record }));
    const seq = Number.isFinite(message.seq) ? message.seq : null;
    const { partial, stable, partialSpk, partialSession } = this;
    this.dispatchEvent(new CustomEvent("caption", {
      detail: { seq, sentences: added, partial, stable, partialSpk, partialSession },
    }));
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

  #setState(state, detail = "") {
    const previous = this.#state;
    if (previous === state && this.#detail === detail) return;
    this.#state = state;
    this.#detail = detail;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, previous, detail } }));
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

function jitter(ms) {
  return Math.round(ms * (0.8 + Math.random() * 0.4));
}
