import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest

from eas.data import datasets as data_module
from eas.data.datasets import DataError, load_dataset, parse_spec
from tests.conftest import assert_user_error


def test_digits_split_is_deterministic_and_normalised_with_train_statistics():
    a, b = load_dataset("digits", seed=1), load_dataset("digits", seed=1)
    c = load_dataset("digits", seed=2)
    assert a.input_shape == (1, 8, 8) and a.num_classes == 10
    assert len(a.train_y) + len(a.val_y) + len(a.test_y) == 1797
    assert (a.val_y == b.val_y).all() and not (a.val_y == c.val_y).all()
    assert abs(float(a.train_x[:].mean())) < 1e-3 and abs(float(a.train_x[:].std()) - 1) < 0.01


@pytest.mark.skipif(not data_module.FASHION_MNIST_SYSTEM.exists(), reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_from_the_debian_package():
    task = load_dataset("fashion-mnist")
    assert task.input_shape == (1, 28, 28) and task.num_classes == 10
    assert len(task.train_y) + len(task.val_y) == 60_000 and len(task.test_y) == 10_000
    assert sorted(set(task.test_y.tolist())) == list(range(10))


def test_fashion_mnist_missing_everywhere_names_all_three_places(tmp_path, monkeypatch):
    monkeypatch.setattr(data_module, "FASHION_MNIST_SYSTEM", tmp_path / "system")
    monkeypatch.setattr(data_module, "FASHION_MNIST_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("EAS_DATA_DIR", str(tmp_path / "cache"))
    with pytest.raises(DataError) as error:
        data_module._fashion_mnist("")
    message = str(error.value)
    assert "system" in message and "cache" in message and "127.0.0.1:9" in message
    assert "apt-get install dataset-fashion-mnist" in message


def test_fashion_mnist_from_the_user_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache" / "fashion-mnist"
    cache.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 50), ("t10k", 20)):
        images = rng.integers(0, 255, (n, 28, 28), dtype=np.uint8)
        labels = np.arange(n, dtype=np.uint8) % 10
        (cache / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(bytes(16) + images.tobytes()))
        (cache / f"{split}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(bytes(8) + labels.tobytes()))
    monkeypatch.setattr(data_module, "FASHION_MNIST_SYSTEM", tmp_path / "absent")
    monkeypatch.setenv("EAS_DATA_DIR", str(tmp_path / "cache"))
    raw = data_module._fashion_mnist("")
    assert raw.train_x.shape == (50, 1, 28, 28) and raw.test_y.tolist()[:3] == [0, 1, 2]
    assert raw.train_x.dtype == np.uint8 and raw.scale == 1 / 255


def write_cifar10(folder: Path, per_batch: int = 20) -> None:
    """A folder in the official CIFAR-10 'python version' layout (Python 2 style byte keys)."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"batch_label": name.encode(), b"labels": [int(i % 10) for i in range(per_batch)],
                 b"data": rng.integers(0, 255, (per_batch, 3072), dtype=np.uint8),
                 b"filenames": [b"x.png"] * per_batch}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))


def test_cifar10_official_folder_loads(tmp_path):
    write_cifar10(tmp_path / "cifar-10-batches-py")
    task = load_dataset(f"cifar10:{tmp_path / 'cifar-10-batches-py'}")
    assert task.input_shape == (3, 32, 32) and task.classes[0] == "airplane"
    assert len(task.train_y) + len(task.val_y) == 100 and len(task.test_y) == 20


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_in_a_cifar_folder_is_refused_and_nothing_runs(tmp_path):
    folder = tmp_path / "cifar"
    write_cifar10(folder)
    marker = tmp_path / "pwned"
    (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": Exploit(marker)}, protocol=2))
    with pytest.raises(DataError, match="refused to load.*nothing in it was run"):
        load_dataset(f"cifar10:{folder}")
    assert not marker.exists()


def test_imagefolder_and_its_errors(tmp_path):
    from PIL import Image

    for label, colour in (("cats", 40), ("dogs", 200)):
        (tmp_path / "imgs" / label).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (12, 12), (colour, i * 10, 0)).save(tmp_path / "imgs" / label / f"{i}.png")
    task = load_dataset(f"imagefolder:{tmp_path / 'imgs'}")
    assert task.input_shape == (3, 12, 12) and task.classes == ("cats", "dogs")
    Image.new("RGB", (20, 16)).save(tmp_path / "imgs" / "dogs" / "big.png")
    with pytest.raises(DataError, match="mixed sizes"):
        load_dataset(f"imagefolder:{tmp_path / 'imgs'}")
    assert load_dataset(f"imagefolder:{tmp_path / 'imgs'}", resolution=8).input_shape == (3, 8, 8)
    (tmp_path / "imgs" / "dogs" / "broken.png").write_bytes(b"not an image")
    (tmp_path / "imgs" / "dogs" / "empty.jpg").write_bytes(b"")
    skipped = load_dataset(f"imagefolder:{tmp_path / 'imgs'}", resolution=8)
    assert len(skipped.train_y) + len(skipped.val_y) + len(skipped.test_y) == 13  # 12 + big.png
    with pytest.raises(DataError, match="2 files cannot be read.*--strict"):
        load_dataset(f"imagefolder:{tmp_path / 'imgs'}", resolution=8, strict=True)


def test_npz_layouts(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "nhwc.npz", x=rng.integers(0, 255, (40, 10, 10, 3), dtype=np.uint8), y=np.arange(40) % 4)
    task = load_dataset(f"npz:{tmp_path / 'nhwc.npz'}")
    assert task.input_shape == (3, 10, 10) and task.num_classes == 4
    np.savez(tmp_path / "bad.npz", images=np.zeros((3, 4, 4)))
    with pytest.raises(DataError, match="'x' and 'y'"):
        load_dataset(f"npz:{tmp_path / 'bad.npz'}")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(DataError, match="cannot read"):
        load_dataset(f"npz:{tmp_path / 'junk.npz'}")


@pytest.mark.parametrize("spec, fragment", [
    ("mnist", "unknown dataset"), ("cifar10", "needs a path"), ("npz:/no/such/file.npz", "does not exist"),
])
def test_bad_specs(spec, fragment):
    with pytest.raises(DataError, match=fragment):
        parse_spec(spec)


def test_cli_data_errors_are_one_line(eas_cli, tmp_path):
    assert_user_error(eas_cli("evaluate", "mobilenet_v2", "--data", "cifar10:/does/not/exist"), "does not exist")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    from PIL import Image
    Image.new("L", (8, 8)).save(tmp_path / "a" / "1.png")
    Image.new("L", (9, 9)).save(tmp_path / "b" / "1.png")
    assert_user_error(eas_cli("evaluate", "mobilenet_v2", "--data", f"imagefolder:{tmp_path}"), "mixed sizes")
