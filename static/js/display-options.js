/**
 * Display options from a page's URL (the widget's and the kiosk's), applied as CSS custom properties so a host
 * can also override them in CSS. Every value is checked; a bad one falls back to the default.
 *
 *   theme     "transparent" | "dark" | "light" (kiosk: "dark" | "light")
 *   font      caption font size in CSS px (10-200)
 *   fg, bg    text and background colours: hex ("#" may be left out: "ffcc00"), rgb()/rgba()/hsl()/hsla() of
 *             numbers, or a colour name; nothing else (no var(), url() or ";")
 *   lines     how many lines of text are visible (1-20)
 *   position  "bottom" | "top": where the text sits
 *   speakers  "1" names speakers where they change, "0" does not
 *   partial   "0" hides the text still being spoken (only locked sentences show)
 */

export function readOptions(search, defaults) {
  const q = new URLSearchParams(search);
  const pick = (name, allowed) => (allowed.includes(q.get(name)) ? q.get(name) : defaults[name]);
  return {
    theme: pick("theme", ["transparent", "dark", "light"]),
    font: clampNumber(q.get("font"), 10, 200, defaults.font),
    fg: colour(q.get("fg")) ?? defaults.fg ?? null,
    bg: colour(q.get("bg")) ?? defaults.bg ?? null,
    lines: Math.round(clampNumber(q.get("lines"), 1, 20, defaults.lines)),
    position: pick("position", ["bottom", "top"]),
    speakers: q.has("speakers") ? q.get("speakers") === "1" : defaults.speakers,
    partial: q.has("partial") ? q.get("partial") !== "0" : true,
  };
}

/**
 * Set data-theme / data-position / data-open-text ("shown" | "hidden": the `partial` option) on <html> and the CSS
 * variables --font, --fg, --bg, --lines. (Not "data-partial": that attribute marks the open text's element, which
 * tests and other programs find by it.)
 */
export function applyOptions(options, root = document.documentElement) {
  root.dataset.theme = options.theme;
  root.dataset.position = options.position;
  root.dataset.openText = options.partial ? "shown" : "hidden";
  root.style.setProperty("--font", `${options.font}px`);
  root.style.setProperty("--lines", String(options.lines));
  if (options.fg) root.style.setProperty("--fg", options.fg);
  if (options.bg) root.style.setProperty("--bg", options.bg);
}

function clampNumber(raw, low, high, fallback) {
  const value = Number(raw);
  return raw !== null && raw !== "" && Number.isFinite(value) ? Math.min(high, Math.max(low, value)) : fallback;
}

// Colours by an allowlist grammar, never by "whatever CSS accepts": CSS.supports("color", ...) also accepts
// var(--x, url(...)) and the like, which would make every embedding page load a foreign URL.
const HEX = /^#(?:[0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8})$/i;
const FUNCTION = /^(?:rgba?|hsla?)\([0-9.%,\/\s+-]*(?:deg|grad|rad|turn)?[0-9.%,\/\s+-]*\)$/i;
const NAME = /^[a-z]{3,24}$/i; // named colours: letters only (red, rebeccapurple, transparent)

function colour(raw) {
  if (!raw || raw.length > 64) return null;
  const value = /^[0-9a-f]{3,8}$/i.test(raw) ? `#${raw}` : raw.trim();
  if (!HEX.test(value) && !FUNCTION.test(value) && !NAME.test(value)) return null;
  return CSS.supports("color", value) ? value : null;
}
