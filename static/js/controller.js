/**
 * The page's captioning lifecycle: waiting for the model, connecting, live, reconnecting, stopping.
 * Owns the microphone stream, the current Session and the Transcript; knows nothing about the DOM.
 *
 * States (the `state` event's detail.state and the badge's data-state):
 *   idle          not captioning (model ready, or a previous run ended)
 *   loading       the server's model is loading; polled until ready
 *   connecting    asking for the microphone, then setting up the first session
 *   live          the server said `ready`; captions flow
 *   reconnecting  a live connection dropped; new sessions are tried with backoff, the transcript is kept
 *   full          the server is full (it refused the session with "busy"): tried again by itself after the wait
 *                 the server asked for (Retry-After), for as long as the person wants captions
 *   stopping      `stop` sent; waiting for the final caption and `stopped`
 *   error         a failure that retrying cannot fix (or the first connection failed); detail says why
 */

import { CaptionError, plainLanguage } from "./errors.js";
import { mergeNames } from "./labels.js";
import { openMicrophone, releaseMicrophone } from "./microphone.js";
import { decodeServerMessage, parseHotwords } from "./protocol.js";
import { Session } from "./session.js";
import { Transcript } from "./transcript.js";

export const State = Object.freeze({
  IDLE: "idle",
  LOADING: "loading",
  CONNECTING: "connecting",
  LIVE: "live",
  RECONNECTING: "reconnecting",
  FULL: "full",
  STOPPING: "stopping",
  ERROR: "error",
});

const EXPORT_FORMATS = ["txt", "srt", "vtt", "json"];
const POLL_LOADING_MS = 1000;
const POLL_DOWN_MS = 3000;
// The server decodes the open segment once more before `stopped`: seconds on a busy CPU.
const STOP_TIMEOUT_MS = 15000;
// Reconnect delays; each is jittered by ±20 % so many pages do not return at the same instant.
const BACKOFF_MS = [1000, 2000, 4000, 8000, 15000, 30000];
// A session that stayed live this long counts as healthy: the next drop starts the backoff afresh.
const STABLE_LIVE_MS = 20000;
// A full server that does not say when to try again (no Retry-After) is asked again after about this long.
const FULL_RETRY_S = 10;

/**
 * Events (CustomEvent, `detail` as listed):
 *   state     {state, previous, detail}   detail: plain-language text for the person, or ""
 *   ready     decoded `ready` message      {session, model, language}
 *   caption   {seq, sentences: [records added], partial, stable, partialSpk, isFinal, latencyMs}
 *             stable: how many leading words of `partial` are settled (shown as locked; only the rest may change)
 *   sentence  one record {id, text, start, end, spk, session}, once per newly locked sentence
 *   words     {seq, record}                better word times arrived for a locked record (record.words replaced)
 *   speakers  {seq, changed: [records]}   after a relabel was applied
 *   correction  {seq, changed: [records], deleted: [ids], removed: [records], names, editor}   a room's editor
 *             corrected this session's sentences (already applied: `changed` records have their new text or are new
 *             sentences from a split, in order; `removed` the records deleted, `deleted` their ids) or named speakers
 *             (`names`: the names that changed, `{"<spk>": name}`, "" = back to "Speaker N"; `names` on the
 *             controller holds them all); the transcript downloads carry the corrected text
 *   stopped   {session}
 *   error     {code, message, detail}     from the server, or a failure that ended the run
 *   storage   {saving, message}            the server stopped (false) or resumed (true) saving the captions
 */
export class CaptionController extends EventTarget {
  /** Every message received from the server, in order, as decoded JSON (or the raw data if not JSON). */
  messages = [];
  /** Current server session id ("" before the first `ready`). */
  session = "";
  model = "";
  language = null;
  /** Latest `latency_ms` from the server, or null. */
  latencyMs = null;
  /** Speaker names a room's editor gave, `{"<spk>": name}` (labels without a name are absent). */
  names = {};

