"""The one training step and schedule shared by proxy training (eas.training.proxy) and full training
(eas.training.full), and what both do after training: BatchNorm recalibration and accuracy.

A step splits its batch into micro-batches (gradient accumulation) and autocasts where the
precision asks for it; when a micro-batch does not fit in memory it retries with halved
micro-batches, so the effective batch, and so the result, stays the same.
"""

from __future__ import annotations

import math

import torch
from torch import nn

MIN_BATCH = 2  # BatchNorm in training mode needs two values per channel


def warmup_cosine(optimizer, total_steps: int):
    """Linear warm-up over 5% of the steps, then cosine decay to zero."""
    warmup = max(1, total_steps // 20)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(
        (s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(1.0, s / total_steps)))))


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


class TrainStep:
    """Callable: one optimiser step of `model` on (x, y); returns the batch's mean loss."""

    def __init__(self, model: nn.Module, optimizer, device: torch.device, precision: str,
                 memory_format=torch.channels_last, micro_batch: int | None = None, loss=None):
        self.model, self.optimizer, self.device = model, optimizer, device
        self.precision, self.memory_format, self.micro_batch = precision, memory_format, micro_batch
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.loss = loss or (lambda logits, targets, inputs: nn.functional.cross_entropy(logits, targets))

    def _accumulate(self, x: torch.Tensor, y: torch.Tensor, micro: int) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for start in range(0, len(y), micro):
            xb = x[start:start + micro].contiguous(memory_format=self.memory_format)
            with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
                loss = self.loss(self.model(xb), y[start:start + micro], xb) * (len(xb) / len(y))
            self.scaler.scale(loss).backward()
            total += loss.item()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return total

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.model.train()
        while True:
            micro = self.micro_batch or len(y)
            try:
                return self._accumulate(x, y, micro)
            except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                if not _is_oom(error) or micro // 2 < MIN_BATCH:
                    raise
                self.micro_batch = micro // 2  # accumulate over more, smaller micro-batches
                self.optimizer.zero_grad(set_to_none=True)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()


class DistillationLoss:
    """Knowledge distillation (Hinton et al., 2015): cross-entropy with the labels mixed with the
    KL divergence to the teacher's softened outputs, scaled by T^2 so its gradients keep their
    size whatever the temperature. The teacher only infers (eval mode, no gradients)."""

    def __init__(self, teacher: nn.Module, alpha: float = 0.5, temperature: float = 4.0):
        self.teacher, self.alpha, self.temperature = teacher.eval(), alpha, temperature

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            taught = self.teacher(inputs).float()
        t = self.temperature
        soft = nn.functional.kl_div(nn.functional.log_softmax(logits.float() / t, dim=1),
                                    nn.functional.log_softmax(taught / t, dim=1), log_target=True,
                                    reduction="batchmean") * t * t
        return (1 - self.alpha) * nn.functional.cross_entropy(logits, targets) + self.alpha * soft


def batches(n: int, batch_size: int, generator: torch.Generator):
    """Endless shuffled index batches over n samples; a last batch too small for BatchNorm
    is folded into the next epoch's order instead of being trained alone."""
    while True:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size):
            index = order[start:start + batch_size]
            if len(index) >= min(MIN_BATCH, n):
                yield index


@torch.no_grad()
def recalibrate_batchnorm(model: nn.Module, x: torch.Tensor, memory_format=torch.channels_last,
                          images: int = 1024, batch_size: int = 128) -> None:
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
    batch_size = max(MIN_BATCH, batch_size)
    for start in range(0, min(images, len(x)), batch_size):
        chunk = x[start:start + batch_size]
        if len(chunk) >= MIN_BATCH:
            model(chunk.contiguous(memory_format=memory_format))
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    model.eval()


@torch.inference_mode()
def evaluate_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device,
                      batch_size: int = 64) -> tuple[float, float]:
    """Top-1 accuracy and mean cross-entropy loss. Small batches: on these CPUs a batch of 1024
    took 2-3x longer per image than one of 64 (activations no longer fit the caches)."""
    model.eval()
    correct, loss_sum = 0, 0.0
    for start in range(0, len(y), batch_size):
        xb = x[start:start + batch_size].to(device).contiguous(memory_format=torch.channels_last)
        yb = y[start:start + batch_size].to(device)
        logits = model(xb).float()
        loss_sum += nn.functional.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
    return correct / len(y), loss_sum / len(y)
