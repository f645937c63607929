#!/usr/bin/env bash
# Set up (first run only) and start the caption server on the embedded default model: http://127.0.0.1:8080/
# Any flag of `python -m app --help` may follow, e.g. --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m app "$@"
