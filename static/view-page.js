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
 */

import { Follow } from "./js/follow.js";
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
const feed = new RoomFeed({ room: query.get("room") ?? "", token: query.get("token") ?? "" });
const view = new TranscriptView({ log: $("transcript"), partial: $("partial"), follow: new Follow($("stage"), $("jump")) });

feed.addEventListener("sentence", ({ detail }) => view.add(detail));
feed.addEventListener("caption", ({ detail }) => view.setPartial(detail.partial, detail.partialSpk,
                                                                 detail.partialSession, detail.stable, detail.open));
feed.addEventListener("speakers", () => view.render(feed.sentences, feed.partial, feed.partialSpk,
                                                    feed.partialSession, feed.stable, feed.open));
// An editor's fix replaces the sentence where it stands (marked for a moment); named speakers show by name.
feed.addEventListener("correction", ({ detail }) => {
  if (Object.keys(detail.names).length) view.setNames(feed.names);
  view.correct(detail, feed.sentences);
});
feed.addEventListener("state", ({ detail }) => {
  const badgeState = BADGE_STATE[detail.state] ?? detail.state;
  $("badge").dataset.state = badgeState;
  document.body.dataset.state = badgeState;
  $("badge-text").textContent = TEXT[detail.state] ?? detail.state;
  $("notice").hidden = !detail.detail;
  $("notice").textContent = detail.detail;
  $("notice").dataset.tone = detail.state === FeedState.ERROR ? "error" : "info";
});

for (const link of document.querySelectorAll("[data-format]")) {
  link.href = feed.url(`/transcript.${link.dataset.format}`);
  link.download = `captions.${link.dataset.format}`;
}

window.liveCaptions = feed;
feed.start();
