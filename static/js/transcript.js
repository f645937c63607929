/**
 * What the page has captioned so far: locked sentences in arrival order plus the one partial line (and how many of
 * its leading words are settled: `stable`). Pure data, no DOM, no network.
 *
 * A page may hold several server sessions (a reconnect or a new Start continues the same transcript), and
 * each session numbers its sentences and times from zero. Sentences are therefore keyed by (session, id),
 * and each session's times are shifted onto one page-wide timeline: a session starts where the page clock
 * stands when it begins, and never before the end of the previous sentence, so exports stay in order.
 */

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
   * Append newly locked sentences (decoded by protocol.js). A sentence is locked once and never changes,
   * so a repeated id is ignored. Returns the records actually added.
   */
  addSentences(sentences) {
    const added = [];
    for (const s of sentences) {
      const key = this.#key(this.#session, s.id);
      if (this.#byKey.has(key) || !s.text) continue;
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

  #key(session, id) {
    return `${session}\u0000${String(id)}`;
  }
}
