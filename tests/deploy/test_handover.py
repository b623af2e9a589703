"""What `eas train` hands over is what it trained: model.onnx and model.pt2 rewritten from the trained
weights and checked on validation images, the preprocessing recorded, model.py loading the weights
with torch alone."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from eas.data.datasets import load_dataset
from eas.deploy import handover
from tests.conftest import ROOT, run_eas

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(knee_export, tmp_path_factory):
    """The shared knee export, trained 3 epochs by the CLI, with a stale int8 file planted first."""
    folder = tmp_path_factory.mktemp("handover") / "knee"
    shutil.copytree(knee_export, folder)
    (folder / "model.int8.onnx").write_bytes((folder / "model.onnx").read_bytes())
    untrained = (folder / "model.onnx").read_bytes()
    result = run_eas("train", str(folder), "--data", "digits", "--epochs", "3", "--quiet", "--json")
    assert result.returncode == 0, result.stderr
    assert (folder / "model.onnx").read_bytes() != untrained
    return folder, json.loads(result.stdout)


def test_every_deployed_file_holds_the_trained_weights_and_was_checked(trained):
    folder, report = trained
    for name in ("model.onnx", "model.pt2"):
        check = report["deployed"][name]
        assert check["images"] > 100 and check["top1_agreement"] == 1.0 and check["max_abs_diff"] < 1e-4
    assert "removed" in report["deployed"]["model.int8.onnx"] and not (folder / "model.int8.onnx").exists()
    assert json.loads((folder / "report.json").read_text())["deployed"] == report["deployed"]


def raw_test_images():
    task = load_dataset("digits")
    return task.test_x.raw(slice(None)).numpy(), task.test_y.numpy()


def test_model_onnx_alone_with_the_recorded_preprocessing_scores_what_train_reported(trained):
    import onnxruntime

    folder, report = trained
    spec = json.loads((folder / "arch.json").read_text())["preprocessing"]
    assert spec == report["preprocessing"] and spec["channels"] == "grayscale"
    pixels, labels = raw_test_images()
    shape = (1, -1, 1, 1)
    x = (pixels * spec["pixel_scale"] - np.reshape(spec["mean"], shape)) / np.reshape(spec["std"], shape)
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    accuracy = float((session.run(None, {"input": x.astype(np.float32)})[0].argmax(1) == labels).mean())
    assert accuracy == pytest.approx(report["test_accuracy"], abs=1e-9)
    program = torch.export.load(str(folder / "model.pt2")).module()
    assert float((program(torch.from_numpy(x.astype(np.float32))).argmax(1).numpy() == labels).mean()) == \
        pytest.approx(report["test_accuracy"], abs=1e-9)


def test_model_py_loads_the_trained_weights_with_torch_alone(trained, tmp_path):
    folder, report = trained
    pixels, labels = raw_test_images()
    np.save(tmp_path / "pixels.npy", pixels)
    code = ("import sys, runpy; sys.modules['eas'] = None; sys.modules['safetensors'] = None\n"
            "import numpy as np\n"
            "m = runpy.run_path('model.py')\n"
            f"pixels = np.load({str(tmp_path / 'pixels.npy')!r})\n"
            "print(m['load_trained']()(m['preprocess'](pixels)).argmax(1).tolist())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    predicted = np.array(json.loads(out.stdout))
    assert float((predicted == labels).mean()) == pytest.approx(report["test_accuracy"], abs=1e-9)


def test_the_generated_model_py_is_lint_clean(trained):
    folder, _ = trained
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(ROOT / "pyproject.toml"),
                           str(folder / "model.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_file_that_cannot_be_rewritten_is_removed_with_its_reason(trained, tmp_path, monkeypatch):
    folder, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)

    def broken(model, example, path):
        raise RuntimeError("exporter cannot take this model")

    monkeypatch.setattr(handover, "export_onnx_file", broken)
    from eas.training.full import load_trained

    task = load_dataset("digits")
    _, model = load_trained(copy, task)
    checks = handover.hand_over(copy, model, task)
    assert checks["model.onnx"]["removed"].endswith("RuntimeError: exporter cannot take this model")
    assert not (copy / "model.onnx").exists() and not (copy / "model.partial.onnx").exists()
    assert checks["model.pt2"]["top1_agreement"] == 1.0


def test_export_makes_the_folder_above_out(small_study, tmp_path):
    root, env = small_study
    out = tmp_path / "models" / "deeper" / "knee"
    result = run_eas("export", "s", "--pick", "knee", "--out", str(out), env=env, cwd=root)
    assert result.returncode == 0, result.stderr
    assert (out / "arch.json").exists()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    refused = run_eas("export", "s", "--pick", "knee", "--out", str(blocked / "knee"), env=env, cwd=root)
    assert refused.returncode == 2 and "cannot make folder" in refused.stderr and "Traceback" not in refused.stderr


def test_a_pt2_file_takes_any_batch(trained):
    folder, _ = trained
    program = torch.export.load(str(Path(folder) / "model.pt2")).module()
    for batch in (1, 3, 64):
        assert program(torch.zeros(batch, 1, 8, 8)).shape == (batch, 10)


def test_a_log_gets_progress_lines_while_an_epoch_runs(knee_export, tmp_path, monkeypatch, caplog):
    from eas.training import full

    folder = tmp_path / "knee"
    shutil.copytree(knee_export, folder)
    monkeypatch.setattr(full, "LOG_SECONDS", 0.0)  # every step, instead of once a minute
    caplog.set_level("INFO", logger="eas")
    full.train_exported(folder, load_dataset("digits"), full.TrainPlan(epochs=1, batch_size=64), "cpu")
    lines = [line for line in caplog.messages if line.startswith("epoch 1/1: step ")]
    assert len(lines) >= 10 and "left in this epoch" in lines[0] and "loss" in lines[0]


@pytest.mark.parametrize("edit, fragment", [
    ({"mean": [0.1, 0.2, 0.3]}, "mean must be 1 finite number"),
    ({"std": [0.0]}, "std must be positive"),
    ({"std": [-1.0]}, "std must be positive"),
    ({"mean": [float("nan")]}, "mean must be 1 finite number"),
    ({"pixel_scale": float("inf")}, "pixel_scale must be a positive finite number"),
    ({"std": None}, "std must be 1 finite number"),
])
def test_model_py_refuses_preprocessing_it_cannot_apply(tmp_path, edit, fragment):
    """An edited arch.json must not turn images into junk: model.py checks its own preprocessing."""
    import runpy

    from eas.arch.reference import reference
    from eas.deploy.arch_files import standalone_source

    (tmp_path / "model.py").write_text(standalone_source(reference("mobilenet_v3_small@0.35"), (1, 8, 8), 10))
    spec = {"pixel_scale": 1 / 16, "mean": [0.3], "std": [0.4]}
    (tmp_path / "arch.json").write_text(json.dumps({"preprocessing": spec}))
    model = runpy.run_path(str(tmp_path / "model.py"))
    assert model["preprocess"](np.full((2, 1, 8, 8), 8, dtype=np.uint8)).shape == (2, 1, 8, 8)
    with pytest.raises(ValueError, match="expected images N x 1 x H x W"):
        model["preprocess"](np.zeros((2, 3, 8, 8), dtype=np.uint8))
    with pytest.raises(ValueError, match="NaN or infinite"):
        model["preprocess"](np.full((2, 1, 8, 8), np.nan))
    broken = {k: v for k, v in {**spec, **edit}.items() if v is not None}
    (tmp_path / "arch.json").write_text(json.dumps({"preprocessing": broken}))
    with pytest.raises(ValueError, match=fragment):
        model["preprocess"](np.zeros((2, 1, 8, 8), dtype=np.uint8))
