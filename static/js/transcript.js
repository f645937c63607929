/**
 * What the page has captioned so far: locked sentences in arrival order plus the one partial line (and how many of
 * its leading words are settled: `stable`). Pure data, no DOM, no network.
 *
 * A page may hold several server sessions (a reconnect or a new Start continues the same transcript), and
 * each session numbers its sentences and times from zero. Sentences are therefore keyed by (session, id),
 * and each session's times are shifted onto one page-wide timeline: a session starts where the page clock
 * stands when it begins, and never before the end of the previous sentence, so exports stay in order.
 *
 * A room's editor may correct the current session's sentences (`correct`): the records change in place, so the
 * page's transcript downloads carry the corrected text.
 */

import { orderedIndex } from "./corrections.js";

export class Transcript {
  partial = "";
  /** How many leading words of `partial` are settled (they lock exactly as shown). */
  stable = 0;

  #sentences = [];
  #byKey = new Map();
  #session = "";
  #offsetMs = 0;
  #originMs = null;

  /** Begin a new server session; its times count from `nowMs` on the page timeline. */
  beginSession(sessionId, nowMs = performance.now()) {
    const id = String(sessionId ?? "");
    if (this.#originMs !== null && id === this.#session) return;
    if (this.#originMs === null) this.#originMs = nowMs;
    const lastEnd = this.#sentences.at(-1)?.end ?? 0;
    this.#session = id;
    this.#offsetMs = Math.max(Math.round(nowMs - this.#originMs), lastEnd);
    this.partial = "";
    this.stable = 0;
  }

  /**
   * Append newly locked sentences (decoded by protocol.js). A sentence is locked once (only a room's editor
   * changes it after: `correct`), so a repeated id is ignored. Returns the records actually added.
   */
  addSentences(sentences) {
    const added = [];
    for (const s of sentences) {
      const key = this.#key(this.#session, s.id);
      if (this.#byKey.has(key) || !s.text) continue;
      const record = this.#record(s);
      this.#byKey.set(key, record);
      this.#sentences.push(record);
      added.push(record);
    }
    return added;
  }

  /**
   * Replace the word times of the current session's locked sentence `id` (a `words` message: the aligner's times,
   * which follow the lock). Returns the record, or null when this page does not hold that sentence.
   */
  setWords(id, words) {
    const record = this.#byKey.get(this.#key(this.#session, id));
    if (!record || !words.length) return null;
    record.words = words.map((w) => ({ w: w.w, start_ms: w.start_ms + this.#offsetMs,
                                       end_ms: w.end_ms + this.#offsetMs }));
    return record;
  }

  /**
   * Apply a `correction` (decoded by protocol.js: `{sentences, deleted}`, ids of the current session): a sentence
   * held takes its new text, times and speaker (its word times go when its text changed and none came with it); one
   * not held is a new sentence from a split, inserted in order of start, then id; `deleted` ones are removed.
   * Returns `{changed: [records], removed: [records]}` (records that did not change are left out).
   */
  correct({ sentences = [], deleted = [] }) {
    const removed = [];
    for (const id of deleted) {
      const key = this.#key(this.#session, id);
      const record = this.#byKey.get(key);
      if (!record) continue;
      this.#byKey.delete(key);
      this.#sentences.splice(this.#sentences.indexOf(record), 1);
      removed.push(record);
    }
    const changed = [];
    for (const s of sentences) {
      if (!s.text) continue;
      const key = this.#key(this.#session, s.id);
      const record = this.#byKey.get(key);
      const fresh = this.#record(s);
      if (!record) {
        this.#sentences.splice(orderedIndex(this.#sentences, fresh), 0, fresh);
        this.#byKey.set(key, fresh);
        changed.push(fresh);
        continue;
      }
      const same = record.text === fresh.text && record.start === fresh.start && record.end === fresh.end
        && record.spk === fresh.spk;
      if (same && !fresh.words) continue;
      if (record.text !== fresh.text && !fresh.words) delete record.words; // times of words no longer there
      Object.assign(record, fresh);
      if (!same) changed.push(record);
    }
    return { changed, removed };
  }

  /** Apply a speaker relabel (Map of sentence id → spk) to the current session; returns changed records. */
  relabel(relabel) {
    const changed = [];
    for (const [id, spk] of relabel) {
      const record = this.#byKey.get(this.#key(this.#session, id));
      if (!record || record.spk === spk) continue;
      record.spk = spk;
      changed.push(record);
    }
    return changed;
  }

  clear() {
    this.#sentences = [];
    this.#byKey.clear();
    this.#originMs = null;
    this.#session = "";
    this.#offsetMs = 0;
    this.partial = "";
    this.stable = 0;
  }

  /** Live records, in order. Callers must not modify them. */
  get sentences() {
    return this.#sentences;
  }

  /** A detached copy: `{sentences: [{id, text, start, end, spk, session}], partial, stable}`. */
  snapshot() {
    return { sentences: this.#sentences.map((s) => ({ ...s })), partial: this.partial, stable: this.stable };
  }

  /** A record of the current session from a decoded sentence, on the page's timeline. */
  #record(s) {
    const record = {
      id: s.id,
      text: s.text,
      start: s.start + this.#offsetMs,
      end: s.end + this.#offsetMs,
      spk: s.spk,
      session: this.#session,
    };
    if (s.words) {
      record.words = s.words.map((w) => ({ w: w.w, start_ms: w.start_ms + this.#offsetMs,
                                           end_ms: w.end_ms + this.#offsetMs }));
    }
    return record;
  }

  #key(session, id) {
    return `${session}\u0000${String(id)}`;
  }
}
