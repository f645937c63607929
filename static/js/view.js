/**
 * Renders the transcript: locked sentences grouped into speaker turns (consecutive sentences of one speaker
 * in one session, as the server's TXT export groups them: app/transcripts/exports.py `turns`), then the partial line.
 *
 * Locked sentences are appended, so the common update touches one element and the reader's text selection
 * survives. A speaker relabel or a clear re-renders everything: both are rare. A room's editor may correct a locked
 * sentence (`correct`): its element takes the new text in place and is marked `corrected` for two seconds
 * (./corrections.js); a deletion, a split or a change of speaker regroups the turns around the same sentence
 * elements (a re-render keeps every element of a sentence that stays), so nothing on screen is rebuilt from scratch.
 * `setNames` shows the room's speaker names ("Dr. Lee" for "Speaker 2") in the turn heads and the partial line.
 *
 * The partial line shows its settled words (the server's `stable` count: they lock exactly as shown) like locked
 * text and only the tentative tail after them quieter. The settled span is never rewritten while it only grows:
 * new settled words are appended to it, and an update that changes only the tail leaves it untouched, so a settled
 * word never flickers. It starts afresh when the open text does (a lock, a clear, a new session).
 *
 * A room where several publishers speak at once sends each one's open text on its own (the caption's `open`,
 * ./open-lines.js): the first to start speaking has the partial line, each other one a line of its own after it, in
 * the order they started, labelled with its voice whenever it is known (the first only when it is not the last
 * turn's speaker, as above).
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
 *   The partial's textContent is its label and a space (when shown), then exactly the server's partial text (with
 *   `open`: the first entry's text).
 *   <p class="partial" data-open-line data-session data-spk>   after it, one per further `open` entry, in order,
 *                                                with the same children (its label whenever its voice is known)
 */

import { isMarked, markCorrected } from "./corrections.js";
import { shortTime, speakerName } from "./labels.js";
import { markForeign } from "./languages.js";
import { openParts, placeLines } from "./open-lines.js";
import { extendsText, splitStable } from "./stable.js";

// Eight speaker colours (CSS --spk-0 … --spk-7), reused in turn when a conversation has more speakers.
const PALETTE_SIZE = 8;

export class TranscriptView {
  #log;
  #partial;
  #follow;
  #lastTurn = null;
  #lastRecord = null;
  #more = new Map(); // session -> the PartialLine of a further open line (`open`), in order
  #partialArgs = ["", null, null, 0, null]; // the latest setPartial's arguments
  #names = {};
  #openLang = ""; // the open text's language where it is not the page's (setOpenLanguage)
  #spans = new Map(); // key(session, id) -> the sentence's element

