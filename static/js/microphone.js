/**
 * Opening the microphone. Kept apart from the WebRTC session because one microphone stream outlives many
 * sessions: a reconnect reuses it, so the person is never asked for permission twice.
 */

import { CaptionError } from "./errors.js";

/**
 * Open a mono microphone stream.
 *
 * By default the browser's echo cancellation, noise suppression and gain control are off: the recogniser
 * does better on the unprocessed signal and the server does its own voice detection. `processing: true`
 * turns them on, which helps on a laptop whose speakers play into its microphone. `audio`: a page's own
 * getUserMedia audio constraints instead (mono unless they say otherwise); `processing` is then not looked at.
 */
export async function openMicrophone({ processing = false, audio: constraints = null } = {}) {
  if (!window.isSecureContext || !navigator.mediaDevices?.getUserMedia) {
    throw new CaptionError("insecure", "", { fatal: true });
  }
  const audio = constraints ? { channelCount: 1, ...constraints } : {
    echoCancellation: processing,
    noiseSuppression: processing,
    autoGainControl: processing,
    channelCount: 1,
  };
  try {
    return await navigator.mediaDevices.getUserMedia({ audio });
  } catch (error) {
    throw microphoneError(error);
  }
}

/** Stop every track so the browser's recording indicator goes away. */
export function releaseMicrophone(stream) {
  for (const track of stream?.getTracks() ?? []) track.stop();
}

function microphoneError(error) {
  const codes = {
    NotAllowedError: "mic-denied",
    SecurityError: "mic-denied",
    NotFoundError: "mic-missing",
    OverconstrainedError: "mic-missing",
    NotReadableError: "mic-busy",
    AbortError: "mic-busy",
  };
  return new CaptionError(codes[error?.name] ?? "mic-busy", error?.message ?? "", { fatal: true });
}
