"""Formats small devices run: `eas export --format pte,ort` writes an ExecuTorch program and ONNX
Runtime's mobile format, each checked in its own runtime; `eas train` rewrites them from the trained
weights (and adds the int8 program), and they run where EAS is not installed."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from eas.data.datasets import load_dataset
from eas.lazy import available
from tests.conftest import ROOT, assert_user_error, run_eas

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not available("executorch"), reason="needs the executorch extra (dev installs it)")]


@pytest.fixture(scope="module")
def trained(small_study, tmp_path_factory):
    """The shared study's knee exported with both formats by the CLI, then trained 2 epochs."""
    root, env = small_study
    folder = tmp_path_factory.mktemp("formats") / "knee"
    exported = run_eas("export", "s", "--pick", "knee", "--out", str(folder), "--format", "pte,ort",
                       env=env, cwd=root)
    assert exported.returncode == 0, exported.stderr
    untrained = {name: (folder / name).read_bytes() for name in ("model.pte", "model.ort")}
    result = run_eas("train", str(folder), "--data", "digits", "--epochs", "2", "--quiet", "--json")
    assert result.returncode == 0, result.stderr
    return folder, exported.stdout, untrained, json.loads(result.stdout)


def test_export_writes_each_format_checked_in_its_own_runtime(trained):
    folder, printed, _, _ = trained
    document = json.loads((folder / "arch.json").read_text())
    assert document["formats"] == ["pte", "ort"]
    assert document["checks"]["pte_max_abs_diff"] < 1e-4 and document["checks"]["ort_max_abs_diff"] < 1e-4
    assert "model.pte (max |diff| vs PyTorch" in printed and "model.ort (max |diff|" in printed


def test_training_rewrites_every_format_and_adds_int8_checked_on_validation_images(trained):
    folder, _, untrained, report = trained
    deployed = report["deployed"]
    for name in ("model.pte", "model.ort"):
        assert (folder / name).read_bytes() != untrained[name]  # the trained weights, not the initial ones
        assert deployed[name]["top1_agreement"] == 1.0 and deployed[name]["max_abs_diff"] < 1e-4
    for name in ("model.int8.pte", "model.int8.ort"):
        int8 = deployed[name]
        assert int8["images"] > 100 and int8["top1_agreement"] >= 0.9 and 1e-6 < int8["max_abs_diff"] < 5, name
        assert (folder / name).exists()
    params = json.loads((folder / "arch.json").read_text())["checks"]["params"]
    saved = (folder / "model.pte").stat().st_size - (folder / "model.int8.pte").stat().st_size
    # one byte a weight instead of four; per-channel scales and the program's records take some back
    assert saved > params


RUN_WITHOUT_EAS = """
import sys, json, numpy as np
sys.modules["eas"] = None  # nothing of EAS may be needed
import onnxruntime
from executorch.runtime import Runtime
x = np.load(sys.argv[1])
def program(name):
    method = Runtime.get().load_program(name).load_method("forward")
    return lambda batch: np.concatenate([method.execute([__import__("torch").from_numpy(batch[i:i + 1])])[0].numpy()
                                         for i in range(len(batch))])
ort = onnxruntime.InferenceSession("model.ort", providers=["CPUExecutionProvider"])
outputs = {"model.ort": ort.run(None, {"input": x})[0], "model.pte": program("model.pte")(x),
           "model.int8.pte": program("model.int8.pte")(x)}
print(json.dumps({name: out.argmax(1).tolist() for name, out in outputs.items()}))
"""


def test_the_files_score_what_training_reported_without_eas(trained, tmp_path):
    folder, _, _, report = trained
    spec = report["preprocessing"]
    task = load_dataset("digits")
    pixels, labels = task.test_x.raw(slice(None)).numpy(), task.test_y.numpy()
    shape = (1, -1, 1, 1)
    x = (pixels * spec["pixel_scale"] - np.reshape(spec["mean"], shape)) / np.reshape(spec["std"], shape)
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    out = subprocess.run([sys.executable, "-c", RUN_WITHOUT_EAS, str(tmp_path / "x.npy")], cwd=folder,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    accuracy = {name: float((np.array(predicted) == labels).mean()) for name, predicted in
                json.loads(out.stdout.strip().splitlines()[-1]).items()}
    assert accuracy["model.ort"] == pytest.approx(report["test_accuracy"], abs=1e-9)
    assert accuracy["model.pte"] == pytest.approx(report["test_accuracy"], abs=1e-9)
    assert abs(accuracy["model.int8.pte"] - report["test_accuracy"]) < 0.05


def test_unknown_or_missing_formats_are_one_line_and_write_nothing(small_study, tmp_path):
    root, env = small_study
    out = tmp_path / "x"
    assert_user_error(run_eas("export", "s", "--pick", "knee", "--out", str(out), "--format", "tflite",
                              env=env, cwd=root), "choose from pte, ort")
    assert_user_error(run_eas("export", "s", "--pick", "knee", "--out", str(out), "--format", "ort,ort",
                              env=env, cwd=root), "twice")
    without = "import sys; sys.modules['executorch'] = None; from eas.cli import main; main()"
    missing = subprocess.run([sys.executable, "-c", without, "export", "s", "--pick", "knee", "--out", str(out),
                              "--format", "pte"], capture_output=True, text=True, cwd=root,
                             env={**os.environ, **env})
    assert_user_error(missing, "pip install 'eas[executorch]'")
    assert not out.exists()


def test_train_refuses_a_format_it_cannot_write_before_training(trained, tmp_path):
    folder, _, _, _ = trained
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(folder), str(copy)], check=True)
    document = json.loads((copy / "arch.json").read_text())
    (copy / "arch.json").write_text(json.dumps({**document, "formats": ["tflite"]}))
    before = {name: (copy / name).read_bytes() for name in ("model.pte", "report.json")}
    assert_user_error(run_eas("train", str(copy), "--data", "digits", "--epochs", "3", "--quiet", cwd=ROOT),
                      "'formats' must be a list of pte, ort")
    assert {name: (copy / name).read_bytes() for name in before} == before


def test_int8_compression_adds_the_int8_graph_in_onnx_runtimes_mobile_format(trained, tmp_path):
    folder, _, _, _ = trained
    copy = tmp_path / "knee"
    subprocess.run(["cp", "-r", str(folder), str(copy)], check=True)
    document = json.loads((copy / "arch.json").read_text())
    (copy / "arch.json").write_text(json.dumps({**document, "formats": ["ort"]}))  # ort alone: no .pte to rewrite
    result = run_eas("compress", str(copy), "--int8", "--out", str(tmp_path / "int8"), "--json")
    assert result.returncode == 0, result.stderr
    deployed = json.loads(result.stdout)["deployed"]
    assert deployed["model.ort"]["top1_agreement"] == 1.0
    # the int8 graph itself (as good as the int8 .onnx it came from), not the float one again
    int8, onnx_int8 = deployed["model.int8.ort"], deployed["model.int8.onnx"]
    assert abs(int8["top1_agreement"] - onnx_int8["top1_agreement"]) <= 0.02 and int8["max_abs_diff"] > 1e-3
    # (no size check: on a network this small the QDQ graph's scales outweigh what int8 weights save)
