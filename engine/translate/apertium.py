"""Apertium, the rule-based translator in Debian (``apertium`` and its ``apertium-<pair>`` data packages, installed
by ``scripts/setup.sh``): offline, no model, a few milliseconds of CPU and some tens of megabytes per pair. Its
quality is modest (chrF about 40 into Spanish on the project's reference sentences, ``python -m bench.translation``);
it is the engine every server has.

Modes. Each installed mode (``/usr/share/apertium/modes/<src>-<dst>.mode``) is a shell pipeline of Apertium's
programs. Modes name languages with ISO 639-1 or 639-3 codes (``CODES`` maps them to BCP 47); a mode for a region or
variant (``es-pt_BR``, ``eng-cat_valencia``) serves that tag (``pt-BR``, ``ca-valencia``), and the plain mode serves
every other tag of the language. Other variants (``eng-cat_iec2017``, ``en-eo-bytecode``) are left out. A pair with no
mode of its own goes through one pivot (English to Portuguese: ``eng-spa`` then ``es-pt``; English to Italian:
``eng-cat`` then ``cat-ita``), at the cost of a second translation's errors.

Pipelines. Each mode used runs as one persistent pipeline in null-flush mode: a sentence goes in followed by a NUL
byte and its translation comes out followed by one, so no sentence pays the pipeline's start (about 0.2 s and 0.4
CPU-s measured here). The ``apertium`` wrapper's own ``-z`` does not flush plain text in 3.8.3 (its deformatting
step, ``apertium-destxt -n | sed``, buffers: nothing comes back until stdin closes), so the pipeline is the one the
wrapper runs inside (``apertium-wblank-mode -z <mode>``) with the options ``apertium -u`` gives it (``-n``: no marks
on unknown words), and the plain-text deformatting (escaping the stream format's reserved characters, the blank
that ends a text) is done here; the output is the same as ``apertium -u``'s, sentence by sentence. Sentences of a
batch go through one at a time, so one call keeps about one core busy, not one per program of the pipeline.

Failures. A call has ``timeout_s`` for all its sentences; past it the pipeline is killed (a new one starts at the next
call) and the call raises ``TranslationError``. A pipeline found dead (a program crashed or was killed) is started
again once within the call, so a crash costs one sentence's delay, not a failed call.
"""

from __future__ import annotations

import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from engine.translate.base import TranslationError, TranslationRequest, UnsupportedPair
from engine.translate.languages import normalise_language, primary

log = logging.getLogger(__name__)

MODES_DIR = Path("/usr/share/apertium/modes")
# Apertium's language codes (ISO 639-3, or 639-1 in older pairs) -> BCP 47 primary subtags. A two-letter code is
# already one; three-letter codes not listed here are left out (their pairs are not offered).
CODES: dict[str, str] = {
    "eng": "en",
    "spa": "es",
    "cat": "ca",
    "glg": "gl",
    "epo": "eo",
    "por": "pt",
    "fra": "fr",
    "ron": "ro",
    "ita": "it",
    "oci": "oc",
    "eus": "eu",
    "arg": "an",
    "ast": "ast",
    "nob": "nb",
    "nno": "nn",
    "swe": "sv",
    "dan": "da",
    "isl": "is",
    "nld": "nl",
    "afr": "af",
    "deu": "de",
    "rus": "ru",
    "ukr": "uk",
    "bel": "be",
    "mlt": "mt",
    "ara": "ar",
    "bul": "bg",
    "mkd": "mk",
    "slv": "sl",
    "hbs": "sh",
    "ces": "cs",
    "slk": "sk",
    "pol": "pl",
    "tur": "tr",
    "kaz": "kk",
    "tat": "tt",
    "cym": "cy",
    "bre": "br",
    "gle": "ga",
    "fin": "fi",
}
TIMEOUT_S = 10.0  # one call, all its sentences and pivots; a sentence takes 1-5 ms on an idle core
MAX_TEXT_CHARS = 4000  # a longer text is cut to this (a caption sentence, or an editor's, is far shorter)
_MODE = re.compile(r"^([a-z]{2,3})-([a-z]{2,3})(?:_([A-Z]{2}|[a-z]{5,8}))?\.mode$")
_RESERVED = re.compile(r"([\^$\[\]{}/@<>\\])")  # the stream format's reserved characters (as apertium-destxt escapes)
_END = b"[][\n]"  # the blank apertium-destxt -n ends a text with: without it the last word waits for more input
_ENVIRONMENT = {**os.environ, "LC_ALL": "C.UTF-8"}  # the programs read and write UTF-8 whatever the server's locale


