#!/usr/bin/env bash
# The environment of benchmarks/microcontroller_truth.py, in .venv-tflite: EAS beside litert-torch
# (PyTorch to TFLite without TensorFlow), ai-edge-quantizer (full int8) and tflite-micro (TensorFlow
# Lite Micro's interpreter, whose planner the SRAM count is checked against).
# litert-torch also asks for LLM tooling (transformers, kagglehub, sentencepiece) that converting a
# CNN never imports, and pip's resolver spent over 15 minutes on that set here: litert-torch goes in
# without its requirements, the ones conversion uses are listed below.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv-tflite/bin/python ] || "$PYTHON" -m venv .venv-tflite
. .venv-tflite/bin/activate
pip_q() { python -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -vE "^WARNING: Location|^ +|^$|requires .*which is not installed|incompatible" || true; }
python -c "import torch" 2>/dev/null || pip_q "torch==2.13.0"   # the CPU build on local disk
pip_q -e .
pip_q --no-deps "litert-torch>=0.10,<0.11"
pip_q "ai-edge-litert[model-utils]>=2.3,<2.4" "ai-edge-quantizer>=0.10,<0.11" "litert-converter>=0.5,<0.6" \
      "torchao>=0.17" jax jaxtyping multipledispatch safetensors tabulate flatbuffers tflite-micro
python -c "import litert_torch, ai_edge_quantizer, tflite_micro" && echo "setup-tflite: ready (.venv-tflite)"
