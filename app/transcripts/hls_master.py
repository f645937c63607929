"""An HLS master playlist pairing a video with a room's captions in each of its languages (RFC 8216, 4.3.4.1 and
4.3.4.2): the video's media playlist as the one variant stream, each room language a ``SUBTITLES`` rendition of one
group, the spoken language the default. A player (hls.js, Safari, ffmpeg) then offers the languages in its
captions menu and keeps them in line with the video by their program dates.

The server never fetches the video: its URI is only written into the playlist for players, so all it must be is
one safe URI line. Pure: the handler (``hls_routes.master_playlist``) reads the query and the room.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine import language_name

GROUP = "captions"
DEFAULT_BANDWIDTH = 2_000_000  # bit/s; RFC 8216 requires BANDWIDTH, and a player only uses it to pick among variants
MAX_URI = 2048
_URI = re.compile(r"(?:https?://[^\s\"'<>\\]+|/?[A-Za-z0-9._~%!$&()*+,;=@/?-]+)")
_RESOLUTION = re.compile(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}")
_CODECS = re.compile(r"[A-Za-z0-9.]{1,40}(?:,[A-Za-z0-9.]{1,40}){0,7}")


@dataclass(frozen=True)
class Variant:
    """The video: its media playlist's URI (absolute http(s), or relative to the master playlist's URL), its peak
    bit rate, and optionally its resolution (``1280x720``) and codecs (``avc1.64001f,mp4a.40.2``)."""

    uri: str
    bandwidth: int = DEFAULT_BANDWIDTH
    resolution: str = ""
    codecs: str = ""

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Variant:
        """From ``video``, ``bandwidth``, ``resolution``, ``codecs``; ``ValueError`` names the parameter that is
        missing or not of its form (never its value)."""
        uri = query.get("video", "")
        if not uri:
            raise ValueError('"video" is required: the URI of the video\'s HLS media playlist')
        if len(uri) > MAX_URI or not _URI.fullmatch(uri) or uri.startswith("//"):
            raise ValueError(f'"video" must be an http(s) URL or a relative path of at most {MAX_URI} characters')
        raw = query.get("bandwidth", str(DEFAULT_BANDWIDTH))
        if not raw.isdigit() or not 1 <= int(raw) <= 10**10:
            raise ValueError('"bandwidth" must be the video\'s peak bit rate in bit/s (a whole number)')
        resolution = query.get("resolution", "")
        if resolution and not _RESOLUTION.fullmatch(resolution):
            raise ValueError('"resolution" must be WIDTHxHEIGHT in pixels, e.g. 1280x720')
        codecs = query.get("codecs", "")
        if codecs and not _CODECS.fullmatch(codecs):
            raise ValueError('"codecs" must be a comma-separated list of RFC 6381 codec names')
        return cls(uri, int(raw), resolution, codecs)


@dataclass(frozen=True)
class Rendition:
    """One language's captions: its BCP 47 tag and its media playlist's URI (relative to the master playlist)."""

    lang: str
    uri: str


def master_playlist(video: Variant, renditions: Sequence[Rendition]) -> str:
    """The master playlist: one ``EXT-X-MEDIA`` per rendition (the first is the default and chosen automatically,
    the others chosen automatically when the player's language matches), then the video as the variant that uses
    them. Version 4: the lowest that has ``EXT-X-MEDIA`` subtitles (RFC 8216, 7)."""
    lines = ["#EXTM3U", "#EXT-X-VERSION:4", "#EXT-X-INDEPENDENT-SEGMENTS"]
    for i, r in enumerate(renditions):
        default = "YES" if i == 0 else "NO"
        lines.append(
            f'#EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="{GROUP}",NAME="{language_name(r.lang)}",'
            f'LANGUAGE="{r.lang}",DEFAULT={default},AUTOSELECT=YES,FORCED=NO,URI="{r.uri}"'
        )
    attributes = [f"BANDWIDTH={video.bandwidth}"]
    if video.resolution:
        attributes.append(f"RESOLUTION={video.resolution}")
    if video.codecs:
        attributes.append(f'CODECS="{video.codecs}"')
    attributes.append(f'SUBTITLES="{GROUP}"')
    lines += ["#EXT-X-STREAM-INF:" + ",".join(attributes), video.uri]
    return "\n".join(lines) + "\n"