def _code(apertium_code: str) -> str | None:
    return apertium_code if len(apertium_code) == 2 else CODES.get(apertium_code)


def installed_modes(modes_dir: Path = MODES_DIR) -> dict[tuple[str, str], Path]:
    """(source, target) -> mode file, for every mode under ``modes_dir`` that translates from one language into
    another: plain pairs as primary subtags (``("en", "es")``), region and variant modes as the target's whole tag
    (``("es", "pt-BR")``). Empty when the folder is missing."""
    out: dict[tuple[str, str], Path] = {}
    if not modes_dir.is_dir():
        return out
    for path in sorted(modes_dir.iterdir()):
        match = _MODE.match(path.name)
        if not match:
            continue
        source, target = _code(match[1]), _code(match[2])
        if source is None or target is None or source == target:
            continue
        tag = normalise_language(f"{target}-{match[3]}") if match[3] else target
        out.setdefault((source, tag), path)  # sorted: "eng-spa" before a later duplicate such as "en-es"
    return out


def pipeline_command(mode: Path) -> str:
    """The shell pipeline that runs ``mode`` in null-flush mode, as ``apertium -u -z`` runs it (see the module).
    Raises ``TranslationError`` when Apertium cannot write it."""
    try:
        done = subprocess.run(
            ["apertium-wblank-mode", "-z", str(mode)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=True,
            env=_ENVIRONMENT,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise TranslationError(f"apertium-wblank-mode {mode.name}: {exc}") from exc
    # $1: the generator's option (-n: unknown words unmarked, as -u asks); $2: the tagger's (-m only with -a).
    return done.stdout.strip().replace("$1", "-n").replace("$2", "")


def stream_text(text: str) -> bytes:
    """``text`` in Apertium's stream format, as ``apertium-destxt -n`` writes it, with the NUL that flushes it."""
    escaped = _RESERVED.sub(r"\\\1", text[:MAX_TEXT_CHARS].replace("\0", " "))
    return escaped.encode("utf-8") + _END + b"\0"


def plain_text(stream: str) -> str:
    """A translation in the stream format back as plain text: escapes undone, blanks (``[...]``, format
    information the deformatter put there) as one space, whitespace collapsed."""
    out: list[str] = []
    blank = False
    i = 0
    while i < len(stream):
        char = stream[i]
        if char == "\\" and i + 1 < len(stream):
            if not blank:
                out.append(stream[i + 1])
            i += 2
            continue
        if blank:
            blank = char != "]"
        elif char == "[":
            blank = True
            out.append(" ")
        else:
            out.append(char)
        i += 1
    return " ".join("".join(out).split())


class _Ended(Exception):
    """The pipeline is gone (a program exited or was killed): worth starting it again."""


class _Pipeline:
    """One mode running persistently. ``run`` puts one text through it; its lock makes calls take turns."""

    def __init__(self, mode: Path) -> None:
        self.mode = mode
        self._command: str | None = None
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def run(self, text: str, deadline: float) -> str:
        """``text`` translated, by ``deadline`` (``time.monotonic()``). Raises ``TranslationError``."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    return plain_text(self._exchange(stream_text(text), deadline).decode("utf-8", "replace"))
                except _Ended as exc:
                    self._kill()
                    if attempt == 2:
                        raise TranslationError(f"apertium {self.mode.stem}: the pipeline {exc}") from None
                    log.warning("apertium %s: the pipeline %s; starting it again", self.mode.stem, exc)
                except TranslationError:
                    self._kill()  # whatever it was doing, its answer would now come after the next question
                    raise
        raise AssertionError("unreachable")

    def _exchange(self, data: bytes, deadline: float) -> bytes:
        proc = self._started()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # ValueError: the pipe was closed under us
            raise _Ended("stopped taking input") from None
        fd = proc.stdout.fileno()
        out = bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while not out.endswith(b"\0"):
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise TranslationError(f"apertium {self.mode.stem}: no answer in time")
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise _Ended("ended")
                out += chunk
        return bytes(out[:-1])

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is not None:
            self._kill()
        if self._proc is None:
            if self._command is None:
                self._command = pipeline_command(self.mode)
            try:
                # A session of its own: the shell and every program of the pipeline go with one killpg.
                self._proc = subprocess.Popen(
                    ["bash", "-c", self._command],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env=_ENVIRONMENT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise TranslationError(f"apertium {self.mode.stem}: {exc}") from exc
        return self._proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # already gone (its group with it)
            pass
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:  # closing stdin flushes what a dead pipeline never read
                    pass

    def pid(self) -> int | None:
        """The pipeline's shell, the leader of its process group (None when not running)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def close(self) -> None:
        with self._lock:
            self._kill()


class ApertiumTranslator:
    """Every mode installed under ``modes_dir``, and each pair one pivot away (see the module). ``timeout_s``: the
    most one ``translate`` call may take."""

    name = "apertium"
    uses_context = False

    def __init__(self, modes_dir: Path = MODES_DIR, *, timeout_s: float = TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._modes = installed_modes(modes_dir)
        self._pipelines: dict[tuple[str, str], _Pipeline] = {}
        self._lock = threading.Lock()  # the pipelines dictionary (the benchmark reads it from another thread)

    @property
    def available(self) -> bool:
        """Apertium's programs and at least one pair are installed."""
        return (
            bool(self._modes)
            and shutil.which("apertium-wblank-mode") is not None
            and shutil.which("lt-proc") is not None
        )

    def route(self, source: str, target: str) -> list[tuple[str, str]] | None:
        """The modes that take ``source`` to ``target`` (tags): one, or two through a pivot; None when none do. A
        mode for the target's whole tag (``pt-BR``) is preferred to its language's (``pt``)."""
        try:
            src, whole = primary(normalise_language(source)), normalise_language(target)
        except ValueError:
            return None
        wanted = list(dict.fromkeys([whole, primary(whole)]))
        for tag in wanted:
            if (src, tag) in self._modes:
                return [(src, tag)]
        pivots = sorted({b for (a, b) in self._modes if a == src and "-" not in b})
        for tag in wanted:
            for pivot in pivots:
                if pivot != primary(tag) and (pivot, tag) in self._modes:
                    return [(src, pivot), (pivot, tag)]
        return None

    def targets(self, source: str) -> frozenset[str]:
        src = primary(source)
        languages = {primary(t) for (_a, t) in self._modes} - {src}
        return frozenset(t for t in languages if self.route(src, t) is not None)

    def translate(self, request: TranslationRequest) -> list[str]:
        route = self.route(request.source, request.target)
        if route is None:
            raise UnsupportedPair(f"Apertium has no way from {request.source} into {request.target}")
        deadline = time.monotonic() + self.timeout_s
        out = list(request.texts)
        for pair in route:
            pipeline = self._pipeline(pair)
            out = [pipeline.run(text, deadline) if text.strip() else text for text in out]
        return out

    def pids(self) -> list[int]:
        """The running pipelines' shells (each leads a process group holding its programs): what the benchmark
        measures CPU and memory of."""
        with self._lock:
            pipelines = list(self._pipelines.values())
        return [pid for p in pipelines if (pid := p.pid()) is not None]

    def _pipeline(self, pair: tuple[str, str]) -> _Pipeline:
        with self._lock:
            if pair not in self._pipelines:
                self._pipelines[pair] = _Pipeline(self._modes[pair])
            return self._pipelines[pair]

    def close(self) -> None:
        with self._lock:
            pipelines, self._pipelines = list(self._pipelines.values()), {}
        for pipeline in pipelines:
            pipeline.close()
