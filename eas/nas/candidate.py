"""Arch + task + fidelity -> Metrics. Pure: no Optuna inside, so the CLI, the search and the
tests all measure a candidate the same way.

Cheap things first: the counted costs come before anything runs, and a candidate that breaks
a constraint is returned as infeasible without being trained. A `Candidate` is trained in
segments (the rungs of a multi-fidelity search continue each other's weights) and validated
after each; latency and inference energy are measured once per candidate, in the runtime it
ships with (eas.measure.runtime: ONNX Runtime by default), and accuracy on each validation, once per
candidate, so that training is most of what a candidate costs. Each phase's time is kept.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch

from eas.arch.builder import build
from eas.arch.counting import arch_cost
from eas.arch.genome import Arch
from eas.arch.microcontroller import flash_bytes, sram_bytes
from eas.data.datasets import Dataset
from eas.measure.device import device_label, resolve_device
from eas.measure.energy import make_meter
from eas.measure.predictor import Predictor, sane_latency
from eas.measure.runtime import Runtime, measure
from eas.objectives import Constraints
from eas.training.proxy import Fidelity, train
from eas.training.recipe import Recipe
from eas.training.step import evaluate_accuracy

Z95 = 1.959964

MIN_SIDE = 4  # pixels: the smallest input a genome may ask for (eas.arch.genome), so the smallest a rung trains at


@dataclass(frozen=True)
class Metrics:
    genome: str
    status: str  # "ok" | "infeasible" | "diverged"
    params: int
    macs: int
    flops: int
    memory_bytes_inference: int
    memory_bytes_training: int
    sram_bytes: int  # on a microcontroller, int8 (eas.arch.microcontroller)
    flash_bytes: int
    latency_ms: float
    latency_ms_p10: float
    latency_ms_p90: float
    latency_batch: int
    latency_batch_ms: float
    accuracy: float = 0.0
    accuracy_low: float = 0.0  # 95% Wilson interval of the validation accuracy
    accuracy_high: float = 0.0
    val_images: int = 0
    val_loss: float = float("nan")
    train_seconds: float = 0.0
    train_steps: int = 0
    train_images: int = 0
    train_energy_j: float = 0.0
    inference_energy_j_per_1k: float = float("nan")
    latency_runtime: dict = field(default_factory=dict)  # runtime, version, provider, threads, batch, device
    latency_source: str = "measured"  # or "predicted": by the study's latency predictor, never measured
    latency_predicted_ms: float = float("nan")  # the predictor's figure, kept beside a measured one
    runtime_error: str | None = None  # why the runtime could not take the model (the search goes on)
    evaluate_energy_j: float = 0.0  # everything this evaluation cost: training, validation, timing
    energy_source: str = ""
    energy_note: str | None = None  # why an estimate was used, or that the machine was busy
    device: str = ""
    precision: str = ""
    reason: str | None = None
    violations: dict = field(default_factory=dict)
    fidelity: dict = field(default_factory=dict)
    evaluate_seconds: float = 0.0
    evaluate_cpu_seconds: float = 0.0  # CPU time of this process (all threads) the evaluation took
    time_split: dict = field(default_factory=dict)  # phase -> seconds

    def to_dict(self) -> dict:
        return asdict(self)


def wilson_interval(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion (sound near 0 and 1, unlike +-2 SE)."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # the interval holds p itself: at p = 1, centre + half rounds to 0.9999999999999999
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def counted_metrics(arch: Arch, task: Dataset, batch_size: int = 1) -> dict:
    """Costs known from the genome alone (no model is built), keyed like Metrics so that
    constraints apply to them directly; training memory at `batch_size`."""
    cost = arch_cost(arch, task.input_shape, task.num_classes)
    return {"params": cost.params, "macs": cost.macs, "flops": 2 * cost.macs,
            "memory_bytes_inference": cost.memory_bytes_inference,
            "sram_bytes": sram_bytes(arch, task.input_shape, task.num_classes),
            "flash_bytes": flash_bytes(arch, task.input_shape, task.num_classes),
            # activations kept for backward grow with the batch (estimated as eas.arch.profile.Profile does)
            "memory_bytes_training": 16 * cost.params + 4 * cost.kept_for_backward * batch_size}


@dataclass
class TrainingTally:
    """What a candidate's training segments added up to."""

    seconds: float = 0.0
    steps: int = 0
    images: int = 0
    energy_j: float = 0.0
    precision: str = ""

    def add(self, result, joules: float) -> None:
        self.seconds += result.seconds
        self.steps += result.steps
        self.images += result.images
        self.energy_j += joules
        self.precision = result.precision


