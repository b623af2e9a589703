"""Inference measurements: latency (warm-up, repeats, median and spread) and energy per 1000
samples over a window long enough for the meter's counter."""

from __future__ import annotations

import torch
from torch import nn

from eas.measure.energy import EnergyReading, Meter, measure_repeated
from eas_agent.measure import Latency, time_repeated  # one timing loop for every runtime


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def latency(model: nn.Module, input_shape: tuple[int, int, int], device: torch.device, batch: int = 1,
            warmup: int = 3, repeats: int = 30, max_seconds: float = 0.5) -> Latency:
    """Time `repeats` forward passes (fewer if they exceed `max_seconds`, at least 3)."""
    model.eval()
    x = torch.randn(batch, *input_shape, device=device).contiguous(memory_format=torch.channels_last)

    def run() -> None:
        model(x)
        _sync(device)

    return time_repeated(run, batch, warmup, repeats, max_seconds)


@torch.no_grad()
def inference_energy(model: nn.Module, input_shape: tuple[int, int, int], device: torch.device,
                     meter: Meter, batch: int = 256, min_seconds: float = 0.2) -> EnergyReading:
    """Energy per 1000 samples of batched inference, repeated until the window is long enough."""
    model.eval()
    x = torch.randn(batch, *input_shape, device=device).contiguous(memory_format=torch.channels_last)
    model(x)  # warm-up outside the window

    def work() -> int:
        model(x)
        return batch

    reading, samples = measure_repeated(meter, work, min_seconds)
    return EnergyReading(reading.joules * 1000 / samples, reading.seconds * 1000 / samples, reading.source)
