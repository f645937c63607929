/**
 * One captioning session: one RTCPeerConnection carrying the microphone to the server and the `captions`
 * data channel carrying JSON back. A reconnect is a new Session (the server gives it a new session id).
 *
 * Signalling is a single POST without trickle ICE: the offer is sent once ICE gathering is complete, so the
 * server gets every candidate at once. The STUN/TURN servers and the transport policy ("relay": TURN only) come
 * from the server (`GET /ice`) before every connection: the same ones the server uses itself, with TURN
 * credentials made for this connection (time-limited ones would be stale in a page left open for a day).
 */

import { CaptionError } from "./errors.js";
import {
  CHANNEL_LABEL,
  decodeHttpError,
  decodeServerMessage,
  decodeIceConfig,
  ProtocolError,
  startMessage,
  stopMessage,
} from "./protocol.js";

// Gathering host candidates takes ~100 ms on loopback, a TURN allocation a few round trips more; a stuck
// interface or an unreachable STUN server must not hold the start for long.
const ICE_GATHER_TIMEOUT_MS = 2000;
// From POST to the server's `ready` message. Generous: a loaded CPU server can answer slowly.
const READY_TIMEOUT_MS = 20000;
// "disconnected" often heals by itself (a brief network change); only a lasting one counts as a drop.
const DISCONNECT_GRACE_MS = 5000;

/**
 * Events: "message", detail `{raw, message}` as from decodeServerMessage (`message` is null for data that
 * is not a JSON object; `raw` is then the data as received).
 * `closed` resolves once, with a short reason, when the session ends for any reason.
 */
export class Session extends EventTarget {
  /** Server session id, known once the offer is answered. */
  id = "";

  #pc = null;
  #channel = null;
  #isClosed = false;
  #disconnectTimer = 0;
  #resolveClosed;
  #ready = deferred();
  #stopped = deferred();

