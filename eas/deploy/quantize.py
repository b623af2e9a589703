"""Post-training static int8 quantisation of a trained export, measured side by side with fp32.

Why onnxruntime: it is already EAS's ONNX runtime (the `export` extra), it runs int8 convolutions
and matrix products with the CPU's integer instructions (VNNI/AVX2) without a compiler step,
and its result is a plain .onnx file any runtime loads. PyTorch's own int8 path (PT2E) now lives
in torchao and is fast only after an inductor compile, which a deployment target without
PyTorch cannot use.

Static means the activation ranges are calibrated once, on training images, and frozen
(QDQ format, weights per channel, MinMax calibration). Weights use 7 of their 8 bits
(`reduce_range`): x86 CPUs without VNNI multiply uint8 by int8 with an instruction whose 16-bit
sums saturate, and a file exported on one machine runs on others. On an AMD EPYC without VNNI
the 8-bit weights of a small trained network agreed with fp32 on 79% of its validation images,
the 7-bit ones on 99% (tests/deploy/test_device_formats.py's network, 2026-12-07); on a CPU with
VNNI 7 bits cost nothing measurable (benchmarks/int8_bits.py: five trained networks, median -0.04
points of test accuracy against -0.21 with 8 bits). Both models are measured in the same
runtime with the same threads: size on disk, latency at batch 1 and 32, energy per 1000
images (with the meter's source) and test accuracy.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import torch

from eas.errors import UserError
from eas.lazy import available, lazy_import

ort = lazy_import("onnxruntime")
ort_quantization = lazy_import("onnxruntime.quantization")
ort_shape_inference = lazy_import("onnxruntime.quantization.shape_inference")

CALIBRATION_IMAGES = 512
LATENCY_BATCHES = (1, 32)


def onnxruntime():
    """(onnxruntime, its quantization package); a clear error when the export extra is missing."""
    if not available("onnxruntime"):
        raise UserError("int8 quantisation needs onnxruntime: pip install 'eas[export]'")
    return ort, ort_quantization


def quantize_onnx(fp32: Path, int8: Path, calibration: np.ndarray, reduce_range: bool = True) -> None:
    """Write the int8 model of `fp32`, its activation ranges calibrated on `calibration` (NCHW);
    `reduce_range=False` uses all 8 bits of the weights (benchmarks/int8_bits.py compares them)."""
    _, quantization = onnxruntime()
    class Images(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter(np.array_split(calibration, max(1, len(calibration) // 32)))

        def get_next(self):
            batch = next(self.batches, None)
            return None if batch is None else {"input": np.ascontiguousarray(batch, dtype=np.float32)}

    prepared = int8.with_name(int8.stem + ".prepared.onnx")
    try:
        # pre-processing folds BatchNorm into the convolutions
        ort_shape_inference.quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
        quantization.quantize_static(str(prepared), str(int8), Images(), quant_format=quantization.QuantFormat.QDQ,
                                     per_channel=True, activation_type=quantization.QuantType.QUInt8,
                                     weight_type=quantization.QuantType.QInt8,
                                     calibrate_method=quantization.CalibrationMethod.MinMax,
                                     reduce_range=reduce_range)  # no saturation without VNNI: see above
    finally:
        prepared.unlink(missing_ok=True)


def _session(path: Path):
    runtime, _ = onnxruntime()
    options = runtime.SessionOptions()
    options.log_severity_level = 3
    return runtime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _latency_ms(session, shape: tuple[int, ...], repeats: int = 50, max_seconds: float = 2.0) -> float:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for _ in range(5):
        session.run(None, {"input": x})
    times, began = [], time.perf_counter()
    while len(times) < repeats and (len(times) < 5 or time.perf_counter() - began < max_seconds):
        start = time.perf_counter()
        session.run(None, {"input": x})
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure_onnx(path: Path, test_x, test_y: np.ndarray, meter) -> dict:
    """Size, latency, energy per 1000 images over the test pass, and test accuracy of one model."""
    session = _session(path)
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))  # model.onnx + model.onnx.data
    latency = {f"latency_ms_b{b}": _latency_ms(session, (b, *test_x.shape[1:])) for b in LATENCY_BATCHES}
    correct = 0
    token = meter.start()
    for start in range(0, len(test_y), 64):
        logits = session.run(None, {"input": np.asarray(test_x[start:start + 64])})[0]
        correct += int((logits.argmax(1) == test_y[start:start + 64]).sum())
    reading = meter.stop(token)
    return {"file": path.name, "size_bytes": size, **latency,
            "energy_j_per_1k": reading.joules * 1000 / len(test_y), "energy_source": reading.source,
            "test_accuracy": correct / len(test_y)}


def compare(fp32: dict, int8: dict) -> dict:
    """What int8 gained against fp32: ratios above 1 are better for int8; accuracy in points."""
    ratios = {key: fp32[key] / int8[key] for key in ("size_bytes", *(f"latency_ms_b{b}" for b in LATENCY_BATCHES),
                                                     "energy_j_per_1k") if int8[key]}
    return {"smaller": ratios["size_bytes"], "faster_b1": ratios.get("latency_ms_b1"),
            "faster_b32": ratios.get("latency_ms_b32"), "less_energy": ratios.get("energy_j_per_1k"),
            "accuracy_points": 100 * (int8["test_accuracy"] - fp32["test_accuracy"])}


def calibration_images(train_x, count: int = CALIBRATION_IMAGES, seed: int = 0) -> np.ndarray:
    pick = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(seed))[:count]
    return train_x[pick].float().numpy()
