/**
 * The one-line embed snippet's script, served at `/embed.js`:
 *
 *   <script src="https://captions.example.org/embed.js" data-room="ROOM_ID" data-theme="dark" async></script>
 *
 * It inserts the caption widget's iframe right after itself. Every `data-*` attribute becomes a URL parameter of
 * the widget (room, token, theme, font, fg, bg, lines, position, speakers, partial, mic, key, lang, autostart),
 * except these, which shape the iframe: data-id (element id, default "live-captions"), data-height (CSS px;
 * default fits the lines), data-title (accessible name). With data-mic="1" the iframe may use the microphone.
 * Talk to the widget with `iframe.contentWindow.postMessage({source: "live-captions", type: "start"}, origin)`
 * and listen for `message` events whose `event.origin` is this server's origin (see static/embed.js).
 */
(() => {
  const script = document.currentScript;
  if (!script) return;
  const origin = new URL(script.src).origin;
  const data = { ...script.dataset };
  const frameKeys = ["id", "height", "title"];
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(data)) if (!frameKeys.includes(key)) params.set(key, value);

  const lines = Number(data.lines) || 2;
  const font = Number(data.font) || 20;
  const iframe = document.createElement("iframe");
  iframe.id = data.id || "live-captions";
  iframe.title = data.title || "Live captions";
  iframe.src = `${origin}/embed?${params}`;
  if (data.mic === "1") iframe.allow = "microphone";
  iframe.style.cssText =
    `display:block;border:0;width:100%;height:${Number(data.height) || Math.ceil(lines * font * 1.35 + 40)}px;` +
    "background:transparent;color-scheme:normal";
  script.after(iframe);
})();
