"""YouTube Live's caption ingestion: captions over HTTP POST, in the format Google describes for live caption
vendors ("Closed Captions over HTTP for YouTube Live Streams", YouTube Help 6077032).

The stream's owner copies the *caption ingestion URL* from YouTube Studio (Live > stream settings > Closed
captions > POST captions to URL: ``http://upload.youtube.com/closedcaption?cid=…``). Each caption is one POST:

- to that URL with ``&seq=N`` added (``?seq=N`` when it has no query). ``seq`` counts the posts of new caption
  data: it starts at 1, goes up by one for each new caption and stays the same when a post is retried, as Google
  asks. It is kept with the output (``resume``), so a restarted server goes on counting where it stopped;
- ``Content-Type: text/plain``, the body UTF-8: per screenful of the caption a line with its time on the wall
  clock, UTC, ``YYYY-MM-DDTHH:MM:SS.mmm`` (the sentence's start; the next screenfuls of a long sentence later, by
  their share of its text), then the text with ``<br>`` between its lines, each line ending in a newline. The
  optional ``region:reg1#cue1`` after the time is left out (Google marks its format "TBD").

Lines are subtitle lines (at most 2 of 42 characters, broken where they read best, as the room's SRT files); a
sentence by another speaker than the one before starts with ``>> `` (the US broadcast mark of a new speaker).

Errors: no answer within 10 s, a refused or dropped connection, a 5xx or a 429 are retried (with ``Retry-After``
when the answer names one); a redirect (not followed: this target contacts nothing but its URL) or any other 4xx
is permanent (a wrong or expired URL), as is a destination the server's outbound policy refuses
(``destinations``: checked for every connection). The error says only the class of what happened
(``failures``): an answer's body is never read but for a success's first ``MAX_ANSWER_BYTES`` (dropped), so
neither a destination's words nor a huge body reach the editor or the server's memory. Nothing that was posted
can be taken back: YouTube has no way to retract a caption.
"""

from __future__ import annotations

import email.utils
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp
from yarl import URL

from . import failures
from .backoff import RetryLater
from .destinations import DestinationPolicy, DestinationRefused, OutboundSession, RedirectRefused
from .layout import BreakLines, frames
from .spec import OutputKind
from .target import OutgoingCaption, Target, TargetError

TIMEOUT_S = 10.0  # one post, connection to answer
NEW_SPEAKER = ">> "
MAX_ANSWER_BYTES = 4096  # of a success's body, read (to reuse the connection) and dropped; a longer one closes it


class YouTubeTarget(Target):
    """Posts each caption to ``url`` (the stream's caption ingestion URL). ``break_lines``: the project's subtitle
    line breaking (``layout.Layout``). ``acknowledged``: the last ``seq`` YouTube took (0 for a new output).
    ``policy``: where it may connect (None: public addresses only)."""

    kind = OutputKind.YOUTUBE

    def __init__(
        self,
        url: str,
        break_lines: BreakLines,
        acknowledged: int = 0,
        timeout_s: float = TIMEOUT_S,
        policy: DestinationPolicy | None = None,
    ) -> None:
        self.url = url  # posted to exactly as given (ASCII, validated by ``spec``), with ``seq`` added
        self.break_lines = break_lines
        self.acknowledged = acknowledged
        self.timeout_s = timeout_s
        self.policy = policy or DestinationPolicy()
        self._http: OutboundSession | None = None

    async def send(self, caption: OutgoingCaption) -> None:
        seq = self.acknowledged + 1  # a retry of the same caption posts the same seq: nothing is acknowledged yet
        joint = "" if self.url.endswith(("?", "&")) else "&" if "?" in self.url else "?"
        url = URL(f"{self.url}{joint}seq={seq}", encoded=True)
        body = self.body(caption).encode("utf-8")
        try:
            async with self._session().http.post(
                url, data=body, headers={"Content-Type": "text/plain"}, allow_redirects=False
            ) as answer:
                status = answer.status
                retry_after = answer.headers.get("Retry-After")
                if 200 <= status < 300:
                    await _discard(answer)
        except TimeoutError:
            raise TargetError(f"no answer within {self.timeout_s:g} s") from None
        except (DestinationRefused, RedirectRefused) as exc:
            raise failures.refused(exc) from None
        except aiohttp.InvalidURL:
            raise TargetError(failures.NOT_A_URL, permanent=True) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise TargetError(failures.connection_failure(exc)) from None
        if 200 <= status < 300:
            self.acknowledged = seq
            return
        message = f"HTTP status {status}"  # what the answer says beyond its status is never shown
        if status == 429 or status >= 500:
            after = _retry_after_s(retry_after)
            if after is not None:
                raise RetryLater(message, after)
            raise TargetError(message)
        raise TargetError(message + ("" if status >= 400 else " (redirects are not followed)"), permanent=True)

    def body(self, caption: OutgoingCaption) -> str:
        """The POST body for ``caption`` (see the module)."""
        text = (NEW_SPEAKER if caption.speaker_changed else "") + " ".join(caption.text.split())
        span = max(0, caption.end_wall_ms - caption.start_wall_ms)
        out = []
        for frame in frames(text, self.break_lines):
            at_ms = caption.start_wall_ms + int(span * frame.offset)
            out.append(f"{timestamp(at_ms)}\n{'<br>'.join(frame.lines)}\n")
        return "".join(out)

    def status(self) -> dict[str, Any]:
        return {"seq": self.acknowledged}

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _session(self) -> OutboundSession:
        if self._http is None:  # made on first use: it belongs to the running loop
            self._http = self.policy.session(aiohttp.ClientTimeout(total=self.timeout_s))
        return self._http


async def _discard(answer: aiohttp.ClientResponse) -> None:
    """Read a success's body to its end, if it ends within ``MAX_ANSWER_BYTES`` (the connection is then reused),
    and drop it; a longer one is left unread, and the connection closes with the answer."""
    left = MAX_ANSWER_BYTES
    while left > 0:
        chunk = await answer.content.read(left)
        if not chunk:
            return
        left -= len(chunk)


def timestamp(wall_ms: int) -> str:
    """``wall_ms`` (ms since the Unix epoch) as YouTube's caption time: UTC, ``YYYY-MM-DDTHH:MM:SS.mmm``."""
    moment = datetime.fromtimestamp(wall_ms // 1000, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{wall_ms % 1000:03d}"


def _retry_after_s(value: str | None) -> float | None:
    """HTTP ``Retry-After``: seconds, or a date (RFC 9110); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
