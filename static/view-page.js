/**
 * The /view page's entry: a room's captions, read-only (`/view?room=<id>[&token=<viewer token>]`), what a phone
 * opens from the kiosk's QR code. Same look as the main page (captions.css, the same transcript view, js/view.js);
 * no microphone.
 *
 * Test hook: `window.liveCaptions` is the RoomFeed (state, detail, transcript(), messages, events).
 * DOM: `[data-sentence-id][data-spk]`, `[data-partial]` (inside it `[data-stable]`: the settled words, shown like
 * locked text; `[data-tentative]`: the rest, quieter; see js/view.js), while several publishers speak one
 * `[data-open-line][data-session]` after it per publisher after the first, `#badge[data-state]`. A sentence an
 * editor just corrected has the class `corrected` for two seconds.
 *
 * A room translated into other languages (docs/protocol.md "Rooms in other languages") gets a language picker,
 * each language named in itself; `lang=<code>` in the address opens the page in one. Picking one follows the
 * room's stream in it (`?lang=`: the whole room comes again, translated) and puts it in the address, so a reload or
 * a shared link keeps it. The page's `lang` attribute follows, so a screen reader reads the captions in their
 * language; the open text stays the speaker's own words until its sentence locks and is translated, shown quieter
 * (`[data-partial].foreign`, with the spoken language's `lang`). `#language` is the picker.
 */

import { Follow } from "./js/follow.js";
import { languageName, matching, requested, roomLanguages, setPageLanguage, SPOKEN } from "./js/languages.js";
import { FeedState, RoomFeed } from "./js/room-feed.js";
import { TranscriptView } from "./js/view.js";

const TEXT = {
  [FeedState.CONNECTING]: "Connecting…",
  [FeedState.LIVE]: "Live",
  [FeedState.WAITING]: "Waiting for a speaker",
  [FeedState.RECONNECTING]: "Reconnecting…",
  [FeedState.STOPPED]: "Stopped",
  [FeedState.ERROR]: "Error",
};
// captions.css colours the badge for the main page's states; map the feed's onto them.
const BADGE_STATE = { [FeedState.WAITING]: "idle", [FeedState.STOPPED]: "idle" };

const $ = (id) => document.getElementById(id);
const query = new URLSearchParams(location.search);
const room = query.get("room") ?? "";
const token = query.get("token") ?? "";
const view = new TranscriptView({ log: $("transcript"), partial: $("partial"), follow: new Follow($("stage"), $("jump")) });
let spoken = SPOKEN;
let feed = null;

/** Follow the room in `lang` ("" = the language spoken in it), in place of the feed followed so far. */
function follow(lang) {
  const before = feed;
  feed = new RoomFeed({ room, token, lang });
  before?.stop(); // after the swap: its last events (stopped) are not shown
  const shown = feed;
  const current = (handler) => (event) => shown === feed && handler(event);
  feed.addEventListener("sentence", current(({ detail }) => view.add(detail)));
  feed.addEventListener("caption", current(({ detail }) => view.setPartial(detail.partial, detail.partialSpk,
                                                                           detail.partialSession, detail.stable,
                                                                           detail.open)));
  feed.addEventListener("speakers", current(() => view.render(feed.sentences, feed.partial, feed.partialSpk,
                                                              feed.partialSession, feed.stable, feed.open)));
  // An editor's fix replaces the sentence where it stands (marked for a moment); named speakers show by name.
  feed.addEventListener("correction", current(({ detail }) => {
    if (Object.keys(detail.names).length) view.setNames(feed.names);
    view.correct(detail, feed.sentences);
  }));
  feed.addEventListener("state", current(({ detail }) => showState(detail)));
  feed.addEventListener("languages", current(({ detail }) => offer(detail.languages)));
  setPageLanguage(lang || spoken);
  view.setOpenLanguage(lang ? spoken : "");
  view.render([], "");
  for (const link of document.querySelectorAll("[data-format]")) {
    const url = new URL(feed.url(`/transcript.${link.dataset.format}`), location.href);
    if (lang) url.searchParams.set("lang", lang);
    link.href = url.pathname + url.search;
    link.download = lang ? `captions.${lang}.${link.dataset.format}` : `captions.${link.dataset.format}`;
  }
  window.liveCaptions = feed;
  feed.start();
}

/** Offer the room's `languages` (besides the spoken one) in the picker; hidden when there are none. */
function offer(languages) {
  const picker = $("language");
  const chosen = feed?.lang || spoken;
  const options = [spoken, ...languages.filter((code) => code !== spoken)];
  if (!options.includes(chosen)) options.push(chosen); // removed by an editor: it stays until the reader moves
  picker.replaceChildren(...options.map((code) => {
    const option = new Option(languageName(code), code, false, code === chosen);
    option.lang = code;
    return option;
  }));
  $("language-box").hidden = options.length < 2;
}

$("language").addEventListener("change", () => {
  const code = $("language").value;
  const lang = code === spoken ? "" : code;
  const url = new URL(location.href);
  if (lang) url.searchParams.set("lang", lang); else url.searchParams.delete("lang");
  history.replaceState(null, "", url);
  follow(lang);
});

function showState(detail) {
  const badgeState = BADGE_STATE[detail.state] ?? detail.state;
  $("badge").dataset.state = badgeState;
  document.body.dataset.state = badgeState;
  $("badge-text").textContent = TEXT[detail.state] ?? detail.state;
  $("notice").hidden = !detail.detail;
  $("notice").textContent = detail.detail;
  $("notice").dataset.tone = detail.state === FeedState.ERROR ? "error" : "info";
}

// The room's languages first (one request), so that a `lang=` it has opens in it and one it lacks opens spoken.
const asked = requested(query.get("lang"), 1)[0] ?? "";
roomLanguages(new RoomFeed({ room, token })).then(({ spoken: language, languages }) => {
  spoken = language;
  const lang = matching(asked, languages) ?? "";
  follow(lang);
  offer(languages);
});
