/**
 * Renders the transcript: locked sentences grouped into speaker turns (consecutive sentences of one speaker
 * in one session, as the server's TXT export groups them: app/transcripts/exports.py `turns`), then the partial line.
 *
 * Locked sentences are only ever appended (they never change), so the common update touches one element and
 * the reader's text selection survives. A speaker relabel or a clear re-renders everything: both are rare.
 *
 * The partial line shows its settled words (the server's `stable` count: they lock exactly as shown) like locked
 * text and only the tentative tail after them quieter. The settled span is never rewritten while it only grows:
 * new settled words are appended to it, and an update that changes only the tail leaves it untouched, so a settled
 * word never flickers. It starts afresh when the open text does (a lock, a clear, a new session).
 *
 * Markup contract (tests rely on it):
 *   <section class="turn" data-speaker>          one speaker's consecutive sentences (no data-spk, so
 *                                                [data-spk] selects sentences only)
 *     <span class="sentence" data-sentence-id data-spk>   one locked sentence; data-spk "" when unknown
 *   <p class="partial" data-partial data-spk>    the open segment's text (empty, with no children, when there is
 *                                                none); data-spk "" unless a label is shown
 *     <span class="who">                        when the server names the voice now speaking (partial_spk) and it is
 *                                                not the last turn's speaker, its label first, then a space
 *     <span class="stable" data-stable>         the settled words ("" when none is settled)
 *     (the white space between them, as a text node)
 *     <span class="tentative" data-tentative>   the words after them, which may still change ("" when all settled)
 *   The partial's textContent is its label and a space (when shown), then exactly the server's partial text.
 */

import { shortTime, speakerName } from "./labels.js";
import { extendsText, splitStable } from "./stable.js";

// Eight speaker colours (CSS --spk-0 … --spk-7), reused in turn when a conversation has more speakers.
const PALETTE_SIZE = 8;

export class TranscriptView {
  #log;
  #partial;
  #follow;
  #lastTurn = null;
  #lastRecord = null;
  #partialKey = "";
  // The partial line's parts: kept across updates, so an unchanged part is never touched.
  #who = Object.assign(document.createElement("span"), { className: "who" });
  #whoGap = document.createTextNode(" ");
  #stable = part("stable");
  #gap = document.createTextNode("");
  #tentative = part("tentative");
  #settled = ""; // the text the settled span shows

  /**
   * @param {{log: HTMLElement, partial: HTMLElement, follow: import("./follow.js").Follow}} parts
   */
  constructor({ log, partial, follow }) {
    this.#log = log;
    this.#partial = partial;
    this.#follow = follow;
  }

  /** Append one newly locked sentence. */
  add(record) {
    this.#append(record);
    this.#follow.update();
  }

  /**
   * Replace the partial line (empty text hides it). `spk`: the provisional label of the voice now speaking (null
   * when not known yet); shown before the text when someone other than the last turn's speaker is talking.
   * `session`: in a room, the publishing session that label belongs to (labels are per session). `stable`: how many
   * leading words of `text` are settled (shown like locked text; the rest quieter).
   */
  setPartial(text, spk = null, session = null, stable = 0) {
    text = text ?? "";
    const known = text && spk !== null && spk !== undefined;
    const other = !this.#lastRecord || this.#lastRecord.spk !== spk
      || (session !== null && this.#lastRecord.session !== session);
    const label = known && other ? speakerName(spk) : "";
    const { settled, gap, tail } = splitStable(text, stable);
    const key = `${label}\u0000${settled}\u0000${gap}\u0000${tail}`;
    if (this.#partialKey === key) return;
    this.#partialKey = key;
    this.#partial.dataset.spk = label ? String(spk) : "";
    if (!text) {
      this.#partial.replaceChildren(); // truly empty: CSS hides it (.partial:empty)
      this.#follow.update();
      return;
    }
    if (this.#stable.parentNode !== this.#partial) {
      this.#partial.replaceChildren(this.#stable, this.#gap, this.#tentative);
    }
    if (label) {
      if (this.#who.textContent !== label) this.#who.textContent = label;
      this.#who.style.setProperty("--speaker", `var(--spk-${spk % PALETTE_SIZE})`);
      if (!this.#who.isConnected) this.#stable.before(this.#who, this.#whoGap);
    } else if (this.#who.parentNode) {
      this.#who.remove();
      this.#whoGap.remove();
    }
    if (settled !== this.#settled) {
      // Settled words only ever grow within one open text: append them, never rewrite what is on screen.
      if (this.#settled && extendsText(this.#settled, settled)) {
        this.#stable.append(settled.slice(this.#settled.length));
      } else {
        this.#stable.textContent = settled;
      }
      this.#settled = settled;
    }
    if (this.#gap.data !== gap) this.#gap.data = gap;
    if (this.#tentative.textContent !== tail) this.#tentative.textContent = tail;
    this.#follow.update();
  }

  /** Rebuild everything from the records (after a speaker relabel or a clear); the partial line is updated. */
  render(records, partial, partialSpk = null, partialSession = null, stable = 0) {
    this.#log.replaceChildren();
    this.#lastTurn = null;
    this.#lastRecord = null;
    for (const record of records) this.#append(record, false);
    this.setPartial(partial, partialSpk, partialSession, stable);
    this.#follow.update();
  }

  #append(record, animate = true) {
    const last = this.#lastRecord;
    if (!last || record.spk !== last.spk || record.session !== last.session) {
      if (last && record.session !== last.session) this.#log.append(sessionBreak(record));
      this.#lastTurn = turnElement(record);
      this.#log.append(this.#lastTurn);
    }
    const text = this.#lastTurn.querySelector(".turn-text");
    if (text.childElementCount) text.append(" ");
    text.append(sentenceElement(record, animate));
    this.#lastRecord = record;
  }
}

function turnElement(record) {
  const turn = document.createElement("section");
  turn.className = "turn";
  turn.dataset.speaker = spkAttr(record.spk);
  if (record.spk !== null) turn.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);

  const head = document.createElement("header");
  head.className = "turn-head";
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = speakerName(record.spk);
  const when = document.createElement("time");
  when.className = "when";
  when.textContent = shortTime(record.start);
  when.dateTime = `PT${(record.start / 1000).toFixed(3)}S`;
  head.append(who, when);

  const text = document.createElement("p");
  text.className = "turn-text";
  turn.append(head, text);
  return turn;
}

function part(name) {
  const span = document.createElement("span");
  span.className = name;
  span.dataset[name] = "";
  return span;
}

function sentenceElement(record, animate) {
  const span = document.createElement("span");
  span.className = animate ? "sentence arriving" : "sentence";
  span.dataset.sentenceId = String(record.id);
  span.dataset.spk = spkAttr(record.spk);
  span.title = `${shortTime(record.start)} – ${shortTime(record.end)}`;
  span.textContent = record.text;
  return span;
}

// Marks where one server session ended and the next began: captions may be missing across it.
function sessionBreak(record) {
  const rule = document.createElement("p");
  rule.className = "session-break";
  rule.textContent = `Resumed at ${shortTime(record.start)}`;
  return rule;
}

function spkAttr(spk) {
  return spk === null ? "" : String(spk);
}
