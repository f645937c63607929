"""Shared fixtures. The real engine (vLLM + speaker model) starts once per test run and is shared by every heavy
test: starting it costs a minute or more and ~4 GB."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bench.lib import postgres
from engine.asr.fake import FakeTranscriber
from engine.config import EngineConfig, TranscriberConfig
from engine.stream.engine import CaptionEngine
from tests.support.loop_watch import watched_loop

if TYPE_CHECKING:
    from playwright.async_api import Browser


@pytest.fixture(scope="session")
async def engine() -> AsyncIterator[CaptionEngine]:
    """The real caption engine on the embedded default model (override with LIVE_CAPTIONS_TEST_MODEL)."""
    eng = CaptionEngine(EngineConfig(transcriber=TranscriberConfig(model=os.environ.get("LIVE_CAPTIONS_TEST_MODEL"))))
    await eng.start()
    yield eng
    await eng.close()


@pytest.fixture
async def fake_engine() -> AsyncIterator[CaptionEngine]:
    """An engine whose recognizer is the named fake: for transport tests where the model is not what is tested
    (bad input, fan-out, persistence). Real VAD and endpointing; text is "audio of N seconds"."""
    eng = CaptionEngine(EngineConfig(speakers=False), transcriber=FakeTranscriber(delay_s=0.1))
    await eng.start()
    yield eng
    await eng.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server for the run (Debian's ``postgresql``, started in a temporary folder on 127.0.0.1 at
    a free port); yields the URL of its ``postgres`` database. Skipped only where the binaries are missing."""
    bin_dir = postgres.binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): apt-get install postgresql")
    with postgres.server(bin_dir) as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database of the run's PostgreSQL server, for one test."""
    return postgres.new_database(postgres_server)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a transcript store opens, once on each backend: a fresh SQLite file, then a fresh PostgreSQL database
    (``open_store``'s target)."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(scope="session")
def mic_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A WAV of the browser tests' ``SPEECH_CLIP`` for Chromium's fake microphone: 1 s of silence, the sentence, 4 s."""
    from speechdata.corpus import audio, pad
    from tests.support.browser import SPEECH_CLIP, write_wav

    return write_wav(tmp_path_factory.mktemp("mic") / "speech.wav", pad(audio(SPEECH_CLIP), 1.0, 4.0))


@pytest.fixture
async def browser(mic_file: Path) -> AsyncIterator[Browser]:
    """A Chromium of its own for one test, its microphone saying ``mic_file`` (Playwright is imported here so that
    the tiers without a browser do not pay for it)."""
    from tests.support.browser import chromium

    async with chromium(mic_file) as b:
        yield b


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where a browser test saves its screenshots: ``$LIVE_CAPTIONS_SCREENSHOTS`` (a folder) when set, else the
    test's temporary folder."""
    folder = Path(os.environ.get("LIVE_CAPTIONS_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def _the_loop_never_blocks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every quick-tier test fails if the server's or the engine's code blocks the event loop
    (``tests/support/loop_watch.py``); the heavy and slow tiers, and tests marked ``blocks_loop``, are not watched."""
    if any(request.node.get_closest_marker(m) for m in ("heavy", "slow", "blocks_loop")):
        yield
        return
    with watched_loop():
        yield
