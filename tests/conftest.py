"""Shared fixtures. The real engine (vLLM + speaker model) starts once per test run and is shared by every heavy
test: starting it costs a minute or more and ~4 GB."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from engine.asr.fake import FakeTranscriber
from engine.config import EngineConfig, TranscriberConfig
from engine.stream.engine import CaptionEngine


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
