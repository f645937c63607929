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
 *   <span class="partial open-line" data-open-line data-session>   each further line of a room's `open`: a block
 *                                                    of its own with its voice's `who` (when known) and its `stable`
 *                                                    and `tentative` spans as above
 * Only the newest `keep` sentences stay in the DOM: a wall screen runs for days. With `open` (./open-lines.js), the
 * first publisher to start speaking has `[data-partial]`, which goes on from the locked text as a lone speaker's
 * does (so it never moves as others start or stop); each other one has its own line under it, in the order they
 * started, named whenever its voice is known.
 *
 * Corrections (a room's editor, `correct`): a corrected sentence keeps its element and gets its new text there,
 * marked `corrected` for two seconds (./corrections.js: a background tint, nothing that takes room); a deleted one
 * leaves with the space after it, a new one from a split goes in its place in order; speaker names are then fixed
 * up where the speaker changes. Nothing else is rebuilt, so no other line is touched but the ones the new text
 * reflows. `setNames` renames speaker labels ("Speaker 2" shows as "Dr. Lee") on the names already shown too.
 */

import { isMarked, markCorrected } from "./corrections.js";
import { speakerName } from "./labels.js";
import { lineStarts } from "./line-breaks.js";
import { markForeign } from "./languages.js";
import { openParts, placeLines } from "./open-lines.js";
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
  #more = new Map(); // session -> the parts of a further open line (`open`: openLine), in order
  #speakers;
  #keep;
  #maxChars;
  #last = null;
  #names = {};
  #openLang = ""; // the open text's language where it is not the page's (setOpenLanguage)
  #spans = new Map(); // key(session, id) -> the sentence's element
  #info = new WeakMap(); // sentence element -> {id, spk, session} of the record it shows
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
    if (this.#spans.has(key(record))) return;
    this.#hidePartialWho(); // the next setPartial decides again against this record

    if (this.#needsName(this.#last, record)) this.#partial.before(this.#nameMark(record.spk), " ");
    this.#partial.before(this.#sentence(record), " ");
    this.#last = this.#info.get(this.#spans.get(key(record)));
    this.#trim();
    this.#layout();
  }

  /**
   * Apply a correction: `changed` records take their new text (and speaker) in the element that shows them, or go
   * in as new sentences (a split) at their place in `records` (the source's whole list, in order); `removed`
   * records leave. Each changed sentence shown is marked `corrected` for two seconds.
   */
  correct({ changed = [], removed = [] }, records = []) {
    for (const record of removed) {
      const span = this.#spans.get(key(record));
      if (!span) continue;
      const head = this.#head(span);
      if (head !== span) removeWithSpace(head); // its speaker's name goes too (#fixNames puts one back if needed)
      removeWithSpace(span);
      this.#spans.delete(key(record));
    }
    const marked = [];
    for (const record of changed) {
      let span = this.#spans.get(key(record));
      if (span) {
        this.#update(span, record);
      } else {
        const at = records.findIndex((r) => key(r) === key(record));
        if (at < 0) continue;
        const next = records.slice(at + 1).map((r) => this.#spans.get(key(r))).find(Boolean);
        if (!next && records.length - at - 1 >= this.#keep) continue; // older than the sentences shown
        span = this.#sentence(record);
        const before = next ? this.#head(next) : this.#partialWho.isConnected ? this.#partialWho : this.#partial;
        before.before(span, " ");
      }
      marked.push(span);
    }
    this.#fixNames();
    this.#trim();
    this.#layout();
    for (const span of marked) if (span.isConnected) markCorrected(span);
  }

  /** Show speaker label `spk` as `names[spk]` where the room named it (`{"<spk>": name}`), on the names shown too. */
  setNames(names) {
    this.#names = { ...(names ?? {}) };
    for (const who of this.#flow.querySelectorAll("[data-who-spk]")) {
      this.#texts.set(who, `${speakerName(Number(who.dataset.whoSpk), this.#names)}:`);
    }
    this.#layout();
  }

  /**
   * The open text is in language `code`, not the page's ("" = the page's): on a screen showing a room language
   * the open text is the speaker's own words until its sentence locks and is translated (js/languages.js).
   */
  setOpenLanguage(code) {
    this.#openLang = code;
    markForeign(this.#partial, code);
    for (const line of this.#more.values()) markForeign(line.el, code);
  }

  #sentence(record) {
    const span = document.createElement("span");
    span.className = "sentence";
    span.dataset.sentenceId = String(record.id);
    this.#spans.set(key(record), span);
    this.#update(span, record);
    return span;
  }

  #update(span, record) {
    span.dataset.spk = record.spk === null ? "" : String(record.spk);
    if (record.spk !== null) span.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);
    else span.style.removeProperty("--speaker");
    this.#texts.set(span, record.text);
    this.#info.set(span, { id: record.id, spk: record.spk, session: record.session });
  }

  #needsName(last, record) {
    const changed = !last || last.spk !== record.spk || last.session !== record.session;
    return this.#speakers && changed && record.spk !== null;
  }

  #nameMark(spk) {
    const who = document.createElement("span");
    who.className = "who";
    this.#setName(who, spk);
    return who;
  }

  #setName(who, spk) {
    who.dataset.whoSpk = String(spk);
    who.style.setProperty("--speaker", `var(--spk-${spk % PALETTE_SIZE})`);
    this.#texts.set(who, `${speakerName(spk, this.#names)}:`);
  }

  /** The first node of a sentence's run: its speaker's name when one goes before it, else the sentence. */
  #head(span) {
    const before = span.previousElementSibling;
    return before && isNameOf(before) ? before : span;
  }

  /** After sentences came, went or changed speaker: a name before exactly the sentences where the speaker changes. */
  #fixNames() {
    let last = null;
    for (const span of this.#flow.querySelectorAll("[data-sentence-id]")) {
      const info = this.#info.get(span);
      const before = span.previousElementSibling;
      const who = before && isNameOf(before) ? before : null;
      // Only one name before a sentence: one left over from a removed sentence goes.
      while (who?.previousElementSibling && isNameOf(who.previousElementSibling)) {
        removeWithSpace(who.previousElementSibling);
      }
      if (this.#needsName(last, info)) {
        if (!who) span.before(this.#nameMark(info.spk), " ");
        else if (who.dataset.whoSpk !== String(info.spk)) this.#setName(who, info.spk);
      } else if (who) {
        removeWithSpace(who);
      }
      last = info;
    }
    this.#last = last;
  }

  /**
   * Replace the open text. `spk`/`session`: the voice now speaking, when the server names it (a room names its
   * publishing session too: labels are per session); its name goes before the text when it is not the speaker of
   * the last sentence, so a new voice is named before its sentence locks. `stable`: how many leading words of
   * `text` are settled (shown like locked text, the rest quieter). `open`: a room's open text one line per speaking
   * publisher (`[{session, text, stable, spk}]`, RoomFeed's); given, it is shown instead of the others (see above).
   */
  setPartial(text, spk = null, session = null, stable = 0, open = null) {
    const { first, more } = openParts(text, spk, session, stable, open);
    const changed = this.#setFirst(first);
    const placed = placeLines(this.#more, more, this.#partial, (key) => {
      const line = openLine(key);
      markForeign(line.el, this.#openLang);
      return line;
    });
    this.#more = placed.lines;
    const filled = more.map((entry) => this.#fillLine(this.#more.get(entry.session), entry));
    if (changed || placed.moved || filled.includes(true)) this.#layout();
  }

  /** The first open text (`setPartial`'s); returns whether anything changed. */
  #setFirst({ text, spk, session, stable }) {
    text = text ?? "";
    const named = this.#speakers && Boolean(text) && Number.isInteger(spk) && (!this.#last || this.#last.spk !== spk
      || (session !== null && this.#last.session !== session));
    const label = named ? `${speakerName(spk, this.#names)}:` : "";
    const { settled, gap, tail } = splitStable(text, stable);
    if (this.#text(this.#partial) === text && this.#text(this.#stable) === settled
        && (this.#partialWho.isConnected ? this.#text(this.#partialWho) : "") === label) {
      return false;
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
    return true;
  }

  /** A further open line (`openLine`'s parts) shows `open` entry `{text, stable, spk}`; returns whether it changed. */
  #fillLine(line, { text, stable, spk }) {
    const label = this.#speakers && Number.isInteger(spk) ? `${speakerName(spk, this.#names)}:` : "";
    const { settled, gap, tail } = splitStable(text, stable);
    if (this.#text(line.who) === label && this.#text(line.stable) === settled && this.#text(line.tentative) === tail
        && line.gap.data === gap) {
      return false;
    }
    if (label) this.#setName(line.who, spk);
    if (label && !line.who.isConnected) line.stable.before(line.who, line.whoGap);
    if (!label) [line.who, line.whoGap].forEach((node) => node.remove());
    this.#texts.set(line.who, label);
    this.#texts.set(line.stable, settled);
    this.#texts.set(line.tentative, tail);
    line.gap.data = gap;
    return true;
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
      if (child === this.#partial) {
        if (this.#stable.parentNode === child) nodes.push(this.#stable, this.#tentative);
      } else if (!("openLine" in child.dataset)) {
        nodes.push(child);
      }
    }
    const fits = this.#fitter();
    this.#breakLines(nodes, this.#tentative, fits);
    // A further open line is a block of its own: its first word starts a line anyway.
    for (const { who, stable, tentative } of this.#more.values()) {
      this.#breakLines([...(who.isConnected ? [who] : []), stable, tentative], tentative, fits);
    }
  }

  /** `#layout` for one run of `nodes` (in order; its settled words, then `tentative`, if it is among them). */
  #breakLines(nodes, tentative, fits) {
    const words = [];
    const where = []; // word -> [node, index of the word in the node]
    let settled = -1; // how many words come before the tentative tail
    for (const node of nodes) {
      if (node === tentative) settled = words.length;
      const ws = this.#text(node).split(/\s+/).filter(Boolean);
      ws.forEach((w, i) => { words.push(w); where.push([node, i]); });
    }
    if (settled < 0) settled = words.length;
    const first = Math.max(0, settled - LAYOUT_WORDS);
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
  render(records, partial, partialSpk = null, partialSession = null, stable = 0, open = null) {
    const marked = [...this.#spans].filter(([, span]) => isMarked(span)).map(([k]) => k);
    this.#flow.replaceChildren(this.#partial);
    this.#spans.clear();
    this.#last = null;
    for (const record of records.slice(-this.#keep)) this.add(record);
    for (const k of marked) if (this.#spans.has(k)) markCorrected(this.#spans.get(k)); // the mark survives a rebuild
    this.setPartial(partial, partialSpk, partialSession, stable, open);
    this.#layout();
  }

  #trim() {
    const sentences = this.#flow.querySelectorAll("[data-sentence-id]");
    for (let i = 0; i < sentences.length - this.#keep; i++) {
      // Drop the sentence, a speaker name and spaces before it.
      let node = sentences[i];
      while (node.previousSibling && !node.previousSibling.dataset?.sentenceId) node.previousSibling.remove();
      node.nextSibling?.nodeType === Node.TEXT_NODE && node.nextSibling.remove();
      const info = this.#info.get(node);
      if (info) this.#spans.delete(key(info));
      node.remove();
    }
  }
}

/** A sentence's key: ids are per session on a page's own data channel (room-wide in a room, where this is too). */
function key(record) {
  return `${record.session ?? ""}\u0000${record.id}`;
}

/**
 * The parts of a further open line (`setPartial`) of publisher `session`: its element, and in it its voice's name
 * (out of it until named), the settled words, the white space after them and the tentative rest.
 */
function openLine(session) {
  const span = (className, data) => {
    const el = document.createElement("span");
    el.className = className;
    el.dataset[data] = "";
    return el;
  };
  const line = { el: span("partial open-line", "openLine"), who: span("who", "partialWho"),
                 whoGap: document.createTextNode(" "), stable: span("stable", "stable"),
                 gap: document.createTextNode(""), tentative: span("tentative", "tentative") };
  line.el.dataset.session = session;
  line.el.append(line.stable, line.gap, line.tentative);
  return line;
}

/** Remove `node` and the space after it. */
function removeWithSpace(node) {
  if (node.nextSibling?.nodeType === Node.TEXT_NODE) node.nextSibling.remove();
  node.remove();
}

/** Whether `el` is a speaker's name put before a sentence (not the open text's voice). */
function isNameOf(el) {
  return el.classList.contains("who") && !("partialWho" in el.dataset);
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
