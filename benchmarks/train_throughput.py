"""Proxy-training throughput: EAS's trainer against a plain eager NCHW PyTorch loop.

Same model, same data (a Fashion-MNIST subset, or digits upsampled when Fashion-MNIST is
missing), same batch size and optimiser, both measured in this run. Also reports the energy
metering overhead as a share of a trial. Goal: >= 1.5x throughput, metering < 1%.

    python benchmarks/train_throughput.py [--images 6000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from eas.arch.builder import build
from eas.data.datasets import load_dataset
from eas.measure.energy import make_meter
from eas.training.proxy import Fidelity, train
from eas.units import table

GENOME = ("stem_c16_k3_s1_relu6-ir_r1_k3_s2_e4_c24_relu6-ir_r2_k3_s2_e4_c48_se_hswish-"
          "ir_r2_k5_s2_e4_c64_hswish-head_c256_f0_hswish_d0.1")


def plain_loop(model, x, y, batch_size, epochs=1.0, device=torch.device("cpu")):
    """The baseline a notebook would write: eager, NCHW, AdamW, fixed order per epoch."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    steps = int(epochs * -(-len(y) // batch_size))
    started = time.perf_counter()
    for step in range(steps):
        start = (step * batch_size) % len(y)
        optimizer.zero_grad()
        loss_fn(model(x[start:start + batch_size].to(device)), y[start:start + batch_size].to(device)).backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, steps * batch_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (scripts/gpu-check.sh)")
    args = parser.parse_args()
    device = torch.device(args.device)
    try:
        task = load_dataset("fashion-mnist")
    except Exception:  # fall back to a dataset every install has
        task = load_dataset("digits")
    x, y = task.train_x.subset(slice(0, args.images)), task.train_y[: args.images]
    shape = task.input_shape
    fidelity = Fidelity(epochs=1, batch_size=128)
    baseline, eas_rate, recalibration = [], [], []
    for repeat in range(args.repeats):
        torch.manual_seed(repeat)
        seconds, images = plain_loop(build(GENOME, shape, 10).to(device), x, y, 128, device=device)
        baseline.append(images / seconds)
        result = train(build(GENOME, shape, 10), x, y, fidelity, device, seed=repeat)
        # Throughput of the training steps; the BatchNorm recalibration after them (which the
        # plain loop does not do at all) is reported on its own line.
        eas_rate.append(result.images / (result.seconds - result.recalibration_seconds))
        recalibration.append(result.recalibration_seconds / result.seconds)
    # Median of alternating runs: this machine's two cores are shared and noisy.
    base, ours = statistics.median(baseline), statistics.median(eas_rate)

    meter, _ = make_meter("auto", cuda=device.type == "cuda")
    reads = 1000
    started = time.perf_counter()
    for _ in range(reads):
        meter.stop(meter.start())
    per_window = (time.perf_counter() - started) / reads
    trial_seconds = args.images / ours
    # A trial opens two windows (training, inference energy).
    overhead = 2 * per_window / trial_seconds

    print(f"model {GENOME}\ndata {task.name}, {len(y)} images, batch 128, {args.device}, "
          f"{torch.get_num_threads()} threads\n")
    print(table([
        ["plain eager NCHW loop (baseline)", f"{base:.0f}", "1.00x"],
        ["eas.training.proxy training steps (channels_last, ...)", f"{ours:.0f}", f"{ours / base:.2f}x"],
    ], ["trainer", "images/s", "ratio"]))
    print(f"\nBatchNorm recalibration after training (2048 images, forward only): "
          f"{statistics.median(recalibration):.1%} of eas.training.proxy's time")
    print(f"\nenergy metering ({meter.source}): {per_window * 1e6:.1f} us per window, "
          f"{overhead:.4%} of a {trial_seconds:.1f} s trial")


if __name__ == "__main__":
    main()
