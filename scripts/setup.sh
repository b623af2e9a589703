#!/usr/bin/env bash
# Sets up everything EAS needs on a fresh Debian machine: system packages (Fashion-MNIST,
# Chromium for the UI test), a virtual environment in .venv, torch, and EAS with its extras.
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
[ -d /usr/share/datasets/fashion-mnist ] || need_apt+=(dataset-fashion-mnist)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]} from Debian"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: cannot install ${need_apt[*]} (needs root and apt-get); tests that need them skip"
  fi
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip_q() { python -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -vE "^WARNING: Location|BuildBackendWarning|^ +|^$" || true; }
# The CPU build of torch 2.13 is on local disk here; a plain `torch` would pull a CUDA build.
python -c "import torch" 2>/dev/null || pip_q "torch==2.13.0"
# compat: the clone's root goes on sys.path, so its eas/ package is found as a regular package
# before any folder named eas/ beside a script (a clone itself named eas/ would otherwise shadow it)
pip_q -e ".[dev]" --config-settings editable_mode=compat
python -c "import eas, torch, optuna" 
