/**
 * A room's open text one line per speaking publisher (a room caption's `open`, docs/protocol.md): what the views
 * (view.js, caption-lines.js) share to show it. The first publisher to start speaking has the view's partial line;
 * each other one gets a line of its own after it, kept by session (so an update touches only what changed in it)
 * and in the order they started. A line goes when its publisher's entry does (its sentence locked, or it stopped).
 */

const NONE = Object.freeze({ session: null, text: "", stable: 0, spk: null });

/**
 * `{first, more}`: the open text a view shows, from its `setPartial` arguments: `open`'s first entry and the others
 * when `open` is given (RoomFeed's `[{session, text, stable, spk}]`), else the one partial `text` (a page's own
 * session, or a server from before `open`) with its voice `spk` of `session` and `stable` settled words.
 */
export function openParts(text, spk, session, stable, open) {
  const [first, ...more] = Array.isArray(open) ? open : [{ session, text: text ?? "", stable, spk }];
  return { first: first ?? NONE, more };
}

/**
 * Put one line per entry of `more` right after `anchor`, in order: the line `lines` (a Map, session -> `{el, ...}`)
 * holds for the entry's session, else `make(session)`'s; the lines of sessions no longer there leave the DOM.
 * Returns `{lines, moved}`: the lines now (a new Map, in order) and whether any element came, went or moved.
 */
export function placeLines(lines, more, anchor, make) {
  const kept = new Map(more.map(({ session }) => [session, lines.get(session) ?? make(session)]));
  let moved = false;
  for (const [session, line] of lines) {
    if (kept.has(session)) continue;
    line.el.remove();
    moved = true;
  }
  let at = anchor;
  for (const line of kept.values()) {
    if (at.nextElementSibling !== line.el) {
      at.after(line.el);
      moved = true;
    }
    at = line.el;
  }
  return { lines: kept, moved };
}