  #state = State.IDLE;
  #detail = "";
  #transcript = new Transcript();
  #running = false;
  #run = 0;
  #current = null;
  #stream = null;
  #options = null;
  #defaults;
  #readyUrl;
  #offerUrl;
  #offerFields;
  #microphone;
  #muted = false;
  #maxHotwords;
  #wakers = new Set();
  #watching = false;
  #stopping = null;

  /**
   * @param {{readyUrl?: string, offerUrl?: string, maxHotwords?: number, model?: string,
   *          defaults?: () => object, offerFields?: {room?: string, token?: string, name?: string},
   *          microphone?: MediaTrackConstraints}} config
   *   defaults(): start options when start() is given none; offerFields: sent with every offer (rooms);
   *   microphone: the page's own getUserMedia audio constraints (then the `processing` option is not used)
   */
  constructor({ readyUrl = "/ready", offerUrl = "/offer", maxHotwords = 0, model = "", defaults,
                offerFields = {}, microphone = null } = {}) {
    super();
    this.#readyUrl = readyUrl;
    this.#offerUrl = offerUrl;
    this.#offerFields = offerFields;
    this.#microphone = microphone;
    this.#maxHotwords = maxHotwords;
    this.model = model;
    this.#defaults = defaults ?? (() => ({}));
  }

  get state() {
    return this.#state;
  }

  /** Plain-language text explaining the current state ("" when there is nothing to say). */
  get detail() {
    return this.#detail;
  }

  /** True from start() until stop() or a failure: the person wants captions. */
  get running() {
    return this.#running;
  }

  /**
   * Whether the microphone is muted: its track then sends silence (the session stays up; nothing new is captioned),
   * and a later start or reconnect keeps it so until it is unmuted.
   */
  get muted() {
    return this.#muted;
  }

