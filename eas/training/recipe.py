"""The training recipe a comparison trains every model with, written once: augmentation suited
to the data, label smoothing, and an exponential moving average (EMA) of the weights.

Augmentation runs on whole batches on the training device, drawn from a generator seeded by
(seed, step, worker), so a resumed run augments exactly as an uninterrupted one. Policies:
"shift" (a random crop of the image padded by 1/8 of its side: translation), "standard" (shift
and a horizontal flip, for natural images and clothing). `auto` picks by the data: digits are
shifted but never flipped (a flipped 2 is not a 2), an npz of unknown content gets nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from eas.errors import UserError

AUGMENTS = ("auto", "none", "shift", "standard")
# The data's kind (its spec before ':') -> what `--augment auto` means for it.
AUTO_AUGMENT = {"digits": "shift", "fashion-mnist": "standard", "cifar10": "standard", "cifar100": "standard",
                "imagefolder": "standard", "npz": "none"}


@dataclass(frozen=True)
class Recipe:
    augment: str = "none"  # none | shift | standard (resolved: never "auto")
    label_smoothing: float = 0.0
    ema: float = 0.0  # the moving average's decay; 0: off

    @classmethod
    def parse(cls, augment: str, label_smoothing: float, ema: float, data: str) -> Recipe:
        """The recipe the options ask for on `data`, checked; `auto` resolved for that data."""
        if augment not in AUGMENTS:
            raise UserError(f"unknown --augment {augment!r} (known: {', '.join(AUGMENTS)})")
        if augment == "auto":
            augment = AUTO_AUGMENT.get(data.split(":", 1)[0], "none")
        if not 0.0 <= label_smoothing < 0.5:
            raise UserError(f"--label-smoothing must be in [0, 0.5) (got {label_smoothing})")
        if not (ema == 0.0 or 0.5 <= ema < 1.0):
            raise UserError(f"--ema must be 0 (off) or a decay in [0.5, 1) (got {ema})")
        return cls(augment, label_smoothing, ema)

    def to_dict(self) -> dict:
        return asdict(self)


def augment_batch(x: torch.Tensor, policy: str, generator: torch.Generator) -> torch.Tensor:
    """`x` (N, C, H, W) augmented per image by `policy`, on x's device."""
    if policy == "none":
        return x
    n, _, height, width = x.shape
    pad = max(1, round(min(height, width) / 8))
    padded = nn.functional.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=x.device)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=x.device)
    rows = (dy[:, None] + torch.arange(height, device=x.device))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(width, device=x.device))
    if policy == "standard":
        flip = torch.rand(n, generator=generator, device=x.device) < 0.5
        cols = torch.where(flip[:, None], cols.flip(1), cols)
    images = torch.arange(n, device=x.device)[:, None, None, None]
    channels = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
    return padded[images, channels, rows, cols[:, None, None, :]].contiguous(memory_format=torch.channels_last)


def batch_generator(device: torch.device, seed: int, step: int, worker: int) -> torch.Generator:
    """The generator that augments one step's batch on one worker: a function of where it is."""
    return torch.Generator(device).manual_seed((seed * 1_000_003 + step) * 1_009 + worker)


class WeightAverage:
    """An exponential moving average of the trainable weights, updated after every step. Its decay
    ramps up as (1 + t) / (10 + t) towards `decay` (as TensorFlow's EMA with num_updates), so a
    short training is not averaged towards its random start. BatchNorm statistics are not
    averaged: they are recalibrated on the averaged weights before each evaluation."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.tensors = {k: p.detach().clone() for k, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        decay = min(self.decay, (1 + step) / (10 + step))
        for name, parameter in model.named_parameters():
            self.tensors[name].lerp_(parameter.detach(), 1 - decay)

    @torch.no_grad()
    def swap(self, model: nn.Module) -> None:
        """Exchange the model's weights with the averaged ones (twice: back as they were)."""
        for name, parameter in model.named_parameters():
            held = parameter.detach().clone()
            parameter.copy_(self.tensors[name])
            self.tensors[name] = held
