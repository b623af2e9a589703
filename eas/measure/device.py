"""The device a run uses (auto, cpu, cuda) and the label stored beside what was measured on it."""

from __future__ import annotations

import platform

import torch

from eas.errors import UserError


def resolve_device(name: str = "auto") -> torch.device:
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
