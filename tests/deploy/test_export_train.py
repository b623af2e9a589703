"""Export a trial of a real study and train it fully, through the CLI."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch

from tests.conftest import assert_user_error, run_eas

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study_root(small_study):
    return small_study


@pytest.fixture(scope="module")
def exported(study_root):
    root, env = study_root
    result = run_eas("export", "s", "--pick", "knee", "--out", str(root / "knee"), "--json", env=env, cwd=root)
    assert result.returncode == 0, result.stderr
    return root / "knee", json.loads(result.stdout)


def stored_trial(root, number):
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{root / 'studies' / 's.db'}")
    return study.trials[number]


def test_artifacts_match_the_study(study_root, exported):
    root, _ = study_root
    folder, document = exported
    assert {p.name for p in folder.iterdir()} >= {"arch.json", "model.py", "model.pt2", "model.onnx"}
    trial = stored_trial(root, document["provenance"]["trial"])
    metrics = trial.user_attrs["metrics"]
    assert document["genome"] == trial.user_attrs["genome"]
    assert document["checks"]["params"] == metrics["params"] and document["checks"]["macs"] == metrics["macs"]
    assert document["energy_source"] == "estimated" and document["task"]["input_shape"] == [1, 8, 8]
    assert document["provenance"]["versions"]["torch"] == torch.__version__

    program = torch.export.load(str(folder / "model.pt2"))
    params = sum(program.state_dict[name].numel() for name in program.graph_signature.parameters)
    assert params == document["checks"]["pt2_params"] == metrics["params"]


def test_standalone_model_builds_without_eas(study_root, exported):
    folder, document = exported
    code = ("import sys, runpy; sys.modules['eas'] = None\n"  # any `import eas` now fails
            "m = runpy.run_path('model.py')\n"
            "model = m['build_model']()\n"
            "print(sum(p.numel() for p in model.parameters()))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) == document["checks"]["params"]


def test_onnx_and_pytorch_agree(exported):
    import onnxruntime

    folder, document = exported
    assert document["checks"]["onnx_max_abs_diff"] < 1e-4
    program = torch.export.load(str(folder / "model.pt2")).module()
    x = torch.randn(2, 1, 8, 8)
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input": x.numpy()})[0]
    with torch.no_grad():
        assert np.abs(got - program(x).numpy()).max() < 1e-4


def tree_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def test_export_bad_input(study_root, exported, tmp_path):
    root, env = study_root
    folder, _ = exported
    before = tree_hash(folder)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{root / 'studies' / 's.db'}")
    infeasible = [t.number for t in study.trials if t.user_attrs.get("status") == "infeasible"]
    cases = [
        (["export", "nope", "--pick", "knee", "--out", str(tmp_path / "a")], "no study storage"),
        (["export", "s", "--trial", "99", "--out", str(tmp_path / "b")], "no trial 99"),
        (["export", "s", "--pick", "knee", "--out", str(folder)], "--force"),
        (["export", "s", "--pick", "best", "--out", str(tmp_path / "c")], "unknown pick"),
        (["export", "s", "--out", str(tmp_path / "d")], "exactly one of"),
        (["export", "s", "--pick", "knee", "--out", "/proc/eas-export"], "cannot write"),
        (["export", "s", "--pick", "knee", "--max-macs", "1", "--out", str(tmp_path / "e")], "within these limits"),
    ]
    if infeasible:
        cases.append((["export", "s", "--trial", str(infeasible[0]), "--out", str(tmp_path / "f")], "infeasible"))
    for args, fragment in cases:
        assert_user_error(run_eas(*args, env=env, cwd=root), fragment)
    assert tree_hash(folder) == before
    assert not list(tmp_path.iterdir())


def test_train_rejects_data_that_does_not_fit(exported, tmp_path):
    folder, _ = exported
    np.savez(tmp_path / "rgb.npz", x=np.zeros((30, 8, 8, 3), dtype=np.uint8), y=np.arange(30) % 10)
    np.savez(tmp_path / "three.npz", x=np.zeros((30, 8, 8), dtype=np.uint8), y=np.arange(30) % 3)
    assert_user_error(run_eas("train", str(folder), "--data", f"npz:{tmp_path / 'rgb.npz'}"), "channel")
    assert_user_error(run_eas("train", str(folder), "--data", f"npz:{tmp_path / 'three.npz'}"), "classes")
    assert_user_error(run_eas("train", str(tmp_path), "--data", "digits"), "arch.json")


def copy_arch(exported, target: Path) -> Path:
    target.mkdir()
    (target / "arch.json").write_bytes((exported[0] / "arch.json").read_bytes())
    return target


TRAIN = ["--data", "digits", "--epochs", "6", "--checkpoint-every", "4", "--quiet", "--json", "--target", "0.3"]


RECIPE = ["--augment", "auto", "--label-smoothing", "0.1", "--ema", "0.9"]


@pytest.mark.parametrize("recipe", [[], RECIPE], ids=["plain", "recipe"])
def test_train_reports_and_resumes_after_kill_9_with_the_same_result(exported, tmp_path, recipe):
    TRAIN = [*globals()["TRAIN"], *recipe]  # augmentation and the averaged weights resume exactly too
    straight = copy_arch(exported, tmp_path / "straight")
    result = run_eas("train", str(straight), *TRAIN)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for key in ("test_accuracy", "energy_kwh", "co2e_g", "flops_per_inference", "params",
                "accuracy_per_mmac", "accuracy_per_mparam", "time_to_target_s"):
        assert key in report
    assert report["energy_source"] == "estimated" and report["grid_gco2e_per_kwh"] == 475.0
    assert report["co2e_g"] == pytest.approx(report["energy_kwh"] * 475.0)
    assert report["epochs_run"] == 6 and (straight / "model.safetensors").exists()
    expected = {"augment": "shift", "label_smoothing": 0.1, "ema": 0.9} if recipe else \
        {"augment": "none", "label_smoothing": 0.0, "ema": 0.0}
    assert report["recipe"] == expected

    killed = copy_arch(exported, tmp_path / "killed")
    process = subprocess.Popen([sys.executable, "-m", "eas", "train", str(killed), *TRAIN],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = killed / "checkpoint" / "state.json"
        if state.exists() and json.loads(state.read_text())["progress"]["epoch"] >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "report.json").exists()
    resumed = run_eas("train", str(killed), *TRAIN)
    assert resumed.returncode == 0, resumed.stderr
    again = json.loads(resumed.stdout)
    # Same steps, same data order, same RNG: the same model to float tolerance.
    assert again["test_accuracy"] == pytest.approx(report["test_accuracy"], abs=1e-6)
    for a, b in zip(again["history"], report["history"], strict=True):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
    from safetensors.torch import load_file

    first, second = load_file(str(straight / "model.safetensors")), load_file(str(killed / "model.safetensors"))
    assert all(torch.allclose(first[k], second[k], atol=1e-5) for k in first)


def test_checkpoint_with_other_settings_is_refused(exported, tmp_path):
    folder = copy_arch(exported, tmp_path / "other")
    assert run_eas("train", str(folder), "--data", "digits", "--epochs", "1", "--quiet").returncode == 0
    assert_user_error(run_eas("train", str(folder), "--data", "digits", "--epochs", "1", "--lr", "0.1"), "--restart")
    assert not list(folder.glob("*.pkl")) and not list(folder.rglob("*.pt"))


def test_a_second_training_of_one_folder_is_refused_while_the_first_holds_it(exported, tmp_path):
    from eas.training.folder_lock import training_lock

    folder = copy_arch(exported, tmp_path / "held")
    before = sorted(p.name for p in folder.iterdir())
    with training_lock(folder):  # as a first `eas train` holds it (the kernel's lock, per open file)
        refused = run_eas("train", str(folder), "--data", "digits", "--epochs", "1", "--quiet")
    assert_user_error(refused, "is being trained by another process (pid")
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing trained, no lock file left
    assert run_eas("train", str(folder), "--data", "digits", "--epochs", "1", "--quiet").returncode == 0
    again = run_eas("export", "s", "--pick", "knee", "--out", str(folder), "--force", "--json",
                    env=study_root_env(exported), cwd=exported[0].parent)
    assert again.returncode == 0, again.stderr  # the lock file does not make the folder foreign


def study_root_env(exported):
    return {"EAS_STUDIES_DIR": str(exported[0].parent / "studies")}


def test_force_never_deletes_what_is_not_an_export(study_root, exported, tmp_path):
    root, env = study_root
    studies = sorted(p.name for p in (root / "studies").iterdir())
    assert_user_error(run_eas("export", "s", "--pick", "knee", "--out", "studies", "--force", env=env, cwd=root),
                      "previous EAS export")
    assert_user_error(run_eas("export", "s", "--pick", "knee", "--out", ".", "--force", env=env, cwd=root),
                      "current folder")
    assert_user_error(run_eas("export", "s", "--pick", "knee", "--out", "..", "--force", env=env,
                              cwd=root / "studies"), "current folder")
    assert sorted(p.name for p in (root / "studies").iterdir()) == studies
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "arch.json").write_text(json.dumps({"format": "eas-arch/1"}))
    (mixed / "notes.txt").write_text("mine")
    assert_user_error(run_eas("export", "s", "--pick", "knee", "--out", str(mixed), "--force", env=env, cwd=root),
                      "other files")
    assert (mixed / "notes.txt").read_text() == "mine"


def test_force_replaces_a_previous_export_only_once_the_new_one_is_complete(study_root, exported, tmp_path,
                                                                              monkeypatch):
    from eas.deploy import export as export_module
    from eas.study.reader import load_study

    root, env = study_root
    folder, document = exported
    copy = tmp_path / "again"
    assert run_eas("export", "s", "--pick", "smallest", "--out", str(copy), env=env, cwd=root).returncode == 0
    before = tree_hash(copy)
    study = load_study(f"sqlite:///{root / 'studies' / 's.db'}", "s")
    record = next(r for r in study.records if r.number == document["provenance"]["trial"])

    def broken_export(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(export_module, "_export_pt2", broken_export)
    with pytest.raises(RuntimeError):
        export_module.export_trial(record, study.settings, "s", copy, force=True, onnx=False)
    assert tree_hash(copy) == before  # the old export is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]  # nothing left aside
    monkeypatch.undo()
    export_module.export_trial(record, study.settings, "s", copy, force=True, onnx=False)
    assert json.loads((copy / "arch.json").read_text())["provenance"]["trial"] == record.number
