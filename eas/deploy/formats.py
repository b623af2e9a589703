"""Formats phones and small devices run, written beside model.pt2 and model.onnx on request
(`eas export --format pte,ort`), rewritten from the trained weights by `eas train`, and checked
in their own runtime against the PyTorch model they came from.

- `pte`: an ExecuTorch program with the XNNPACK delegate (`model.pte`), and after training its
  int8 twin (`model.int8.pte`: PT2E static quantisation, per-channel weights, calibrated on
  training images). ExecuTorch was chosen over litert-torch's TFLite by measurement
  (docs/how-to/microcontrollers.md, "Formats"): it installs with pip as one extra next to the
  torch EAS already uses and converted every network of the spaces measured, float outputs equal
  to PyTorch's to float rounding, while litert-torch's requirements did not resolve in 15
  minutes and TensorFlow Lite Micro has no kernel for GELU, one of `hybrid`'s choices.
- `ort`: ONNX Runtime's mobile format (`model.ort`), made from model.onnx by the runtime itself,
  optimised as onnxruntime's own converter does for any hardware (its NCHWc layout, which only
  x86 runs, left out), and after training its int8 twin (`model.int8.ort`: the static QDQ graph
  `eas compress --int8` makes, calibrated on training images). It needs nothing beyond the
  onnxruntime EAS already uses.

The `.pte` files take one image at a time (batch 1), as a device runs them; `.ort` keeps
model.onnx's free batch size. Neither needs EAS to run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from eas.deploy.quantize import quantize_onnx
from eas.errors import UserError
from eas.lazy import available, lazy_import
from eas.measure.runtime import to_onnx

ort = lazy_import("onnxruntime")
# The executorch extra (and the torchao it brings), imported when a .pte is first written or run.
executorch_exir = lazy_import("executorch.exir")
executorch_runtime = lazy_import("executorch.runtime")
executorch_native = lazy_import("executorch.extension.pybindings.portable_lib")
xnnpack_partitioner = lazy_import("executorch.backends.xnnpack.partition.xnnpack_partitioner")
xnnpack_quantizer = lazy_import("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")
pt2e = lazy_import("torchao.quantization.pt2e.quantize_pt2e")


@dataclass(frozen=True)
class DeployFormat:
    name: str  # what --format takes
    file: str  # the float file in the export folder
    int8_file: str | None  # its int8 twin, written after training (calibration needs the data)
    module: str  # what must be importable to write and check it
    install: str  # the one line that installs it
    write: Callable[[torch.nn.Module, torch.Tensor, Path], None]  # (model, example images, path)
    write_int8: Callable[[torch.nn.Module, torch.Tensor, Path], None] | None  # (model, calibration, path)
    load: Callable[[Path, int], Callable[[torch.Tensor], np.ndarray]]  # (path, threads) -> images -> logits
    batch: int  # images per call the file takes at most

    def files(self) -> tuple[str, ...]:
        return (self.file,) if self.int8_file is None else (self.file, self.int8_file)

    def run(self, path: Path, x: torch.Tensor, threads: int = 1) -> np.ndarray:
        """The logits of `x` from the file, run in its own runtime."""
        predict = self.load(path, threads)
        return np.concatenate([predict(x[i:i + self.batch]) for i in range(0, len(x), self.batch)])

    def latency_ms(self, path: Path, image: torch.Tensor, threads: int = 1, repeats: int = 50,
                   seconds: float = 3.0) -> float:
        """Median milliseconds of one image through the loaded file (after 5 warm-up runs), as a
        device that keeps the program loaded meets it; at most `seconds` of timed runs."""
        predict = self.load(path, threads)
        for _ in range(5):
            predict(image)
        times: list[float] = []
        end = time.perf_counter() + seconds
        while len(times) < repeats and (len(times) < 5 or time.perf_counter() < end):
            start = time.perf_counter()
            predict(image)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3


def _quiet_executorch():
    """ExecuTorch's import logs torchao's optional CUDA kernels it cannot load: not EAS's news."""
    for name in ("torchao", "torch.utils._pytree", "executorch"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _lower_to_pte(program: torch.export.ExportedProgram, path: Path) -> None:
    lowered = executorch_exir.to_edge_transform_and_lower(
        program, partitioner=[xnnpack_partitioner.XnnpackPartitioner()]).to_executorch()
    path.write_bytes(lowered.buffer)


def write_pte(model: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    _quiet_executorch()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        _lower_to_pte(torch.export.export(model.eval(), (example[:1],)), path)


def write_int8_pte(model: torch.nn.Module, calibration: torch.Tensor, path: Path) -> None:
    """Static int8: activation ranges observed on `calibration` (in batches), then frozen."""
    _quiet_executorch()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        batch = torch.export.Dim("batch", min=1, max=2**16)
        graph = torch.export.export(model.eval(), (calibration[:2],), dynamic_shapes=({0: batch},)).module()
        quantizer = xnnpack_quantizer.XNNPACKQuantizer().set_global(
            xnnpack_quantizer.get_symmetric_quantization_config(is_per_channel=True))
        observed = pt2e.prepare_pt2e(graph, quantizer)
        for start in range(0, len(calibration), 64):
            observed(calibration[start:start + 64])
        _lower_to_pte(torch.export.export(pt2e.convert_pt2e(observed), (calibration[:1],)), path)


@contextlib.contextmanager
def _native_stderr_silenced():
    """XNNPACK's first start prints its CPU probing notes (from C++, past Python's sys.stderr) to
    the terminal: not the user's news. A failure still raises, with its own message."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def load_pte(path: Path, threads: int = 1) -> Callable[[torch.Tensor], np.ndarray]:
    """The program's forward method, on XNNPACK's thread pool set to `threads`. The pool is one per
    process and a loaded method keeps using the pool it was loaded with: resetting it under a
    loaded method crashes the process, so it is reset before loading, and only when it changes."""
    _quiet_executorch()
    with _native_stderr_silenced():
        runtime = executorch_runtime.Runtime.get()
        pool = portable_lib()
        if pool is not None and pool._threadpool_get_thread_count() != threads:
            pool._unsafe_reset_threadpool(threads)
        method = runtime.load_program(str(path)).load_method("forward")
    return lambda x: method.execute([x.contiguous()])[0].numpy()


def portable_lib():
    """ExecuTorch's native module, for its thread pool (private calls: None where they are gone)."""
    try:
        return executorch_native if hasattr(executorch_native, "_unsafe_reset_threadpool") else None
    except ImportError:
        return None


def write_ort(model: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    """model.onnx's graph, optimised and saved by onnxruntime in its own (mobile) format."""
    onnx_path = path.with_suffix(".source.onnx")
    try:
        to_onnx(model, example, str(onnx_path))
        onnx_to_ort(onnx_path, path)
    finally:
        onnx_path.unlink(missing_ok=True)


def write_int8_ort(model: torch.nn.Module, calibration: torch.Tensor, path: Path) -> None:
    """The int8 graph `eas compress --int8` makes (static QDQ: per-channel int8 weights, uint8
    activations with ranges calibrated on `calibration`), in ONNX Runtime's mobile format."""
    source, quantised = path.with_suffix(".source.onnx"), path.with_suffix(".int8.onnx")
    try:
        to_onnx(model, calibration[:2], str(source))
        quantize_onnx(source, quantised, calibration.numpy())
        onnx_to_ort(quantised, path)
    finally:
        source.unlink(missing_ok=True)
        quantised.unlink(missing_ok=True)


def onnx_to_ort(onnx_path: Path, path: Path) -> None:
    """An .onnx file (an int8 QDQ one too) saved by onnxruntime in its mobile format."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(path)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"],
                         disabled_optimizers=["NchwcTransformer"])


def load_ort(path: Path, threads: int = 1) -> Callable[[torch.Tensor], np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"input": x.numpy()})[0]


FORMATS = {
    "pte": DeployFormat("pte", "model.pte", "model.int8.pte", "executorch", "pip install 'eas[executorch]'",
                        write_pte, write_int8_pte, load_pte, batch=1),
    "ort": DeployFormat("ort", "model.ort", "model.int8.ort", "onnxruntime", "pip install onnxruntime",
                        write_ort, write_int8_ort, load_ort, batch=64),
}


def _installed(name: str, where: str) -> DeployFormat:
    if not available(FORMATS[name].module):
        raise UserError(f"{where} {name} needs {FORMATS[name].module}: {FORMATS[name].install}")
    return FORMATS[name]


def parse_formats(text: str | None, option: str = "--format") -> list[str]:
    """`pte,ort` -> ["pte", "ort"]: known, installed, each once; a clear error otherwise. None
    asks for none; an empty text or an empty name between commas is refused."""
    if text is None:
        return []
    names = [part.strip().lower() for part in text.split(",")]
    if not all(names):
        raise UserError(f"{option} {text!r}: name each format, comma-separated ({', '.join(FORMATS)})")
    for name in names:
        if name not in FORMATS:
            raise UserError(f"{option} {name!r}: choose from {', '.join(FORMATS)} (comma-separated)")
        _installed(name, option)
    if len(set(names)) != len(names):
        raise UserError(f"{option} {text!r} names a format twice")
    return names


def stored_formats(document: dict) -> list[DeployFormat]:
    """The formats an export's arch.json asks for (none in an older export), each installed."""
    names = document.get("formats") or []
    if not isinstance(names, list) or any(not isinstance(name, str) or name not in FORMATS for name in names):
        raise UserError(f"arch.json: 'formats' must be a list of {', '.join(FORMATS)}, not {str(names)[:60]}")
    return [_installed(name, "arch.json asks for format") for name in names]
