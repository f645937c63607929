/**
 * Broadcast line breaks for the kiosk and the widget: the rules of the subtitle files (app/transcripts/line_breaks.py), so a
 * wall screen reads like broadcast captions rather than a wrapped paragraph. A break after punctuation is best,
 * before a conjunction or preposition next; never after an article or a preposition, never inside a name.
 * The word lists must stay equal to app/transcripts/line_breaks.py's (a test compares them).
 */

export const BREAK_BEFORE = new Set(
  ("and but or nor so yet because although though while whereas unless until if when whenever where wherever " +
   "whether than that which who whom whose what how why after before since as once of to in on at for with from " +
   "by about into onto over under between through during without within against among across behind beyond " +
   "upon toward towards like").split(" "));
export const NO_BREAK_AFTER = new Set(
  ("a an the this that these those my your his her its our their of to in on at for with from by into onto " +
   "and or but mr mrs ms dr st very").split(" "));

const COST_SENTENCE = 0;
const COST_CLAUSE = 1;
const COST_BEFORE_CONJUNCTION = 3;
const COST_PLAIN = 6;
const COST_DANGLING = 14;
const COST_IN_NAME = 20;
const COST_RAGGED = 12; // a line left short, per (unused share of the width) squared

const bare = (word) => word.replace(/^["'()[\]“”‘’]+|["'()[\]“”‘’]+$/g, "").toLowerCase();
const isUpper = (ch) => ch !== undefined && ch !== ch.toLowerCase() && ch === ch.toUpperCase();

/** How bad a line break between the words `before` and `after` reads (as app/transcripts/line_breaks.py break_cost). */
export function breakCost(before, after) {
  if (/[.?!]$/.test(before)) return COST_SENTENCE;
  if (/[,;:]$/.test(before)) return COST_CLAUSE;
  if (NO_BREAK_AFTER.has(bare(before))) return COST_DANGLING;
  if (isUpper(before[0]) && isUpper(after[0])) return COST_IN_NAME;
  if (BREAK_BEFORE.has(bare(after))) return COST_BEFORE_CONJUNCTION;
  return COST_PLAIN;
}

/**
 * Lay a run of words out as lines of at most `maxChars` characters that also pass `fits(text)` (the screen's
 * width in pixels), choosing the breaks that read best (a dynamic programme over the word boundaries; a line left
 * short costs more the shorter it is, the last line excepted). Returns the indices of the words that begin a new
 * line (never 0). A word longer than a line gets a line of its own. `keep`: the first `keep` words stay together
 * on the first line (a line laid out already, which more words continue); ignored if they do not fit on one.
 */
export function lineStarts(words, maxChars, fits = () => true, keep = 0) {
  const n = words.length;
  const best = new Array(n + 1).fill(Infinity);
  const from = new Array(n + 1).fill(0);
  best[0] = 0;
  for (let j = 1; j <= n; j++) {
    let width = -1;
    for (let i = j - 1; i >= 0; i--) {
      width += words[i].length + 1;
      if ((width > maxChars || !fits(words.slice(i, j).join(" "))) && i < j - 1) break;
      if (i > 0 && i < keep) continue; // no line starts inside the kept words
      const slack = Math.max(0, maxChars - width) / maxChars;
      const cost = best[i] + (j < n ? breakCost(words[j - 1], words[j]) + COST_RAGGED * slack * slack : 0);
      if (cost < best[j]) {
        best[j] = cost;
        from[j] = i;
      }
    }
  }
  if (best[n] === Infinity) return lineStarts(words, maxChars, fits);
  const starts = [];
  for (let j = n; j > 0; j = from[j]) if (from[j] > 0) starts.push(from[j]);
  return starts.reverse();
}
