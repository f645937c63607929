/**
 * Caption lines for the widget and the kiosk: the room's text as one flowing paragraph, newest at the end, in a
 * box as tall as N lines (CSS `--lines`) that clips older lines away at the top, like broadcast captions.
 * The newest lines are broken as broadcast subtitles are (./line-breaks.js, the rules of the subtitle files): at
 * most `maxChars` characters (42) and the box's width, after punctuation rather than inside a phrase. The breaks
 * are `<br>` elements inside the spans below, after a space, so each span's textContent stays its text.
 *
 * The open text's settled words (the server's `stable` count: they lock exactly as shown) look like locked text;
 * only the tentative tail after them is quieter. Where the lines break among the settled words does not depend on
 * the tail (the tail is laid out after them), and a span is only rewritten when its text or its breaks change, so
 * an update that changes only the tail never touches the settled span: a settled word never flickers or jumps.
 *
 * Markup contract (tests rely on it; the same attributes as the main page's), inside `<p class="flow">`:
 *   <span class="who" data-who-spk>                  a speaker's name where the speaker changes (optional)
 *   <span class="sentence" data-sentence-id data-spk>  one locked sentence; data-spk "" when unknown
 *   <span class="who" data-who-spk data-partial-who> the name of the voice now speaking, before the open text,
 *                                                    when the server names it and it is not the last sentence's
 *   <span class="partial" data-partial>              the open text (no children when there is none); its
 *                                                    textContent is the server's partial text
 *     <span class="stable" data-stable>              its settled words ("" when none is settled)
 *     (the white space between them, as a text node)
 *     <span class="tentative" data-tentative>        the words after them, which may still change
 * Only the newest `keep` sentences stay in the DOM: a wall screen runs for days.
 */

import { speakerName } from "./labels.js";
import { lineStarts } from "./line-breaks.js";
import { splitStable } from "./stable.js";

const PALETTE_SIZE = 8;
const LAYOUT_WORDS = 120; // the newest words laid out line by line: far more than any screen shows

export class CaptionLines {
  #flow;
  #partial;
  #stable;
  #gap = document.createTextNode("");
  #tentative;
  #partialWho;
  #partialGap = document.createTextNode(" ");
  #speakers;
  #keep;
  #maxChars;
  #last = null;
  #texts = new WeakMap(); // element -> its text (its children may hold line breaks)
  #shown = new WeakMap(); // element -> what it shows: {text, breaks (word indexes), words}
  #measure = null;

  /**
   * @param {HTMLElement} box  the clipping element; its content is owned by this class
   * @param {{speakers?: boolean, keep?: number, maxChars?: number}} options  speakers: name speakers where they
   *   change; maxChars: longest line in characters (the box's width may allow fewer)
   */
  constructor(box, { speakers = true, keep = 60, maxChars = 42 } = {}) {
    this.#flow = document.createElement("p");
    this.#flow.className = "flow";
    box.replaceChildren(this.#flow);
    this.#speakers = speakers;
    this.#keep = keep;
    this.#maxChars = maxChars;
    if (typeof ResizeObserver !== "undefined") {
      // Lines depend on the width only: new text changes the height, and is laid out where it is added.
      let width = 0;
      new ResizeObserver(() => {
        if (this.#flow.clientWidth !== width) {
          width = this.#flow.clientWidth;
          this.#layout();
        }
      }).observe(this.#flow);
    }
    this.#partial = document.createElement("span");
    this.#partial.className = "partial";
    this.#partial.dataset.partial = "";
    this.#stable = document.createElement("span");
    this.#stable.className = "stable";
    this.#stable.dataset.stable = "";
    this.#tentative = document.createElement("span");
    this.#tentative.className = "tentative";
    this.#tentative.dataset.tentative = "";
    this.#partialWho = document.createElement("span");
    this.#partialWho.className = "who";
    this.#partialWho.dataset.partialWho = "";
    this.#flow.replaceChildren(this.#partial);
  }

  add(record) {
    this.#hidePartialWho(); // the next setPartial decides again against this record

    const changed = !this.#last || this.#last.spk !== record.spk || this.#last.session !== record.session;
    if (this.#speakers && changed && record.spk !== null) {
      const who = document.createElement("span");
      who.className = "who";
      who.dataset.whoSpk = String(record.spk);
      who.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);
      this.#texts.set(who, `${speakerName(record.spk)}:`);
      this.#partial.before(who, " ");
    }
    const span = document.createElement("span");
    span.className = "sentence";
    span.dataset.sentenceId = String(record.id);
    span.dataset.spk = record.spk === null ? "" : String(record.spk);
    if (record.spk !== null) span.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);
    this.#texts.set(span, record.text);
    this.#partial.before(span, " ");
    this.#last = record;
    this.#trim();
    this.#layout();
  }

