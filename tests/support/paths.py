"""Where the tests find the checkout's own files (pages, docs, scripts), wherever a test file sits under tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/support/ is two folders down
SUPPORT = ROOT / "tests" / "support"
