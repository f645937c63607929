#!/usr/bin/env bash
# Set up (first run only) and start the caption server on the embedded default model: http://127.0.0.1:8080/
# Any flag of `python -m app --help` may follow, e.g. --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The server exits with status 3 when its speech engine dies (it ends every session with the reason first):
# start it again, as systemd's Restart=on-failure would. Any other exit (Ctrl-C, a bad flag) ends this script.
while true; do
  status=0
  .venv/bin/python -m app "$@" || status=$?
  [ "$status" -eq 3 ] || exit "$status"
  echo "serve.sh: the speech engine died; restarting the server" >&2
  sleep 2
done
