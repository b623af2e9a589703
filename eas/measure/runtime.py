"""Latency and inference energy in the runtime a model ships with.

Eager PyTorch at batch 1 measures mostly its own per-module overhead: measured here, 4.3-6.5x
ONNX Runtime's time for the same mobile-space networks, ranking them by their number of modules
rather than by their work. So by default a candidate is exported to ONNX the way `eas export`
ships it (eval mode, a dynamic batch axis) and timed in ONNX Runtime with a fixed number of
threads (graph optimisations on: BatchNorm is folded into the convolutions), at batch 1 and at
a larger batch; its inference energy is metered on that same session. Every number carries
where it came from: runtime and version, execution provider, threads, batch, CPU or GPU model.
`--runtime torch` keeps eager PyTorch (what studies made before runtimes were recorded used).
"""

from __future__ import annotations

import io
import platform
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from eas.errors import UserError
from eas.lazy import available, lazy_import
from eas.measure.energy import EnergyReading, Meter, measure_repeated
from eas.measure.inference import Latency, inference_energy, latency, time_repeated

onnxruntime = lazy_import("onnxruntime")

RUNTIMES = ("onnxruntime", "torch")


@dataclass(frozen=True)
class Runtime:
    """Where a study's latencies and inference energies are measured."""

    name: str = "onnxruntime"
    threads: int | None = 1  # onnxruntime's intra-op threads; torch uses the process's own
    batch: int = 32  # the larger batch timed besides batch 1

    @classmethod
    def parse(cls, name: str, threads: int, batch: int) -> Runtime:
        if name not in RUNTIMES:
            raise UserError(f"unknown runtime {name!r} (known: {', '.join(RUNTIMES)})")
        if not 1 <= threads <= 256:
            raise UserError(f"--runtime-threads must be 1..256 (got {threads})")
        if not 2 <= batch <= 4096:
            raise UserError(f"--runtime-batch must be 2..4096 (got {batch})")
        if name == "onnxruntime" and not available("onnxruntime"):
            raise UserError("--runtime onnxruntime needs onnxruntime: pip install onnxruntime (or --runtime torch)")
        return cls(name, threads if name == "onnxruntime" else None, batch)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> Runtime:
        """As stored in a study; a study stored before runtimes were recorded timed eager torch."""
        if not data:
            return cls("torch", None, 32)
        return cls(str(data.get("name")), data.get("threads"), int(data.get("batch", 32)))


def cpu_model() -> str:
    """The CPU's model name, as the kernel reports it (platform.processor() is often empty)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def to_onnx(model: nn.Module, example: torch.Tensor, target) -> None:
    """Export `model` (eval mode) to ONNX, batch axis dynamic: the one exporter of `eas export`
    and of the search's measurements, so a stored latency is the shipped graph's."""
    model.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), target, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)


def session(onnx: bytes | str, threads: int, cuda: bool = False):
    """An ONNX Runtime session with every graph optimisation and a fixed number of threads."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    providers = ["CUDAExecutionProvider"] if cuda and "CUDAExecutionProvider" in \
        onnxruntime.get_available_providers() else ["CPUExecutionProvider"]
    return onnxruntime.InferenceSession(onnx, options, providers=providers)


@dataclass(frozen=True)
class Measured:
    single: Latency
    batched: Latency
    energy: EnergyReading  # per 1000 samples
    provenance: dict  # runtime, version, provider, threads, batch sizes, device


def measure(model: nn.Module, input_shape: tuple[int, int, int], runtime: Runtime, device: torch.device,
            meter: Meter, energy_seconds: float = 0.2) -> Measured:
    """Latency at batch 1 and `runtime.batch`, and inference energy per 1000 samples, in `runtime`."""
    label = f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else f"cpu:{cpu_model()}"
    if runtime.name == "torch":
        single = latency(model, input_shape, device, batch=1, repeats=20, max_seconds=0.15)
        batched = latency(model, input_shape, device, batch=runtime.batch, warmup=1, repeats=3)
        energy = inference_energy(model, input_shape, device, meter, batch=runtime.batch, min_seconds=energy_seconds)
        provenance = {"runtime": f"torch {torch.__version__} (eager)", "provider": device.type,
                      "threads": torch.get_num_threads(), "batch": [1, runtime.batch], "device": label}
        return Measured(single, batched, energy, provenance)
    buffer = io.BytesIO()
    to_onnx(model, torch.zeros(1, *input_shape, device=device), buffer)
    ran = session(buffer.getvalue(), runtime.threads, cuda=device.type == "cuda")
    one = np.random.default_rng(0).standard_normal((1, *input_shape), dtype=np.float32)
    many = np.repeat(one, runtime.batch, axis=0)
    # Enough warm-up and repeats for a median within a few percent of a long timing (measured in
    # benchmarks/latency_truth.py); still well under a second for mobile-space models.
    single = time_repeated(lambda: ran.run(None, {"input": one}), 1, warmup=20, repeats=100, max_seconds=0.4)
    batched = time_repeated(lambda: ran.run(None, {"input": many}), runtime.batch, warmup=1, repeats=5,
                            max_seconds=0.2)

    def work() -> int:
        ran.run(None, {"input": many})
        return runtime.batch

    reading, samples = measure_repeated(meter, work, energy_seconds)
    energy = EnergyReading(reading.joules * 1000 / samples, reading.seconds * 1000 / samples, reading.source)
    provenance = {"runtime": f"onnxruntime {onnxruntime.__version__}", "provider": ran.get_providers()[0],
                  "threads": runtime.threads, "batch": [1, runtime.batch], "device": label}
    return Measured(single, batched, energy, provenance)
