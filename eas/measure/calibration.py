"""`eas agent calibrate`: measure a sample of a space's networks on one target and runtime, and
fit the latency predictor the search uses there (eas.measure.predictor)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import torch

from eas.arch.builder import build
from eas.arch.genome import Arch
from eas.measure.energy import make_meter
from eas.measure.predictor import Predictor, fit
from eas.measure.runtime import Runtime, measure


def sample_architectures(space, n: int, seed: int) -> list[Arch]:
    """`n` distinct architectures drawn uniformly from the space's choices."""
    rng, seen, archs = random.Random(seed), set(), []
    choices = space.parameters()
    for _ in range(100 * n):
        arch = space.arch_from_params({name: rng.choice(values) for name, values in choices.items()})
        if arch.encode() not in seen:
            seen.add(arch.encode())
            archs.append(arch)
            if len(archs) == n:
                break
    return archs


def calibrate(space, input_shape: tuple[int, int, int], num_classes: int, runtime: Runtime, n: int = 200,
              seed: int = 0, progress: Callable[[int, int, float], None] | None = None) -> Predictor:
    """Measure `n` random networks of `space` in `runtime` (on its device when it names one) and
    fit the predictor; `progress(done, n, latency_ms)` after each measurement."""
    meter, _ = make_meter("estimated")  # the energy of these timings is not kept
    cpu = torch.device("cpu")
    archs, latencies, provenance = [], [], {}
    for arch in sample_architectures(space, n, seed):
        torch.manual_seed(seed)
        model = build(arch, input_shape, num_classes)
        measured = measure(model, input_shape, runtime, cpu, meter, energy_seconds=0.0)
        if math.isfinite(measured.single.median_ms) and measured.single.median_ms > 0:
            archs.append(arch)
            latencies.append(measured.single.median_ms)
            provenance = measured.provenance
        if progress:
            progress(len(latencies), n, measured.single.median_ms)
    runtime_of = {k: provenance.get(k) for k in ("runtime", "provider", "threads", "device", "url")}
    return fit(archs, latencies, input_shape, num_classes, space.name, runtime_of, seed=seed)
