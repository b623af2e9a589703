"""Bad input of every kind: one line on stderr, exit code 2, never a traceback, nothing stored
touched; and junk that used to be accepted silently is refused."""

import gzip
import io
import json
import os
import shutil
import subprocess
import zipfile

import numpy as np
import pytest
from PIL import Image

from eas.data.datasets import load_dataset
from eas.errors import UserError
from tests.conftest import ROOT, assert_user_error, run_eas

SEARCH = ["search", "--space", "tiny", "--data", "digits", "--quiet"]
GENOME = "stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0"


@pytest.mark.parametrize("args, fragment", [
    ([*SEARCH, "--budget", "1m", "--seed", "-1"], "--seed"),
    ([*SEARCH, "--budget", "1m", "--epochs", "inf"], "epochs"),
    ([*SEARCH, "--budget", "1m", "--lr", "nan"], "learning rate"),
    ([*SEARCH, "--budget", "1m", "--batch-size", "1"], "BatchNorm"),
    ([*SEARCH, "--budget", "9" * 400 + "s"], "--budget"),
    ([*SEARCH, "--budget", "99999h"], "at most a year"),
    ([*SEARCH, "--budget", "1m", "--max-steps", "-1"], "max steps"),
    (["evaluate", GENOME, "--data", "digits", "--max-steps", "0"], "max steps"),
    (["evaluate", GENOME, "--data", "digits", "--resolution", "0"], "--resolution"),
    (["arch", "show", GENOME, "--input", "3x100000x100000"], "out of range"),
    (["arch", "show", GENOME, "--input", "3x4000x4000"], "too large to build"),
    (["arch", "show", GENOME, "--classes", "10000000000"], "--classes"),
    (["arch", "show", "stem_c8192_k7_s1_relu-ir_r32_k7_s1_e16_c8192_se_relu-head_c8192_f8192_relu_d0",
      "--input", "1x28x28", "--classes", "10"], "too large to build"),
    (["train", ".", "--data", "digits", "--batch-size", "1"], "BatchNorm"),
    (["train", ".", "--data", "digits", "--seed", "-3"], "--seed"),
    (["train", ".", "--data", "digits", "--nproc", "64"], "CPU cores"),
    ([*SEARCH, "--budget", ""], "--budget is empty"),
    ([*SEARCH, "--budget", "1m", "--study", ""], "invalid study name"),
    ([*SEARCH, "--budget", "1m", "--meter", "bogus"], "unknown energy meter"),
    ([*SEARCH, "--budget", "1m", "--meter", "nvml"], "NVML"),
    ([*SEARCH, "--budget", "1m", "--runtime", "bogus"], "unknown runtime"),
    ([*SEARCH, "--budget", "1m", "--runtime-threads", "0"], "--runtime-threads"),
    ([*SEARCH, "--budget", "1m", "--runtime-batch", "1"], "--runtime-batch"),
])
@pytest.mark.slow
def test_cli_bad_values(tmp_path, args, fragment):
    assert_user_error(run_eas(*args, cwd=tmp_path, env={"EAS_STUDIES_DIR": str(tmp_path / "studies")}), fragment)
    assert not (tmp_path / "studies").exists()


def npz(tmp_path, name, x, y):
    path = tmp_path / f"{name}.npz"
    np.savez(path, x=x, y=y)
    return f"npz:{path}"


@pytest.mark.parametrize("name, x, y, fragment", [
    ("negative", np.zeros((40, 8, 8), np.uint8), np.r_[[-1], np.arange(39) % 3], "class indices"),
    ("empty", np.zeros((0, 8, 8), np.uint8), np.zeros(0, np.int64), "at least 10 samples"),
    ("strings", np.zeros((40, 8, 8), np.uint8), np.array(["cat", "dog"] * 20), "integers"),
    ("two", np.zeros((2, 8, 8), np.uint8), np.array([0, 1]), "at least 10 samples"),
    ("huge-label", np.zeros((40, 8, 8), np.uint8), np.r_[[10**8], np.arange(39) % 3], "class indices"),
    ("fractional", np.zeros((40, 8, 8), np.uint8), np.arange(40) % 3 + 0.5, "whole numbers"),
    ("giant-image", np.zeros((20, 1, 5000, 1), np.uint8), np.arange(20) % 2, "out of range"),
    ("nan-pixels", np.full((40, 8, 8), np.nan, np.float32), np.arange(40) % 3, "finite"),
    ("inf-pixels", np.r_[np.zeros((39, 8, 8)), np.full((1, 8, 8), np.inf)], np.arange(40) % 3, "finite"),
    ("huge-pixels", np.full((40, 8, 8), 1e30), np.arange(40) % 3, "finite"),
])
@pytest.mark.slow
def test_npz_that_cannot_be_a_dataset(tmp_path, name, x, y, fragment):
    spec = npz(tmp_path, name, x, y)
    with pytest.raises(UserError, match=fragment):
        load_dataset(spec)
    assert_user_error(run_eas("evaluate", GENOME, "--data", spec, "--max-steps", "1", cwd=tmp_path), fragment)


