"""`eas compress`: a lighter model from a trained export, written as a new export folder and
measured side by side with the model it came from.

- int8 (eas.deploy.quantize): the same network, quantised after training; fp32 and int8 are measured
  in the same runtime.
- prune (eas.deploy.prune): a narrower genome of the same family that inherits the surviving
  weights, then fine-tuned briefly with `eas train`'s loop; measured before and after.

The new folder is an ordinary export (arch.json, model.py, ...) whose arch.json names where it
came from (`derived_from`), so the explorer and `eas show` can follow a candidate to its
deployed descendants. Everything is checked before anything is written, and the folder
appears only when complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from eas.arch.builder import build
from eas.arch.genome import Arch, arch_spec
from eas.arch.profile import profile
from eas.deploy.arch_files import standalone_source
from eas.deploy.export import writing_folder
from eas.deploy.formats import stored_formats
from eas.deploy.handover import hand_over, onnx_agreement
from eas.deploy.prune import inherit_weights, pruned_arch
from eas.deploy.quantize import (
    CALIBRATION_IMAGES,
    calibration_images,
    compare,
    measure_onnx,
    onnxruntime,
    quantize_onnx,
)
from eas.errors import UserError
from eas.measure.energy import make_meter
from eas.measure.inference import inference_energy, latency
from eas.training.checkpoint import load_weights, save_weights
from eas.training.full import WEIGHTS, load_trained, train_exported
from eas.training.step import evaluate_accuracy, recalibrate_batchnorm
from eas.units import human


def derived_document(document: dict, genome: str, source: Path, method: dict, metrics: dict) -> dict:
    """arch.json of a compressed model: the parent's task and training, a new genome and spec,
    and where it came from."""
    return {**document, "genome": genome, "spec": arch_spec(Arch.decode(genome)), "metrics": metrics,
            "derived_from": {"folder": str(Path(source).resolve()), "genome": document["genome"], **method},
            "checks": {}}


def default_output(folder: Path, method: str) -> Path:
    """Where a compressed model goes unless told: beside its source, e.g. models/knee-int8."""
    folder = Path(folder).resolve()  # `eas compress .` names the folder it is in
    return folder.with_name(f"{folder.name}-{method}")


def _test_arrays(task):
    return task.test_x, task.test_y.numpy()  # images are read and normalised 64 at a time


def compress_int8(folder: Path, out: Path, task, meter_name: str = "auto", force: bool = False) -> dict:
    """Quantise a trained export to int8; returns report.json (fp32 and int8 side by side)."""
    runtime, _ = onnxruntime()  # installed? (the export extra)
    document, model = load_trained(folder, task)
    meter, _ = make_meter(meter_name)
    test_x, test_y = _test_arrays(task)

    with writing_folder(out, force, derived_from=folder) as work:
        fp32, int8 = work / "model.onnx", work / "model.int8.onnx"
        save_weights(work / WEIGHTS, model)  # model.py loads them: the folder is a complete trained export
        formats = stored_formats(document)
        checks = hand_over(work, model, task, formats)
        if "removed" in checks["model.onnx"]:
            raise UserError(f"cannot quantise: model.onnx {checks['model.onnx']['removed']}")
        quantize_onnx(fp32, int8, calibration_images(task.train_x))
        checks["model.int8.onnx"] = onnx_agreement(int8, model, task)  # hand_over wrote model.int8.ort alike
        before, after = measure_onnx(fp32, test_x, test_y, meter), measure_onnx(int8, test_x, test_y, meter)
        report = {"method": "int8", "data": task.name, "runtime": f"onnxruntime {runtime.__version__}",
                  "calibration_images": CALIBRATION_IMAGES, "fp32": before, "int8": after,
                  "gain": compare(before, after), "deployed": checks, "preprocessing": task.preprocessing()}
        metrics = {"test_accuracy": after["test_accuracy"], "size_bytes": after["size_bytes"]}
        method = {"method": "int8", "format": "onnx QDQ, per-channel int8 weights, uint8 activations"}
        (work / "model.py").write_text(standalone_source(Arch.decode(document["genome"]), task.input_shape,
                                                         task.num_classes))
        (work / "arch.json").write_text(json.dumps({**derived_document(document, document["genome"], folder, method,
                                                                       metrics), "preprocessing": task.preprocessing()},
                                                   indent=2))
        (work / "report.json").write_text(json.dumps(report, indent=2))
        return report



def measure_torch(model, task, meter) -> dict:
    """Counted cost, CPU latency, energy per 1000 images and test accuracy of a PyTorch model."""
    cpu = torch.device("cpu")
    cost = profile(model, task.input_shape)
    energy = inference_energy(model, task.input_shape, cpu, meter)
    accuracy, _ = evaluate_accuracy(model, task.test_x, task.test_y, cpu)
    return {"params": cost.params, "macs": cost.macs,
            "latency_ms_b1": latency(model, task.input_shape, cpu, batch=1).median_ms,
            "latency_ms_b32": latency(model, task.input_shape, cpu, batch=32).median_ms,
            "energy_j_per_1k": energy.joules, "energy_source": energy.source, "test_accuracy": accuracy}


def compress_prune(folder: Path, out: Path, task, ratio: float, plan, meter_name: str = "auto",
                   force: bool = False, show_progress: bool = True) -> dict:
    """Remove `ratio` of each stage's channels, inherit the weights, fine-tune with `plan`;
    returns report.json (before, right after pruning, after fine-tuning)."""
    document, model = load_trained(folder, task)
    arch = Arch.decode(document["genome"])
    narrower = pruned_arch(arch, ratio)
    if narrower == arch:
        raise UserError(f"--prune {ratio} removes no channel of {arch.encode()}; use a larger fraction")
    pruned = build(narrower, task.input_shape, task.num_classes).eval()
    inherit_weights(model, pruned, arch)
    # Removed input channels change what each kept channel's BatchNorm sees: recompute its statistics.
    recalibrate_batchnorm(pruned, task.train_x, images=2048)
    pruned.eval()
    meter, _ = make_meter(meter_name)

    with writing_folder(out, force, derived_from=folder) as work:
        before = measure_torch(model, task, meter)
        inherited = work / "inherited.safetensors"
        save_weights(inherited, pruned)
        untuned, _ = evaluate_accuracy(pruned, task.test_x, task.test_y, torch.device("cpu"))
        (work / "model.py").write_text(standalone_source(narrower, task.input_shape, task.num_classes))
        method = {"method": "prune", "ratio": ratio, "importance": "filter norm x BatchNorm scale",
                  "fine_tune_epochs": plan.epochs}
        placeholder = derived_document(document, narrower.encode(), folder, method, {})
        (work / "arch.json").write_text(json.dumps(placeholder, indent=2))
        training = train_exported(work, task, plan, "auto", meter_name, show_progress=show_progress,
                                  start_from=inherited)
        tuned = load_weights(work / WEIGHTS, build(narrower, task.input_shape, task.num_classes))
        after = measure_torch(tuned.eval(), task, meter)
        report = {"method": "prune", "ratio": ratio, "data": task.name, "genome_before": arch.encode(),
                  "genome_after": narrower.encode(), "before": before,
                  "after_pruning_test_accuracy": untuned, "after": after,
                  "fine_tune": {k: training[k] for k in ("train_seconds", "energy_kwh", "energy_source",
                                                         "epochs_run")},
                  "gain": {"fewer_params": before["params"] / after["params"],
                           "fewer_macs": before["macs"] / after["macs"],
                           "faster_b1": before["latency_ms_b1"] / after["latency_ms_b1"],
                           "accuracy_points": 100 * (after["test_accuracy"] - before["test_accuracy"])}}
        metrics = {k: after[k] for k in ("params", "macs", "test_accuracy")}
        (work / "arch.json").write_text(json.dumps({**derived_document(document, narrower.encode(), folder, method,
                                                                       metrics), "preprocessing": task.preprocessing()},
                                                   indent=2))
        deployed = hand_over(work, tuned, task, stored_formats(document))
        (work / "report.json").write_text(json.dumps({**training, "compression": report, "deployed": deployed,
                                                      "preprocessing": task.preprocessing()}, indent=2))
        for leftover in ("checkpoint", "best.safetensors"):  # fine-tuning is done; keep only the result
            path = work / leftover
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        return report



OPPOSITE = {"smaller": "larger", "faster": "slower", "less": "more"}


def _gain(ratio: float, word: str) -> str:
    """"2.00x smaller", or "1.50x slower" rather than "0.67x faster"."""
    return f"{ratio:.2f}x {word}" if ratio >= 1 else f"{1 / ratio:.2f}x {OPPOSITE[word]}"


def comparison_rows(report: dict) -> tuple[list[list[str]], list[str]]:
    """The command's table: one row per measured quantity, before / after / gain."""
    if report["method"] == "int8":
        before, after, headers = report["fp32"], report["int8"], ["", "fp32", "int8", "int8 vs fp32"]
        quantities = [("size on disk", "size_bytes", lambda v: f"{v / 1024:.1f} KiB", "smaller")]
    else:
        before, after, headers = report["before"], report["after"], ["", "before", "pruned + fine-tuned", "gain"]
        quantities = [("parameters", "params", lambda v: f"{v:,}", "smaller"),
                      ("MACs", "macs", lambda v: human(v), "smaller")]
    quantities += [("latency, batch 1", "latency_ms_b1", lambda v: f"{v:.3f} ms", "faster"),
                   ("latency, batch 32", "latency_ms_b32", lambda v: f"{v:.3f} ms", "faster"),
                   (f"energy / 1k images ({after['energy_source']})", "energy_j_per_1k", lambda v: f"{v:.3g} J",
                    "less")]
    rows = [[label, show(before[key]), show(after[key]), _gain(before[key] / after[key], word)]
            for label, key, show, word in quantities]
    points = 100 * (after["test_accuracy"] - before["test_accuracy"])
    rows.append(["test accuracy", f"{before['test_accuracy']:.2%}", f"{after['test_accuracy']:.2%}",
                 f"{points:+.2f} points"])
    return rows, headers
