"""Shared fixtures. The real engine (vLLM + speaker model) starts once per test run and is shared by every heavy
test: starting it costs a minute or more and ~4 GB."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from engine.config import EngineConfig, TranscriberConfig
from engine.hub import CaptionEngine


@pytest.fixture(scope="session")
async def engine() -> AsyncIterator[CaptionEngine]:
    """The real caption engine on the embedded default model (override with LIVE_CAPTIONS_TEST_MODEL)."""
    eng = CaptionEngine(EngineConfig(transcriber=TranscriberConfig(model=os.environ.get("LIVE_CAPTIONS_TEST_MODEL"))))
    await eng.start()
    yield eng
    await eng.close()