def test_whole_float_labels_are_accepted(tmp_path):
    task = load_dataset(npz(tmp_path, "floats", np.random.rand(40, 8, 8), (np.arange(40) % 3).astype(float)))
    assert task.num_classes == 3


def test_an_image_decompression_bomb_is_never_decoded(tmp_path, caplog):
    for label in ("a", "b"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(6):
            Image.new("L", (8, 8)).save(tmp_path / "images" / label / f"ok{i}.png")
    bomb = io.BytesIO()
    Image.new("1", (20000, 20000)).save(bomb, format="PNG")  # ~50 kB that decode to 400 Mpixel
    (tmp_path / "images" / "a" / "bomb.png").write_bytes(bomb.getvalue())
    with pytest.raises(UserError, match="bomb.png"):
        load_dataset(f"imagefolder:{tmp_path / 'images'}", strict=True)
    task = load_dataset(f"imagefolder:{tmp_path / 'images'}")  # skipped, and said so
    assert len(task.train_y) + len(task.val_y) + len(task.test_y) == 12
    assert "skipped 1 files" in caplog.text


@pytest.mark.slow
def test_arch_json_with_a_bad_class_count(tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    document = {"format": "eas-arch/1", "genome": GENOME, "task": {"input_shape": [1, 8, 8], "num_classes": "ten"}}
    (folder / "arch.json").write_text(json.dumps(document))
    assert_user_error(run_eas("train", str(folder), "--data", "digits", cwd=tmp_path), "num_classes")
    document["task"]["num_classes"] = 10**10
    (folder / "arch.json").write_text(json.dumps(document))
    assert_user_error(run_eas("train", str(folder), "--data", "digits", cwd=tmp_path), "num_classes")


def test_fashion_mnist_reader_is_not_fooled_by_a_short_file(tmp_path, monkeypatch):
    """A truncated gzip is a clear error (the reader stays one line on bad files)."""
    from eas.data import datasets

    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"\x00" * 10)[:15])
    with pytest.raises(UserError):
        datasets._read_idx(path, 16)


TINY_SPACE = (ROOT / "eas" / "arch" / "search_spaces" / "tiny.yaml").read_text()


@pytest.mark.parametrize("name, content, fragment", [
    ("model.onnx", b"\x08\x07\x12\x04\xff\xfe\x00\x01" * 300, "not a text"),
    ("bomb.yaml", b'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
                  b'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n', "aliases"),
    ("recursive.yaml", b"a: &a [*a]\n", "aliases"),
    ("typo.yaml", (TINY_SPACE + "trian:\n  lr: [0.01]\n").encode(), "trian: unknown field"),
    ("unknown.yaml", (TINY_SPACE + "colour: blue\n").encode(), "colour: unknown field"),
    ("bool.yaml", TINY_SPACE.replace("width: [8, 16]", "width: true", 1).encode(), "true/false"),
    ("many.yaml", TINY_SPACE.replace("width: [8, 16]", "width: [" + ", ".join(map(str, range(8, 8 + 8 * 5000, 8)))
                                     + "]", 1).encode(), "at most 256 choices"),
    ("huge.yaml", b"#" * (2 << 20), "larger than"),
])
def test_space_files_that_are_refused(tmp_path, name, content, fragment):
    """Binary files, alias bombs, recursive aliases, generated choice lists and typos: one line."""
    from eas.arch.space import load_space

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError, match=fragment):
        load_space(path)


