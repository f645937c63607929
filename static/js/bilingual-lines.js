/**
 * Two languages of a room side by side, for a bilingual kiosk (`lang=en,es`): one row per sentence, its text in
 * each language in its own column, so that a sentence and its translation start on the same line whatever their
 * lengths. The newest rows are at the bottom of a box as tall as N lines (CSS `--lines`) that clips older ones at
 * the top, as js/caption-lines.js does for one language.
 *
 * Each column is fed by its own RoomFeed (the room in that language): `add`, `correct` and `relabel` take the column
 * index and that feed's records. A row is made by whichever column has its sentence first (the spoken language's,
 * usually: a translation follows its lock), in order of start, and the other column's cell fills in when its text
 * comes. The open text (the speaker's words, not yet locked, so not yet translated) is a last row in the first
 * column only, marked `foreign` (quieter, with its language) where that column is not the spoken language.
 *
 * Markup contract (tests rely on it), inside the box:
 *   <div class="pairs">
 *     <div class="pair" data-pair-id data-spk>             one sentence (data-spk "" when unknown)
 *       <p class="cell" lang>                              one per column, in the columns' order
 *         <span class="who" data-who-spk>                  the speaker's name, in the first column where it changes
 *         <span class="sentence" data-sentence-id data-spk>   the sentence in that language (absent until it comes)
 *     <div class="pair open-row">                          last: the open text
 *       <p class="cell"><span class="partial" data-partial>   the first open text (textContent: the server's)
 *       <p class="cell">                                   empty
 */

import { markCorrected } from "./corrections.js";
import { speakerName } from "./labels.js";
import { markForeign } from "./languages.js";

const PALETTE_SIZE = 8;

export class BilingualLines {
  #pairs;
  #open;
  #partial;
  #languages;
  #speakers;
  #keep;
  #names = {};
  #rows = new Map(); // sentence id -> {el, cells: [HTMLElement], start, spk}

  /**
   * @param {HTMLElement} box  the clipping element; its content is owned by this class
   * @param {{languages: string[], speakers?: boolean, keep?: number}} options  languages: each column's code, in
   *   order; speakers: name speakers where they change; keep: rows kept in the DOM (a wall screen runs for days)
   */
  constructor(box, { languages, speakers = true, keep = 60 }) {
    this.#languages = languages;
    this.#speakers = speakers;
    this.#keep = keep;
    this.#pairs = document.createElement("div");
    this.#pairs.className = "pairs";
    this.#open = row();
    this.#open.classList.add("open-row");
    this.#open.append(...languages.map((lang) => cell(lang)));
    this.#partial = document.createElement("span");
    this.#partial.className = "partial";
    this.#partial.dataset.partial = "";
    this.#open.firstChild.append(this.#partial);
    this.#pairs.append(this.#open);
    box.replaceChildren(this.#pairs);
  }

  /** Sentence `record` of column `column` (newly locked or newly translated): its cell takes its text. */
  add(column, record) {
    const pair = this.#row(record);
    let span = pair.cells[column].querySelector(".sentence");
    if (!span) {
      span = document.createElement("span");
      span.className = "sentence";
      pair.cells[column].append(span);
    }
    fill(span, record);
    if (column === 0 && pair.spk !== record.spk) this.#setSpeaker(pair, record.spk);
    this.#trim();
  }

  /** Column `column`'s correction (RoomFeed's `correction` detail): changed sentences take their text, removed go. */
  correct(column, { changed = [], removed = [] }) {
    for (const record of removed) {
      const pair = this.#rows.get(record.id);
      pair?.cells[column].querySelector(".sentence")?.remove();
      if (pair && !pair.el.querySelector(".sentence")) {
        pair.el.remove();
        this.#rows.delete(record.id);
      }
    }
    for (const record of changed) {
      this.add(column, record);
      markCorrected(this.#rows.get(record.id).cells[column].querySelector(".sentence"));
    }
    this.#fixNames();
  }

  /** Speakers relabelled (column 0's records): each row shows its new speaker. */
  relabel(records) {
    for (const record of records) {
      const pair = this.#rows.get(record.id);
      if (pair) this.#setSpeaker(pair, record.spk);
    }
  }

  /** Show speaker label `spk` as `names[spk]` where the room named it. */
  setNames(names) {
    this.#names = { ...(names ?? {}) };
    this.#fixNames();
  }

  /** The open text (the first open line's: RoomFeed's `partial`); "" for none. `lang`: its language where it is not
   * the first column's ("" otherwise). */
  setPartial(text, lang = "") {
    if (this.#partial.textContent !== text) this.#partial.textContent = text;
    markForeign(this.#partial, lang);
  }

  /** The row of `record`'s sentence, made in order of start where there is none yet. */
  #row(record) {
    const held = this.#rows.get(record.id);
    if (held) return held;
    const pair = { el: row(), cells: this.#languages.map((lang) => cell(lang)), start: record.start, spk: undefined };
    pair.el.dataset.pairId = String(record.id);
    pair.el.append(...pair.cells);
    let next = this.#open;
    for (const other of [...this.#rows.values()].reverse()) {
      if (other.start < record.start || (other.start === record.start && Number(other.el.dataset.pairId) < record.id)) break;
      next = other.el;
    }
    next.before(pair.el);
    this.#rows.set(record.id, pair);
    this.#setSpeaker(pair, record.spk);
    return pair;
  }

  #setSpeaker(pair, spk) {
    pair.spk = spk;
    pair.el.dataset.spk = spk === null ? "" : String(spk);
    if (spk !== null) pair.el.style.setProperty("--speaker", `var(--spk-${spk % PALETTE_SIZE})`);
    this.#fixNames();
  }

  /** A name before the first column's text where the speaker changes from the row above. */
  #fixNames() {
    let last;
    for (const pair of this.#rows.values()) {
      const first = pair.cells[0];
      let who = first.querySelector(".who");
      const show = this.#speakers && pair.spk !== null && pair.spk !== undefined && pair.spk !== last;
      last = pair.spk;
      if (!show) {
        if (who?.nextSibling?.nodeType === Node.TEXT_NODE) who.nextSibling.remove();
        who?.remove();
        continue;
      }
      if (!who) {
        who = document.createElement("span");
        who.className = "who";
        first.prepend(who, " ");
      }
      who.dataset.whoSpk = String(pair.spk);
      const name = `${speakerName(pair.spk, this.#names)}:`;
      if (who.textContent !== name) who.textContent = name;
    }
  }

  #trim() {
    for (const [id, pair] of this.#rows) {
      if (this.#rows.size <= this.#keep) break;
      pair.el.remove();
      this.#rows.delete(id);
    }
  }
}

function row() {
  const el = document.createElement("div");
  el.className = "pair";
  return el;
}

function cell(lang) {
  const el = document.createElement("p");
  el.className = "cell";
  el.lang = lang;
  return el;
}

function fill(span, record) {
  span.dataset.sentenceId = String(record.id);
  span.dataset.spk = record.spk === null ? "" : String(record.spk);
  if (span.textContent !== record.text) span.textContent = record.text;
}
