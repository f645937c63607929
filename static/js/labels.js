/**
 * How the page labels time and speakers. Transcript files (TXT, SRT, WebVTT, JSON) are not made here: the
 * server renders them (app/transcripts/exports.py) for the download buttons and for room transcripts alike.
 */

/**
 * "Speaker 1" for spk 0: the server's speaker indices are 0-based, people count from one. `names`: the room's
 * speaker names (`{"<spk>": name}`, from `correction` messages); a label an editor named shows as that name.
 */
export function speakerName(spk, names = null) {
  if (spk === null || spk === undefined) return "Speaker ?";
  const named = names?.[spk];
  return typeof named === "string" && named ? named : `Speaker ${spk + 1}`;
}

/**
 * Merge the `names` of a `correction` into `names` (a plain object, changed in place): a name replaces the label's
 * previous one, "" gives the label back its "Speaker N". Returns whether anything changed.
 */
export function mergeNames(names, update) {
  let changed = false;
  for (const [spk, name] of Object.entries(update ?? {})) {
    if (!/^\d+$/.test(spk) || typeof name !== "string") continue;
    if (name ? names[spk] === name : !Object.hasOwn(names, spk)) continue;
    if (name) names[spk] = name;
    else delete names[spk];
    changed = true;
  }
  return changed;
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
