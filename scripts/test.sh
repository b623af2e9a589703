#!/usr/bin/env bash
# Sets everything up, then ruff, the docs build and the whole test suite: the fast tier first, then
# the end-to-end tests (PostgreSQL, browser). With -m/-k/tests/...: only what is asked.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. .venv/bin/activate
# The multi-worker tests need the local PostgreSQL server; start it when it is installed but down.
if command -v pg_ctlcluster >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
fi
ruff check .
mypy                                               # the public modules' types (pyproject.toml)
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$(mktemp -d)"   # the docs build, links and all
# A test process per core (pytest-xdist; work stealing keeps each busy to the end): the whole suite took
# 17 minutes instead of 27 on 2 cores. The end-to-end tier gets one process more: its tests often wait
# on the processes they start (grace periods, heartbeats, servers), and a third process fills those
# waits (measured on 2 cores: 869 s with 2 processes, 742 s with 3; the fast tier gains nothing).
XDIST=(-n auto --dist worksteal)
SLOW_XDIST=(-n "$(( $(nproc) + 1 ))" --dist worksteal)
if [[ " $* " == *" -m "* || " $* " == *" -k "* || " $* " == *"tests/"* ]]; then
  python -m pytest "${XDIST[@]}" "$@"                      # a tier or tests of your own choosing
else
  python -m pytest "${XDIST[@]}" -m "not slow" "$@"        # the fast tier first: the library through its API
  python -m pytest "${SLOW_XDIST[@]}" -m slow "$@"         # then the end-to-end tests
fi
