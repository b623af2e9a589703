"""Datasets as in-memory tensors, with deterministic splits and train-set normalisation.

A dataset is named by a spec: `digits`, `fashion-mnist`, `cifar10:PATH`, `cifar100:PATH`,
`imagefolder:PATH` or `npz:PATH`. One loader per scheme, in one dispatch table. Every loader
returns raw arrays (N, C, H, W) and integer labels; `load_dataset` splits and normalises.
"""

from __future__ import annotations

import gzip
import math
import os
import pickle
import urllib.request
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from eas.arch.bounds import MAX_CLASSES, MAX_SIDE, check_shape
from eas.errors import UserError
from eas.lazy import lazy_import

Image = lazy_import("PIL.Image")
sklearn_datasets = lazy_import("sklearn.datasets")

FASHION_MNIST_SYSTEM = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FASHION_MNIST_FILES = {
    "train_x": "train-images-idx3-ubyte.gz", "train_y": "train-labels-idx1-ubyte.gz",
    "test_x": "t10k-images-idx3-ubyte.gz", "test_y": "t10k-labels-idx1-ubyte.gz",
}


MIN_SAMPLES = 10  # enough for a training, a validation and a test split
MAX_PIXEL = 65535.0  # 16-bit images at most; a larger pixel value (1e30) is junk, not an image


class DataError(UserError):
    """A dataset that cannot be found or read."""


@dataclass(frozen=True)
class RawData:
    """Arrays as read from disk: x (N, C, H, W) float32 in [0, 1], y (N,) int64."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray | None
    test_y: np.ndarray | None
    classes: tuple[str, ...]


@dataclass(frozen=True)
class Dataset:
    """Normalised float32 tensors, split into train / validation / test."""

    name: str
    train_x: object  # torch.Tensor (N, C, H, W)
    train_y: object
    val_x: object
    val_y: object
    test_x: object
    test_y: object
    classes: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_x.shape[1:])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def describe(self) -> dict:
        c, h, w = self.input_shape
        return {"name": self.name, "input_shape": f"{c}x{h}x{w}", "classes": self.num_classes,
                "train": len(self.train_y), "validation": len(self.val_y), "test": len(self.test_y)}


# -- loaders -------------------------------------------------------------------------------

def _digits(_: str, resolution: int | None) -> RawData:
    bunch = sklearn_datasets.load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None]
    return RawData(x, bunch.target.astype(np.int64), None, None, tuple(str(i) for i in range(10)))


def _read_idx(path: Path, offset: int) -> np.ndarray:
    try:
        with gzip.open(path, "rb") as handle:
            return np.frombuffer(handle.read(), dtype=np.uint8, offset=offset)
    except (OSError, EOFError, ValueError) as error:
        raise DataError(f"cannot read {path}: {error}") from None


def fashion_mnist_cache() -> Path:
    base = os.environ.get("EAS_DATA_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "eas")
    return Path(base) / "fashion-mnist"


def _find_fashion_mnist() -> Path:
    """The Debian package's folder, then the user cache, then a download into the cache."""
    for folder in (FASHION_MNIST_SYSTEM, fashion_mnist_cache()):
        if all((folder / name).exists() for name in FASHION_MNIST_FILES.values()):
            return folder
    cache = fashion_mnist_cache()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for name in FASHION_MNIST_FILES.values():
            if not (cache / name).exists():
                with urllib.request.urlopen(FASHION_MNIST_URL + name, timeout=20) as response:
                    data = response.read()
                (cache / name).with_suffix(".part").write_bytes(data)
                (cache / name).with_suffix(".part").rename(cache / name)
        return cache
    except OSError as error:
        raise DataError(
            f"Fashion-MNIST not found: not in {FASHION_MNIST_SYSTEM} (Debian: apt-get install "
            f"dataset-fashion-mnist), not in the cache {cache} (or $EAS_DATA_DIR), and the "
            f"download from {FASHION_MNIST_URL} failed ({getattr(error, 'reason', error)})") from None