def _tree(folder):
    """Every file under `folder` with its bytes: 'untouched' means equal before and after."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("where", ["itself", "parent", "inside"])
def test_compress_never_writes_over_or_around_its_source(knee_export, tmp_path, where):
    source = tmp_path / "models" / "knee"
    shutil.copytree(knee_export, source)
    (tmp_path / "models" / "notes.txt").write_text("mine")
    before, notes = _tree(source), _tree(tmp_path / "models")
    out = {"itself": source, "parent": source.parent, "inside": source / "int8"}[where]
    result = run_eas("compress", str(source), "--int8", "--out", str(out), "--force", cwd=tmp_path)
    assert_user_error(result, "overlaps the export it compresses")
    assert _tree(source) == before and _tree(tmp_path / "models") == notes


@pytest.mark.slow
def test_compress_force_replaces_only_an_earlier_output_of_the_same_source(knee_export, tmp_path):
    source, other = tmp_path / "knee", tmp_path / "other-export"
    shutil.copytree(knee_export, source)
    shutil.copytree(knee_export, other)  # an export, but not compressed from `source`
    before = _tree(other)
    assert_user_error(run_eas("compress", str(source), "--int8", "--out", str(other), "--force", cwd=tmp_path),
                      "an earlier compressed model of")
    assert _tree(other) == before


@pytest.mark.slow
@pytest.mark.parametrize("out", ["", "."])
def test_export_out_must_name_a_folder_to_write(small_study, out):
    root, env = small_study
    assert_user_error(run_eas("export", "s", "--pick", "knee", "--out", out, env=env, cwd=root),
                      "--out must name a folder")


def test_a_second_export_to_the_same_new_folder_does_not_replace_the_first(tmp_path):
    from eas.deploy.export import replace_folder

    out, work = tmp_path / "knee", tmp_path / ".knee.tmp-1-x"
    out.mkdir()
    (out / "arch.json").write_text("first")  # the other export finished first
    work.mkdir()
    (work / "arch.json").write_text("second")
    with pytest.raises(UserError, match="written by someone else meanwhile"):
        replace_folder(work, out, force=False)
    assert (out / "arch.json").read_text() == "first"


def test_scratch_folders_of_a_killed_export_are_cleaned_up(tmp_path, monkeypatch):
    from eas.deploy.arch_files import ARCH_FORMAT
    from eas.deploy.export import prepare_output

    monkeypatch.chdir(tmp_path)
    dead = 2**22 + 12345  # above Linux's default pid_max: no such process
    half_written = tmp_path / f".knee.tmp-{dead}-abc"
    half_written.mkdir()
    (half_written / "model.py").write_text("half")
    moved_aside = tmp_path / f".knee.previous-{dead}-def"  # killed between the two renames
    moved_aside.mkdir()
    (moved_aside / "arch.json").write_text(json.dumps({"format": ARCH_FORMAT, "genome": "previous"}))
    own = tmp_path / f".knee.tmp-{os.getpid()}-ghi"  # a live process's work: left alone
    own.mkdir()
    prepare_output(tmp_path / "knee", force=True)
    assert not half_written.exists() and not moved_aside.exists() and own.exists()
    assert json.loads((tmp_path / "knee" / "arch.json").read_text())["genome"] == "previous"


@pytest.mark.slow
def test_junk_numbers_in_a_shared_study_make_broken_trials(tmp_path):
    """Plausible-looking junk that anyone with write access can plant: 150% accuracy, -500,
    1e308, negative MACs, an accuracy outside its own interval, a start time that is no date.
    Each trial is listed as broken; `eas show` and `eas export --pick most-accurate` use the
    real ones."""
    import sqlite3

    from eas.study import schema
    from tests.study_factory import make_study, plant

    url = f"sqlite:///{tmp_path / 'studies' / 'shared.db'}"
    (tmp_path / "studies").mkdir()
    study = make_study(url, "shared", trials=4)
    real = max(t.user_attrs[schema.METRICS]["accuracy"] for t in study.trials if t.number != 1)  # 1: its date goes
    genome = study.trials[0].user_attrs[schema.GENOME]
    base = dict(study.trials[0].user_attrs[schema.METRICS])
    for junk in ({"accuracy": 1.5}, {"accuracy": -500.0}, {"accuracy": 1e308}, {"macs": -1000},
                 {"accuracy": 0.99, "accuracy_low": 0.2, "accuracy_high": 0.3}):
        plant(study, genome, {**base, **junk})
    connection = sqlite3.connect(tmp_path / "studies" / "shared.db")
    with connection:
        connection.execute("UPDATE trials SET datetime_start = 'yesterday-ish' WHERE number = 1")
    connection.close()
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    shown = run_eas("show", "shared", "--json", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    broken = {b["trial"]: b["reason"] for b in document["broken"]}
    assert set(broken) == {1, 4, 5, 6, 7, 8}, broken
    assert "out of range" in broken[4] and "outside its interval" in broken[8] and "not a date" in broken[1]
    assert all(row["accuracy"] <= 1.0 for row in document["pareto"])
    assert run_eas("show", "shared", "--trial", "1", env=env, cwd=tmp_path).returncode == 0
    exported = run_eas("export", "shared", "--pick", "most-accurate", "--out", str(tmp_path / "best"), "--json",
                       env=env, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    picked = json.loads((tmp_path / "best" / "arch.json").read_text())["metrics"]["accuracy"]
    assert picked == pytest.approx(real)


@pytest.mark.parametrize("field, value", [("objectives", 7), ("objectives", ["accuracy", "bogus"]),
                                          ("space", "mobile"), ("constraints", {"max_macs": "lots"})])
@pytest.mark.slow
def test_a_study_with_malformed_settings_is_listed_as_such_and_refused(tmp_path, field, value):
    from eas.study import schema
    from tests.study_factory import make_study

    (tmp_path / "studies").mkdir()
    good = make_study(f"sqlite:///{tmp_path / 'studies' / 'good.db'}", "good", trials=2)
    bad = make_study(f"sqlite:///{tmp_path / 'studies' / 'bad.db'}", "bad", trials=2)
    bad.set_user_attr(schema.SETTINGS, {**bad.user_attrs[schema.SETTINGS], field: value})
    good.set_user_attr(schema.VERIFICATION, [{"of": "three", "members": [1]}, 5])  # junk, not shown
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    listed = run_eas("studies", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    states = {row["study"]: row["state"] for row in json.loads(listed.stdout)}
    assert states["bad"] == "malformed settings" and states["good"] != "malformed settings"
    export = ["export", "bad", "--pick", "knee", "--out", str(tmp_path / "x")]
    for command in (["show", "bad"], ["show", "bad", "--json"], export):
        assert_user_error(run_eas(*command, env=env, cwd=tmp_path), "malformed EAS settings")
    shown = run_eas("show", "good", env=env, cwd=tmp_path)
    assert shown.returncode == 0 and "verified" not in shown.stdout, shown.stderr


@pytest.fixture(scope="module")
def trained_copy(knee_export, tmp_path_factory):
    """The shared knee, trained 2 epochs on digits by the CLI (its checkpoint kept)."""
    folder = tmp_path_factory.mktemp("bad-checkpoints") / "knee"
    shutil.copytree(knee_export, folder)
    result = run_eas("train", str(folder), "--data", "digits", "--epochs", "2", "--quiet")
    assert result.returncode == 0, result.stderr
    return folder


def _edit_state(folder, change) -> None:
    path = folder / "checkpoint" / "state.json"
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state))


@pytest.mark.slow
@pytest.mark.parametrize("case, fragment", [
    ("scheduler-int", "checkpoint"), ("rng-wrong-type", "checkpoint"), ("progress-types", "progress: epoch"),
    ("best-missing", "best.safetensors"), ("other-data", "trains on data digits"),
    ("other-shape", "channels x height x width"), ("arch-training-list", "training"), ("arch-folder", "not a file"),
    ("teacher-garbled", "does not hold this architecture's weights"),
    ("teacher-pickle", "does not hold this architecture's weights"),
])
def test_hand_edited_export_folders_and_checkpoints_are_refused(trained_copy, tmp_path, case, fragment):
    """Every file `eas train` reads back is input: one line, nothing trained, nothing rewritten."""
    import pickle

    from safetensors.torch import save_file

    folder = tmp_path / "knee"
    shutil.copytree(trained_copy, folder)
    data, extra = "digits", []
    if case == "scheduler-int":
        _edit_state(folder, lambda s: s.update(scheduler=7))
    elif case == "rng-wrong-type":
        import torch
        tensors = {"rng.torch": torch.zeros(3, dtype=torch.float64)}
        save_file(tensors, str(folder / "checkpoint" / "optimizer.safetensors"))
    elif case == "progress-types":
        _edit_state(folder, lambda s: s["progress"].update(epoch="two"))
    elif case == "best-missing":
        (folder / "best.safetensors").unlink()
    elif case == "other-data":
        data = npz(tmp_path, "same-shape", np.zeros((40, 8, 8), np.uint8), np.arange(40) % 10)
    elif case == "other-shape":
        data = npz(tmp_path, "bigger", np.zeros((40, 16, 16), np.uint8), np.arange(40) % 10)
    elif case == "arch-training-list":
        document = json.loads((folder / "arch.json").read_text())
        (folder / "arch.json").write_text(json.dumps({**document, "training": [0.1]}))
    elif case == "arch-folder":
        (folder / "arch.json").unlink()
        (folder / "arch.json").mkdir()
    else:
        teacher = tmp_path / "teacher"
        shutil.copytree(trained_copy, teacher)
        weights = teacher / "model.safetensors"
        if case == "teacher-garbled":
            weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbled" + bytes(range(256)))
        else:
            weights.write_bytes(pickle.dumps({"weight": [1.0, 2.0]}))
        extra = ["--teacher", str(teacher), "--restart"]
    before = _tree(folder) if folder.joinpath("arch.json").is_file() else None
    result = run_eas("train", str(folder), "--data", data, "--epochs", "2", "--quiet", *extra, cwd=tmp_path)
    assert_user_error(result, fragment)
    if before is not None:
        assert _tree(folder) == before


@pytest.mark.slow
@pytest.mark.parametrize("method", ["--int8", "--prune"])
def test_compress_of_garbled_or_pickled_weights_is_one_line(trained_copy, tmp_path, method):
    import pickle

    folder = tmp_path / "knee"
    shutil.copytree(trained_copy, folder)
    (folder / "model.safetensors").write_bytes(pickle.dumps({"weight": [1.0]}))
    args = [method] if method == "--int8" else [method, "0.5"]
    assert_user_error(run_eas("compress", str(folder), *args, "--data", "digits", cwd=tmp_path),
                      "does not hold this architecture's weights")


@pytest.mark.slow
def test_compress_of_the_current_folder_names_its_output_beside_it(knee_export, tmp_path):
    folder = tmp_path / "knee"
    shutil.copytree(knee_export, folder)
    assert_user_error(run_eas("compress", ".", "--int8", "--data", "digits", cwd=folder), "no trained weights")


def test_an_npz_whose_header_claims_more_than_it_holds_is_refused_before_allocating(tmp_path):
    """A header claiming 1e11 values would have numpy allocate 373 GiB; the file holds 1 KiB."""
    path = tmp_path / "liar.npz"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (10**11,)})
    labels = io.BytesIO()
    np.save(labels, np.arange(40) % 3)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(1024))
        archive.writestr("y.npy", labels.getvalue())
    with pytest.raises(UserError, match="claims 100,000,000,000 values"):
        load_dataset(f"npz:{path}")


def _cifar_batch(folder, name, data, labels):
    import pickle

    with open(folder / name, "wb") as handle:
        pickle.dump({b"data": data, b"labels": labels}, handle, protocol=2)


@pytest.mark.parametrize("case, fragment", [
    ("wrong-shape", "uint8 images of shape"), ("label-minus-one", "class indices"), ("label-1e12", "class indices"),
    ("string-data", "uint8 images"), ("string-labels", "integers"), ("lengths-differ", "one label per image"),
])
def test_cifar_batches_that_cannot_be_data_are_refused(tmp_path, case, fragment):
    from tests.data.test_data import write_cifar10

    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10(folder)
    images, labels = np.zeros((20, 3072), np.uint8), list(range(10)) * 2
    if case == "wrong-shape":
        images = np.zeros((20, 1000), np.uint8)
    elif case == "label-minus-one":
        labels[0] = -1
    elif case == "label-1e12":
        labels[0] = 10**12
    elif case == "string-data":
        images = "not an array"
    elif case == "string-labels":
        labels = ["cat"] * 20
    else:
        labels = labels[:15]
    _cifar_batch(folder, "data_batch_3", images, labels)
    with pytest.raises(UserError, match=fragment):
        load_dataset(f"cifar10:{folder}")


@pytest.fixture
def immutable():
    """chattr +i, undone after the test (root can write anything read-only by permission bits)."""
    marked = []

    def mark(path):
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("chattr +i is not available on this file system")
        marked.append(path)

    yield mark
    for path in reversed(marked):
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


@pytest.mark.slow
def test_a_read_only_study_file_is_refused_in_one_line(small_study, tmp_path, immutable):
    root, _ = small_study
    (tmp_path / "studies").mkdir()
    shutil.copy(root / "studies" / "s.db", tmp_path / "studies" / "s.db")
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    immutable(tmp_path / "studies" / "s.db")
    before = (tmp_path / "studies" / "s.db").read_bytes()
    search = ["search", "--space", "tiny", "--data", "digits", "--epochs", "2", "--trials", "1", "--study", "s",
              "--quiet", "--max-macs", "700k", "--sampler", "random", "--rungs", "1"]
    for command in (search, ["resume", "s", "--trials", "1"]):
        assert_user_error(run_eas(*command, env=env, cwd=tmp_path), "cannot write", "read-only")
    assert (tmp_path / "studies" / "s.db").read_bytes() == before


def test_a_read_only_export_folder_is_refused_in_one_line(knee_export, tmp_path, immutable):
    folder = tmp_path / "knee"
    shutil.copytree(knee_export, folder)
    immutable(folder)
    assert_user_error(run_eas("train", str(folder), "--data", "digits", "--epochs", "1", cwd=tmp_path),
                      "cannot write", "read-only")


@pytest.mark.slow
def test_an_attribute_that_is_not_json_is_a_broken_trial_and_a_clear_refusal_to_join(tmp_path):
    """Optuna itself cannot load a study with such an attribute: `eas show` marks the trial
    broken; `eas worker` and a resumed `eas search` refuse in one line instead of a traceback."""
    import sqlite3

    from tests.study_factory import make_study

    (tmp_path / "studies").mkdir()
    make_study(f"sqlite:///{tmp_path / 'studies' / 'j.db'}", "j", trials=3)
    connection = sqlite3.connect(tmp_path / "studies" / "j.db")
    with connection:
        connection.execute("UPDATE trial_user_attributes SET value_json = '{not json' WHERE key = 'metrics' AND "
                           "trial_id = (SELECT trial_id FROM trials WHERE number = 2)")
    connection.close()
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    shown = run_eas("show", "j", "--json", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["broken"] == [{"trial": 2, "reason": "stored metrics is not JSON"}]
    assert_user_error(run_eas("worker", "--study", "j", "--trials", "1", env=env, cwd=tmp_path),
                      "not JSON", "trial 2: metrics")


def _digest(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_garbled_date_is_a_broken_trial_for_show_and_a_clear_refusal_to_join(tmp_path):
    import sqlite3

    from tests.study_factory import make_study

    (tmp_path / "studies").mkdir()
    db = tmp_path / "studies" / "d.db"
    make_study(f"sqlite:///{db}", "d", trials=3)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE trials SET datetime_start = 'garbled' WHERE number = 1")
        connection.execute("UPDATE trials SET datetime_complete = '2026-13-45 99:99' WHERE number = 2")
    before = _digest(db)
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    shown = run_eas("show", "d", env=env, cwd=tmp_path)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "2 broken" in shown.stdout and "footprint" in shown.stdout
    assert_user_error(run_eas("worker", "--study", "d", "--trials", "1", env=env, cwd=tmp_path),
                      "dates that are not dates", "trial 1")
    assert _digest(db) == before


def test_cifar_data_that_names_a_file_is_one_line(tmp_path):
    (tmp_path / "plain").write_text("x")
    assert_user_error(run_eas("evaluate", GENOME, "--data", f"cifar10:{tmp_path / 'plain'}", cwd=tmp_path),
                      "is not a folder")


def test_compress_of_an_export_that_does_not_say_its_data_asks_for_it(knee_export, tmp_path):
    folder = tmp_path / "nodata"
    shutil.copytree(knee_export, folder)
    document = json.loads((folder / "arch.json").read_text())
    del document["task"]["data"]
    (folder / "arch.json").write_text(json.dumps(document))
    assert_user_error(run_eas("compress", str(folder), "--int8", cwd=tmp_path), "give --data")
    assert not (tmp_path / "nodata-int8").exists()


def test_a_backup_onto_a_file_the_study_itself_or_an_unwritable_place_is_one_line(small_study, tmp_path):
    root, env = small_study
    study = root / "studies" / "s.db"
    before = _digest(study)
    plain = tmp_path / "plain"
    plain.write_text("keep me")
    assert_user_error(run_eas("studies", "--backup", str(plain), env=env, cwd=root), "is not a folder")
    assert_user_error(run_eas("studies", "--backup", str(root / "studies"), env=env, cwd=root), "exists")
    assert_user_error(run_eas("studies", "--backup", "/dev/full", env=env, cwd=root), "is not a folder")
    assert_user_error(run_eas("studies", "--backup", str(plain / "below"), env=env, cwd=root), "cannot back up")
    assert plain.read_text() == "keep me" and _digest(study) == before


def test_supernet_train_out_a_file_is_one_line(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("keep me")
    assert_user_error(run_eas("supernet", "train", "--space", "tiny", "--data", "digits", "--steps", "2", "--out",
                              str(plain), cwd=tmp_path), "is a file")
    assert plain.read_text() == "keep me"


def test_junk_that_used_to_be_accepted_is_refused():
    """Round 4 (issue 51): each of these ran, or was stored, as if sound."""
    import yaml

    from eas.arch.reference import reference
    from eas.arch.space import SPACES_DIR, load_space, space_from_definition
    from eas.deploy.formats import parse_formats
    from eas.measure.predictor import Predictor, load_predictor
    from eas.nas.baselines import MAX_BASELINES, parse_baselines
    from eas.objectives import Constraints

    with pytest.raises(UserError, match="--max-sram"):
        Constraints.parse(sram="")  # an empty limit was no limit
    for text in ("", ",", "pte,"):
        with pytest.raises(UserError, match="name each format"):
            parse_formats(text)
    assert parse_formats(None) == []
    with pytest.raises(UserError, match="must be a number in 0.05..4"):
        reference("mobilenet_v2@０.５")  # fullwidth digits, which float() reads
    mobile = yaml.safe_load((SPACES_DIR / "mobile.yaml").read_text())
    mobile["stages"][1]["stride"] = [2, 2]
    with pytest.raises(UserError, match=r"stages\[1\].stride: 2 is listed twice"):
        space_from_definition(mobile)
    space = load_space("mobile")
    assert parse_baselines(["mobilenet_v2@0.5,0.50,.5,0.500", "mobilenet_v2@1"], space) == \
        ["mobilenet_v2@0.5", "mobilenet_v2@1.0"]  # one name per network: each is trained once
    many = ",".join(f"{a / 100:.2f}" for a in range(10, 10 + MAX_BASELINES + 1))
    with pytest.raises(UserError, match=f"at most {MAX_BASELINES}"):
        parse_baselines([f"mobilenet_v2@{many}"], space)
    fitted = {"kind": "additive", "names": ["conv_macs", "conv_macs"], "scale": [1.0, 1.0],
              "model": {"prices": [1.0, 1.0], "intercept": 0.1}, "input_shape": [1, 8, 8], "num_classes": 10,
              "space": "tiny", "runtime": {}}
    for names, fragment in ((["conv_macs", "conv_macs"], "one listed twice"), (["conv\x1b[31m", "x"], "feature names")):
        with pytest.raises(UserError, match=fragment):
            Predictor.from_dict({**fitted, "names": names})
    with pytest.raises(UserError, match="--predictor /nonexistent/p.json: no such file"):
        load_predictor("/nonexistent/p.json")


def test_a_study_started_in_year_1_is_listed_without_a_date():
    from datetime import datetime, timezone

    from eas.study.reader import _date_text

    year_1 = datetime(1, 1, 1, tzinfo=timezone.utc).timestamp()
    assert _date_text(year_1) in ("", "0001-01-01 00:00") and _date_text(None) == "" and _date_text(float("nan")) == ""
