#!/usr/bin/env bash
# The sessions bench on an NVIDIA GPU in one command: check the GPU and the interpreter, then for each model start
# the server on upstream vLLM and double the sessions until a step is no longer on time, within a total time
# budget, writing every table into one folder. Loopback only; nothing is downloaded. `bench/gpu.sh --help`.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/gpu.sh [--out DIR] [--models "M ..."] [--minutes N] [--sessions "N ..."] [--seconds S]
                    [--python PATH] [--dry-run] [--help]

On a machine with an NVIDIA GPU: check nvidia-smi, torch's CUDA, upstream vLLM, the models and the speech clips
(failing at once, with what to install, if one is missing), then for each model run

  python -m bench.sessions --modes engine --as-users --until-late --budget-s B --sessions LADDER --model M

(the server on vLLM, the clients on loopback: the sweep stops at the first step not on time, or before a step that
would overrun the model's share of the time) and write a summary: per model the most sessions served on time and
the latencies there.

  --out DIR         where everything goes (default /tmp/live-captions-gpu-YYYYmmdd-HHMMSS)
  --models "M ..."  the models, in order, space-separated: embedded names, model folders or hub ids already in the
                    Hugging Face cache (default: whisper-base, then every other Whisper this machine has locally:
                    `python -m bench.gpu_sweep models`)
  --minutes N       the whole run's wall time, checks included, in whole minutes (default 8); each model gets an
                    even share of what is left when it starts, less 15 s kept for the summary
  --sessions "N ..." the ladder of sessions offered at once (default "1 2 4 8 16 32 64")
  --seconds S       speech and pauses per session, as bench.sessions --seconds (default 40: a step takes ~50 s)
  --python PATH     the interpreter, with the project and upstream vLLM installed (default .venv/bin/python if
                    present, else python3)
  --dry-run         print the plan (the commands, with each model's budget) and exit, touching no GPU
  --help            this text

Writes into DIR: gpu.csv (nvidia-smi's name, memory and driver), per model LABEL.md (bench.sessions's tables),
LABEL.json (its rows), LABEL.log (its progress, then the bench server's log), and summary.md. LABEL is the model's
name as a file name (`python -m bench.gpu_sweep labels M`). The speech corpus is shared/data/speech beside the
repository, or LIVE_CAPTIONS_SPEECH_DIR. Exit status: 0 when every model ran to its end, 1 when one failed or was
skipped (the summary is written all the same), 2 when a check failed (nothing was measured).
EOF
}

die() {
  echo "bench/gpu.sh: $*" >&2
  exit 2
}

start_s=$(date +%s)  # --minutes counts from here: the checks and the model listing are part of the run
RESERVE_S=15      # kept at the end for the summary and the last exits
STOP_S=30         # after a sweep's last step: the bench server's stop (SIGTERM, up to 30 s) and the process's exit
MIN_SHARE_S=90    # less than this cannot start a GPU server and run a step: the model is skipped
KILL_AFTER_S=45   # a sweep past its share gets SIGTERM (the bench server stops itself), SIGKILL this much later

out="/tmp/live-captions-gpu-$(date +%Y%m%d-%H%M%S)"
models_arg=""
minutes=8
ladder="1 2 4 8 16 32 64"
seconds=40
python_arg=""
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --help|-h) usage; exit 0 ;;
    --dry-run) dry_run=1; shift; continue ;;
    --out|--models|--minutes|--sessions|--seconds|--python)
      [ $# -ge 2 ] || die "$1 needs a value (see --help)"
      case "$1" in
        --out) out=$2 ;;
        --models) models_arg=$2 ;;
        --minutes) minutes=$2 ;;
        --sessions) ladder=$2 ;;
        --seconds) seconds=$2 ;;
        --python) python_arg=$2 ;;
      esac
      shift 2 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