def _fashion_mnist(_: str, resolution: int | None) -> RawData:
    folder = _find_fashion_mnist()
    arrays = {}
    for key, name in FASHION_MNIST_FILES.items():
        is_images = key.endswith("_x")
        values = _read_idx(folder / name, 16 if is_images else 8)
        arrays[key] = (values.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0 if is_images
                       else values.astype(np.int64))
    classes = ("t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
               "bag", "ankle-boot")
    return RawData(arrays["train_x"], arrays["train_y"], arrays["test_x"], arrays["test_y"], classes)


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Accepts numpy arrays and plain containers; any other global is refused before it runs."""

    ALLOWED = {
        ("numpy", "ndarray"), ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),  # how Python 3 writes bytes into protocol-2 pickles
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refused to load {module}.{name}")
        return super().find_class(module, name)


def load_numpy_pickle(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return _NumpyOnlyUnpickler(handle, encoding="bytes").load()
    except pickle.UnpicklingError as error:
        raise DataError(f"{path}: not a plain CIFAR batch file ({error}); nothing in it was run") from None
    except (OSError, EOFError, ValueError) as error:
        raise DataError(f"cannot read {path}: {error}") from None


def _cifar(kind: str) -> Callable[[str, int | None], RawData]:
    files = {"cifar10": ([f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels",
                         "batches.meta", b"label_names"),
             "cifar100": (["train"], ["test"], b"fine_labels", "meta", b"fine_label_names")}[kind]

    def load(path: str, resolution: int | None) -> RawData:
        train_files, test_files, label_key, meta_file, names_key = files
        folder = Path(path)
        if not folder.is_dir():
            raise DataError(f"{kind}: {folder} is not a folder (expected the official 'python version')")

        def read(names):
            xs, ys = [], []
            for name in names:
                where = folder / name
                batch = load_numpy_pickle(where)
                if not isinstance(batch, dict) or b"data" not in batch or label_key not in batch:
                    raise DataError(f"{where}: missing b'data' or {label_key!r}")
                data, labels = batch[b"data"], batch[label_key]
                if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.shape[1:] != (3072,):
                    raise DataError(f"{where}: b'data' must be uint8 images of shape (N, 3072) (got "
                                    f"{type(data).__name__} {getattr(data, 'dtype', '')} {getattr(data, 'shape', '')})")
                if not isinstance(labels, (list, np.ndarray)) or len(labels) != len(data):
                    raise DataError(f"{where}: {label_key!r} must list one label per image ({len(data)} images)")
                xs.append(data.reshape(-1, 3, 32, 32))
                ys.append(integer_labels(np.asarray(labels), str(where)))
            return np.concatenate(xs).astype(np.float32) / 255.0, np.concatenate(ys)

        train_x, train_y = read(train_files)
        test_x, test_y = read(test_files)
        meta = load_numpy_pickle(folder / meta_file) if (folder / meta_file).exists() else {}
        names = meta.get(names_key) if isinstance(meta, dict) else None
        count = int(max(train_y.max(), test_y.max())) + 1
        classes = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names) if names else \
            tuple(str(i) for i in range(count))
        return RawData(train_x, train_y, test_x, test_y, classes)

    return load


def _imagefolder(path: str, resolution: int | None) -> RawData:
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"imagefolder: {root} is not a folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if len(classes) < 2:
        raise DataError(f"imagefolder: {root} needs at least two class sub-folders")
    suffixes = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
    images, labels, size, mode = [], [], None, None
    for label, name in enumerate(classes):
        for file in sorted((root / name).rglob("*")):
            if file.suffix.lower() not in suffixes:
                continue
            try:
                with warnings.catch_warnings():
                    # A decompression bomb (a small file that expands to gigapixels) is an error.
                    warnings.simplefilter("error", Image.DecompressionBombWarning)
                    with Image.open(file) as image:
                        image.load()
            except (OSError, Image.UnidentifiedImageError, Image.DecompressionBombError,
                    Image.DecompressionBombWarning) as error:
                raise DataError(f"imagefolder: cannot read image {file}: {error}") from None
            mode = mode or ("L" if image.mode in ("L", "1", "I;16") else "RGB")
            image = image.convert(mode)
            if resolution:
                image = image.resize((resolution, resolution))
            elif size is None:
                size = image.size
            elif image.size != size:
                raise DataError(f"imagefolder: images of mixed sizes ({file} is {image.size[0]}x"
                                f"{image.size[1]}, others {size[0]}x{size[1]}); pass a resolution")
            array = np.asarray(image, dtype=np.float32) / 255.0
            images.append(array[None] if array.ndim == 2 else array.transpose(2, 0, 1))
            labels.append(label)
    if not images:
        raise DataError(f"imagefolder: no images found under {root}")
    return RawData(np.stack(images), np.asarray(labels, dtype=np.int64), None, None, tuple(classes))


def _check_npz_headers(path: str) -> None:
    """Each array's header must fit the bytes stored for it: a header that claims 1e11 values
    would have numpy allocate hundreds of GiB before reading a byte."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    shape, _, dtype = read_header(member)
                claimed = math.prod(shape) * dtype.itemsize
                if claimed > info.file_size:
                    raise DataError(f"npz: {path}: array {info.filename} claims {math.prod(shape):,} values of "
                                    f"{dtype} but holds {info.file_size:,} bytes")
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise DataError(f"npz: cannot read {path}: {str(error)[:200]}") from None