  /**
   * @param {{log: HTMLElement, partial: HTMLElement, follow: import("./follow.js").Follow}} parts
   */
  constructor({ log, partial, follow }) {
    this.#log = log;
    this.#partial = new PartialLine(partial);
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
   * leading words of `text` are settled (shown like locked text; the rest quieter). `open`: a room's open text one
   * line per speaking publisher (`[{session, text, stable, spk}]`, RoomFeed's); given, it is shown instead of the
   * others (see the module).
   */
  setPartial(text, spk = null, session = null, stable = 0, open = null) {
    this.#partialArgs = [text ?? "", spk, session, stable, open];
    const { first, more } = openParts(text, spk, session, stable, open);
    const known = first.text && first.spk !== null && first.spk !== undefined;
    const other = !this.#lastRecord || this.#lastRecord.spk !== first.spk
      || (first.session !== null && this.#lastRecord.session !== first.session);
    this.#partial.show(first.text, first.stable, known && other ? speakerName(first.spk, this.#names) : "", first.spk);
    this.#more = placeLines(this.#more, more, this.#partial.el, (key) => {
      const line = new PartialLine(openLineElement(key));
      markForeign(line.el, this.#openLang);
      return line;
    }).lines;
    for (const { session: key, text: said, stable: settled, spk: voice } of more) {
      this.#more.get(key).show(said, settled, voice === null ? "" : speakerName(voice, this.#names), voice);
    }
    this.#follow.update();
  }

  /**
   * Rebuild everything from the records (after a speaker relabel, a correction or a clear); the partial line is
   * updated. The element of a sentence shown before is kept (with its new text), so a reader's place holds.
   */
  render(records, partial, partialSpk = null, partialSession = null, stable = 0, open = null) {
    const kept = this.#spans;
    this.#spans = new Map();
    this.#log.replaceChildren();
    this.#lastTurn = null;
    this.#lastRecord = null;
    for (const record of records) this.#append(record, false, kept);
    this.setPartial(partial, partialSpk, partialSession, stable, open);
    this.#follow.update();
  }

  /**
   * Apply a correction: `changed` records (their new text and speaker; one not shown yet is a new sentence from a
   * split), `removed` records leave; `records` is the source's whole list in order. A change of text only is made in
   * the sentence's element; anything else regroups the turns (render). Each changed sentence is marked `corrected`.
   */
  correct({ changed = [], removed = [] }, records = []) {
    const regroup = removed.some((r) => this.#spans.has(key(r))) || changed.some((record) => {
      const span = this.#spans.get(key(record));
      return !span || span.dataset.spk !== spkAttr(record.spk);
    });
    if (regroup) {
      this.render(records, ...this.#partialArgs);
    } else {
      for (const record of changed) fill(this.#spans.get(key(record)), record);
      this.#follow.update();
    }
    for (const record of changed) {
      const span = this.#spans.get(key(record));
      if (span) markCorrected(span);
    }
  }

  /** Show speaker label `spk` as `names[spk]` where the room named it (`{"<spk>": name}`), on the names shown too. */
  setNames(names) {
    this.#names = { ...(names ?? {}) };
    for (const turn of this.#log.querySelectorAll(".turn")) {
      const who = turn.querySelector(".turn-head .who");
      if (who && turn.dataset.speaker !== "") who.textContent = speakerName(Number(turn.dataset.speaker), this.#names);
    }
    for (const line of [this.#partial, ...this.#more.values()]) line.key = "";
    this.setPartial(...this.#partialArgs);
  }

  /**
   * The open text is in language `code`, not the page's ("" = the page's): on a page showing a room language the
   * open text is the speaker's own words until its sentence locks and is translated (./languages.js).
   */
  setOpenLanguage(code) {
    this.#openLang = code;
    for (const line of [this.#partial, ...this.#more.values()]) markForeign(line.el, code);
  }

  #append(record, animate = true, kept = null) {
    const last = this.#lastRecord;
    if (!last || record.spk !== last.spk || record.session !== last.session) {
      if (last && record.session !== last.session) this.#log.append(sessionBreak(record));
      this.#lastTurn = turnElement(record, this.#names);
      this.#log.append(this.#lastTurn);
    }
    const text = this.#lastTurn.querySelector(".turn-text");
    if (text.childElementCount) text.append(" ");
    const old = kept?.get(key(record));
    const span = old ? fill(old, record) : sentenceElement(record, animate);
    if (old && isMarked(old)) markCorrected(old);
    this.#spans.set(key(record), span);
    text.append(span);
    this.#lastRecord = record;
  }
}

/**
 * One open line's element (`<p class="partial">`): its voice's label, its settled words, the tentative rest. The
 * parts are kept across updates, so an unchanged part is never touched.
 */
class PartialLine {
  key = "";
  #who = Object.assign(document.createElement("span"), { className: "who" });
  #whoGap = document.createTextNode(" ");
  #stable = part("stable");
  #gap = document.createTextNode("");
  #tentative = part("tentative");
  #settled = ""; // the text the settled span shows

  constructor(el) {
    this.el = el;
  }

  /** Show `text`, its first `stable` words settled, after `label` ("" for none), the name of voice `spk`. */
  show(text, stable, label, spk) {
    const { settled, gap, tail } = splitStable(text, stable);
    const key = `${label}\u0000${settled}\u0000${gap}\u0000${tail}`;
    if (this.key === key) return;
    this.key = key;
    this.el.dataset.spk = label ? String(spk) : "";
    if (!text) {
      this.el.replaceChildren(); // truly empty: CSS hides it (.partial:empty)
      return;
    }
    if (this.#stable.parentNode !== this.el) this.el.replaceChildren(this.#stable, this.#gap, this.#tentative);
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
  }
}

function openLineElement(session) {
  const line = document.createElement("p");
  line.className = "partial";
  line.dataset.openLine = "";
  line.dataset.session = session;
  return line;
}

/** A sentence's key: ids are per session on the page's own data channel (room-wide in a room, where this is too). */
function key(record) {
  return `${record.session ?? ""}\u0000${record.id}`;
}

function turnElement(record, names) {
  const turn = document.createElement("section");
  turn.className = "turn";
  turn.dataset.speaker = spkAttr(record.spk);
  if (record.spk !== null) turn.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);

  const head = document.createElement("header");
  head.className = "turn-head";
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = speakerName(record.spk, names);
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
  return fill(span, record);
}

/** Make `span` show `record` (touching only what differs); returns it. */
function fill(span, record) {
  if (span.dataset.sentenceId !== String(record.id)) span.dataset.sentenceId = String(record.id);
  if (span.dataset.spk !== spkAttr(record.spk)) span.dataset.spk = spkAttr(record.spk);
  const title = `${shortTime(record.start)} – ${shortTime(record.end)}`;
  if (span.title !== title) span.title = title;
  if (span.textContent !== record.text) span.textContent = record.text;
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
