/**
 * The page's small error taxonomy: every failure becomes a CaptionError with a stable `code` (the server's
 * own codes pass through unchanged), and `plainLanguage()` turns it into a sentence a person can act on.
 */

export class CaptionError extends Error {
  name = "CaptionError";

  /**
   * @param {string} code    stable machine-readable reason ("busy", "mic-denied", ...)
   * @param {string} message detail from the server or the browser; may be empty
   * @param {{status?: number, fatal?: boolean, retryAfterS?: number, reason?: string}} options  fatal: retrying
   *   cannot help (so no reconnect); retryAfterS: the server said when to try again (its Retry-After), in seconds;
   *   reason: the server's finer reason, if it gave one (a "busy" server is "full", at its "limit" or "shutting_down")
   */
  constructor(code, message = "", { status = 0, fatal = false, retryAfterS = 0, reason = "" } = {}) {
    super(message || code);
    this.code = code;
    this.detail = message;
    this.status = status;
    this.fatal = fatal;
    this.retryAfterS = retryAfterS;
    this.reason = reason;
  }

  /** Wrap anything thrown into a CaptionError, keeping CaptionErrors as they are. */
  static from(error) {
    if (error instanceof CaptionError) return error;
    return new CaptionError("unexpected", error?.message ?? String(error));
  }
}

const PLAIN = {
  "mic-denied":
    "Microphone access is blocked. Allow the microphone for this page (see the icon in the address bar), " +
    "then press Start.",
  "mic-missing": "No microphone was found. Connect one, then press Start.",
  "mic-busy": "The microphone is in use by another app or could not be opened.",
  "mic-ended": "The microphone stopped sending sound (was it unplugged?). Press Start to try again.",
  insecure: "This page can only use the microphone over https (or on this computer via localhost).",
  unsupported: "This browser cannot stream audio to the server (WebRTC is missing or disabled).",
  busy: "The server is full: it is captioning as many speakers as it can keep on time. This page tries again by itself.",
  restarting: "The server is restarting. This page tries again by itself.",
  loading: "The speech model is still loading.",
  "model-failed": "The speech model failed to load on the server.",
  unreachable: "The captioning server cannot be reached. Check that it is running.",
  "connect-timeout": "The audio connection to the server could not be set up.",
  "connection-lost": "The connection to the server dropped.",
  "bad-answer": "The server sent a reply this page does not understand.",
};

/** A sentence for a person: what happened and, where possible, what to do. */
export function plainLanguage(error) {
  const err = CaptionError.from(error);
  const plain = PLAIN[err.code];
  if (plain && err.code === "model-failed" && err.detail) return `${plain} (${err.detail})`;
  if (plain) return plain;
  if (err.detail) return `The server reported a problem: ${err.detail}`;
  return `Something went wrong (${err.code}).`;
}
