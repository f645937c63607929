/**
 * Transcript text formats (TXT, SRT, WebVTT, JSON) and the time and speaker labels shared with the page.
 * Input is the transcript's records: `{id, text, start, end, spk, session}`, times in milliseconds.
 */

/** "Speaker 1" for spk 0: the server's speaker indices are 0-based, people count from one. */
export function speakerName(spk) {
  return spk === null || spk === undefined ? "Speaker ?" : `Speaker ${spk + 1}`;
}

/**
 * `HH:MM:SS<sep>mmm`, e.g. "00:01:02,345" (SRT, sep ",") or "00:01:02.345" (WebVTT, sep ".").
 * Rounds to whole milliseconds first and derives every field from that integer, so a value such as
 * 999.6 ms becomes "00:00:01,000", never "00:00:00,1000".
 */
export function clockTime(ms, sep) {
  const total = Math.max(0, Math.round(Number(ms) || 0));
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor(total / 60_000) % 60;
  const seconds = Math.floor(total / 1000) % 60;
  const millis = total % 1000;
  return `${pad(hours, 2)}:${pad(minutes, 2)}:${pad(seconds, 2)}${sep}${pad(millis, 3)}`;
}

/** Short reading time for the page: "0:07", "12:30", "1:02:03". */
export function shortTime(ms) {
  const total = Math.max(0, Math.floor((Number(ms) || 0) / 1000));
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor(total / 60) % 60;
  const seconds = total % 60;
  return hours ? `${hours}:${pad(minutes, 2)}:${pad(seconds, 2)}` : `${minutes}:${pad(seconds, 2)}`;
}

/** Plain text: one paragraph per speaker turn, headed by the speaker and the time the turn began. */
export function toTxt(sentences) {
  return turns(sentences)
    .map((turn) => {
      const head = `[${clockTime(turn[0].start, ".").slice(0, 8)}] ${speakerName(turn[0].spk)}`;
      return `${head}\n${turn.map((s) => oneLine(s.text)).join(" ")}\n`;
    })
    .join("\n");
}

/** SubRip: numbered cues, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, speaker named in each cue. */
export function toSrt(sentences) {
  return sentences
    .map((s, i) => {
      const [start, end] = cueTimes(s);
      const who = s.spk === null ? "" : `${speakerName(s.spk)}: `;
      return `${i + 1}\n${clockTime(start, ",")} --> ${clockTime(end, ",")}\n${who}${cueText(s.text)}\n`;
    })
    .join("\n");
}

/** WebVTT: `WEBVTT` header (present even when empty), speakers as voice spans (`<v Speaker 1>`). */
export function toVtt(sentences) {
  const cues = sentences.map((s, i) => {
    const [start, end] = cueTimes(s);
    const text = escapeVtt(cueText(s.text));
    const body = s.spk === null ? text : `<v ${speakerName(s.spk)}>${text}`;
    return `${i + 1}\n${clockTime(start, ".")} --> ${clockTime(end, ".")}\n${body}\n`;
  });
  return ["WEBVTT\n", ...cues].join("\n");
}

/** JSON: the records as the page holds them, with speaker names spelled out for convenience. */
export function toJson(sentences, { model = "", language = null, exportedAt = new Date() } = {}) {
  const document = {
    model,
    language,
    exported_at: exportedAt.toISOString(),
    sentences: sentences.map((s) => ({
      id: s.id,
      session: s.session,
      start_ms: s.start,
      end_ms: s.end,
      spk: s.spk,
      speaker: s.spk === null ? null : speakerName(s.spk),
      text: s.text,
    })),
  };
  return `${JSON.stringify(document, null, 2)}\n`;
}

export const FORMATS = {
  txt: { render: toTxt, mime: "text/plain" },
  srt: { render: toSrt, mime: "application/x-subrip" },
  vtt: { render: toVtt, mime: "text/vtt" },
  json: { render: toJson, mime: "application/json" },
};

/**
 * Consecutive sentences of one speaker within one session, as arrays. The page and the TXT export group
 * the same way so that what a person downloads reads like what they saw.
 */
export function turns(sentences) {
  const groups = [];
  let last = null;
  for (const s of sentences) {
    if (!last || s.spk !== last.spk || s.session !== last.session) groups.push([]);
    groups.at(-1).push(s);
    last = s;
  }
  return groups;
}

// Players drop a cue whose end is not after its start; give such a cue one millisecond.
function cueTimes(s) {
  const start = Math.round(s.start);
  return [start, Math.max(Math.round(s.end), start + 1)];
}

// A blank line ends a cue, and "-->" inside the text would read as a timing line: keep text on one line.
function cueText(text) {
  return oneLine(text).replaceAll("-->", "→");
}

function oneLine(text) {
  return String(text).replace(/\s+/g, " ").trim();
}

function escapeVtt(text) {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

function pad(n, width) {
  return String(n).padStart(width, "0");
}
