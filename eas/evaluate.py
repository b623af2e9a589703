"""Arch + task + fidelity -> Metrics. Pure: no Optuna inside, so the CLI, the search and the
tests all measure a candidate the same way.

Cheap things first: the cost profile and latency come before training, and a candidate that
breaks a constraint is returned as infeasible without being trained.
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import asdict, dataclass, field

import torch

from eas.builder import build
from eas.cost import profile
from eas.data import Dataset
from eas.energy import make_meter
from eas.genome import Arch
from eas.measure import inference_energy, latency
from eas.objectives import Constraints
from eas.train import Fidelity, train
from eas.train_step import evaluate_accuracy


@dataclass(frozen=True)
class Metrics:
    genome: str
    status: str  # "ok" | "infeasible" | "diverged"
    params: int
    macs: int
    flops: int
    memory_bytes_inference: int
    memory_bytes_training: int
    latency_ms: float
    latency_ms_p10: float
    latency_ms_p90: float
    latency_batch: int
    latency_batch_ms: float
    accuracy: float = 0.0
    val_loss: float = float("nan")
    train_seconds: float = 0.0
    train_steps: int = 0
    train_images: int = 0
    train_energy_j: float = 0.0
    inference_energy_j_per_1k: float = float("nan")
    energy_source: str = ""
    energy_note: str | None = None  # why an estimate was used, when auto found no counter
    device: str = ""
    precision: str = ""
    reason: str | None = None
    violations: dict = field(default_factory=dict)
    fidelity: dict = field(default_factory=dict)
    evaluate_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_device(name: str = "auto") -> torch.device:
    from eas.errors import UserError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda"):
        raise UserError(f"unknown device {name!r} (known: auto, cpu, cuda)")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA GPU is available on this machine")
    return torch.device(name)


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.processor() or platform.machine()}x{torch.get_num_threads()}"


def evaluate(arch: Arch | str, task: Dataset, fidelity: Fidelity = Fidelity(), device: str = "auto",
             seed: int = 0, meter: str = "auto", constraints: Constraints | None = None,
             deadline: float | None = None, latency_batch: int = 32) -> Metrics:
    """Build, profile, time and (if feasible) train `arch` on `task`; measure energy throughout."""
    began = time.perf_counter()
    arch = Arch.decode(arch) if isinstance(arch, str) else arch
    torch_device = resolve_device(device)
    energy_meter, energy_note = make_meter(meter, cuda=torch_device.type == "cuda")
    torch.manual_seed(seed)
    model = build(arch, task.input_shape, task.num_classes).to(torch_device)
    cost = profile(model, task.input_shape)
    model = model.to(memory_format=torch.channels_last)
    common = dict(
        genome=arch.encode(), params=cost.params, macs=cost.macs, flops=cost.flops,
        memory_bytes_inference=cost.memory_bytes_inference,
        # Activations kept for backward grow linearly with the batch.
        memory_bytes_training=4 * cost.param_bytes + cost.activation_bytes_training * fidelity.batch_size,
        latency_ms=math.nan, latency_ms_p10=math.nan, latency_ms_p90=math.nan, latency_batch=latency_batch,
        latency_batch_ms=math.nan, device=device_label(torch_device), fidelity=fidelity.to_dict(),
        energy_source=energy_meter.source, energy_note=energy_note,
    )

    def infeasible(violations: dict) -> Metrics | None:
        broken = [k for k, v in violations.items() if v > 0]
        if not broken:
            return None
        return Metrics(status="infeasible", violations=violations, reason="violates " + ", ".join(broken),
                       evaluate_seconds=time.perf_counter() - began, **common)

    # Counted costs first: a candidate over a MACs/params/memory limit costs milliseconds.
    rejected = infeasible(constraints.violations(common)) if constraints else None
    if rejected:
        return rejected
    single = latency(model, task.input_shape, torch_device, batch=1)
    batched = latency(model, task.input_shape, torch_device, batch=latency_batch, repeats=10)
    common.update(latency_ms=single.median_ms, latency_ms_p10=single.p10_ms, latency_ms_p90=single.p90_ms,
                  latency_batch_ms=batched.median_ms)
    violations = constraints.violations(common) if constraints else {}
    rejected = infeasible(violations)
    if rejected:
        return rejected

    token = energy_meter.start()
    result = train(model, task.train_x, task.train_y, fidelity, torch_device, seed, deadline)
    train_energy = energy_meter.stop(token)
    common.update(train_seconds=result.seconds, train_steps=result.steps, train_images=result.images,
                  train_energy_j=train_energy.joules, precision=result.precision, violations=violations)
    if result.diverged:
        return Metrics(status="diverged", reason=result.diverged,
                       evaluate_seconds=time.perf_counter() - began, **common)
    accuracy, val_loss = evaluate_accuracy(model, task.val_x, task.val_y, torch_device)
    per_1k = inference_energy(model, task.input_shape, torch_device, energy_meter)
    return Metrics(status="ok", accuracy=accuracy, val_loss=val_loss,
                   inference_energy_j_per_1k=per_1k.joules,
                   evaluate_seconds=time.perf_counter() - began, **common)
