#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite (unit, end-to-end, PostgreSQL, browser).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. .venv/bin/activate
# The multi-worker tests need the local PostgreSQL server; start it when it is installed but down.
if command -v pg_ctlcluster >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
fi
ruff check .
python -m pytest "$@"
