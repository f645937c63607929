/**
 * The editor page's list of locked sentences: one focusable row per sentence, in the room's order, and the in-place
 * forms that edit a row's text or name its speaker. DOM only: what a key does and what goes to the server is the
 * page's (../edit.js).
 *
 * Markup contract (tests and the page rely on it), inside `<ol class="lines">`:
 *   <li class="line" data-sentence-id data-spk tabindex>   one sentence; one row has tabindex 0 (the current one,
 *                                                          reached with Tab), the others -1 (roving focus)
 *     <span class="who">                                  its speaker's name ("Speaker 2", or the room's name for it)
 *     <time class="when">                                 when it was said (room time)
 *     <span class="text" data-text>                       the sentence as the server has it (while a save is under
 *                                                          way: the text being saved)
 *     <textarea class="editbox" data-editbox>             only while the row is open for editing: it replaces the
 *                                                          text, and nothing but the person types in it
 *     <form class="nameform" data-nameform>               only while naming the row's speaker
 *     <span class="flag" data-flag>                      "not shown yet" while the audience does not have it yet
 *     <span class="save" data-save>                      "saving…", "saved", "press Delete again…", an error
 *     <span class="note" data-note>                      what changed under an open row (another editor's fix)
 *     <span class="translation" data-translation lang>    the sentence in the room language the page shows beside
 *                                                          the source, when it has one (`translate`)
 * Row attributes: `data-open` while edited, `data-state` (saving, retrying, saved, error, arming), `data-held`
 * (sentence: not released yet; fix: its latest fix not released yet), class `corrected` for two seconds after a fix.
 */

import { markCorrected } from "./corrections.js";
import { shortTime, speakerName } from "./labels.js";

const PALETTE_SIZE = 8;

export class Rows {
  #list;
  #rows = new Map(); // sentence id -> <li>
  #names = {};
  #current = null; // id of the row Tab reaches (and the arrow keys move from)
  #help;

  /** @param {HTMLOListElement} list  @param {{help?: string}} options  help: id of the keyboard help's element */
  constructor(list, { help = "" } = {}) {
    this.#list = list;
    this.#help = help;
    if (help) list.setAttribute("aria-describedby", help); // said on entering the list, not on every line
  }

