"""Reading a room's caption files back as a viewer's software would: WebVTT cues, an HLS playlist's segments as
they are listed, and an SCC file through pycaption's ``SCCReader``. Times are in seconds."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import aiohttp
from pycaption import SCCReader


def vtt_blocks(vtt: str) -> list[str]:
    """A WebVTT file's cues as ``"start --> end\\ntext"`` blocks, without identifiers."""
    out = []
    for block in vtt.strip().split("\n\n")[1:]:
        lines = block.split("\n")
        at = next(i for i, line in enumerate(lines) if "-->" in line)
        out.append("\n".join(lines[at:]))
    return out


def vtt_cues(vtt: str) -> list[tuple[float, float, str]]:
    """(start s, end s, text without markup) of each cue of a WebVTT file."""
    out = []
    for block in vtt_blocks(vtt):
        timing, *lines = block.split("\n")
        a, b = (
            sum(float(x) * f for x, f in zip(t.strip().split(" ")[0].split(":")[::-1], (1, 60, 3600), strict=False))
            for t in timing.split("-->")
        )
        out.append((a, b, re.sub(r"<[^>]*>", "", " ".join(lines))))
    return out


async def until_listed(http: aiohttp.ClientSession, url: str, count: int, timeout_s: float = 15.0) -> str:
    """The HLS playlist at ``url`` once it lists at least ``count`` caption segments (polled every 0.1 s; fails
    after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with http.get(url) as r:
            text = await r.text()
        if sum(1 for line in text.splitlines() if line.startswith("captions/")) >= count:
            return text
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.1)


async def follow_hls(playlist: str, out: Path) -> asyncio.subprocess.Process:
    """Debian's ffmpeg following the live HLS playlist at ``playlist`` from its first segment, writing the subtitles to
    ``out`` (WebVTT) until the playlist ends; its output pipes are for ``communicate()``."""
    return await asyncio.create_subprocess_exec(
        "ffmpeg",
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        "-live_start_index",
        "0",
        "-i",
        playlist,
        "-c:s",
        "copy",
        str(out),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def pycaption_captions(scc_text: str) -> list[tuple[float, float, str]]:
    """(start s, end s, text) of each caption of an SCC file, as pycaption's ``SCCReader`` reads it."""
    captions = SCCReader().read(scc_text).get_captions("en-US")
    return [(c.start / 1e6, c.end / 1e6, c.get_text()) for c in captions]
