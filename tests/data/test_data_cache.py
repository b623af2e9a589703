"""The uint8 data cache: decoded once, read a batch at a time, never trusted when damaged."""

import fcntl
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from eas.data import DataError, imagefolder
from eas.data import cache as cache_module
from eas.data.datasets import load_dataset
from eas.data.images import Images, PixelFile
from tests.conftest import EAS, ROOT, assert_user_error

GENOME = "stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0"


def make_folder(root: Path, per_class: int = 8, size: tuple[int, int] = (20, 14)) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in ("ants", "bees"):
        (root / label / "nested").mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
            where = root / label / ("nested" if i % 2 else "") / f"{i}.{'png' if i % 3 else 'jpg'}"
            Image.fromarray(pixels).save(where)
    return root


def cache_folders() -> list[Path]:
    return sorted(p for p in cache_module.cache_root().iterdir() if p.is_dir())


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EAS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_rows_read_back_in_any_order(tmp_path):
    x = np.random.default_rng(1).integers(0, 255, (50, 3, 4, 5), dtype=np.uint8)
    (tmp_path / "pixels").write_bytes(x.tobytes())
    pixels = PixelFile(tmp_path / "pixels", x.shape, "uint8")
    rows = np.array([7, 3, 4, 5, 49, 0, 7, 8])  # runs, gaps and a repeat
    assert np.array_equal(pixels.read(rows), x[rows])
    images = Images(pixels, np.arange(10, 40), scale=1 / 255, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    batch = images[torch.tensor([2, 0, 29])]
    expected = (x[[12, 10, 39]] / 255.0 - np.array([0.5, 0.4, 0.3])[:, None, None]) / \
        np.array([0.2, 0.25, 0.3])[:, None, None]
    assert batch.dtype == torch.float32 and np.allclose(batch.numpy(), expected, atol=1e-5)
    view = images.subset(np.array([29, 1]))
    assert len(view) == 2 and np.allclose(view[:].numpy(), images[np.array([29, 1])].numpy())


def test_an_image_folder_is_decoded_once_and_normalised_from_its_training_split(data_dir, tmp_path):
    folder = make_folder(tmp_path / "photos")
    task = load_dataset(f"imagefolder:{folder}", resolution=12)
    assert task.input_shape == (3, 12, 12) and len(task.train_y) + len(task.val_y) + len(task.test_y) == 16
    train = task.train_x[:]
    assert abs(float(train.mean())) < 0.05 and abs(float(train.std()) - 1) < 0.05
    # A split keeps its shuffled order (the folder's is by class): its first rows, which BatchNorm
    # recalibration reads, hold both classes.
    assert set(task.train_y[:6].tolist()) == {0, 1}
    (built,) = cache_folders()
    stamp = (built / "pixels.bin").stat().st_mtime_ns
    again = load_dataset(f"imagefolder:{folder}", resolution=12)
    assert cache_folders() == [built] and (built / "pixels.bin").stat().st_mtime_ns == stamp
    assert torch.equal(again.train_x[:], train)
    # Another resolution, or a changed folder, is another cache; the first one stays.
    load_dataset(f"imagefolder:{folder}", resolution=10)
    (folder / "ants" / "0.jpg").touch()
    load_dataset(f"imagefolder:{folder}", resolution=12)
    assert len(cache_folders()) == 3 and built in cache_folders()


@pytest.mark.parametrize("damage", ["truncate", "edit", "header", "header-field"])
def test_a_damaged_cache_is_rebuilt_never_trained_on(data_dir, tmp_path, damage, caplog):
    folder = make_folder(tmp_path / "photos")
    expected = load_dataset(f"imagefolder:{folder}", resolution=12).train_x[:]
    (built,) = cache_folders()
    pixels = built / "pixels.bin"
    if damage == "truncate":
        os.truncate(pixels, pixels.stat().st_size - 100)
    elif damage == "edit":
        data = bytearray(pixels.read_bytes())
        data[len(data) // 2] ^= 0xFF
        pixels.write_bytes(bytes(data))
        os.utime(pixels, ns=(time.time_ns(), pixels.stat().st_mtime_ns + 1_000_000))
    elif damage == "header":
        (built / "header.json").write_text("{not json")
    else:  # valid JSON, one field changed by hand
        header = json.loads((built / "header.json").read_text())
        (built / "header.json").write_text(json.dumps({**header, "scale": 1.0}))
    caplog.clear()
    second = load_dataset(f"imagefolder:{folder}", resolution=12)
    assert "cannot be used" in caplog.text
    assert torch.equal(second.train_x[:], expected)
    assert cache_folders() == [built] and not list(cache_module.cache_root().glob("*.building-*"))


def test_pixels_changed_behind_an_unchanged_time_are_found_when_first_read(data_dir, tmp_path):
    folder = make_folder(tmp_path / "photos")
    expected = load_dataset(f"imagefolder:{folder}", resolution=12).train_x[:]
    (built,) = cache_folders()
    pixels = built / "pixels.bin"
    stamp = pixels.stat()
    data = bytearray(pixels.read_bytes())
    data[len(data) // 3] ^= 0x01  # one bit, the modification time put back
    pixels.write_bytes(bytes(data))
    os.utime(pixels, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    with pytest.raises(cache_module.CacheDamaged, match="chunk 0 of pixels.bin no longer matches") as found:
        load_dataset(f"imagefolder:{folder}", resolution=12).train_x[:]  # the statistics read it first
    assert "\n" not in str(found.value) and "rebuilt on the next run" in str(found.value)
    assert torch.equal(load_dataset(f"imagefolder:{folder}", resolution=12).train_x[:], expected)  # rebuilt


def test_chunks_are_checked_once_and_only_where_read(tmp_path):
    x = np.arange(64 * 100, dtype=np.uint8).reshape(100, 1, 8, 8)
    (tmp_path / "pixels").write_bytes(x.tobytes())
    chunk = 640  # ten rows a chunk
    hashes = tuple(hashlib.sha256(x.tobytes()[i:i + chunk]).hexdigest() for i in range(0, x.nbytes, chunk))
    pixels = PixelFile(tmp_path / "pixels", x.shape, "uint8", hashes, chunk)
    assert np.array_equal(pixels.read(np.array([3, 45])), x[[3, 45]])
    assert pixels._verified == {0, 4}
    broken = PixelFile(tmp_path / "pixels", x.shape, "uint8", hashes[:5] + ("0" * 64,) + hashes[6:], chunk)
    assert np.array_equal(broken.read(np.arange(0, 50)), x[:50])  # chunk 5 untouched
    with pytest.raises(OSError, match="chunk 5"):
        broken.read(np.array([55]))


@pytest.mark.parametrize("field, value", [("scale", float("nan")), ("scale", -1.0), ("shape", [1, 2]),
                                          ("test_start", 10**9), ("chunk_sha256", []), ("classes", "ab"),
                                          ("classes", [1, 2])])
def test_a_header_out_of_range_is_rebuilt(data_dir, tmp_path, field, value, caplog):
    folder = make_folder(tmp_path / "photos")
    expected = load_dataset(f"imagefolder:{folder}", resolution=12).train_x[:]
    (built,) = cache_folders()
    header = json.loads((built / "header.json").read_text())
    header[field] = value
    header["header_sha256"] = cache_module._header_hash(header)  # a careful forger: the header's own hash fits
    (built / "header.json").write_text(json.dumps(header))
    caplog.clear()
    again = load_dataset(f"imagefolder:{folder}", resolution=12)
    assert "cannot be used" in caplog.text
    assert torch.equal(again.train_x[:], expected)


def test_missing_labels_are_rebuilt(data_dir, tmp_path, caplog):
    folder = make_folder(tmp_path / "photos")
    load_dataset(f"imagefolder:{folder}", resolution=12)
    (built,) = cache_folders()
    (built / "labels.npy").unlink()
    caplog.clear()
    again = load_dataset(f"imagefolder:{folder}", resolution=12)
    assert "cannot be used" in caplog.text and len(again.train_y) > 0


def test_broken_files_are_skipped_and_counted_or_refused_with_strict(data_dir, tmp_path, eas_cli):
    folder = make_folder(tmp_path / "photos")
    (folder / "bees" / "zero.png").write_bytes(b"")
    (folder / "bees" / "broken.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    env = {"EAS_DATA_DIR": str(data_dir)}
    args = ("evaluate", GENOME, "--data", f"imagefolder:{folder}", "--resolution", "12", "--max-steps", "1",
            "--batch-size", "4", "--json")
    result = eas_cli(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert "skipped 2 files that cannot be read" in result.stderr and "--strict" in result.stderr
    assert_user_error(eas_cli(*args, "--strict", env=env), "2 files cannot be read", "--strict")
    # A class whose every file is broken is refused; so are a folder with no images at all and
    # one whose every image is broken.
    (folder / "wasps").mkdir()
    for i in range(3):
        (folder / "wasps" / f"{i}.png").write_bytes(b"")
    assert_user_error(eas_cli(*args[:-5], env=env), "'wasps' has no readable images")
    (tmp_path / "empty" / "a").mkdir(parents=True)
    (tmp_path / "empty" / "b").mkdir()
    (tmp_path / "empty" / "a" / "notes.txt").write_text("no pictures here")
    with pytest.raises(DataError, match="no images found"):
        load_dataset(f"imagefolder:{tmp_path / 'empty'}")
    (tmp_path / "empty" / "a" / "1.png").write_bytes(b"junk")
    with pytest.raises(DataError, match="none of the 1 images .* can be read"):
        load_dataset(f"imagefolder:{tmp_path / 'empty'}")


def test_a_full_disk_leaves_no_partial_cache_and_touches_nothing_else(data_dir, tmp_path):
    folder = make_folder(tmp_path / "photos", per_class=30, size=(64, 64))
    load_dataset("digits")
    (kept,) = cache_folders()
    before = {p.name: p.read_bytes() for p in kept.iterdir()}

    def small_disk():  # writes past 64 KiB fail with EFBIG, as a full disk fails them with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    result = subprocess.run([*EAS, "evaluate", GENOME, "--data", f"imagefolder:{folder}"], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "EAS_DATA_DIR": str(data_dir)},
                            preexec_fn=small_disk, timeout=300)
    assert_user_error(result, "cannot write the data cache", "partial cache was removed")
    assert cache_folders() == [kept] and not list(cache_module.cache_root().glob("*.building-*"))
    assert {p.name: p.read_bytes() for p in kept.iterdir()} == before


def lock_waiters(path: Path) -> int:
    inode = path.stat().st_ino
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if "->" in line and line.split()[-3].endswith(f":{inode}"))


def test_two_processes_building_one_cache_build_it_once(data_dir, tmp_path):
    folder = make_folder(tmp_path / "photos", per_class=imagefolder.PARALLEL_FROM // 2, size=(8, 8))
    key = cache_module.cache_key("imagefolder", imagefolder.fingerprint(
        folder, imagefolder.list_images(folder)[1], None))
    cache_module.cache_root().mkdir(parents=True)
    lock_file = cache_module.cache_root() / f"{key}.lock"
    code = ("import sys, eas; eas.prepare_process(); from eas.data.datasets import load_dataset; "
            f"t = load_dataset('imagefolder:{folder}'); print(float(t.train_x[:].sum()), len(t.train_y))")
    with open(lock_file, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # both must queue behind this lock: neither can see a cache yet
        runs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env={**os.environ, "EAS_DATA_DIR": str(data_dir)})
                for _ in range(2)]
        deadline = time.monotonic() + 240
        while lock_waiters(lock_file) < 2:  # a condition, not a pace: each process reaches the lock
            assert time.monotonic() < deadline and all(run.poll() is None for run in runs)
            time.sleep(0.1)
    outputs = [run.communicate(timeout=300) for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    assert outputs[0][0] == outputs[1][0]
    builds = [err.count("decoding 256 images") for _, err in outputs]
    assert sorted(builds) == [0, 1], outputs  # one built; the other waited and read it
    assert len(cache_folders()) == 1 and not list(cache_module.cache_root().glob("*.building-*"))
