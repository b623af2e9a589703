"""`eas compress` (int8, structured pruning) and distillation, on a trained export of a real study."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from eas.arch.builder import build
from eas.arch.genome import Arch
from eas.deploy.prune import inherit_weights, pruned_arch
from eas.training.step import DistillationLoss
from tests.conftest import assert_user_error, built_once, run_eas

ATTENTION_GENOME = ("stem_c16_k3_s1_hswish-ds_r2_k5_s2_c24_hswish-ir_r2_k3_s2_e4_c32_relu6"
                    "-la_r1_s1_c32_h4_f2_gelu-head_c64_f0_relu_d0")
PLAIN_GENOME = "stem_c16_k3_s1_relu-ir_r2_k3_s2_e3_c24_relu6-ds_r1_k3_s1_c40_hswish-head_c48_f0_relu_d0"


@pytest.fixture(scope="session")
def trained(knee_export, tmp_path_factory):
    """The knee of the shared digits study, exported and trained by the CLI once for all test
    processes (each trained it before: 45 s apiece); copy it before changing it."""
    def train(root: Path) -> None:
        shutil.copytree(knee_export, root / "knee")
        result = run_eas("train", str(root / "knee"), "--data", "digits", "--epochs", "12", "--quiet", "--json")
        assert result.returncode == 0, result.stderr
        (root / "training.json").write_text(result.stdout)

    root = built_once(tmp_path_factory, "compress-trained", train)
    return root / "knee", json.loads((root / "training.json").read_text())


def weight_bytes(path) -> int:
    import onnx
    from onnx import numpy_helper

    return sum(numpy_helper.to_array(init).nbytes for init in onnx.load(str(path)).graph.initializer)


@pytest.mark.slow
def test_int8_is_written_beside_fp32_and_measured_side_by_side(trained, tmp_path):
    import onnx
    import onnxruntime

    from eas.data.datasets import load_dataset

    folder, training = trained
    out = tmp_path / "int8"
    result = run_eas("compress", str(folder), "--int8", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == json.loads((out / "report.json").read_text())
    fp32, int8 = report["fp32"], report["int8"]
    assert int8["size_bytes"] == (out / "model.int8.onnx").stat().st_size
    # The weights take a quarter of the bytes (on a model this small the quantisation parameters
    # and the graph keep the whole file from shrinking: the exporter already folds BatchNorm).
    assert weight_bytes(out / "model.int8.onnx") < 0.5 * weight_bytes(out / "model.onnx")
    assert fp32["energy_source"] == int8["energy_source"] == "estimated"  # no counter on CI machines
    # fp32 in onnxruntime is the model `eas train` saved: same test accuracy as its report.
    assert fp32["test_accuracy"] == pytest.approx(training["test_accuracy"], abs=1e-9)
    # The int8 graph really holds 8-bit weights.
    graph = onnx.load(str(out / "model.int8.onnx")).graph
    assert any(init.data_type == onnx.TensorProto.INT8 for init in graph.initializer)
    assert sum(node.op_type == "DequantizeLinear" for node in graph.node) >= 3
    # Its accuracy, measured again here, is the one reported; and close to fp32 (digits: 360 test images).
    task = load_dataset("digits")
    session = onnxruntime.InferenceSession(str(out / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"input": task.test_x[:].numpy()})[0]
    assert (logits.argmax(1) == task.test_y.numpy()).mean() == pytest.approx(int8["test_accuracy"])
    assert abs(report["gain"]["accuracy_points"]) < 5
    derived = json.loads((out / "arch.json").read_text())["derived_from"]
    assert derived["folder"] == str(folder.resolve()) and derived["method"] == "int8"


@pytest.mark.slow
def test_show_follows_a_trial_to_its_export_and_compressed_models(small_study, trained, tmp_path):
    root, env = small_study
    folder = tmp_path / "knee"  # a copy: the compressed model is written beside it
    shutil.copytree(trained[0], folder)
    training = trained[1]
    result = run_eas("compress", str(folder), "--int8", "--json")  # default output: beside the export
    assert result.returncode == 0, result.stderr
    trial = json.loads((folder / "arch.json").read_text())["provenance"]["trial"]
    shown = run_eas("show", "s", "--trial", str(trial), "--exports", str(folder.parent), env=env, cwd=root)
    assert shown.returncode == 0, shown.stderr
    lineage = json.loads(shown.stdout)["descendants"]
    assert [(e["folder"], e["made_by"], e["from"], e["depth"]) for e in lineage] == [
        ("knee", "export", None, 0), ("knee-int8", "int8", "knee", 1)]
    assert lineage[0]["test_accuracy"] == pytest.approx(training["test_accuracy"])
    other = run_eas("show", "s", "--trial", str(1 if trial == 0 else 0), "--exports", str(folder.parent),
                    env=env, cwd=root)
    assert json.loads(other.stdout)["descendants"] == []


@pytest.mark.slow
def test_a_pruned_model_is_a_smaller_genome_whose_counts_eas_arch_show_confirms(trained, tmp_path):
    folder, _ = trained
    out = tmp_path / "pruned"
    result = run_eas("compress", str(folder), "--prune", "0.3", "--epochs", "2", "--out", str(out), "--json",
                     "--quiet")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    document = json.loads((out / "arch.json").read_text())
    assert document["genome"] == report["genome_after"] != report["genome_before"]
    shown = run_eas("arch", "show", document["genome"], "--input", "1x8x8", "--classes", "10", "--json")
    assert shown.returncode == 0, shown.stderr
    counted = json.loads(shown.stdout)
    assert (counted["macs"], counted["params"]) == (report["after"]["macs"], report["after"]["params"])
    assert report["after"]["params"] < report["before"]["params"]
    assert report["after"]["macs"] < report["before"]["macs"]
    # The weights left behind fit the pruned genome's own network.
    from safetensors.torch import load_file

    model = build(document["genome"], (1, 8, 8), 10)
    model.load_state_dict(load_file(str(out / "model.safetensors")))
    assert not (out / "checkpoint").exists()


def _silence_pruned_channels(old, new) -> None:
    """Make the channels pruning will remove output exactly zero (BatchNorm scale and shift 0),
    and scale the others by a seeded random amount so that they are the important ones."""
    generator = torch.Generator().manual_seed(0)
    new_layers = dict(new.named_modules())
    for name, module in old.named_modules():
        if isinstance(module, torch.nn.BatchNorm2d) and name in new_layers:
            kept = new_layers[name].num_features
            with torch.no_grad():
                module.weight.copy_(0.5 + torch.rand(module.num_features, generator=generator))
                module.running_var.copy_(0.5 + torch.rand(module.num_features, generator=generator))
                module.running_mean.normal_(generator=generator)
                module.bias.normal_(generator=generator)
                if kept < module.num_features:
                    module.weight[kept:] = 0
                    module.bias[kept:] = 0


@pytest.mark.parametrize("genome", [ATTENTION_GENOME, PLAIN_GENOME])
def test_pruning_removes_the_unimportant_channels_and_keeps_the_function(genome):
    arch = Arch.decode(genome)
    old = build(arch, (1, 16, 16), 10).eval()
    assert torch.equal(_pruned_output(old, arch, 0.0), _pruned_output(old, arch, None))
    narrower = pruned_arch(arch, 0.4)
    new = build(narrower, (1, 16, 16), 10).eval()
    _silence_pruned_channels(old, new)
    x = torch.randn(8, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    inherit_weights(old, new, arch)
    with torch.no_grad():
        assert torch.allclose(new(x), old(x), atol=1e-5)
    assert sum(p.numel() for p in new.parameters()) < sum(p.numel() for p in old.parameters())
    widths = [s.width for s in narrower.stages]
    if "la_" in genome:  # the stage feeding attention keeps its width; attention keeps its own
        assert widths[1:] == [32, 32] and widths[0] == 14
    else:
        assert widths == [14, 24] and narrower.head.width == 29


def _pruned_output(model, arch, ratio):
    x = torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(2))
    if ratio is None:
        with torch.no_grad():
            return model(x)
    new = build(pruned_arch(arch, ratio), (1, 16, 16), 10).eval()
    inherit_weights(model, new, arch)
    with torch.no_grad():
        return new(x)


def test_distillation_loss_pulls_the_student_toward_the_teacher():
    teacher = torch.nn.Linear(4, 3)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    only_teacher = DistillationLoss(teacher, alpha=1.0, temperature=4.0)
    with torch.no_grad():
        assert only_teacher(teacher(x), y, x).item() == pytest.approx(0.0, abs=1e-6)
    student = torch.zeros(16, 3, requires_grad=True)
    only_teacher(student, y, x).backward()
    with torch.no_grad():  # a small step along the gradient moves the student's outputs toward the teacher's
        target = torch.softmax(teacher(x) / 4.0, 1)
        before = (torch.softmax(student / 4.0, 1) - target).abs().sum()
        after = (torch.softmax((student - 0.5 * student.grad) / 4.0, 1) - target).abs().sum()
    assert after < before


@pytest.mark.slow
def test_distillation_reports_the_teacher_and_refuses_a_teacher_of_another_task(trained, tmp_path):
    folder, training = trained
    student = tmp_path / "student"
    shutil.copytree(folder, student, ignore=shutil.ignore_patterns("checkpoint*", "*.safetensors", "report.json"))
    result = run_eas("train", str(student), "--data", "digits", "--epochs", "2", "--teacher", str(folder),
                     "--quiet", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["teacher"]["folder"] == str(folder.resolve()) == report["plan"]["teacher"]
    assert report["teacher"]["test_accuracy"] == pytest.approx(training["test_accuracy"])

    other = tmp_path / "five-classes"
    shutil.copytree(folder, other)
    document = json.loads((other / "arch.json").read_text())
    document["task"]["num_classes"] = 5
    (other / "arch.json").write_text(json.dumps(document))
    before = sorted(p.name for p in student.iterdir())
    assert_user_error(run_eas("train", str(student), "--data", "digits", "--teacher", str(other)),
                      "number of classes 5")
    assert sorted(p.name for p in student.iterdir()) == before


@pytest.mark.slow
def test_compress_bad_input_is_one_line_and_writes_nothing(trained, tmp_path):
    folder, _ = trained
    untrained = tmp_path / "untrained"
    shutil.copytree(folder, untrained, ignore=shutil.ignore_patterns("checkpoint*", "*.safetensors", "report.json"))
    out = tmp_path / "out"
    cases = [
        (["compress", str(tmp_path), "--int8", "--out", str(out)], "holds no arch.json"),
        (["compress", str(untrained), "--int8", "--out", str(out)], "no trained weights"),
        (["compress", str(folder), "--prune", "1.5", "--out", str(out)], "--prune must be a fraction"),
        (["compress", str(folder), "--prune", "0", "--out", str(out)], "--prune must be a fraction"),
        (["compress", str(folder), "--int8", "--prune", "0.3", "--out", str(out)], "exactly one of"),
        (["compress", str(folder), "--out", str(out)], "exactly one of"),
        (["compress", str(folder), "--int8", "--out", str(folder)], "overlaps the export it compresses"),
        (["train", str(folder), "--data", "digits", "--nproc", "0"], "--nproc must be"),
        (["train", str(folder), "--data", "digits", "--nproc", "2", "--nnodes", "2"], "--rdzv-endpoint"),
        (["train", str(folder), "--data", "digits", "--nproc", "2", "--rdzv-endpoint", "nohost"], "HOST:PORT"),
    ]
    listing = sorted(p.name for p in folder.iterdir())
    for args, message in cases:
        assert_user_error(run_eas(*args), message)
        assert not out.exists()
    assert sorted(p.name for p in folder.iterdir()) == listing
    assert np.isfinite(json.loads((folder / "report.json").read_text())["test_accuracy"])
