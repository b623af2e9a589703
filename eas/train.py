"""Proxy training at a fidelity: short, deterministic, and safe to run on any candidate.

A candidate's failure (divergence, a batch that does not fit) ends that candidate with a reason,
never the process. Out-of-memory retries with smaller micro-batches and gradient accumulation,
so the effective batch (and so the result) stays the same.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from eas.errors import UserError


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
        if not self.epochs > 0:
            raise UserError(f"epochs must be positive (got {self.epochs})")
        if self.subset is not None and self.subset < 1:
            raise UserError(f"subset must be at least 1 (got {self.subset})")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"unknown optimizer {self.optimizer!r} (known: {', '.join(OPTIMIZERS)})")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise UserError(f"unknown precision {self.precision!r} (known: auto, fp32, bf16, fp16)")
        if self.batch_size < 1:
            raise UserError(f"batch size must be at least 1 (got {self.batch_size})")

    def key(self) -> str:
        """Identifies the fidelity: equal keys mean comparable accuracies."""
        return ",".join(f"{k}={v}" for k, v in asdict(self).items())

    def to_dict(self) -> dict:
        return asdict(self)


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


def resolve_precision(requested: str, device: torch.device) -> str:
    """fp32 on CPU unless asked (bf16 autocast was 1.6-2.4x slower on these CPUs);
    bf16 on CUDA where supported, else fp16 with a gradient scaler."""
    if requested != "auto":
        return requested
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


def _is_oom(error: BaseException) -> bool:
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def train(model: nn.Module, train_x: torch.Tensor, train_y: torch.Tensor, fidelity: Fidelity,
          device: torch.device, seed: int = 0, deadline: float | None = None) -> TrainResult:
    """Train `model` in place at `fidelity`. `deadline` is a time.monotonic() value."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    if fidelity.subset and fidelity.subset < len(train_y):
        chosen = torch.randperm(len(train_y), generator=generator)[: fidelity.subset]
        train_x, train_y = train_x[chosen], train_y[chosen]
    n = len(train_y)
    steps_per_epoch = math.ceil(n / fidelity.batch_size)
    total_steps = max(1, math.ceil(fidelity.epochs * steps_per_epoch))
    if fidelity.max_steps:
        total_steps = min(total_steps, fidelity.max_steps)

    precision = resolve_precision(fidelity.precision, device)
    # channels_last gave about 2x on these CPUs and helps CUDA convs too; "off" opts out.
    channels_last = fidelity.channels_last != "off"
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model.to(device=device, memory_format=memory_format).train()
    train_x, train_y = train_x.to(device), train_y.to(device)
    optimizer = OPTIMIZERS[fidelity.optimizer](model.parameters(), fidelity)
    # Linear warm-up over 5% of the steps, then cosine decay to zero.
    warmup = max(1, total_steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(
        (s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(1.0, s / total_steps)))))
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor, micro: int) -> float:
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for start in range(0, len(y), micro):
            xb = x[start:start + micro].contiguous(memory_format=memory_format)
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = loss_fn(model(xb), y[start:start + micro]) * (len(xb) / len(y))
            scaler.scale(loss).backward()
            total += loss.item()
        scaler.step(optimizer)
        scaler.update()
        return total

    started = time.perf_counter()
    micro, images, loss_value, order, position = fidelity.batch_size, 0, float("nan"), None, n
    for step_index in range(total_steps):
        if deadline is not None and time.monotonic() > deadline:
            raise TrialTimeout(f"cut by the time limit after {step_index} of {total_steps} steps")
        if position >= n:
            order, position = torch.randperm(n, generator=generator).to(device), 0
        index = order[position:position + fidelity.batch_size]
        position += fidelity.batch_size
        x, y = train_x[index], train_y[index]
        while True:
            try:
                loss_value = step(x, y, micro)
                break
            except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                if not _is_oom(error) or micro == 1:
                    raise
                micro = max(1, micro // 2)  # accumulate over more, smaller micro-batches
                optimizer.zero_grad(set_to_none=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        schedule.step()
        images += len(y)
        if not math.isfinite(loss_value):
            return TrainResult(time.perf_counter() - started, step_index + 1, images / n, images,
                               loss_value, precision, channels_last, micro,
                               diverged=f"loss became {loss_value} at step {step_index + 1}")
    recalibration_started = time.perf_counter()
    recalibrate_batchnorm(model, train_x, memory_format, batch_size=micro)
    if device.type == "cuda":
        torch.cuda.synchronize()
    finished = time.perf_counter()
    return TrainResult(finished - started, total_steps, images / n, images, loss_value,
                       precision, channels_last, micro, recalibration_seconds=finished - recalibration_started)


@torch.no_grad()
def recalibrate_batchnorm(model: nn.Module, x: torch.Tensor, memory_format, images: int = 2048,
                          batch_size: int = 256) -> None:
    """Recompute BatchNorm running statistics with the final weights.

    After a few dozen steps the exponential running averages still describe the early weights,
    and an eval-mode network scores near chance (seen: 10% vs 74% on Fashion-MNIST after 24
    steps). Once-for-All recalibrates the same way: a cumulative average over fresh batches.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average
    model.train()
    for start in range(0, min(images, len(x)), batch_size):
        model(x[start:start + batch_size].contiguous(memory_format=memory_format))
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    model.eval()


@torch.no_grad()
def evaluate_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device,
                      batch_size: int = 1024) -> tuple[float, float]:
    """Top-1 accuracy and mean cross-entropy loss."""
    model.eval()
    correct, loss_sum = 0, 0.0
    for start in range(0, len(y), batch_size):
        xb = x[start:start + batch_size].to(device).contiguous(memory_format=torch.channels_last)
        yb = y[start:start + batch_size].to(device)
        logits = model(xb).float()
        loss_sum += nn.functional.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
    return correct / len(y), loss_sum / len(y)