  /** Ids of the rows, in order. */
  get ids() {
    return [...this.#list.children].map((li) => Number(li.dataset.sentenceId));
  }

  get current() {
    return this.#current;
  }

  has(id) {
    return this.#rows.has(id);
  }

  row(id) {
    return this.#rows.get(id) ?? null;
  }

  /** The id of the row holding `node` (the row itself, its text box, its form), or null. */
  idOf(node) {
    const li = node?.closest?.("li.line");
    return li && this.#list.contains(li) ? Number(li.dataset.sentenceId) : null;
  }

  /**
   * Show `record`: a new row at its place in `order` (the ids of every sentence in order; rows go before the first
   * later sentence shown), or the row's new text, speaker and time. An open row keeps what is being typed: only its
   * hidden text changes. `text` overrides what the row shows (a save under way).
   */
  show(record, order = null, text = null) {
    let li = this.#rows.get(record.id);
    if (!li) {
      li = this.#create(record);
      const after = order ? order.slice(order.indexOf(record.id) + 1) : [];
      const next = after.map((id) => this.#rows.get(id)).find(Boolean);
      const newest = this.#list.lastElementChild;
      this.#list.insertBefore(li, next ?? null);
      // Until the person picks a line, Tab reaches the newest one.
      const untouched = !next && !this.#list.contains(document.activeElement)
        && Number(newest?.dataset.sentenceId) === this.#current;
      if (this.#current === null || untouched) this.#setCurrent(record.id);
    }
    li.dataset.spk = record.spk === null ? "" : String(record.spk);
    const who = li.querySelector(".who");
    const name = speakerName(record.spk, this.#names);
    if (who.textContent !== name) who.textContent = name;
    if (record.spk !== null) li.style.setProperty("--speaker", `var(--spk-${record.spk % PALETTE_SIZE})`);
    const when = li.querySelector(".when");
    if (when.textContent !== shortTime(record.start)) when.textContent = shortTime(record.start);
    const shown = li.querySelector("[data-text]");
    const value = text ?? record.text;
    if (shown.textContent !== value) shown.textContent = value;
    return li;
  }

  /** Show `text`, the row's sentence in room language `lang`, under its source text ("" for none: nothing). */
  translate(id, lang, text) {
    const li = this.#rows.get(id);
    if (!li) return;
    let shown = li.querySelector("[data-translation]");
    if (!text) {
      shown?.remove();
      return;
    }
    if (!shown) {
      shown = part("translation", "span", true);
      li.append(shown);
    }
    shown.lang = lang;
    if (shown.textContent !== text) shown.textContent = text;
  }

  /** Mark a row as just corrected (two seconds). */
  mark(id) {
    const li = this.#rows.get(id);
    if (li) markCorrected(li);
  }

  /** Remove a row; the current row moves to its neighbour (returned: the id now current, or null). */
  remove(id) {
    const li = this.#rows.get(id);
    if (!li) return this.#current;
    const next = li.nextElementSibling ?? li.previousElementSibling;
    const hadFocus = li.contains(document.activeElement);
    li.remove();
    this.#rows.delete(id);
    if (this.#current === id) {
      this.#current = null;
      if (next) this.#setCurrent(Number(next.dataset.sentenceId));
      if (hadFocus && next) next.focus();
    }
    return this.#current;
  }

  /** Speaker names of the room (`{"<spk>": name}`): every row shows its speaker's. */
  setNames(names) {
    this.#names = { ...(names ?? {}) };
    for (const li of this.#rows.values()) {
      const spk = li.dataset.spk === "" ? null : Number(li.dataset.spk);
      li.querySelector(".who").textContent = speakerName(spk, this.#names);
    }
  }

  nameOf(spk) {
    return speakerName(spk, this.#names);
  }

  /** The name the room gave label `spk`, or "". */
  givenName(spk) {
    return this.#names[spk] ?? "";
  }

  /** Move the current row (and the focus) to `id`. */
  focus(id) {
    const li = this.#rows.get(id);
    if (!li) return;
    this.#setCurrent(id);
    li.focus({ preventScroll: true });
    li.scrollIntoView({ block: "nearest" });
  }

  /** The id `steps` rows away from `id` (clamped to the first and last), or null when there are none. */
  step(id, steps) {
    const ids = this.ids;
    if (!ids.length) return null;
    const at = ids.indexOf(id);
    if (at < 0) return steps < 0 ? ids[0] : ids.at(-1);
    return ids[Math.max(0, Math.min(ids.length - 1, at + steps))];
  }

  /** Save state of a row: "" (none), saving, retrying, saved, error or arming, with its words. */
  setSave(id, state, text = "") {
    const li = this.#rows.get(id);
    if (!li) return;
    if ((li.dataset.state ?? "") !== state) {
      if (state) li.dataset.state = state;
      else delete li.dataset.state;
    }
    const save = li.querySelector("[data-save]");
    if (save.textContent !== text) save.textContent = text;
  }

  saveState(id) {
    return this.#rows.get(id)?.dataset.state ?? "";
  }

  /** Whether the audience has the row yet: "" (it has), "sentence" (not the sentence), "fix" (not its last fix). */
  setHeld(id, held) {
    const li = this.#rows.get(id);
    if (!li || (li.dataset.held ?? "") === held) return;
    if (held) li.dataset.held = held;
    else delete li.dataset.held;
    li.querySelector("[data-flag]").textContent = held === "sentence" ? "not shown yet" : held ? "fix not shown yet" : "";
  }

  /** A note under the row (what happened to it while it was open); "" removes it. */
  setNote(id, text) {
    const li = this.#rows.get(id);
    if (!li) return;
    const note = li.querySelector("[data-note]");
    note.textContent = text;
    note.hidden = !text;
  }

  isOpen(id) {
    return this.#rows.get(id)?.dataset.open !== undefined;
  }

  /** Open the row for editing with `text` in a text box (caret at the end); returns the text box. */
  open(id, text) {
    const li = this.#rows.get(id);
    if (!li) return null;
    this.#closeForms(li);
    li.dataset.open = "";
    const box = document.createElement("textarea");
    box.className = "editbox";
    box.dataset.editbox = "";
    box.rows = 1;
    box.spellcheck = true;
    box.value = text;
    box.setAttribute("aria-label", `Edit the line of ${li.querySelector(".who").textContent} at ${
      li.querySelector(".when").textContent}`);
    if (this.#help) box.setAttribute("aria-describedby", this.#help);
    li.querySelector("[data-text]").after(box);
    this.#setCurrent(id);
    box.focus({ preventScroll: true });
    box.setSelectionRange(box.value.length, box.value.length);
    li.scrollIntoView({ block: "nearest" });
    return box;
  }

  /** Open the form that names the row's speaker; returns its input. */
  openName(id) {
    const li = this.#rows.get(id);
    if (!li || li.dataset.spk === "") return null;
    this.#closeForms(li);
    li.dataset.open = "";
    const spk = Number(li.dataset.spk);
    const form = document.createElement("form");
    form.className = "nameform";
    form.dataset.nameform = "";
    const label = document.createElement("label");
    const input = document.createElement("input");
    input.type = "text";
    input.maxLength = 60;
    input.autocomplete = "off";
    input.value = this.givenName(spk);
    input.placeholder = `Speaker ${spk + 1}`;
    label.append(`Name for Speaker ${spk + 1} (everywhere in this room; empty: “Speaker ${spk + 1}”) `, input);
    form.append(label);
    li.querySelector("[data-text]").after(form);
    this.#setCurrent(id);
    input.focus();
    input.select();
    return input;
  }

  /** Close the row's text box or name form; the focus goes back to the row. */
  close(id) {
    const li = this.#rows.get(id);
    if (!li) return;
    const hadFocus = li.contains(document.activeElement);
    this.#closeForms(li);
    if (hadFocus) li.focus({ preventScroll: true });
  }

  #closeForms(li) {
    for (const el of li.querySelectorAll("[data-editbox], [data-nameform]")) el.remove();
    delete li.dataset.open;
  }

  #create(record) {
    const li = document.createElement("li");
    li.className = "line";
    li.dataset.sentenceId = String(record.id);
    li.tabIndex = -1;
    const head = part("head");
    head.append(part("who"), " ", part("when", "time"));
    const text = part("text", "span", true);
    const flag = part("flag", "span", true);
    const save = part("save", "span", true);
    const note = part("note", "span", true);
    note.hidden = true;
    li.append(head, " ", text, " ", flag, " ", save, note);
    this.#rows.set(record.id, li);
    return li;
  }

  #setCurrent(id) {
    if (this.#current === id) return;
    const old = this.#rows.get(this.#current);
    if (old) old.tabIndex = -1;
    this.#current = id;
    const li = this.#rows.get(id);
    if (li) li.tabIndex = 0;
  }
}

/**
 * One part of a line: a `tag` element of class `name`; a `marked` one also carries the empty data-<name> attribute
 * that the editor's code and its tests find it by.
 */
function part(name, tag = "span", marked = false) {
  const el = document.createElement(tag);
  el.className = name;
  if (marked) el.dataset[name] = "";
  return el;
}
