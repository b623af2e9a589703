#!/usr/bin/env bash
# Sets everything up, then runs a real short search on Fashion-MNIST and prints its Pareto set.
# Pass other `eas search` options to override, e.g. ./scripts/search-demo.sh --budget 30m
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. .venv/bin/activate
eas search --space mobile --data fashion-mnist --budget 3m --max-macs 20M --epochs 1 --subset 9000 \
  --study demo-fashion-mnist "$@"
eas studies
