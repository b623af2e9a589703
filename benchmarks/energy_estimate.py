"""How much the estimated energy of the same training depends on what else the machine runs.

With no energy counter (no RAPL, no NVML), EAS estimates energy from CPU time x watts per
core. OpenMP threads that busy-wait while their partner thread is descheduled burn CPU time
that no work needed, so on a busy machine the estimate (and the wall time) balloons. EAS sets
OMP_WAIT_POLICY=PASSIVE before torch loads; this benchmark measures the same candidate's
training, several times each, idle and while another torch process keeps both cores busy,
with OpenMP's default waiting (the baseline) and with passive waiting, plus the ratio of an
8-epoch to a 4-epoch run on the busy machine (expected: about 2).

    python benchmarks/energy_estimate.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r'''
import json, os, sys
policy, repeats = sys.argv[1], int(sys.argv[2])
if policy == "passive":
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
import torch  # loaded first: OpenMP reads its waiting policy now, before eas could set it
torch.set_num_threads(2)
from eas.arch.builder import build
from eas.data.datasets import load_dataset
from eas.measure.energy import EstimatedMeter
from eas.training.proxy import Fidelity, train
task = load_dataset("digits")
genome = "stem_c16_k3_s1_relu-ds_r1_k3_s2_c24_relu-ir_r2_k3_s2_e4_c32_relu6-head_c0_f0_relu_d0"
meter, results = EstimatedMeter(), []
for epochs in [4] * repeats + [8]:
    model = build(genome, task.input_shape, task.num_classes)
    token = meter.start()
    train(model, task.train_x, task.train_y, Fidelity(epochs=epochs, batch_size=64), torch.device("cpu"))
    reading = meter.stop(token)
    results.append({"epochs": epochs, "joules": reading.joules, "seconds": reading.seconds, "note": reading.note})
print(json.dumps(results))
'''

HOG = ("import torch, time\ntorch.set_num_threads(2)\na = torch.randn(800, 800)\n"
       "while True:\n    a @ a\n")


def measure(policy: str, busy: bool, repeats: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    hog = subprocess.Popen([sys.executable, "-c", HOG], env=env) if busy else None
    try:
        if hog:
            time.sleep(2)
        out = subprocess.run([sys.executable, "-c", CHILD, policy, str(repeats)], capture_output=True, text=True,
                             env=env, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        if hog:
            hog.kill()
            hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from eas.units import table

    rows, summary = [], {}
    for policy in ("default", "passive"):
        for busy in (False, True):
            results = measure(policy, busy, args.repeats)
            four = [r["joules"] for r in results if r["epochs"] == 4]
            eight = next(r for r in results if r["epochs"] == 8)
            summary[(policy, busy)] = statistics.median(four)
            flagged = sum(bool(r["note"]) for r in results)
            rows.append([f"OpenMP {policy} waiting", "busy" if busy else "idle", f"{statistics.median(four):.1f}",
                         f"{min(four):.1f}-{max(four):.1f}",
                         f"{statistics.median(r['seconds'] for r in results if r['epochs'] == 4):.1f}",
                         f"{eight['joules'] / statistics.median(four):.2f}", f"{flagged}/{len(results)}"])
    for row, key in zip(rows, summary, strict=True):
        row.insert(4, f"{summary[key] / summary[(key[0], False)]:.2f}x")
    print(f"\nthe same training (4 epochs of digits, {args.repeats} times; then once with 8 epochs), energy "
          "estimated from CPU time x 4 W per core:\n")
    print(table(rows, ["waiting", "machine", "median J", "range J", "vs idle", "median s", "8 / 4 epochs",
                       "noted oversubscribed"]))
    base = summary[("default", True)] / summary[("default", False)]
    passive = summary[("passive", True)] / summary[("passive", False)]
    print(f"\nbusy/idle inflation of the estimate: {base:.2f}x with default waiting (baseline), "
          f"{passive:.2f}x with EAS's passive waiting")


if __name__ == "__main__":
    main()