  /**
   * @param {{stream: MediaStream, offerUrl: string, iceUrl?: string,
   *          start: {language: string|null, hotwords: string[], task?: string},
   *          offerFields?: {room?: string, token?: string}}} init
   *   offerFields: extra fields for the POST /offer body (publish into a room; the server's token)
   *   iceUrl: where the RTCPeerConnection configuration comes from (default: `ice` beside offerUrl)
   */
  constructor({ stream, offerUrl, iceUrl, start, offerFields = {} }) {
    super();
    this.stream = stream;
    this.offerUrl = offerUrl;
    this.iceUrl = iceUrl ?? new URL("ice", new URL(offerUrl, location.href)).href;
    this.offerFields = offerFields;
    this.start = start;
    this.closed = new Promise((resolve) => (this.#resolveClosed = resolve));
    // Nobody may be waiting on these when the session closes early; don't report that as unhandled.
    this.#ready.promise.catch(() => {});
  }

  /**
   * Connect and start captioning. Resolves with the server's decoded `ready` message once it arrives;
   * rejects with a CaptionError (the session is then closed).
   */
  async connect() {
    if (typeof RTCPeerConnection !== "function") {
      throw new CaptionError("unsupported", "", { fatal: true });
    }
    try {
      const rtcConfig = await this.#fetchIceConfig();
      if (this.#isClosed) throw new CaptionError("stopped");
      const pc = (this.#pc = new RTCPeerConnection(rtcConfig));
      // The channel must exist before the offer so that the offer's SDP negotiates it.
      const channel = (this.#channel = pc.createDataChannel(CHANNEL_LABEL, { ordered: true }));
      for (const track of this.stream.getAudioTracks()) pc.addTrack(track, this.stream);

      channel.addEventListener("open", () => channel.send(startMessage(this.start)));
      channel.addEventListener("message", (event) => this.#onMessage(event.data));
      channel.addEventListener("close", () => this.close("channel closed"));
      pc.addEventListener("connectionstatechange", () => this.#onConnectionState());

      await pc.setLocalDescription(await pc.createOffer());
      await iceGatheringComplete(pc, ICE_GATHER_TIMEOUT_MS);
      if (this.#isClosed) throw new CaptionError("stopped");
      const answer = await this.#postOffer(pc.localDescription);
      this.id = answer.session == null ? "" : String(answer.session);
      this.room = answer.room == null ? "" : String(answer.room);
      if (this.#isClosed) throw new CaptionError("stopped");
      await pc.setRemoteDescription({ type: answer.type, sdp: answer.sdp });

      const timer = setTimeout(
        () => this.#ready.reject(new CaptionError("connect-timeout", "no ready message from the server")),
        READY_TIMEOUT_MS,
      );
      try {
        return await this.#ready.promise;
      } finally {
        clearTimeout(timer);
      }
    } catch (error) {
      this.close("connect failed");
      throw CaptionError.from(error);
    }
  }

  /** Send a JSON-encoded message if the channel is open; returns whether it was sent. */
  send(text) {
    if (this.#channel?.readyState !== "open") return false;
    this.#channel.send(text);
    return true;
  }

  /**
   * Ask the server to finish: it decodes the open segment, sends a final caption, then `stopped`.
   * Resolves when `stopped` arrives, the connection ends, or `timeoutMs` passes; the session is closed then.
   */
  async stop(timeoutMs) {
    if (this.#isClosed) return;
    if (this.send(stopMessage())) {
      await Promise.race([this.#stopped.promise, this.closed, sleep(timeoutMs)]);
    }
    this.close("stopped");
  }

  /** Close the connection; safe to call more than once. */
  close(reason = "closed") {
    if (this.#isClosed) return;
    this.#isClosed = true;
    clearTimeout(this.#disconnectTimer);
    this.#ready.reject(new CaptionError("connection-lost", reason));
    this.#stopped.resolve();
    try {
      this.#channel?.close();
      this.#pc?.close();
    } finally {
      this.#resolveClosed(reason);
    }
  }

  #onMessage(data) {
    if (this.#isClosed) return;
    let decoded;
    try {
      decoded = decodeServerMessage(data);
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      decoded = { raw: data, message: null };
    }
    this.dispatchEvent(new CustomEvent("message", { detail: decoded }));
    // Only the messages that drive the session's own life are looked at here.
    const message = decoded.message;
    if (message?.type === "ready") this.#ready.resolve(message);
    if (message?.type === "stopped") this.#stopped.resolve();
    // An error before `ready` means the server refused the start (bad language, too many hotwords, ...).
    if (message?.type === "error") this.#ready.reject(new CaptionError(message.code, message.message));
  }

  #onConnectionState() {
    const state = this.#pc.connectionState;
    clearTimeout(this.#disconnectTimer);
    if (state === "failed" || state === "closed") this.close(`connection ${state}`);
    if (state === "disconnected") {
      this.#disconnectTimer = setTimeout(() => this.close("connection lost"), DISCONNECT_GRACE_MS);
    }
  }

  /** `GET /ice`: the server's STUN/TURN servers and transport policy, with credentials for this connection. */
  async #fetchIceConfig() {
    const url = new URL(this.iceUrl, location.href);
    if (this.offerFields.room) url.searchParams.set("room", this.offerFields.room);
    const headers = this.offerFields.token ? { Authorization: `Bearer ${this.offerFields.token}` } : {};
    let response;
    try {
      response = await fetch(url, { headers, cache: "no-store" });
    } catch (error) {
      throw new CaptionError("unreachable", error?.message ?? "");
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const { code, message } = decodeHttpError(body, response.status);
      throw new CaptionError(code, message, { status: response.status, fatal: response.status === 401 });
    }
    try {
      return decodeIceConfig(body);
    } catch (error) {
      throw new CaptionError("bad-answer", error.message, { fatal: true });
    }
  }

  async #postOffer(description) {
    // A session's own room is spoken in the language it starts in (a room it joins has its own already); one of
    // Whisper's translate task is English, whatever is spoken.
    const translating = this.start.task === "translate";
    const language = translating ? { task: "translate" }
      : !this.offerFields.room && this.start.language ? { language: this.start.language } : {};
    let response;
    try {
      response = await fetch(this.offerUrl, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ ...this.offerFields, ...language, sdp: description.sdp, type: description.type }),
      });
    } catch (error) {
      throw new CaptionError("unreachable", error?.message ?? "");
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const { code, message } = decodeHttpError(body, response.status);
      // A 4xx other than "busy" means this page and the server disagree: retrying would only repeat it.
      const fatal = response.status >= 400 && response.status < 500 && code !== "busy";
      const retryAfterS = retryAfter(response.headers.get("Retry-After"), body?.error?.retry_after_s);
      const reason = typeof body?.error?.reason === "string" ? body.error.reason : "";
      throw new CaptionError(code, message, { status: response.status, fatal, retryAfterS, reason });
    }
    if (!body || typeof body.sdp !== "string" || body.type !== "answer") {
      throw new CaptionError("bad-answer", "the offer's answer has no SDP");
    }
    return body;
  }
}

/** Seconds to wait before trying again, from a `Retry-After` header (seconds) or the error body's field; 0 if none. */
function retryAfter(header, field) {
  for (const value of [header, field]) {
    const seconds = Number(value);
    if (value !== null && value !== undefined && value !== "" && Number.isFinite(seconds) && seconds > 0) {
      return Math.min(seconds, 600);
    }
  }
  return 0;
}

/** Resolve when ICE gathering is complete or after `timeoutMs`, whichever comes first. */
function iceGatheringComplete(pc, timeoutMs) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      pc.removeEventListener("icegatheringstatechange", check);
      resolve();
    };
    const check = () => pc.iceGatheringState === "complete" && done();
    const timer = setTimeout(done, timeoutMs);
    pc.addEventListener("icegatheringstatechange", check);
  });
}

function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
