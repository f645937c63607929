/**
 * Stable words of the open text (docs/protocol.md, `caption.stable`): the first `stable` words of `partial` (split
 * on white space, as the server splits them) are settled: they lock exactly as shown and never change; only the
 * words after them, the tentative tail, may still change. Pure functions, no DOM: the views (view.js,
 * caption-lines.js) show the settled part like locked text and the tail quieter.
 */

/** How many words `text` has (runs of non-space characters). */
export function wordCount(text) {
  return String(text ?? "").match(/\S+/g)?.length ?? 0;
}

/** The wire's `stable` as a count that fits `text`: a whole number from 0 to its word count (anything else: 0). */
export function stableCount(value, text) {
  return Number.isInteger(value) && value > 0 ? Math.min(value, wordCount(text)) : 0;
}

/**
 * Split `text` after its first `count` words: `{settled, gap, tail}`, where `settled + gap + tail === text`,
 * `settled` ends with the last settled word (empty when none is), `gap` is the white space after it and `tail`
 * the tentative rest (empty when every word is settled).
 */
export function splitStable(text, count) {
  const value = String(text ?? "");
  const n = Number.isInteger(count) && count > 0 ? count : 0;
  if (!n) return { settled: "", gap: "", tail: value };
  const words = /\S+/g;
  let end = 0;
  for (let k = 0; k < n; k++) {
    const match = words.exec(value);
    if (!match) break;
    end = match.index + match[0].length;
  }
  const rest = value.slice(end);
  const gap = rest.length - rest.trimStart().length;
  return { settled: value.slice(0, end), gap: rest.slice(0, gap), tail: rest.slice(gap) };
}

/** Whether `next` is `previous` with words appended (or equal): settled text only ever grows like this. */
export function extendsText(previous, next) {
  return next === previous || (next.startsWith(previous) && (!previous || /^\s/.test(next.slice(previous.length))));
}
