/**
 * What every display shares about corrections (a room's editor fixing text live, docs/protocol.md "Correcting a
 * room live: the editor"): where a new sentence from a split goes, and the brief mark a corrected sentence gets.
 *
 * The mark is the CSS class `corrected` on the sentence's element for `CORRECTED_MS`: a background tint only
 * (each page's style sheet fades it, or with prefers-reduced-motion simply shows it), never anything that takes
 * room, so no line moves because of it.
 */

export const CORRECTED_MS = 2000;

const timers = new WeakMap(); // element -> its timer

/** Mark `element` as just corrected for CORRECTED_MS (marking it again starts the time and the fade afresh). */
export function markCorrected(element) {
  clearTimeout(timers.get(element));
  if (element.classList.contains("corrected")) {
    element.classList.remove("corrected");
    void element.offsetWidth; // a style flush, so that the fade starts over
  }
  element.classList.add("corrected");
  timers.set(element, setTimeout(() => {
    element.classList.remove("corrected");
    timers.delete(element);
  }, CORRECTED_MS));
}

/** Whether `element` is marked as just corrected (a display rebuilding its DOM keeps the mark on the new one). */
export function isMarked(element) {
  return element.classList.contains("corrected");
}

/**
 * The index in `records` (ordered by start, then id) at which `record` goes: a new sentence from a split sits
 * after the sentences that start before it (or at the same time with a lower id).
 */
export function orderedIndex(records, record) {
  let i = records.length;
  while (i > 0 && before(record, records[i - 1])) i--;
  return i;
}

function before(a, b) {
  return a.start < b.start || (a.start === b.start && a.id < b.id);
}
