/**
 * Caption lines for the widget and the kiosk: the room's text as one flowing paragraph, newest at the end, in a
 * box as tall as N lines (CSS `--lines`) that clips older lines away at the top, like broadcast captions.
 *
 * Markup contract (tests rely on it; the same attributes as the main page's), inside `<p class="flow">`:
 *   <span class="who" data-who-spk>                  a speaker's name where the speaker changes (optional)
 *   <span class="sentence" data-sentence-id data-spk>  one locked sentence; data-spk "" when unknown
 *   <span class="partial" data-partial>              the open text, replaced on every update
 * Only the newest `keep` sentences stay in the DOM: a wall screen runs for days.
 */

import { speakerName } from "./labels.js";

const PALETTE_SIZE = 8;

export class CaptionLines {
  #flow;
  #partial;
  #speakers;
  #keep;
  #last = null;

  /**
   * @param {HTMLElement} box  the clipping element; its content is owned by this class
   * @param {{speakers?: boolean, keep?: number}} options  speakers: name speakers where they change
   */
  constructor(box, { speakers = true, keep = 60 } = {}) {
    this.#flow = document.createElement("p");
    this.#flow.className = "flow";
    box.replaceChildren(this.#flow);
    this.#speakers = speakers;
    this.#keep = keep;
    this.#partial = document.createElement("span");
    this.#partial.className = "partial";
    this.#partial.dataset.partial = "";
    this.#flow.replaceChildren(this.#partial);
  }

  add(record) {
    const changed = !this.#last || this.#last.spk !== record.spk || this.#last.session !== record.session;
    if (this.#speakers && changed && record.spk !== null) {
      const who = document.createElement("span");
      who.className = "who";
      who.dataset.whoSpk = String(record.spk);
      who.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);
      who.textContent = `${speakerName(record.spk)}:`;
      this.#partial.before(who, " ");
    }
    const span = document.createElement("span");
    span.className = "sentence";
    span.dataset.sentenceId = String(record.id);
    span.dataset.spk = record.spk === null ? "" : String(record.spk);
    if (record.spk !== null) span.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);
    span.textContent = record.text;
    this.#partial.before(span, " ");
    this.#last = record;
    this.#trim();
  }

  setPartial(text) {
    if (this.#partial.textContent !== text) this.#partial.textContent = text;
  }

  /** Rebuild from records (after a speaker relabel). */
  render(records, partial) {
    this.#flow.replaceChildren(this.#partial);
    this.#last = null;
    for (const record of records.slice(-this.#keep)) this.add(record);
    this.setPartial(partial);
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
