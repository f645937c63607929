/**
 * A room's languages as the audience pages show them: which a room has (`GET /rooms/{id}`: the one spoken in it and
 * those it is translated into, docs/protocol.md "Rooms in other languages"), what each is called, and which one a
 * page asked for. Knows nothing about the DOM but the page's `lang` attribute.
 *
 * A language is named in itself ("español", "català"), as language pickers do: a reader looks for their own
 * language, not for its name in a language they may not read.
 */

/** The language a room is spoken in when its status does not say. */
export const SPOKEN = "en";

/**
 * `{spoken, languages}` of the room `feed` follows: its spoken language and the ones it is translated into (codes).
 * A room that cannot be read (offline, a 404) answers `{spoken: "en", languages: []}`: the page shows the spoken
 * language only.
 * @param {import("./room-feed.js").RoomFeed} feed
 */
export async function roomLanguages(feed) {
  try {
    const response = await fetch(feed.url(""), { cache: "no-store" });
    if (!response.ok) return { spoken: SPOKEN, languages: [] };
    const status = await response.json();
    const spoken = typeof status.language === "string" && status.language ? status.language : SPOKEN;
    return { spoken, languages: codes(status.languages).filter((code) => code !== spoken) };
  } catch {
    return { spoken: SPOKEN, languages: [] };
  }
}

/** Language codes of a `languages` value (a list of strings); anything else is none. */
export function codes(value) {
  return Array.isArray(value) ? value.filter((code) => typeof code === "string" && code) : [];
}

/**
 * The languages a page's `lang` parameter asks for (`"es"`, or `"en,es"` for a bilingual screen), lower-cased,
 * each once, at most `limit`; `[]` for none.
 */
export function requested(param, limit = 2) {
  const out = [];
  for (const part of (param ?? "").split(",")) {
    const code = part.trim().toLowerCase();
    if (/^[a-z]{2,3}(-[a-z0-9]{1,8})*$/.test(code) && !out.includes(code)) out.push(code);
  }
  return out.slice(0, limit);
}

/**
 * Which of `have` (a room's language codes) language `asked` is: the same tag whatever its case, else the first of
 * the same language ("es-mx" asked of a room in "es"), else undefined. The server answers a stream's `lang` so too.
 */
export function matching(asked, have) {
  const primary = (code) => String(code).split("-")[0].toLowerCase();
  if (!asked) return undefined;
  return have.find((code) => String(code).toLowerCase() === asked.toLowerCase())
    ?? have.find((code) => primary(code) === primary(asked));
}

/** What `code` is called in itself ("es" → "Español"), or the code where the browser does not know it. */
export function languageName(code) {
  try {
    const name = new Intl.DisplayNames([code], { type: "language" }).of(code);
    return name && name !== code ? name.charAt(0).toLocaleUpperCase(code) + name.slice(1) : code;
  } catch {
    return code;
  }
}

/** Set the page's language (its `lang` attribute), so that a screen reader reads its captions in it. */
export function setPageLanguage(code) {
  document.documentElement.lang = code;
}

/**
 * Mark `el` as text in language `code` other than the page's (class `foreign`, its `lang`), or as the page's own
 * (`code` ""). On a page in a room language the open text is still the speaker's own words: the styles show it
 * quieter, and a screen reader reads it in its language.
 */
export function markForeign(el, code) {
  el.classList.toggle("foreign", Boolean(code));
  if (code) {
    el.lang = code;
  } else {
    el.removeAttribute("lang");
  }
}