[[ "$minutes" =~ ^[1-9][0-9]*$ ]] || die "--minutes must be a whole number of minutes, got '$minutes'"
[[ "$seconds" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--seconds must be a number, got '$seconds'"
read -r -a sessions <<<"$ladder"
[ ${#sessions[@]} -gt 0 ] || die "--sessions needs at least one number"
for n in "${sessions[@]}"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "--sessions takes positive whole numbers, got '$n'"
done
[ -n "$out" ] || die "--out needs a folder"
# Paths given on the command line are the caller's: make them absolute before moving to the repository.
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
if [ -n "$python_arg" ]; then
  case "$python_arg" in
    */*) case "$python_arg" in /*) py=$python_arg ;; *) py="$PWD/$python_arg" ;; esac ;;
    *) py=$(command -v "$python_arg") || die "--python $python_arg: not found on PATH" ;;
  esac
  [ -x "$py" ] || die "--python $python_arg: not an executable"
fi

cd "$(dirname "$0")/.."
if [ -z "$python_arg" ]; then
  if [ -x .venv/bin/python ]; then
    py="$PWD/.venv/bin/python"
  else
    py=$(command -v python3) || die "no .venv/bin/python and no python3 on PATH: run scripts/setup.sh, or --python"
  fi
fi

# Nothing may be fetched at run time (the machine may have no network, and a hub lookup that waits on one would
# eat the budget): the hub libraries stay offline, vLLM sends no usage report. The caller's own settings win.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export VLLM_NO_USAGE_STATS="${VLLM_NO_USAGE_STATS:-1}" DO_NOT_TRACK="${DO_NOT_TRACK:-1}" PYTHONUNBUFFERED=1

if [ -n "$models_arg" ]; then
  read -r -a models <<<"$models_arg"
  [ ${#models[@]} -gt 0 ] || die "--models needs at least one model"
else
  mapfile -t models < <("$py" -m bench.gpu_sweep models)
  [ ${#models[@]} -gt 0 ] || die "cannot list the local models with $py (python -m bench.gpu_sweep models)"
fi
mapfile -t labels < <("$py" -m bench.gpu_sweep labels "${models[@]}")
[ ${#labels[@]} -eq ${#models[@]} ] || die "cannot name the models' result files with $py"

total_s=$((minutes * 60))
share0=$(( (total_s - RESERVE_S) / ${#models[@]} ))
[ "$share0" -ge "$MIN_SHARE_S" ] \
  || die "--minutes $minutes gives each of ${#models[@]} models ${share0} s, under the ${MIN_SHARE_S} s one needs"

smi_cmd=(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv)
preflight_cmd=("$py" -m bench.gpu_sweep preflight --sessions "${sessions[@]}" --seconds "$seconds" \
  --models "${models[@]}")

# One model's sweep: bounded softly by --budget-s (no step starts that would end past it) and hard by timeout.
sweep_cmd() {  # share_s model label -> the command, in the array `cmd`
  cmd=(timeout -s TERM -k "$KILL_AFTER_S" "$1" "$py" -m bench.sessions --modes engine --as-users --until-late
       --budget-s "$(($1 - STOP_S))" --sessions "${sessions[@]}" --seconds "$seconds" --model "$2"
       --json "$out/$3.json")
}

show() {  # a command as the shell would read it back: words quoted only where they need it
  local word sep=""
  for word in "$@"; do
    if [[ "$word" =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then
      printf '%s%s' "$sep" "$word"
    else
      printf '%s%q' "$sep" "$word"
    fi
    sep=" "
  done
}

if [ "$dry_run" = 1 ]; then
  echo "plan (dry run: nothing runs)"
  echo "out: $out"
  echo "python: $py"
  echo "models: ${models[*]}"
  echo "budget: ${total_s} s in all, ${RESERVE_S} s kept for the summary; each model's share of what is left as it"
  echo "  starts: ${share0} s each if the checks took none (its sweep's --budget-s is ${STOP_S} s less)"
  echo "1. $(show "${smi_cmd[@]}") > $(show "$out/gpu.csv")"
  echo "2. $(show "${preflight_cmd[@]}")"
  step=3
  for i in "${!models[@]}"; do
    sweep_cmd "$share0" "${models[$i]}" "${labels[$i]}"
    echo "$step. [${labels[$i]}: share ${share0} s] $(show "${cmd[@]}") > $(show "$out/${labels[$i]}.md")" \
      "2> $(show "$out/${labels[$i]}.log")"
    step=$((step + 1))
  done
  echo "$step. $(show "$py" -m bench.gpu_sweep summary "$out" "${labels[@]}") (writes $(show "$out/summary.md"))"
  exit 0
fi

deadline_s=$((start_s + total_s))
command -v nvidia-smi >/dev/null 2>&1 \
  || die "no nvidia-smi: this bench needs an NVIDIA GPU and its driver (the CPU build is measured by bench.sessions)"
mkdir -p "$out"
"${smi_cmd[@]}" >"$out/gpu.csv" 2>&1 || { cat "$out/gpu.csv" >&2; die "nvidia-smi sees no GPU (its output above)"; }
cat "$out/gpu.csv"
"${preflight_cmd[@]}" || die "the checks failed (above): nothing was measured"

# The bench server's log, where bench.sessions keeps it (bench/lib/clips.py: CACHE_DIR under the temporary folder).
server_log="$("$py" -c 'import tempfile; print(tempfile.gettempdir())')/live-captions-bench/sessions-server-engine.log"
# timeout runs each sweep in a process group of its own, which a Ctrl-C at the terminal does not reach: pass it on,
# so that no server is left holding the GPU.
child=""
on_signal() {
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  echo "bench/gpu.sh: interrupted; what was written is in $out" >&2
  exit 130
}
trap on_signal INT TERM
status=0
notes=()
for i in "${!models[@]}"; do
  model=${models[$i]} label=${labels[$i]}
  left_s=$((deadline_s - RESERVE_S - $(date +%s)))
  share=$((left_s / (${#models[@]} - i)))
  if [ "$share" -lt "$MIN_SHARE_S" ]; then
    echo "== $label: skipped, ${left_s} s left for $((${#models[@]} - i)) models" >&2
    notes+=(--note "$label=skipped: ${share} s left for it")
    status=1
    continue
  fi
  sweep_cmd "$share" "$model" "$label"
  echo "== $label: up to ${share} s: $(show "${cmd[@]}")" >&2
  t0=$(date +%s)
  rm -f "$server_log"
  rc=0
  "${cmd[@]}" >"$out/$label.md" 2>"$out/$label.log" &
  child=$!
  wait "$child" || rc=$?
  child=""
  if [ -f "$server_log" ]; then
    printf '\n==== the bench server log (%s) ====\n' "$server_log" >>"$out/$label.log"
    cat "$server_log" >>"$out/$label.log"
  fi
  echo "== $label: exit $rc after $(($(date +%s) - t0)) s" >&2
  if [ "$rc" != 0 ]; then
    status=1
    case "$rc" in
      124|137) notes+=(--note "$label=stopped at its ${share} s share") ;;
      *) notes+=(--note "$label=exit $rc") ;;
    esac
    tail -n 20 "$out/$label.log" >&2
  fi
done

"$py" -m bench.gpu_sweep summary "$out" "${labels[@]}" "${notes[@]}"
echo "results in $out ($(($(date +%s) - start_s)) s)" >&2
exit "$status"
