"""Bad input of every kind: one line on stderr, exit code 2, never a traceback, nothing stored
touched; and junk that used to be accepted silently is refused."""

import gzip
import io
import json

import numpy as np
import pytest
from PIL import Image

from eas.data.datasets import load_dataset
from eas.errors import UserError
from tests.conftest import assert_user_error, run_eas

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
])
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
])
def test_npz_that_cannot_be_a_dataset(tmp_path, name, x, y, fragment):
    spec = npz(tmp_path, name, x, y)
    with pytest.raises(UserError, match=fragment):
        load_dataset(spec)
    assert_user_error(run_eas("evaluate", GENOME, "--data", spec, "--max-steps", "1", cwd=tmp_path), fragment)


def test_whole_float_labels_are_accepted(tmp_path):
    task = load_dataset(npz(tmp_path, "floats", np.random.rand(40, 8, 8), (np.arange(40) % 3).astype(float)))
    assert task.num_classes == 3


def test_an_image_decompression_bomb_is_refused(tmp_path):
    for label in ("a", "b"):
        (tmp_path / "images" / label).mkdir(parents=True)
        Image.new("L", (8, 8)).save(tmp_path / "images" / label / "ok.png")
    bomb = io.BytesIO()
    Image.new("1", (20000, 20000)).save(bomb, format="PNG")  # ~50 kB that decode to 400 Mpixel
    (tmp_path / "images" / "a" / "bomb.png").write_bytes(bomb.getvalue())
    with pytest.raises(UserError, match="bomb.png"):
        load_dataset(f"imagefolder:{tmp_path / 'images'}")


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
