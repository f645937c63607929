"""Reader for CTranslate2 model binaries (``model.bin``), the format faster-whisper checkpoints ship in.

The file is little-endian and holds, in order:

- ``uint32`` binary version (this reader understands version 6, the current one),
- the model spec name (a string) and ``uint32`` spec revision,
- ``uint32`` number of variables, then per variable: name (string), ``uint8`` rank, ``uint32`` × rank
  dimensions, ``uint8`` data type, ``uint32`` payload size in bytes, the payload,
- ``uint32`` number of aliases, then per alias: alias name (string), target variable name (string).

A string is a ``uint16`` byte count (including a trailing NUL) followed by the UTF-8 bytes and the NUL.
Scalars (rank 0) carry model options such as ``decoder/num_heads``; arrays carry the weights.

A checkpoint may be split into several files that concatenate to one ``model.bin``: pass them in order.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

SUPPORTED_BINARY_VERSION = 6

# CTranslate2's DataType enumeration. bfloat16 has no numpy type: it is read as raw uint16 and widened.
_FLOAT32, _INT8, _INT16, _INT32, _FLOAT16, _BFLOAT16 = 0, 1, 2, 3, 4, 5
_NUMPY_DTYPES: dict[int, np.dtype] = {
    _FLOAT32: np.dtype("<f4"),
    _INT8: np.dtype("i1"),
    _INT16: np.dtype("<i2"),
    _INT32: np.dtype("<i4"),
    _FLOAT16: np.dtype("<f2"),
    _BFLOAT16: np.dtype("<u2"),
}


class Ct2FormatError(ValueError):
    """The bytes are not a CTranslate2 model binary this reader understands (names file and reason)."""


@dataclass(frozen=True)
class Ct2Model:
    """Everything stored in one CTranslate2 model binary.

    ``variables`` maps each stored name to its array (weights keep their stored dtype; bfloat16 is widened
    to float32). ``aliases`` maps an alias (e.g. a tied output projection) to the variable it shares.
    """

    spec_name: str
    spec_revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]

    def get(self, name: str) -> np.ndarray:
        """The array stored under ``name``, or under the variable it aliases; KeyError if absent."""
        return self.variables[self.aliases.get(name, name)]

    def scalar(self, name: str, default: int | None = None) -> int:
        """An integer option stored as a rank-0 variable; ``default`` when absent (KeyError if no default)."""
        if name not in self.variables and default is not None:
            return default
        value = self.variables[name]
        if value.ndim != 0:
            raise Ct2FormatError(f"{name} is an array of shape {value.shape}, expected a scalar")
        return int(value)


class _ChainedReader:
    """Reads the concatenation of several files sequentially, without joining them on disk."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._paths = list(paths)
        self._index = 0
        self._file: BinaryIO | None = None
        self.position = 0

    def __enter__(self) -> _ChainedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes, crossing file boundaries; fewer only at the end of the last file."""
        chunks: list[bytes] = []
        remaining = size
        while remaining > 0:
            if self._file is None:
                if self._index >= len(self._paths):
                    break
                self._file = open(self._paths[self._index], "rb")  # closed in read() or __exit__
                self._index += 1
            chunk = self._file.read(remaining)
            if not chunk:
                self._file.close()
                self._file = None
                continue
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        self.position += len(data)
        return data


def read_ct2_model(parts: Path | Sequence[Path]) -> Ct2Model:
    """Parse a CTranslate2 ``model.bin`` given as one path or as ordered parts that concatenate to it.

    Raises ``Ct2FormatError`` on an unsupported version, an unknown data type, a truncated file or
    trailing bytes (so a missing or mis-ordered part is caught rather than silently misread).
    """
    paths = [parts] if isinstance(parts, Path) else list(parts)
    if not paths:
        raise Ct2FormatError("no model.bin file given")
    label = " + ".join(p.name for p in paths)
    with _ChainedReader(paths) as reader:

        def take(size: int) -> bytes:
            data = reader.read(size)
            if len(data) != size:
                raise Ct2FormatError(f"{label}: truncated at byte {reader.position} (missing part?)")
            return data

        def unpack(fmt: str) -> tuple[int, ...]:
            return struct.unpack("<" + fmt, take(struct.calcsize("<" + fmt)))

        def string() -> str:
            (length,) = unpack("H")
            raw = take(length)
            if not raw or raw[-1] != 0:
                raise Ct2FormatError(f"{label}: malformed string before byte {reader.position}")
            return raw[:-1].decode("utf-8")

        (version,) = unpack("I")
        if version != SUPPORTED_BINARY_VERSION:
            raise Ct2FormatError(
                f"{label}: CTranslate2 binary version {version}, only version {SUPPORTED_BINARY_VERSION} is supported"
            )
        spec_name = string()
        (spec_revision,) = unpack("I")
        (count,) = unpack("I")
        variables: dict[str, np.ndarray] = {}
        for _ in range(count):
            name = string()
            (rank,) = unpack("B")
            shape = unpack("I" * rank) if rank else ()
            dtype_code, nbytes = unpack("BI")
            if dtype_code not in _NUMPY_DTYPES:
                raise Ct2FormatError(f"{label}: variable {name} has unknown data type {dtype_code}")
            dtype = _NUMPY_DTYPES[dtype_code]
            expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if nbytes != expected:
                raise Ct2FormatError(f"{label}: variable {name} stores {nbytes} bytes, shape {shape} needs {expected}")
            array = np.frombuffer(take(nbytes), dtype=dtype).reshape(shape)
            if dtype_code == _BFLOAT16:
                array = (array.astype(np.uint32) << 16).view(np.float32)
            variables[name] = array
        (alias_count,) = unpack("I")
        aliases: dict[str, str] = {}
        for _ in range(alias_count):
            alias = string()
            aliases[alias] = string()
        if reader.read(1):
            raise Ct2FormatError(f"{label}: unexpected bytes after the last alias (extra or mis-ordered part?)")
    for alias, target in aliases.items():
        if target not in variables:
            raise Ct2FormatError(f"{label}: alias {alias} points to missing variable {target}")
    return Ct2Model(spec_name=spec_name, spec_revision=spec_revision, variables=variables, aliases=aliases)
