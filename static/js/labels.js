/**
 * How the page labels time and speakers. Transcript files (TXT, SRT, WebVTT, JSON) are not made here: the
 * server renders them (app/transcripts/exports.py) for the download buttons and for room transcripts alike.
 */

/** "Speaker 1" for spk 0: the server's speaker indices are 0-based, people count from one. */
export function speakerName(spk) {
  return spk === null || spk === undefined ? "Speaker ?" : `Speaker ${spk + 1}`;
}

/** Short reading time for the page: "0:07", "12:30", "1:02:03". */
export function shortTime(ms) {
  const total = Math.max(0, Math.floor((Number(ms) || 0) / 1000));
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor(total / 60) % 60;
  const seconds = total % 60;
  return hours ? `${hours}:${pad(minutes, 2)}:${pad(seconds, 2)}` : `${minutes}:${pad(seconds, 2)}`;
}

function pad(n, width) {
  return String(n).padStart(width, "0");
}
