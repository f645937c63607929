#!/usr/bin/env bash
# Set up (first run only) and run the whole test suite: lint, types, unit, functional and browser tests.
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not heavy and not slow" -n 4 for the quick tier.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
.venv/bin/ruff check .
.venv/bin/ruff format --check .  # the layout is ruff's (formatting is not a review question)
.venv/bin/lint-imports --no-cache  # layer contracts: pyproject.toml [tool.importlinter]
.venv/bin/mypy --strict --cache-dir .mypy_cache/strict engine app  # its own cache: the run below is not strict
.venv/bin/mypy --explicit-package-bases bench speechdata tests  # tests/ and bench/ have no __init__.py: names from the root
.venv/bin/mypy --strict --explicit-package-bases --cache-dir .mypy_cache/support tests/support  # the helpers every test shares
.venv/bin/vulture  # dead code in app/ and engine/: pyproject.toml [tool.vulture], vulture_whitelist.py
exec .venv/bin/python -m pytest "$@"