  /**
   * Replace the open text. `spk`/`session`: the voice now speaking, when the server names it (a room names its
   * publishing session too: labels are per session); its name goes before the text when it is not the speaker of
   * the last sentence, so a new voice is named before its sentence locks. `stable`: how many leading words of
   * `text` are settled (shown like locked text, the rest quieter).
   */
  setPartial(text, spk = null, session = null, stable = 0) {
    text = text ?? "";
    const named = this.#speakers && Boolean(text) && Number.isInteger(spk) && (!this.#last || this.#last.spk !== spk
      || (session !== null && this.#last.session !== session));
    const label = named ? `${speakerName(spk)}:` : "";
    const { settled, gap, tail } = splitStable(text, stable);
    if (this.#text(this.#partial) === text && this.#text(this.#stable) === settled
        && (this.#partialWho.isConnected ? this.#text(this.#partialWho) : "") === label) {
      return;
    }
    if (label) {
      this.#partialWho.dataset.whoSpk = String(spk);
      this.#partialWho.style.setProperty("--speaker", `var(--spk-${spk % PALETTE_SIZE})`);
      this.#texts.set(this.#partialWho, label);
      if (!this.#partialWho.isConnected) this.#partial.before(this.#partialWho, this.#partialGap);
    } else {
      this.#hidePartialWho();
    }
    this.#texts.set(this.#partial, text);
    this.#texts.set(this.#stable, settled);
    this.#texts.set(this.#tentative, tail);
    if (!text) {
      this.#partial.replaceChildren(); // no children: an empty widget hides its box (embed.css)
    } else if (this.#stable.parentNode !== this.#partial) {
      this.#partial.replaceChildren(this.#stable, this.#gap, this.#tentative);
    }
    if (this.#gap.data !== gap) this.#gap.data = gap;
    this.#layout();
  }

  #hidePartialWho() {
    this.#partialWho.remove();
    this.#partialGap.remove();
  }

  #text(el) {
    return this.#texts.get(el) ?? "";
  }

  /**
   * Break the newest lines as subtitles are broken: `<br>` before each line's first word. The settled words (locked
   * sentences, names, the open text's settled part) are laid out first, on their own; the tentative tail follows
   * on their last line and below, without moving a break among them.
   */
  #layout() {
    const nodes = [];
    for (const child of this.#flow.children) {
      if (child !== this.#partial) nodes.push(child);
      else if (this.#stable.parentNode === child) nodes.push(this.#stable, this.#tentative);
    }
    const words = [];
    const where = []; // word -> [node, index of the word in the node]
    let settled = -1; // how many words come before the tentative tail
    for (const node of nodes) {
      if (node === this.#tentative) settled = words.length;
      const ws = this.#text(node).split(/\s+/).filter(Boolean);
      ws.forEach((w, i) => { words.push(w); where.push([node, i]); });
    }
    if (settled < 0) settled = words.length;
    const first = Math.max(0, settled - LAYOUT_WORDS);
    const fits = this.#fitter();
    const starts = lineStarts(words.slice(first, settled), this.#maxChars, fits).map((i) => i + first);
    if (settled < words.length) {
      // The tail goes on from the last settled line, which keeps its words together.
      const from = starts.at(-1) ?? first;
      starts.push(...lineStarts(words.slice(from), this.#maxChars, fits, settled - from).map((i) => i + from));
    }
    if (first > 0) starts.push(first);
    const breaksIn = new Map(nodes.map((node) => [node, []]));
    for (const g of starts) {
      const [node, i] = where[g];
      breaksIn.get(node).push(i);
    }
    for (const node of nodes) this.#show(node, this.#text(node), breaksIn.get(node).sort((a, b) => a - b));
  }

  /**
   * Make `node` show `text` with a line break before each word index in `breaks`. Nothing is touched when it
   * shows that already; words added at the end of what it shows are appended (what is on screen stays as it is).
   */
  #show(node, text, breaks) {
    const shown = this.#shown.get(node);
    if (shown && shown.text === text && String(shown.breaks) === String(breaks)) return;
    const words = text.split(/\s+/).filter(Boolean);
    const grown = shown && shown.words && text.startsWith(shown.text) && /^\s/.test(text.slice(shown.text.length))
      && String(shown.breaks) === String(breaks.filter((i) => i < shown.words));
    if (grown) node.append(...pieces(words, breaks, shown.words, text.slice(shown.text.length)));
    else node.replaceChildren(...pieces(words, breaks, 0, text));
    this.#shown.set(node, { text, breaks, words: words.length });
  }

  /** Whether a line of text fits the box's width in its font (measured on a canvas: no layout pass). */
  #fitter() {
    const width = this.#flow.clientWidth;
    if (!width) return () => true;
    this.#measure ??= document.createElement("canvas").getContext("2d");
    const ctx = this.#measure;
    if (!ctx) return () => true;
    const style = getComputedStyle(this.#flow);
    ctx.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    return (line) => ctx.measureText(line).width <= width;
  }

  /** Rebuild from records (after a speaker relabel); the open text is updated, not rebuilt. */
  render(records, partial, partialSpk = null, partialSession = null, stable = 0) {
    this.#flow.replaceChildren(this.#partial);
    this.#last = null;
    for (const record of records.slice(-this.#keep)) this.add(record);
    this.setPartial(partial, partialSpk, partialSession, stable);
    this.#layout();
  }

  #trim() {
    const sentences = this.#flow.querySelectorAll("[data-sentence-id]");
    for (let i = 0; i < sentences.length - this.#keep; i++) {
      // Drop the sentence, a speaker name and spaces before it.
      let node = sentences[i];
      while (node.previousSibling && !node.previousSibling.dataset?.sentenceId) node.previousSibling.remove();
      node.nextSibling?.nodeType === Node.TEXT_NODE && node.nextSibling.remove();
      node.remove();
    }
  }
}

/**
 * The DOM nodes that show `words` from index `from` on, with a `<br>` before each index in `breaks` (after the
 * space that ends the line before). `raw`: the text itself, used as it is when no break falls among those words
 * (so the node's textContent stays exactly its text).
 */
function pieces(words, breaks, from, raw) {
  if (!breaks.some((i) => i >= from)) return raw ? [document.createTextNode(raw)] : [];
  const out = [];
  let run = "";
  for (let i = from; i < words.length; i++) {
    if (i > 0) run += " ";
    if (breaks.includes(i)) {
      if (run) out.push(document.createTextNode(run));
      out.push(document.createElement("br"));
      run = "";
    }
    run += words[i];
  }
  if (run) out.push(document.createTextNode(run));
  return out;
}
