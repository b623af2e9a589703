"""What is handed over is what was trained.

After `eas train` (or a compression) every file of an export folder meant for deployment is
rewritten from the trained PyTorch model and checked against it on real validation images: the
largest difference of the logits and the share of images whose top-1 class agrees. A file that
cannot be rewritten is removed, with the reason recorded, never left holding older weights; the
checks go into report.json (`"deployed"`), and arch.json records the preprocessing the model was
trained with (resolution, channels, mean and std, resize and crop).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from eas.deploy.export import export_onnx_file, export_pt2_file, failure
from eas.deploy.formats import DeployFormat, stored_formats
from eas.deploy.quantize import calibration_images
from eas.jsonfile import read_json
from eas.lazy import available, lazy_import
from eas.training.full import load_trained

onnxruntime = lazy_import("onnxruntime")

CHECK_IMAGES = 512  # validation images every deployed file is checked on
# made from the weights before this training and not rewritten here: removed, `eas compress` remakes them
STALE = ("model.int8.onnx", "model.int8.ort")


def agreement(expected: np.ndarray, got: np.ndarray) -> dict:
    """Largest |difference| of the logits and the share of images with the same top-1 class."""
    return {"max_abs_diff": float(np.abs(expected - got).max()),
            "top1_agreement": float((expected.argmax(1) == got.argmax(1)).mean()), "images": len(expected)}


def check_images(task, images: int = CHECK_IMAGES) -> torch.Tensor:
    """The first validation images, normalised as in training (float32, on the CPU)."""
    return task.val_x[:min(images, len(task.val_y))].cpu().float().contiguous()


def _onnx_outputs(path: Path, x: torch.Tensor) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"input": x[i:i + 64].numpy()})[0] for i in range(0, len(x), 64)])


def _pt2_outputs(path: Path, x: torch.Tensor) -> np.ndarray:
    program = torch.export.load(str(path)).module()
    with torch.no_grad():
        return torch.cat([program(x[i:i + 64]) for i in range(0, len(x), 64)]).numpy()


def torch_outputs(model: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return torch.cat([model(x[i:i + 64]) for i in range(0, len(x), 64)]).numpy()


def onnx_agreement(path: Path, model: torch.nn.Module, task, images: int = CHECK_IMAGES) -> dict:
    """An ONNX file (an int8 one, say) against the trained PyTorch model on validation images."""
    x = check_images(task, images)
    return agreement(torch_outputs(model.cpu().eval(), x), _onnx_outputs(Path(path), x))


def hand_over(folder: Path, model: torch.nn.Module, task, formats: Sequence[DeployFormat] = (),
              images: int = CHECK_IMAGES) -> dict:
    """Rewrite every deployable file in `folder` from the trained `model`, with the device
    `formats` its arch.json asks for (eas.deploy.formats); what each check found."""
    folder = Path(folder)
    model = model.cpu().eval().to(memory_format=torch.contiguous_format)
    x = check_images(task, images)
    expected = torch_outputs(model, x)
    writers = {"model.pt2": (lambda path: export_pt2_file(model, x[:2], path), _pt2_outputs)}
    if available("onnxruntime"):
        writers["model.onnx"] = (lambda path: export_onnx_file(model, x[:2], path), _onnx_outputs)
    for deploy_format in formats:
        writers[deploy_format.file] = (lambda path, f=deploy_format: f.write(model, x[:2], path), deploy_format.run)
        if deploy_format.int8_file:
            calibration = torch.from_numpy(calibration_images(task.train_x))  # training images, for int8 ranges
            writers[deploy_format.int8_file] = (
                lambda path, f=deploy_format, c=calibration: f.write_int8(model, c, path), deploy_format.run)
    checks = {}
    for name, (write, outputs) in writers.items():
        target = folder / name
        partial = target.with_suffix(".partial" + target.suffix)  # torch.export wants its suffix: model.partial.pt2
        try:
            write(partial)
            checks[name] = agreement(expected, outputs(partial, x))
            os.replace(partial, target)
        except Exception as error:  # an exporter or runtime that cannot take this model: say so, keep nothing old
            partial.unlink(missing_ok=True)
            target.unlink(missing_ok=True)
            checks[name] = {"removed": f"not rewritten with the trained weights: {failure(error)}"}
    if "model.onnx" not in writers and (folder / "model.onnx").exists():
        (folder / "model.onnx").unlink()
        checks["model.onnx"] = {"removed": "not rewritten with the trained weights: onnxruntime is not installed"}
    for name in STALE:
        if name not in writers and (folder / name).exists():
            (folder / name).unlink()
            checks[name] = {"removed": "made from the weights before this training; run `eas compress` again"}
    return checks


def record_preprocessing(folder: Path, task) -> dict:
    """arch.json gains the preprocessing the model was trained with (written aside, then renamed)."""
    path = Path(folder) / "arch.json"
    document = read_json(path)
    document["preprocessing"] = task.preprocessing()
    partial = path.with_name("arch.json.partial")
    partial.write_text(json.dumps(document, indent=2, default=str))
    os.replace(partial, path)
    return document["preprocessing"]


def finish_training(folder: Path, task) -> dict:
    """After `eas train`: every deployable file rewritten from the trained weights and checked,
    arch.json's preprocessing recorded, both in report.json; the report."""
    folder = Path(folder)
    _, model = load_trained(folder, task)
    report = read_json(folder / "report.json")
    report["deployed"] = hand_over(folder, model, task, stored_formats(read_json(folder / "arch.json")))
    report["preprocessing"] = record_preprocessing(folder, task)
    partial = folder / "report.json.partial"
    partial.write_text(json.dumps(report, indent=2))
    os.replace(partial, folder / "report.json")
    return report
