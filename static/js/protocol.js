/**
 * The `captions` data-channel protocol, client side (see docs/protocol.md).
 *
 * This is the only module that knows wire field names. It builds the client's messages and turns the server's
 * JSON into normalised objects with checked types, so rendering code never touches raw wire data and a
 * malformed field cannot reach the DOM.
 */

import { stableCount } from "./stable.js";

export const CHANNEL_LABEL = "captions";

/**
 * Client → server: begin captioning. `language` "" or null means auto-detect (sent as null). `task` "translate":
 * captions in English of speech in `language` (Whisper's translate task; the words said are kept beside them).
 */
export function startMessage({ language = null, hotwords = [], words = true, task = "transcribe" } = {}) {
  // words: each locked sentence comes with its word times, so the page's subtitle downloads cut cues at them.
  const message = { type: "start", language: language || null, hotwords: [...hotwords], words };
  return JSON.stringify(task === "translate" ? { ...message, task } : message);
}

/** Client → server: finish the open segment, then answer with a final caption and `stopped`. */
export function stopMessage() {
  return JSON.stringify({ type: "stop" });
}

/**
 * Split free text typed by a person into hotwords: commas or new lines separate entries, blanks and
 * case-insensitive repeats are dropped, and at most `max` entries are kept (the server rejects more).
 */
export function parseHotwords(text, max) {
  const seen = new Set();
  const words = [];
  for (const part of String(text ?? "").split(/[,\n]/)) {
    const word = part.trim().replace(/\s+/g, " ");
    const key = word.toLowerCase();
    if (!word || seen.has(key)) continue;
    seen.add(key);
    words.push(word);
  }
  return words.slice(0, Math.max(0, max));
}

export class ProtocolError extends Error {
  name = "ProtocolError";
}

/**
 * Decode one server → client message (a JSON string, or an already-parsed object in tests).
 *
 * Returns `{raw, message}`: `raw` is the JSON exactly as sent, `message` a normalised copy, one of
 *   {type: "ready", seq, session, model, language}
 *   {type: "caption", seq, sentences: [{id, text, start, end, spk, words?: [{w, start_ms, end_ms}]}], partial,
 *    stable, partialSpk (null when the server names no voice), isFinal, latencyMs}
 *     stable: how many leading words of `partial` (split on white space) are settled: they lock exactly as shown;
 *     only the words after them may still change (0 when the server did not say; never more than partial has)
 *   {type: "words", seq, id, words: [{w, start_ms, end_ms}]}: better word times for the locked sentence `id`
 *   {type: "speakers", seq, relabel: Map<string sentence id, spk>}
 *   {type: "correction", seq, sentences: [{id, text, start, end, spk, words?}], deleted: [ids], names: {"<spk>":
 *    name}, editor}: a room's editor corrected this session's sentences (ids are the session's): replace the
 *     sentence with the same id, insert one not seen before (a split) in order of start then id, remove `deleted`;
 *     `names` renames speaker labels ("" = back to "Speaker N"); sentences without a usable id or text are left out
 *   {type: "vocabulary", seq, terms: [str], learned: [str]}: a room's vocabulary (the editor's stream only)
 *   {type: "stopped", seq}
 *   {type: "error", seq, code, message}
 *   {type: "storage", seq, saving, message}: the server stopped (saving false) or resumed saving captions
 *   {type: "unknown", seq}: a message type this page does not know, so a newer server cannot break it.
 * Times are milliseconds from the start of the session's audio; `spk` is a 0-based speaker index or null
 * (not known yet); `latencyMs` is null when the server did not say. Throws ProtocolError on non-JSON or
 * non-object input.
 */
export function decodeServerMessage(data) {
  let raw = data;
  if (typeof data === "string") {
    try {
      raw = JSON.parse(data);
    } catch {
      throw new ProtocolError("message is not JSON");
    }
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new ProtocolError("message is not a JSON object");
  }
  const seq = finiteOr(raw.seq, null);
  switch (raw.type) {
    case "ready":
      return {
        raw,
        message: {
          type: "ready",
          seq,
          session: raw.session == null ? "" : String(raw.session),
          model: textOr(raw.model, ""),
          language: textOr(raw.language, null),
        },
      };
    case "caption":
      return {
        raw,
        message: {
          type: "caption",
          seq,
          sentences: Array.isArray(raw.sentences) ? raw.sentences.map(sentence) : [],
          partial: textOr(raw.partial, ""),
          stable: stableCount(raw.stable, textOr(raw.partial, "")),
          partialSpk: Number.isInteger(raw.partial_spk) ? raw.partial_spk : null,
          isFinal: raw.is_final === true,
          latencyMs: finiteOr(raw.latency_ms, null),
        },
      };
    case "speakers": {
      const relabel = new Map();
      for (const [id, spk] of Object.entries(raw.relabel ?? {})) relabel.set(String(id), speaker(spk));
      return { raw, message: { type: "speakers", seq, relabel } };
    }
    case "correction":
      return { raw, message: decodeCorrection(raw) };
    case "vocabulary":
      return { raw, message: { type: "vocabulary", seq, terms: texts(raw.terms), learned: texts(raw.learned) } };
    case "words": {
      const words = Array.isArray(raw.words) ? raw.words.map(word).filter((w) => w.w) : [];
      return { raw, message: { type: "words", seq, id: raw.id, words } };
    }
    case "stopped":
      return { raw, message: { type: "stopped", seq } };
    case "error":
      return {
        raw,
        message: {
          type: "error",
          seq,
          code: textOr(raw.code, "error"),
          message: textOr(raw.message, ""),
        },
      };
    case "storage":
      return { raw, message: { type: "storage", seq, saving: raw.saving !== false, message: textOr(raw.message, "") } };
    default:
      return { raw, message: { type: "unknown", seq } };
  }
}

