"""Timing an ONNX model in ONNX Runtime: the one code path for EAS's own process and the agent.

Latency is the median of repeated runs after warm-up, at batch 1 and at a larger batch, with a
fixed number of intra-op threads and every graph optimisation on (BatchNorm folded into the
convolutions), the way an exported model ships. Inputs are checked against limits before
anything runs: the agent receives models from the network.
"""

from __future__ import annotations

import functools
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnxruntime

onnxruntime.set_default_logger_severity(3)  # a refused model is reported to the caller, not logged


class ModelRefused(ValueError):
    """A model or request the runtime will not run: the reason is one line for the caller, and
    the HTTP status the agent answers it with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Latency:
    batch: int
    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int


@dataclass(frozen=True)
class Limits:
    """What a measurement may ask of the machine."""

    max_model_bytes: int = 64 * 2**20
    max_sample_values: int = 3 * 512 * 512  # one input sample: channels x height x width
    max_batch: int = 256
    max_threads: int = os.cpu_count() or 1


def time_repeated(run: Callable[[], object], batch: int, warmup: int = 3, repeats: int = 30,
                  max_seconds: float = 0.5) -> Latency:
    """Time `repeats` calls of `run` after `warmup` (fewer if they exceed `max_seconds`, at least 3)."""
    for _ in range(warmup):
        run()
    times, began = [], time.perf_counter()
    while len(times) < repeats and (len(times) < 3 or time.perf_counter() - began < max_seconds):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    # "inclusive": deciles within the times measured. The default ("exclusive") extrapolates past the
    # fastest and slowest of a few repeats; seen on a loaded machine: 3 repeats of a batch gave a
    # p10 of -0.046 ms, which the search then rightly refused to trust.
    deciles = statistics.quantiles(times, n=10, method="inclusive") if len(times) >= 2 else times * 9
    return Latency(batch, statistics.median(times), deciles[0], deciles[-1], len(times))


@functools.cache  # read once per process: every measurement is labelled with it
def cpu_model() -> str:
    """The CPU's model name, as the kernel reports it (platform.processor() is often empty)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "Model")):  # x86; Raspberry Pi's ARM kernels say "Model"
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def session(onnx: bytes | str, threads: int, cuda: bool = False) -> onnxruntime.InferenceSession:
    """An ONNX Runtime session with every graph optimisation and a fixed number of threads."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    providers = ["CUDAExecutionProvider"] if cuda and "CUDAExecutionProvider" in \
        onnxruntime.get_available_providers() else ["CPUExecutionProvider"]
    return onnxruntime.InferenceSession(onnx, options, providers=providers)


def checked_session(onnx: bytes, threads: int, batch: int, limits: Limits):
    """(session, one sample's shape) for a model received from elsewhere, or ModelRefused."""
    if len(onnx) > limits.max_model_bytes:
        raise ModelRefused(f"model of {len(onnx):,} bytes is over the limit of {limits.max_model_bytes:,}", 413)
    if not 1 <= threads <= limits.max_threads:
        raise ModelRefused(f"threads must be 1..{limits.max_threads} (got {threads})")
    if not 1 <= batch <= limits.max_batch:
        raise ModelRefused(f"batch must be 1..{limits.max_batch} (got {batch})")
    try:
        ran = session(onnx, threads)
    except Exception as error:  # ONNX Runtime's own message says what is wrong with the graph
        raise ModelRefused(f"not a model ONNX Runtime can run: {str(error).splitlines()[0][:200]}") from None
    inputs = ran.get_inputs()
    if len(inputs) != 1 or inputs[0].type != "tensor(float)":
        raise ModelRefused("the model must take exactly one float32 input")
    shape = inputs[0].shape
    sample = shape[1:]
    if not shape or isinstance(shape[0], int) or not all(isinstance(d, int) and d > 0 for d in sample):
        raise ModelRefused(f"input shape {shape} must be (dynamic batch, fixed sizes...)")
    if int(np.prod(sample)) > limits.max_sample_values:
        raise ModelRefused(f"input sample of {int(np.prod(sample)):,} values is over the limit of "
                           f"{limits.max_sample_values:,}")
    return ran, tuple(sample)


SESSIONS = 3  # timed one after another; the median session's latency is the measurement


def time_session(open_session: Callable[[], onnxruntime.InferenceSession], sample: tuple[int, ...], batch: int,
                 run_options=None):
    """(latency at batch 1, latency at `batch`, one batched run for energy windows, the last session).

    Timings of one session repeat within a few percent, but two sessions of the same model differ
    by up to 20% here (memory placement): over 60 mobile-space networks timed twice, a single
    session agreed within +-10% for 97%, the median of 3 sessions for 100% (worst 7%)."""
    one = np.random.default_rng(0).standard_normal((1, *sample), dtype=np.float32)
    many = np.repeat(one, batch, axis=0)
    singles = []
    for _ in range(SESSIONS):
        ran = open_session()
        name = ran.get_inputs()[0].name
        singles.append(time_repeated(lambda ran=ran, name=name: ran.run(None, {name: one}, run_options), 1,
                                     warmup=10, repeats=50, max_seconds=0.15))
    single = sorted(singles, key=lambda latency: latency.median_ms)[len(singles) // 2]
    batched = time_repeated(lambda: ran.run(None, {name: many}, run_options), batch, warmup=1, repeats=5,
                            max_seconds=0.2)

    def run_batch() -> int:
        ran.run(None, {name: many}, run_options)
        return batch

    return single, batched, run_batch, ran