class Candidate:
    """One candidate under evaluation: built once, timed once, trained and validated in segments."""

    def __init__(self, arch: Arch, task: Dataset, fidelity: Fidelity, device: str = "auto", seed: int = 0,
                 meter: str = "auto", runtime: Runtime = Runtime()):
        self.began, self.cpu_began = time.perf_counter(), time.process_time()
        self.arch, self.task, self.fidelity, self.seed, self.runtime = arch, task, fidelity, seed, runtime
        self.predictor = Predictor.from_dict(runtime.predictor) if runtime.predictor else None
        self.device = resolve_device(device)
        self.meter, self.energy_note = make_meter(meter, cuda=self.device.type == "cuda")
        self.split = dict.fromkeys(("build", "latency", "training", "recalibration", "validation"), 0.0)
        self.energy_j = 0.0
        self.trained = TrainingTally()
        self.violations: dict[str, float] = {}
        started = time.perf_counter()
        torch.manual_seed(seed)
        self.model = build(arch, task.input_shape, task.num_classes).to(self.device)
        self.model = self.model.to(memory_format=torch.channels_last)
        self.split["build"] = time.perf_counter() - started
        self.metrics = dict(
            genome=arch.encode(), **counted_metrics(arch, task, fidelity.batch_size),
            latency_ms=math.nan, latency_ms_p10=math.nan, latency_ms_p90=math.nan, latency_batch=self.runtime.batch,
            latency_batch_ms=math.nan, inference_energy_j_per_1k=math.nan, device=device_label(self.device),
            fidelity=fidelity.to_dict(),
            energy_source=self.meter.source, energy_note=self.energy_note,
        )

    def metered(self, phase: str, work):
        token, started = self.meter.start(), time.perf_counter()
        result = work()
        reading = self.meter.stop(token)
        self.split[phase] += time.perf_counter() - started
        self.energy_j += reading.joules
        if reading.note:  # keep why the energy is estimated; add that the machine was busy
            self.metrics["energy_note"] = "; ".join(filter(None, (self.energy_note, reading.note)))
        return result, reading

    def measure_latency(self) -> None:
        """Latency at batch 1 and at the runtime's batch, and inference energy per 1000 samples,
        in the runtime the model ships with, once per candidate. A model the runtime cannot take
        keeps NaN and the reason; the search goes on."""
        try:
            measured, _ = self.metered("latency", lambda: measure(self.model, self.task.input_shape, self.runtime,
                                                                   self.device, self.meter))
        except Exception as error:  # an operator the exporter or the runtime lacks, say
            self.metrics["runtime_error"] = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            return
        single, batched = measured.single, measured.batched
        self.metrics.update(latency_source="measured")
        self.metrics.update(latency_ms=single.median_ms, latency_ms_p10=single.p10_ms, latency_ms_p90=single.p90_ms,
                            latency_batch_ms=batched.median_ms, inference_energy_j_per_1k=measured.energy.joules,
                            latency_runtime=measured.provenance)

    def predict_latency(self) -> None:
        """The study's predictor's latency, in microseconds and before anything is trained: what
        the search refuses proposals by; measured later if the candidate reaches the top rung."""
        predicted = self.predictor.predict(self.arch)
        if not sane_latency(predicted):  # a prediction is input too: measured instead, and said so
            self.metrics["latency_note"] = f"the latency predictor gave {predicted:.4g} ms; measured instead"
            self.measure_latency()
            return
        self.metrics.update(latency_ms=predicted, latency_predicted_ms=predicted, latency_source="predicted")

    def confirm_latency(self, constraints: Constraints | None) -> str | None:
        """Measure a latency that was only predicted; the reason when the measurement breaks a limit."""
        if self.metrics.get("latency_source") != "predicted":
            return None
        predicted = self.metrics["latency_ms"]
        self.metrics["latency_ms"] = math.nan
        self.measure_latency()
        self.violations = constraints.violations(self.metrics) if constraints else {}
        if self.violations.get("max_latency_ms", 0) > 0:
            return (f"violates max_latency: measured {self.metrics['latency_ms']:.3g} ms at the top rung "
                    f"(predicted {predicted:.3g} ms)")
        return None

    def train_segment(self, steps: int, segment: int = 0, deadline: float | None = None,
                      recalibration_images: int = 1024, recipe: Recipe = Recipe()):
        """`steps` more optimiser steps from the current weights; returns the TrainResult."""
        result, reading = self.metered("training", lambda: train(
            self.model, self.task.train_x, self.task.train_y, self.fidelity, self.device, self.seed, deadline,
            steps=steps, segment=segment, recalibration_images=recalibration_images, recipe=recipe))
        self.split["training"] -= result.recalibration_seconds
        self.split["recalibration"] += result.recalibration_seconds
        self.trained.add(result, reading.joules)
        return result

    @contextmanager
    def resized(self, scale: float):
        """Train and validate at `scale` times the input size the network takes (a lower rung
        on smaller images): the network resizes its input itself, so the weights carry over."""
        if scale == 1.0:
            yield
            return
        _, height, width = self.arch.sees(self.task.input_shape)
        kept = self.model.size
        self.model.size = (max(MIN_SIDE, round(height * scale)), max(MIN_SIDE, round(width * scale)))
        try:
            yield
        finally:
            self.model.size = kept

    def validate(self, images: int | None = None) -> dict:
        """Accuracy with its 95% interval on the first `images` validation images (all when None)."""
        x, y = self.task.val_x, self.task.val_y
        if images is not None:
            x, y = x[:images], y[:images]
        (accuracy, loss), _ = self.metered("validation", lambda: evaluate_accuracy(self.model, x, y, self.device))
        low, high = wilson_interval(round(accuracy * len(y)), len(y))
        return {"accuracy": accuracy, "accuracy_low": low, "accuracy_high": high, "val_images": len(y),
                "val_loss": loss}

    def test(self) -> dict:
        """Accuracy with its 95% interval on the whole test split: what a claim is scored on once
        the choices are made (`eas verify`), never what a search ranks or promotes by."""
        x, y = self.task.test_x, self.task.test_y
        (accuracy, _), _ = self.metered("validation", lambda: evaluate_accuracy(self.model, x, y, self.device))
        low, high = wilson_interval(round(accuracy * len(y)), len(y))
        return {"accuracy": accuracy, "accuracy_low": low, "accuracy_high": high, "images": len(y)}

    def result(self, status: str, reason: str | None = None, violations: dict | None = None,
               validation: dict | None = None) -> Metrics:
        split = {k: round(v, 4) for k, v in self.split.items()}
        total = time.perf_counter() - self.began
        split["other"] = round(max(0.0, total - sum(self.split.values())), 4)
        trained = self.trained
        return Metrics(status=status, reason=reason, violations=self.violations if violations is None else violations,
                       **(validation or {}), train_seconds=trained.seconds, train_steps=trained.steps,
                       train_images=trained.images, train_energy_j=trained.energy_j, precision=trained.precision,
                       evaluate_energy_j=self.energy_j, evaluate_seconds=total,
                       evaluate_cpu_seconds=time.process_time() - self.cpu_began, time_split=split, **self.metrics)

    def screen(self, constraints: Constraints | None) -> Metrics | None:
        """The infeasible result when the candidate breaks a limit, else None. Counted costs are
        checked first (milliseconds); latency is predicted (with a predictor) or measured only for a
        candidate within them."""
        for step in (None, self.predict_latency if self.predictor else self.measure_latency):
            if step is not None:
                step()
            self.violations = constraints.violations(self.metrics) if constraints else {}
            broken = [name for name, excess in self.violations.items() if excess > 0]
            if broken:
                return self.result("infeasible", "violates " + ", ".join(broken))
        return None


def evaluate(arch: Arch | str, task: Dataset, fidelity: Fidelity = Fidelity(), device: str = "auto",
             seed: int = 0, meter: str = "auto", constraints: Constraints | None = None,
             deadline: float | None = None, runtime: Runtime = Runtime()) -> Metrics:
    """Count, time and (if feasible) train `arch` on `task` at one fidelity; energy throughout."""
    arch = Arch.decode(arch) if isinstance(arch, str) else arch
    candidate = Candidate(arch, task, fidelity, device, seed, meter, runtime)
    infeasible = candidate.screen(constraints)
    if infeasible is not None:
        return infeasible
    trained = candidate.train_segment(fidelity.total_steps(len(task.train_y)), deadline=deadline)
    if trained.diverged:
        return candidate.result("diverged", trained.diverged)
    broken = candidate.confirm_latency(constraints)
    return candidate.result("infeasible" if broken else "ok", broken, validation=candidate.validate())