  set muted(value) {
    this.#muted = Boolean(value);
    for (const track of this.#stream?.getAudioTracks() ?? []) track.enabled = !this.#muted;
  }

  /** `{sentences: [{id, text, start, end, spk, session}], partial, stable}`, a detached copy. */
  transcript() {
    return this.#transcript.snapshot();
  }

  /** Locked sentence records (live objects, for rendering and export; do not modify). */
  get sentences() {
    return this.#transcript.sentences;
  }

  /**
   * Start captioning. `options`: {language: code | "" | null (auto), hotwords: string[] | string,
   * processing: boolean (browser echo/noise processing), task: "transcribe" | "translate" (English captions of
   * speech in `language`)}; missing fields come from the page's controls.
   * Resolves once live; rejects with a CaptionError if the run ends in `error` or is stopped first.
   */
  start(options = {}) {
    if (this.#running || this.#stopping) return this.#whenLive();
    const merged = { ...this.#defaults(), ...options };
    const hotwords = Array.isArray(merged.hotwords) ? merged.hotwords.join(",") : merged.hotwords;
    this.#options = {
      language: merged.language || null,
      hotwords: parseHotwords(hotwords, this.#maxHotwords),
      processing: Boolean(merged.processing),
      task: merged.task === "translate" ? "translate" : "transcribe",
    };
    this.#running = true;
    const run = ++this.#run;
    const live = this.#whenLive();
    this.#begin(run);
    return live;
  }

  /** Stop captioning: the server finishes the open segment first. Resolves once idle. */
  stop() {
    if (!this.#running) return this.#stopping ?? Promise.resolve();
    this.#running = false;
    this.#wake();
    this.#stopping = this.#finish().finally(() => (this.#stopping = null));
    return this.#stopping;
  }

  /**
   * The locked transcript as a file: format "txt", "srt", "vtt" or "json". The server renders it (the same
   * formatter as a room's transcript files) from the sentences this page holds. Resolves to a Blob typed as
   * the file is; rejects with a CaptionError("export-failed") when the server cannot be reached.
   */
  async exportFile(format) {
    if (!EXPORT_FORMATS.includes(format)) throw new CaptionError("bad-format", `unknown format ${format}`);
    const url = new URL(`exports/transcript.${format}`, new URL(this.#offerUrl, location.href));
    const body = { sentences: this.#transcript.sentences, model: this.model, language: this.language };
    if (this.#offerFields.token) body.token = this.#offerFields.token;
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch (err) {
      throw new CaptionError("export-failed", `the server could not be reached (${err.message})`);
    }
    if (!response.ok) {
      const reason = await response.json().then((j) => j?.error?.message).catch(() => "");
      throw new CaptionError("export-failed", reason || `the server answered ${response.status}`);
    }
    return response.blob();
  }

  /** The locked transcript as text in one of the formats of `exportFile` (what the download buttons save). */
  async exportAs(format) {
    return (await this.exportFile(format)).text();
  }

  /** Forget the transcript shown so far. */
  clear() {
    this.#transcript.clear();
    this.latencyMs = null;
  }

  /**
   * Handle one server message exactly as if it had arrived on the data channel (the Session feeds it
   * here too). Lets tests drive the page's rendering without a server.
   */
  receive(data) {
    let decoded;
    try {
      decoded = decodeServerMessage(data);
    } catch {
      decoded = { raw: data, message: null };
    }
    this.#handle(decoded);
  }

  /** At page load: poll the server until its model is ready, showing `loading` meanwhile. */
  async watchReadiness() {
    if (this.#watching) return;
    this.#watching = true;
    try {
      while (!this.#running) {
        const ready = await this.#fetchReady();
        if (this.#running) return;
        if (ready.state === "ready") {
          if (this.#state !== State.IDLE) this.#setState(State.IDLE);
          return;
        }
        if (ready.state === "loading") this.#setState(State.LOADING, loadingText(ready.detail));
        else this.#setState(State.ERROR, plainLanguage(readinessError(ready)));
        await this.#sleep(ready.state === "loading" ? POLL_LOADING_MS : POLL_DOWN_MS);
      }
    } finally {
      this.#watching = false;
    }
  }

  async #begin(run) {
    try {
      this.#setState(State.CONNECTING, "Waiting for the microphone…");
      const stream = await openMicrophone({ processing: this.#options.processing, audio: this.#microphone });
      if (!this.#isCurrent(run)) {
        releaseMicrophone(stream);
        return;
      }
      this.#stream = stream;
      for (const track of stream.getAudioTracks()) track.enabled = !this.#muted;
      for (const track of stream.getAudioTracks()) {
        track.addEventListener("ended", () => this.#isCurrent(run) && this.#fail(new CaptionError("mic-ended")));
      }
      await this.#connectLoop(run);
    } catch (error) {
      if (this.#isCurrent(run)) this.#fail(error);
    }
  }

  /** Connect, stay live until the connection drops, reconnect with backoff; until stopped or failed. */
  async #connectLoop(run) {
    let attempt = 0;
    let wasLive = false;
    while (this.#isCurrent(run)) {
      let liveSince = 0;
      try {
        await this.#awaitModel(run);
        if (!this.#isCurrent(run)) return;
        // (A page waiting for a full server says so until the server's answer changes.)
        const waiting = this.#state === State.FULL;
        if (!waiting && !wasLive) this.#setState(State.CONNECTING, "Connecting to the server…");
        else if (!waiting && this.#state !== State.RECONNECTING) this.#setState(State.RECONNECTING, "Reconnecting…");

        const session = new Session({
          stream: this.#stream,
          offerUrl: this.#offerUrl,
          start: this.#options,
          offerFields: this.#offerFields,
        });
        this.#current = session;
        session.addEventListener("message", (event) => this.#handle(event.detail));
        await session.connect();
        if (!this.#isCurrent(run)) return;

        wasLive = true;
        liveSince = Date.now();
        this.#setState(State.LIVE);
        const reason = await session.closed;
        if (!this.#isCurrent(run)) return;
        throw new CaptionError("connection-lost", reason);
      } catch (error) {
        if (!this.#isCurrent(run)) return;
        this.#current?.close("replaced");
        this.#current = null;
        this.#dropPartial();
        const err = CaptionError.from(error);
        if (err.code === "loading") {
          // The model is (re)loading: wait for it through /ready, without counting a failed attempt.
          await this.#sleep(POLL_LOADING_MS);
          continue;
        }
        if (err.code === "unreachable" && this.#state === State.FULL) {
          // It was full or stopping, and now cannot be reached (restarting): keep waiting for it, as for a full one.
          const waitMs = jitter(FULL_RETRY_S * 1000);
          this.#setState(State.FULL, `${plainLanguage(err)} Trying again in ${Math.round(waitMs / 1000)} s…`);
          await this.#sleep(waitMs);
          continue;
        }
        if (err.code === "busy") {
          // The server is full: it keeps its sessions on time rather than let this one make them all late. Wait as
          // long as it asks (jittered, so that many pages do not come back at once), then try again; not a failure.
          const waitMs = jitter((err.retryAfterS || FULL_RETRY_S) * 1000);
          const why = err.reason === "shutting_down" ? new CaptionError("restarting") : err;
          this.#setState(State.FULL, `${plainLanguage(why)} Trying again in ${Math.round(waitMs / 1000)} s…`);
          await this.#sleep(waitMs);
          continue;
        }
        if (!wasLive || err.fatal) throw err;
        if (liveSince && Date.now() - liveSince >= STABLE_LIVE_MS) attempt = 0;
        this.#setState(State.RECONNECTING, `${plainLanguage(err)} Reconnecting…`);
      }
      await this.#sleep(backoff(attempt++));
    }
  }

  /** Resolve once /ready says ready; `loading` meanwhile. Throws when the model failed or no server. */
  async #awaitModel(run) {
    for (;;) {
      const ready = await this.#fetchReady();
      if (!this.#isCurrent(run) || ready.state === "ready") return;
      if (ready.state !== "loading") throw readinessError(ready);
      this.#setState(State.LOADING, loadingText(ready.detail));
      await this.#sleep(POLL_LOADING_MS);
    }
  }

  async #fetchReady() {
    let response;
    try {
      response = await fetch(this.#readyUrl, { cache: "no-store" });
    } catch (error) {
      return { state: "unreachable", detail: error?.message ?? "" };
    }
    const body = await response.json().catch(() => ({}));
    if (typeof body?.model === "string" && body.model) this.model = body.model;
    if (response.ok && body?.ready === true) return { state: "ready" };
    if (body?.state === "loading" || body?.state === "failed") {
      return { state: body.state, detail: typeof body.detail === "string" ? body.detail : "" };
    }
    return { state: "unreachable", detail: `HTTP ${response.status}` };
  }

  async #finish() {
    const session = this.#current;
    this.#current = null;
    if (session && this.#state === State.LIVE) {
      this.#setState(State.STOPPING, "Finishing the last sentence…");
      await session.stop(STOP_TIMEOUT_MS);
    } else {
      session?.close("stopped");
    }
    releaseMicrophone(this.#stream);
    this.#stream = null;
    // Text still open at this point was never locked: it is not part of the transcript.
    this.#dropPartial();
    this.#setState(State.IDLE);
  }

  #fail(error) {
    const err = CaptionError.from(error);
    this.#running = false;
    this.#run += 1;
    this.#wake();
    this.#current?.close("failed");
    this.#current = null;
    releaseMicrophone(this.#stream);
    this.#stream = null;
    this.#dropPartial();
    this.#setState(State.ERROR, plainLanguage(err));
    this.#emit("error", { code: err.code, message: err.detail, detail: plainLanguage(err) });
  }

  #handle({ raw, message }) {
    this.messages.push(raw);
    if (!message) return;
    switch (message.type) {
      case "ready":
        this.session = message.session;
        this.model = message.model || this.model;
        this.language = message.language;
        this.#transcript.beginSession(message.session);
        this.#emit("ready", { session: message.session, model: message.model, language: message.language });
        break;
      case "caption": {
        const added = this.#transcript.addSentences(message.sentences);
        this.#transcript.partial = message.partial;
        this.#transcript.stable = message.stable;
        if (message.latencyMs !== null) this.latencyMs = message.latencyMs;
        for (const record of added) this.#emit("sentence", { ...record });
        this.#emit("caption", {
          seq: message.seq,
          sentences: added.map((record) => ({ ...record })),
          partial: message.partial,
          stable: message.stable,
          partialSpk: message.partialSpk,
          isFinal: message.isFinal,
          latencyMs: message.latencyMs,
        });
        break;
      }
      case "words": {
        const record = this.#transcript.setWords(message.id, message.words);
        if (record) this.#emit("words", { seq: message.seq, record: { ...record } });
        break;
      }
      case "speakers": {
        const changed = this.#transcript.relabel(message.relabel);
        this.#emit("speakers", { seq: message.seq, changed: changed.map((record) => ({ ...record })) });
        break;
      }
      case "correction": {
        const { changed, removed } = this.#transcript.correct(message);
        const names = {};
        for (const [spk, name] of Object.entries(message.names)) {
          if (mergeNames(this.names, { [spk]: name })) names[spk] = name;
        }
        if (!changed.length && !removed.length && !Object.keys(names).length) break;
        this.#emit("correction", {
          seq: message.seq,
          changed: changed.map((record) => ({ ...record })),
          deleted: removed.map((record) => record.id),
          removed: removed.map((record) => ({ ...record })),
          names,
          editor: message.editor,
        });
        break;
      }
      case "stopped":
        this.#emit("stopped", { session: this.session });
        break;
      case "error": {
        const detail = plainLanguage(new CaptionError(message.code, message.message));
        this.#emit("error", { code: message.code, message: message.message, detail });
        break;
      }
      case "storage":
        this.#emit("storage", { saving: message.saving, message: message.message });
        break;
      default:
        break;
    }
  }

  #dropPartial() {
    if (!this.#transcript.partial) return;
    this.#transcript.partial = "";
    this.#transcript.stable = 0;
    this.#emit("caption", { seq: null, sentences: [], partial: "", stable: 0, partialSpk: null, isFinal: false,
                            latencyMs: null });
  }

  #setState(state, detail = "") {
    const previous = this.#state;
    if (previous === state && this.#detail === detail) return;
    this.#state = state;
    this.#detail = detail;
    if (state !== State.LIVE) this.latencyMs = null;
    this.#emit("state", { state, previous, detail });
  }

  #emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  #isCurrent(run) {
    return this.#running && run === this.#run;
  }

  #whenLive() {
    if (this.#state === State.LIVE) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onState = ({ detail }) => {
        if (detail.state === State.LIVE) resolve();
        else if (detail.state === State.ERROR) reject(new CaptionError("failed", detail.detail));
        else if (detail.state === State.IDLE) reject(new CaptionError("stopped", "stopped before going live"));
        else return;
        this.removeEventListener("state", onState);
      };
      this.addEventListener("state", onState);
    });
  }

  /** Wait `ms`, or less if stop() or a failure wakes every sleeper. */
  #sleep(ms) {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.#wakers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#wakers.add(wake);
    });
  }

  #wake() {
    for (const wake of [...this.#wakers]) wake();
  }
}

function backoff(attempt) {
  return jitter(BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)]);
}

/** `ms` ±20 %, so that many pages waiting alike do not all come back at the same instant. */
function jitter(ms) {
  return Math.round(ms * (0.8 + Math.random() * 0.4));
}

function readinessError(ready) {
  if (ready.state === "failed") return new CaptionError("model-failed", ready.detail, { fatal: true });
  return new CaptionError("unreachable", ready.detail);
}

function loadingText(detail) {
  const base = "The speech model is loading. On a first start this can take a few minutes.";
  return detail ? `${base} (${detail})` : base;
}