def _npz(path: str, resolution: int | None) -> RawData:
    _check_npz_headers(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "x" not in archive or "y" not in archive:
                raise DataError(f"npz: {path} must hold arrays 'x' and 'y' (has {', '.join(archive.files)})")
            x, y = archive["x"], archive["y"]
    except (OSError, ValueError, EOFError) as error:
        raise DataError(f"npz: cannot read {path}: {error}") from None
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[1] not in (1, 3, 4) and x.shape[3] in (1, 3, 4):
        x = x.transpose(0, 3, 1, 2)  # NHWC -> NCHW
    if x.ndim != 4 or len(x) != len(y) or y.ndim != 1:
        raise DataError(f"npz: {path}: expected x of shape (N,H,W), (N,C,H,W) or (N,H,W,C) and y of "
                        f"shape (N,) (got {x.shape} and {y.shape})")
    if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
        raise DataError(f"npz: {path}: images must be numbers (got dtype {x.dtype})")
    if np.issubdtype(x.dtype, np.floating) and not (np.all(np.isfinite(x)) and np.abs(x).max(initial=0) <= MAX_PIXEL):
        raise DataError(f"npz: {path}: pixel values must be finite numbers within +-{MAX_PIXEL:g} (found NaN, inf "
                        "or a value beyond)")
    x = x.astype(np.float32) / (255.0 if x.dtype == np.uint8 else 1.0)
    y = integer_labels(y, f"npz: {path}")
    return RawData(x, y, None, None, tuple(str(i) for i in range(int(y.max()) + 1)) if len(y) else ())


def integer_labels(y: np.ndarray, where: str) -> np.ndarray:
    """Class labels as int64: whole numbers 0..MAX_CLASSES-1, never silently truncated."""
    if y.dtype == bool or not np.issubdtype(y.dtype, np.number) or np.issubdtype(y.dtype, np.complexfloating):
        raise DataError(f"{where}: labels must be integers (got dtype {y.dtype})")
    if len(y) == 0:
        return y.astype(np.int64)
    if np.issubdtype(y.dtype, np.floating) and not (np.all(np.isfinite(y)) and np.all(y == np.round(y))):
        raise DataError(f"{where}: labels must be whole numbers (got e.g. {y[y != np.round(y)][:1]})")
    if y.min() < 0 or y.max() >= MAX_CLASSES:
        raise DataError(f"{where}: labels must be class indices 0..{MAX_CLASSES - 1:,} "
                        f"(got {y.min():g}..{y.max():g})")
    return y.astype(np.int64)


LOADERS: dict[str, Callable[[str, int | None], RawData]] = {
    "digits": _digits,
    "fashion-mnist": _fashion_mnist,
    "cifar10": _cifar("cifar10"),
    "cifar100": _cifar("cifar100"),
    "imagefolder": _imagefolder,
    "npz": _npz,
}
NEEDS_PATH = {"cifar10", "cifar100", "imagefolder", "npz"}


def parse_spec(spec: str) -> tuple[str, str]:
    scheme, _, path = spec.partition(":")
    if scheme not in LOADERS:
        raise DataError(f"unknown dataset {spec!r} (known: digits, fashion-mnist, cifar10:PATH, "
                        "cifar100:PATH, imagefolder:PATH, npz:PATH)")
    if scheme in NEEDS_PATH and not path:
        raise DataError(f"dataset {scheme} needs a path: {scheme}:PATH")
    if path and scheme in NEEDS_PATH and not Path(path).exists():
        raise DataError(f"{scheme}: {path} does not exist")
    return scheme, path


def load_dataset(spec: str, seed: int = 0, val_fraction: float = 0.1,
                 resolution: int | None = None) -> Dataset:
    """Load, split (deterministically from `seed`) and normalise (train statistics) a dataset.

    Without an official test split, 15% of the data is held out as test set first.
    """
    if resolution is not None and not 1 <= resolution <= MAX_SIDE:
        raise DataError(f"resolution must be 1..{MAX_SIDE} (got {resolution})")
    scheme, path = parse_spec(spec)
    raw = LOADERS[scheme](path, resolution)
    if len(raw.train_y) < MIN_SAMPLES:
        raise DataError(f"{spec}: needs at least {MIN_SAMPLES} samples to split into training, validation "
                        f"and test sets (got {len(raw.train_y)})")
    if len(np.unique(raw.train_y)) < 2:
        raise DataError(f"{spec}: needs at least two classes")
    try:
        check_shape(raw.train_x.shape[1:], f"{spec}: image shape")
    except UserError as error:
        raise DataError(str(error)) from None
    rng = np.random.default_rng(seed)
    train_x, train_y, test_x, test_y = raw.train_x, raw.train_y, raw.test_x, raw.test_y
    if test_x is None:
        order = rng.permutation(len(train_y))
        n_test = max(1, int(round(0.15 * len(order))))
        test_x, test_y = train_x[order[:n_test]], train_y[order[:n_test]]
        train_x, train_y = train_x[order[n_test:]], train_y[order[n_test:]]
    order = rng.permutation(len(train_y))
    n_val = max(1, int(round(val_fraction * len(order))))
    val_idx, train_idx = order[:n_val], order[n_val:]
    mean = train_x[train_idx].mean(axis=(0, 2, 3))
    std = train_x[train_idx].std(axis=(0, 2, 3)) + 1e-6

    def tensor(x):
        return torch.from_numpy(((x - mean[:, None, None]) / std[:, None, None]).astype(np.float32))

    return Dataset(
        name=spec, classes=raw.classes,
        train_x=tensor(train_x[train_idx]), train_y=torch.from_numpy(train_y[train_idx]),
        val_x=tensor(train_x[val_idx]), val_y=torch.from_numpy(train_y[val_idx]),
        test_x=tensor(test_x), test_y=torch.from_numpy(test_y),
        mean=tuple(float(m) for m in mean), std=tuple(float(s) for s in std),
    )
