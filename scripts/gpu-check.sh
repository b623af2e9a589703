#!/usr/bin/env bash
# Every CUDA path of EAS end to end, in about 5 minutes, on a machine with a CUDA GPU:
#   the `cuda` tests; `eas evaluate`; a search with two workers sharing the GPU; `eas train` under
#   autocast, killed with SIGKILL and resumed (compared with an uninterrupted run); the NVML energy
#   source and its label; int8 and pruning of the GPU-trained export; proxy-training throughput on
#   the GPU against a plain eager loop. Prints a summary; writes logs under $OUT (or ./gpu-check).
#
#   scripts/gpu-check.sh                 # on the GPU machine, in the repository root
#   DEVICE=cpu BUDGET=20s scripts/gpu-check.sh   # the same flow on a CPU (checks the script itself)
#
# Needs a python3 whose torch sees the GPU and EAS's dependencies (pip install -e . where pip
# reaches an index; where it does not, carry wheels and set PYTHONPATH). Data: digits (scikit-learn).
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
BUDGET=${BUDGET:-2m}
PRECISION=${PRECISION:-$([ "$DEVICE" = cuda ] && echo bf16 || echo fp32)}
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
LOGS=${OUT:-$PWD/gpu-check}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$LOGS"
export EAS_STUDIES_DIR="$WORK/studies" EAS_DATA_DIR="$WORK/data" PYTHONUNBUFFERED=1
eas() { "$PY" -m eas "$@"; }
say() { echo "== $*" | tee -a "$LOGS/summary.txt"; }
started=$(date +%s)

say "device $DEVICE, precision $PRECISION, $("$PY" -c 'import torch; print("torch", torch.__version__, "|",
  torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")')"
if [ "$DEVICE" = cuda ]; then
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA GPU visible to torch")'
  "$PY" -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$LOGS/pytest-cuda.log" | tail -3
fi

GENOME=stem_c16_k3_s1_relu-ds_r1_k3_s2_c32_relu-ds_r1_k3_s2_c64_relu-head_c0_f0_relu_d0
eas evaluate "$GENOME" --data digits --device "$DEVICE" --precision "$PRECISION" --epochs 3 --json \
  > "$LOGS/evaluate.json"
py() { "$PY" - "$@"; }  # a short Python program on stdin, arguments after it
say "evaluate: $(py "$LOGS/evaluate.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
print(f"accuracy {m['accuracy']:.3f}, precision {m['precision']}, energy source {m['energy_source']}")
EOF
)"

eas search --space tiny --data digits --budget "$BUDGET" --workers 2 --device "$DEVICE" --precision "$PRECISION" \
  --rungs 2 --study gpu-check --quiet > "$LOGS/search.txt" 2>&1
say "search ($BUDGET, 2 workers on one $DEVICE): $(eas studies | grep gpu-check || true)"

eas export gpu-check --pick knee --out "$WORK/knee" > /dev/null
TRAIN=(--data digits --epochs 6 --checkpoint-every 5 --device "$DEVICE" --precision "$PRECISION" --json --quiet)
cp -r "$WORK/knee" "$WORK/straight"
eas train "$WORK/straight" "${TRAIN[@]}" > "$LOGS/train-straight.json"
cp -r "$WORK/knee" "$WORK/killed"
eas train "$WORK/killed" "${TRAIN[@]}" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do
  if [ -f "$WORK/killed/checkpoint/state.json" ] && "$PY" -c 'import json,sys
sys.exit(0 if json.load(open(sys.argv[1]))["progress"]["epoch"] >= 2 else 1)' "$WORK/killed/checkpoint/state.json"
  then break; fi
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
eas train "$WORK/killed" "${TRAIN[@]}" > "$LOGS/train-resumed.json"
say "train with $PRECISION, kill -9 at epoch 2 and resume: $(py "$LOGS"/train-{straight,resumed}.json <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
print(f"test accuracy uninterrupted {a['test_accuracy']:.4f}, resumed {b['test_accuracy']:.4f}; "
      f"energy {a['energy_kwh'] * 3.6e6:.0f} J, source {a['energy_source']}")
EOF
)"

eas compress "$WORK/straight" --int8 --data digits --json --quiet > "$LOGS/int8.json"
eas compress "$WORK/straight" --prune 0.3 --epochs 1 --data digits --json --quiet > "$LOGS/prune.json"
say "compress: $(py "$LOGS/int8.json" "$LOGS/prune.json" <<'EOF'
import json, sys
int8, prune = (json.load(open(p)) for p in sys.argv[1:])
print(f"int8 {int8['gain']['smaller']:.2f}x smaller, {int8['gain']['accuracy_points']:+.2f} points; "
      f"prune 0.3: {prune['before']['test_accuracy']:.3f} -> {prune['after']['test_accuracy']:.3f} after 1 epoch")
EOF
)"

if [ "$DEVICE" = cuda ]; then
  "$PY" benchmarks/train_throughput.py --device cuda --images 6000 2>&1 | tee "$LOGS/throughput.txt" | tail -8
fi
say "all CUDA paths ran in $(( $(date +%s) - started )) s"
