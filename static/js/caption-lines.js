/**
 * Caption lines for the widget and the kiosk: the room's text as one flowing paragraph, newest at the end, in a
 * box as tall as N lines (CSS `--lines`) that clips older lines away at the top, like broadcast captions.
 * The newest lines are broken as broadcast subtitles are (./line-breaks.js, the rules of the subtitle files): at
 * most `maxChars` characters (42) and the box's width, after punctuation rather than inside a phrase. The breaks
 * are `<br>` elements inside the spans below, after a space, so each span's textContent stays its text.
 *
 * Markup contract (tests rely on it; the same attributes as the main page's), inside `<p class="flow">`:
 *   <span class="who" data-who-spk>                  a speaker's name where the speaker changes (optional)
 *   <span class="sentence" data-sentence-id data-spk>  one locked sentence; data-spk "" when unknown
 *   <span class="who" data-who-spk data-partial-who> the name of the voice now speaking, before the open text,
 *                                                    when the server names it and it is not the last sentence's
 *   <span class="partial" data-partial>              the open text, replaced on every update
 * Only the newest `keep` sentences stay in the DOM: a wall screen runs for days.
 */

import { speakerName } from "./labels.js";
import { lineStarts } from "./line-breaks.js";

const PALETTE_SIZE = 8;
const LAYOUT_WORDS = 120; // the newest words laid out line by line: far more than any screen shows

export class CaptionLines {
  #flow;
  #partial;
  #partialWho;
  #partialGap = document.createTextNode(" ");
  #speakers;
  #keep;
  #maxChars;
  #last = null;
  #texts = new WeakMap(); // element -> its text (its children may hold line breaks)
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
      this.#setText(who, `${speakerName(record.spk)}:`);
      this.#partial.before(who, " ");
    }
    const span = document.createElement("span");
    span.className = "sentence";
    span.dataset.sentenceId = String(record.id);
    span.dataset.spk = record.spk === null ? "" : String(record.spk);
    if (record.spk !== null) span.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);
    this.#setText(span, record.text);
    this.#partial.before(span, " ");
    this.#last = record;
    this.#trim();
    this.#layout();
  }

  /**
   * Replace the open text. `spk`/`session`: the voice now speaking, when the server names it (a room names its
   * publishing session too: labels are per session); its name goes before the text when it is not the speaker of
   * the last sentence, so a new voice is named before its sentence locks.
   */
  setPartial(text, spk = null, session = null) {
    const named = this.#speakers && Boolean(text) && Number.isInteger(spk) && (!this.#last || this.#last.spk !== spk
      || (session !== null && this.#last.session !== session));
    const label = named ? `${speakerName(spk)}:` : "";
    if (this.#text(this.#partial) === text && (this.#partialWho.isConnected ? this.#text(this.#partialWho) : "") === label) {
      return;
    }
    if (label) {
      this.#partialWho.dataset.whoSpk = String(spk);
      this.#partialWho.style.setProperty("--speaker", `var(--spk-${spk % PALETTE_SIZE})`);
      this.#setText(this.#partialWho, label);
      if (!this.#partialWho.isConnected) this.#partial.before(this.#partialWho, this.#partialGap);
    } else {
      this.#hidePartialWho();
    }
    this.#setText(this.#partial, text);
    this.#layout();
  }

  #hidePartialWho() {
    this.#partialWho.remove();
    this.#partialGap.remove();
  }

  #text(el) {
    return this.#texts.get(el) ?? el.textContent;
  }

  #setText(el, text) {
    this.#texts.set(el, text);
    el.textContent = text;
  }

  /** Break the newest lines as subtitles are broken: `<br>` before each line's first word. */
  #layout() {
    const nodes = [...this.#flow.children];
    const words = [];
    const where = []; // word -> [node, index of the word in the node]
    for (const node of nodes) {
      const ws = this.#text(node).split(/\s+/).filter(Boolean);
      ws.forEach((w, i) => { words.push(w); where.push([node, i]); });
    }
    const first = Math.max(0, words.length - LAYOUT_WORDS);
    const fits = this.#fitter();
    const starts = new Set(lineStarts(words.slice(first), this.#maxChars, fits).map((i) => i + first));
    if (first > 0) starts.add(first);
    const breaksIn = new Map();
    for (const g of starts) {
      const [node, i] = where[g];
      if (!breaksIn.has(node)) breaksIn.set(node, new Set());
      breaksIn.get(node).add(i);
    }
    for (const node of nodes) {
      const text = this.#text(node);
      const at = breaksIn.get(node);
      if (!at) {
        if (node.childElementCount) node.textContent = text;
        continue;
      }
      const ws = text.split(/\s+/).filter(Boolean);
      const parts = [];
      let run = [];
      ws.forEach((w, i) => {
        if (at.has(i)) {
          if (run.length) parts.push(document.createTextNode(run.join(" ") + " "));
          parts.push(document.createElement("br"));
          run = [];
        }
        run.push(w);
      });
      if (run.length) parts.push(document.createTextNode(run.join(" ")));
      node.replaceChildren(...parts);
    }
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

  /** Rebuild from records (after a speaker relabel). */
  render(records, partial, partialSpk = null, partialSession = null) {
    this.#flow.replaceChildren(this.#partial);
    this.#last = null;
    for (const record of records.slice(-this.#keep)) this.add(record);
    this.setPartial(partial, partialSpk, partialSession);
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
