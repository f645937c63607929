"""A real meeting through a phone per person, with the real engine: the AMI meeting's four close-talk channels, each
published from its own WebRTC client (20 ms Opus packets, as browsers send) into one room under its speaker's name,
each "phone" also hearing the other three 12 dB down and a few milliseconds late. Every phone is admitted, every word
is captioned about once (not once per phone that heard it), from the right phone, under the right name. The bounds
are generous for a shared CI machine; ``bench.meeting`` (the same run, scored the same way) measures the figures."""

from __future__ import annotations

import aiohttp
import pytest

from bench.meeting import NAMES, SPEAKERS, leaked, meeting_room, ogg_of, score_phones
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio
from tests.support.servers import capacity_afresh, running_server

pytestmark = pytest.mark.heavy


async def test_four_phones_caption_a_meeting_once_each_under_its_names(engine: CaptionEngine) -> None:
    sources = [audio(f"ami_seriously_src_{s}") for s in SPEAKERS]
    phones = leaked(sources, [[12.0 if i != j else float("inf") for j in range(4)] for i in range(4)])
    oggs = {s: ogg_of(f"test-phone-{s}", p) for s, p in zip(SPEAKERS, phones, strict=True)}
    # A meeting on a server that has measured nothing yet (as ``bench.meeting``'s): admission counts its voices.
    with capacity_afresh(engine):
        async with running_server(engine, max_sessions=None) as (url, _app), aiohttp.ClientSession() as http:
            run = await meeting_room(http, url, {s: (oggs[s], {"name": NAMES[s]}) for s in SPEAKERS})
    scores = score_phones(run)
    print(scores)  # the figures bench.meeting reports, in the test log of every run
    # Before the room arbitrated, the phones captioned 463 words for the 232 said: cpWER 132 %, 138 % of the words
    # said from the wrong phone, 82 % twice, and the fourth phone was refused (bench.meeting, docs/benchmarks.md).
    assert scores["admitted"] == 4, (scores, run["ready_before"])  # (what the server said of its capacity)
    assert scores["cpwer"] <= 0.45, scores
    # A loaded machine decodes some words of overlaps from the wrong phone: 1.7 % here alone, 2.2-3.5 % with a core
    # kept busy beside it, 5.2 % once on a CI machine (12 of the 232 words).
    assert scores["wrong_mic"] <= 0.08, scores
    assert scores["duplicates"] <= 0.05, scores
    assert scores["named"] >= 0.95, scores
    assert scores["words_captioned"] <= 1.2 * scores["words_said"], scores
