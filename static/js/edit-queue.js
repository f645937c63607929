/**
 * The editor's requests to the server (docs/protocol.md "Correcting a room live: the editor"), one at a time, in the
 * order they were made, each retried until the server answers it: no edit is lost to a dropped connection, a
 * restarting server or a full disk, and an edit never overtakes an earlier one (a text fix, then a split of the
 * fixed text, reach the server in that order).
 *
 * Contract:
 * - `push(job)` queues `{method, path, body?, target?, doneIf?}` and returns a promise of the answer's JSON body. It
 *   resolves on a 2xx answer; it rejects with an `EditError` (`status`, `code`, `message`) on an answer that retrying
 *   cannot change (400, 401, 403, 404, 409, 413, 415). A network failure, a request that takes longer than
 *   REQUEST_TIMEOUT_MS, 408, 429 and 5xx answers are retried after a backoff, for ever, in place: the jobs after it
 *   wait (order matters more than speed; a person is watching the count).
 * - `doneIf()`, when given, is asked before a retry: a job whose first try may have reached the server (the answer
 *   was lost) and whose effect is already visible (a split whose sentence is already cut there) resolves with null
 *   instead of being sent twice. After a lost answer, a retried DELETE that the server answers 404 resolved too.
 * - `target`: a free label of what the job changes (`"sentence:7"`), for `pendingFor`.
 * - Events: `change` `{pending, retrying, detail}` whenever the number of jobs or the retry state changes; `detail`
 *   is a plain-language reason while retrying ("" otherwise).
 * The token goes in `Authorization: Bearer`; the queue knows nothing about the page.
 */

const BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 15000];
const REQUEST_TIMEOUT_MS = 15000;
const RETRY_STATUS = new Set([408, 425, 429, 500, 502, 503, 504]);

export class EditError extends Error {
  name = "EditError";

  constructor(status, code, message) {
    super(message || code);
    this.status = status;
    this.code = code;
  }
}

export class EditQueue extends EventTarget {
  #token;
  #jobs = [];
  #running = false;
  #retrying = false;
  #detail = "";
  #wake = null;

  /** @param {{token: string}} options  the room's editor token (or the server's) */
  constructor({ token }) {
    super();
    this.#token = token;
  }

  /** How many jobs are waiting or under way. */
  get pending() {
    return this.#jobs.length;
  }

  /** Whether the job under way failed and waits to be tried again. */
  get retrying() {
    return this.#retrying;
  }

  /** How many jobs with this `target` are waiting or under way. */
  pendingFor(target) {
    return this.#jobs.filter((job) => job.target === target).length;
  }

  /** Try the waiting job now instead of after its backoff (the person pressed "retry now", or came back online). */
  retryNow() {
    this.#wake?.();
  }

  /** Queue a request; see the module's contract. */
  push({ method, path, body = undefined, target = "", doneIf = null }) {
    return new Promise((resolve, reject) => {
      this.#jobs.push({ method, path, body, target, doneIf, resolve, reject });
      this.#changed();
      if (!this.#running) this.#run();
    });
  }

  async #run() {
    this.#running = true;
    while (this.#jobs.length) {
      const job = this.#jobs[0];
      let outcome;
      try {
        outcome = { ok: true, value: await this.#send(job) };
      } catch (error) {
        outcome = { ok: false, error };
      }
      // The job leaves the queue before its caller hears: `pendingFor` then counts only what is still to come.
      this.#jobs.shift();
      this.#retrying = false;
      this.#detail = "";
      this.#changed();
      if (outcome.ok) job.resolve(outcome.value);
      else job.reject(outcome.error);
    }
    this.#running = false;
  }

  /** Send `job` until the server answers it for good; returns the body, or throws an EditError. */
  async #send(job) {
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0 && job.doneIf?.()) return null;
      let response;
      try {
        response = await this.#fetch(job);
      } catch (error) {
        await this.#backoff(attempt, `The server cannot be reached (${error.message || error.name}).`);
        continue;
      }
      const body = await response.json().catch(() => null);
      if (response.ok) return body;
      if (attempt > 0 && job.method === "DELETE" && response.status === 404) return null; // gone by the first try
      const error = body?.error ?? {};
      if (RETRY_STATUS.has(response.status)) {
        const why = error.message || `the server answered ${response.status}`;
        await this.#backoff(attempt, `Not saved yet: ${why}.`, retryAfterMs(response));
        continue;
      }
      throw new EditError(response.status, error.code || `http-${response.status}`,
                          error.message || `the server answered ${response.status}`);
    }
  }

  async #fetch(job) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error("no answer in time")), REQUEST_TIMEOUT_MS);
    try {
      const headers = { Authorization: `Bearer ${this.#token}` };
      if (job.body !== undefined) headers["Content-Type"] = "application/json";
      return await fetch(job.path, {
        method: job.method,
        headers,
        body: job.body === undefined ? undefined : JSON.stringify(job.body),
        cache: "no-store",
        signal: controller.signal,
      });
    } finally {
      clearTimeout(timer);
    }
  }

  async #backoff(attempt, detail, atLeastMs = 0) {
    const ms = Math.max(atLeastMs, jitter(BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)]));
    this.#setRetrying(true, `${detail} Trying again in ${Math.max(1, Math.round(ms / 1000))} s.`);
    await new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const onOnline = () => done();
      window.addEventListener("online", onOnline);
      this.#wake = done;
      function done() {
        clearTimeout(timer);
        window.removeEventListener("online", onOnline);
        resolve();
      }
    });
    this.#wake = null;
  }

  #setRetrying(retrying, detail) {
    if (this.#retrying === retrying && this.#detail === detail) return;
    this.#retrying = retrying;
    this.#detail = detail;
    this.#changed();
  }

  #changed() {
    const detail = { pending: this.#jobs.length, retrying: this.#retrying, detail: this.#detail };
    this.dispatchEvent(new CustomEvent("change", { detail }));
  }
}

function retryAfterMs(response) {
  const seconds = Number(response.headers.get("Retry-After"));
  return Number.isFinite(seconds) && seconds > 0 ? Math.min(seconds, 60) * 1000 : 0;
}

/** `ms` ±20 %, so that editors cut off together do not all come back at the same instant. */
function jitter(ms) {
  return Math.round(ms * (0.8 + Math.random() * 0.4));
}