/**
 * Decode the JSON body of a failed HTTP request (`{"error": {"code", "message"}}`) into `{code, message}`.
 * Bodies of another shape (a proxy's HTML page, say) yield a code derived from the HTTP status.
 */
/**
 * `GET /ice` → the RTCPeerConnection configuration `{iceServers, iceTransportPolicy}` the server wants every
 * client to use (its STUN/TURN servers with the credentials to use now). Throws ProtocolError for a malformed
 * body: a page must not quietly fall back to other servers or to a weaker policy than the server asked for.
 */
export function decodeIceConfig(body) {
  if (!body || typeof body !== "object" || !Array.isArray(body.iceServers)) {
    throw new ProtocolError("the ICE configuration has no iceServers list");
  }
  const policy = body.iceTransportPolicy ?? "all";
  if (policy !== "all" && policy !== "relay") throw new ProtocolError(`unknown ICE transport policy ${policy}`);
  const iceServers = body.iceServers.map((server) => {
    const urls = Array.isArray(server?.urls) ? server.urls : [server?.urls];
    if (!urls.length || !urls.every((url) => typeof url === "string" && /^(stun|turns?):/.test(url))) {
      throw new ProtocolError("an ICE server without a stun: or turn: URL");
    }
    const entry = { urls };
    if (typeof server.username === "string" && typeof server.credential === "string") {
      entry.username = server.username;
      entry.credential = server.credential;
    }
    return entry;
  });
  return { iceServers, iceTransportPolicy: policy };
}

export function decodeHttpError(body, status) {
  const error = body && typeof body === "object" ? body.error : null;
  return {
    code: textOr(error?.code, `http-${status}`),
    message: textOr(error?.message, ""),
  };
}

/**
 * A room caption's `open` (docs/protocol.md, "Viewer stream"): each speaking publisher's open text on its own, in the
 * order they started, as `[{session, text, stable, spk}]` (`stable` fitted to `text` as stableCount does, `spk` null
 * when not known; an entry without a session or text is left out). null when the message has no `open` (a server
 * from before it): its `partial` is then all there is.
 */
export function decodeOpenLines(raw) {
  if (!Array.isArray(raw)) return null;
  return raw.filter((line) => typeof line?.session === "string" && textOr(line.text, "").trim())
    .map(({ session, text, stable, spk }) => ({ session, text, stable: stableCount(stable, text), spk: speaker(spk) }));
}

/**
 * The `correction` message (data channel or a room's event stream; see decodeServerMessage) as
 * `{type: "correction", seq, sentences, deleted, names, editor}`, every field checked. Rooms' records also keep
 * the `session` each sentence names.
 */
export function decodeCorrection(raw) {
  const sentences = [];
  for (const item of Array.isArray(raw?.sentences) ? raw.sentences : []) {
    const decoded = sentence(item);
    if (!Number.isInteger(decoded.id) || !decoded.text) continue;
    if (typeof item.session === "string") decoded.session = item.session;
    sentences.push(decoded);
  }
  const deleted = (Array.isArray(raw?.deleted) ? raw.deleted : []).filter((id) => Number.isInteger(id));
  const names = {};
  if (raw?.names && typeof raw.names === "object" && !Array.isArray(raw.names)) {
    for (const [spk, name] of Object.entries(raw.names)) {
      if (/^\d+$/.test(spk) && typeof name === "string") names[spk] = name.trim();
    }
  }
  return { type: "correction", seq: finiteOr(raw?.seq, null), sentences, deleted, names,
           editor: textOr(raw?.editor, "") };
}

function texts(value) {
  return Array.isArray(value) ? value.filter((t) => typeof t === "string" && t.trim()).map((t) => t.trim()) : [];
}

function sentence(raw) {
  const start = Math.max(0, finiteOr(raw?.start, 0));
  const out = {
    id: raw?.id,
    text: textOr(raw?.text, "").trim(),
    start,
    end: Math.max(start, finiteOr(raw?.end, start)),
    spk: speaker(raw?.spk),
  };
  if (Array.isArray(raw?.words)) out.words = raw.words.map(word).filter((w) => w.w);
  return out;
}

function word(raw) {
  const start = Math.max(0, finiteOr(raw?.start_ms, 0));
  return { w: textOr(raw?.w, "").trim(), start_ms: start, end_ms: Math.max(start, finiteOr(raw?.end_ms, start)) };
}

function speaker(value) {
  return Number.isInteger(value) && value >= 0 ? value : null;
}

function finiteOr(value, fallback) {
  return typeof value === "number" && Number.isFinite(value) ? value : fallback;
}

function textOr(value, fallback) {
  return typeof value === "string" ? value : fallback;
}
