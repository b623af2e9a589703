"""Proxy training at a fidelity: short, deterministic, and safe to run on any candidate.

A candidate's failure (divergence, a batch that does not fit) ends that candidate with a reason,
never the process. The step and schedule are the ones full training uses (eas.training.step).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from eas import interrupt
from eas.data.images import Images
from eas.errors import UserError
from eas.training.recipe import Recipe, WeightAverage, augment_batch, batch_generator
from eas.training.step import MIN_BATCH, TrainStep, batches, recalibrate_batchnorm, resolve_precision, warmup_cosine

MAX_EPOCHS = 10_000


def _positive_finite(value, what: str, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise UserError(f"{what} must be a finite {'non-negative' if allow_zero else 'positive'} number "
                        f"(got {value!r})")


@dataclass(frozen=True)
class Fidelity:
    """How much training a candidate gets. `subset` caps the training images, `max_steps` the
    optimiser steps; `epochs` may be fractional."""

    epochs: float = 1.0
    subset: int | None = None
    max_steps: int | None = None
    batch_size: int = 128
    lr: float = 3e-3
    optimizer: str = "adamw"
    weight_decay: float = 0.01
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    channels_last: str = "auto"  # auto | on | off

    def __post_init__(self) -> None:
        _positive_finite(self.epochs, "epochs")
        if self.epochs > MAX_EPOCHS:
            raise UserError(f"epochs must be at most {MAX_EPOCHS:,} (got {self.epochs})")
        _positive_finite(self.lr, "learning rate")
        _positive_finite(self.weight_decay, "weight decay", allow_zero=True)
        if self.subset is not None and self.subset < MIN_BATCH:
            raise UserError(f"subset must be at least {MIN_BATCH} (got {self.subset})")
        if self.max_steps is not None and self.max_steps < 1:
            raise UserError(f"max steps must be at least 1 (got {self.max_steps})")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"unknown optimizer {self.optimizer!r} (known: {', '.join(OPTIMIZERS)})")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise UserError(f"unknown precision {self.precision!r} (known: auto, fp32, bf16, fp16)")
        if not isinstance(self.batch_size, int) or self.batch_size < MIN_BATCH:
            raise UserError(f"batch size must be at least {MIN_BATCH}: BatchNorm needs two samples per batch "
                            f"(got {self.batch_size})")

    def key(self) -> str:
        """Identifies the fidelity: equal keys mean comparable accuracies."""
        return ",".join(f"{k}={v}" for k, v in asdict(self).items())

    def to_dict(self) -> dict:
        return asdict(self)

    def total_steps(self, images: int) -> int:
        n = min(images, self.subset) if self.subset else images
        steps = max(1, math.ceil(self.epochs * math.ceil(n / self.batch_size)))
        return min(steps, self.max_steps) if self.max_steps else steps


OPTIMIZERS = {
    "adamw": lambda params, f: torch.optim.AdamW(params, lr=f.lr, weight_decay=f.weight_decay),
    "sgd": lambda params, f: torch.optim.SGD(params, lr=f.lr, momentum=0.9, nesterov=True,
                                             weight_decay=f.weight_decay),
}


class TrialTimeout(Exception):
    """Training passed its deadline (the search budget or the per-trial timeout)."""


@dataclass(frozen=True)
class TrainResult:
    seconds: float
    steps: int
    epochs: float
    images: int
    final_loss: float
    precision: str
    channels_last: bool
    micro_batch: int
    diverged: str | None = None  # the reason, when training stopped on a non-finite loss
    recalibration_seconds: float = 0.0  # part of `seconds`: BatchNorm statistics after training


def train(model: nn.Module, train_x: Images, train_y: torch.Tensor, fidelity: Fidelity,
          device: torch.device, seed: int = 0, deadline: float | None = None, steps: int | None = None,
          segment: int = 0, recalibration_images: int = 1024, recipe: Recipe = Recipe()) -> TrainResult:
    """Train `model` in place: `steps` optimiser steps (default: the fidelity's) with a fresh
    optimiser and a warm-up + cosine schedule over those steps. A multi-fidelity rung continues
    training an earlier rung's weights as a new `segment` (a warm restart); its data order and
    randomness follow (seed, segment) only, so a segment resumed on another worker trains the
    same way. `deadline` is a time.monotonic() value. `recipe` (augmentation, label smoothing,
    weight averaging) is what `eas verify` trains every model of a comparison with; the search's
    own proxy training uses none of it."""
    if steps is not None and steps < 1:
        raise ValueError(f"train() needs at least one step (got {steps}); None means the fidelity's")
    torch.manual_seed(seed * 1009 + segment)
    generator = torch.Generator().manual_seed(seed)
    if fidelity.subset and fidelity.subset < len(train_y):
        chosen = torch.randperm(len(train_y), generator=generator)[: fidelity.subset]
        train_x, train_y = train_x.subset(chosen), train_y[chosen]
    generator.manual_seed(seed * 1009 + segment)
    n = len(train_y)
    total_steps = fidelity.total_steps(n) if steps is None else steps
    precision = resolve_precision(fidelity.precision, device)
    # channels_last gave about 2x on these CPUs and helps CUDA convs too; "off" opts out.
    channels_last = fidelity.channels_last != "off"
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model.to(device=device, memory_format=memory_format).train()
    train_x, train_y = train_x.to(device), train_y.to(device)
    optimizer = OPTIMIZERS[fidelity.optimizer](model.parameters(), fidelity)
    schedule = warmup_cosine(optimizer, total_steps)
    loss = None if not recipe.label_smoothing else (lambda logits, targets, inputs: nn.functional.cross_entropy(
        logits, targets, label_smoothing=recipe.label_smoothing))
    step = TrainStep(model, optimizer, device, precision, memory_format, loss=loss)
    average = WeightAverage(model, recipe.ema) if recipe.ema else None
    order = batches(n, fidelity.batch_size, generator)

    started = time.perf_counter()
    images, loss_value = 0, float("nan")
    for step_index in range(total_steps):
        interrupt.check()
        if deadline is not None and time.monotonic() > deadline:
            raise TrialTimeout(f"cut by the time limit after {step_index} of {total_steps} steps")
        index = next(order).to(device)
        x = train_x[index]
        if recipe.augment != "none":
            x = augment_batch(x, recipe.augment, batch_generator(device, seed * 1009 + segment, step_index, 0))
        loss_value = step(x, train_y[index])
        if average is not None:
            average.update(model, step_index)
        schedule.step()
        images += len(index)
        if not math.isfinite(loss_value):
            return TrainResult(time.perf_counter() - started, step_index + 1, images / n, images,
                               loss_value, precision, channels_last, step.micro_batch or fidelity.batch_size,
                               diverged=f"loss became {loss_value} at step {step_index + 1}")
    if average is not None:
        average.swap(model)  # the averaged weights are the ones kept, their BatchNorm recalibrated
    recalibration_started = time.perf_counter()
    recalibrate_batchnorm(model, train_x, memory_format, images=recalibration_images,
                          batch_size=min(128, step.micro_batch or 128))
    if device.type == "cuda":
        torch.cuda.synchronize()
    finished = time.perf_counter()
    return TrainResult(finished - started, total_steps, images / n, images, loss_value,
                       precision, channels_last, step.micro_batch or fidelity.batch_size,
                       recalibration_seconds=finished - recalibration_started)
