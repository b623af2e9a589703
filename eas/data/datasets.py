"""Datasets decoded once into a disk cache, split deterministically, normalised a batch at a time.

A dataset is named by a spec: `digits`, `fashion-mnist`, `cifar10:PATH`, `cifar100:PATH`,
`imagefolder:PATH` or `npz:PATH`; `imagefolder@160:PATH` asks for a resolution (short side resized
to 160, centre-cropped). One source per scheme, in one dispatch table: what identifies it (for the
cache key) and how it is written into the cache. The array sources return raw arrays (N, C, H, W)
as stored (uint8 for images) with the scale that brings them to [0, 1]; image folders stream into
the cache from worker processes. `load_dataset` opens the cache, splits and computes the
normalisation from the training split; batches are read and normalised where they are used
(eas.data.images).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
import logging
import math
import os
import pickle
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from eas.arch.bounds import MAX_CLASSES, MAX_SIDE, check_shape
from eas.data import DataError
from eas.data import imagefolder as image_folders
from eas.data.cache import CHUNK_BYTES, Writer, cache_key, cache_root, cached, drop_damaged
from eas.data.images import Images, PixelFile, rows_per_read
from eas.errors import UserError
from eas.lazy import lazy_import

logger = logging.getLogger(__name__)

sklearn_datasets = lazy_import("sklearn.datasets")

FASHION_MNIST_SYSTEM = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FASHION_MNIST_FILES = {
    "train_x": "train-images-idx3-ubyte.gz", "train_y": "train-labels-idx1-ubyte.gz",
    "test_x": "t10k-images-idx3-ubyte.gz", "test_y": "t10k-labels-idx1-ubyte.gz",
}


MIN_SAMPLES = 10  # enough for a training, a validation and a test split
# Without an official test split, this share of the data is held out as the test split, drawn with
# this seed whatever the study's seed: the seed re-splits training and validation only, so a claim
# made on the test split is made on images no search of any seed trained on or ranked by. (Seed 0
# draws it as every seed did before the split was fixed, so seed-0 studies keep their splits.)
TEST_SHARE, TEST_SPLIT_SEED = 0.15, 0
MAX_ARRAY_BYTES = 4 << 30  # images given as arrays are held in memory; larger data streams from a folder
MAX_PIXEL = 65535.0  # 16-bit images at most; a larger pixel value (1e30) is junk, not an image
STATISTICS_BYTES = 256 << 20  # the normalisation reads at most this much of the training split


@dataclass(frozen=True)
class RawData:
    """Arrays as read from disk: x (N, C, H, W) as stored (uint8 for images; x * scale is in
    [0, 1] for images), y (N,) int64."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray | None
    test_y: np.ndarray | None
    classes: tuple[str, ...]
    scale: float = 1 / 255


@dataclass(frozen=True)
class Dataset:
    """Splits of a cached dataset: Images (normalised a batch at a time) and int64 label tensors."""

    name: str
    train_x: Images  # (N, C, H, W)
    train_y: torch.Tensor
    val_x: Images
    val_y: torch.Tensor
    test_x: Images
    test_y: torch.Tensor
    classes: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    test_source: str = "official"  # or "held out": TEST_SHARE of the data, drawn with TEST_SPLIT_SEED

    @property
    def input_shape(self) -> tuple[int, int, int]:
        channels, height, width = self.train_x.shape[1:]
        return channels, height, width

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def preprocessing(self) -> dict:
        """How a deployed model's input is made from an image, exactly as training made it."""
        channels, height, width = self.input_shape
        _, _, resolution = parse_spec(self.name)
        return {"input": f"float32 NCHW, {channels}x{height}x{width}",
                "channels": "grayscale" if channels == 1 else "RGB",
                "resize": (f"short side to {resolution} px, then the centre {resolution}x{resolution} square"
                           if resolution else f"none: the images are {height}x{width} as stored"),
                "pixel_scale": self.train_x.scale, "mean": list(self.mean), "std": list(self.std),
                "formula": "(pixel * pixel_scale - mean) / std, per channel; pixels as stored (uint8 0..255 for "
                           "image data)"}

    def test_split(self) -> dict:
        """What identifies the test split, recorded in a study when it is created: where it comes
        from, its size, and a fingerprint of its rows and labels (equal fingerprints: the same images)."""
        digest = hashlib.sha256(np.asarray(self.test_x.rows, dtype=np.int64).tobytes())
        digest.update(self.test_y.numpy().astype(np.int64).tobytes())
        return {"source": self.test_source, "images": len(self.test_y), "fingerprint": digest.hexdigest()[:16]}

    def describe(self) -> dict:
        c, h, w = self.input_shape
        return {"name": self.name, "input_shape": f"{c}x{h}x{w}", "classes": self.num_classes,
                "train": len(self.train_y), "validation": len(self.val_y), "test": len(self.test_y)}


# -- loaders -------------------------------------------------------------------------------

def _digits(_: str) -> RawData:
    bunch = sklearn_datasets.load_digits()
    x = bunch.images.astype(np.uint8)[:, None]  # 17 grey levels, 0..16
    return RawData(x, bunch.target.astype(np.int64), None, None, tuple(str(i) for i in range(10)), scale=1 / 16)


def _read_idx(path: Path, offset: int) -> np.ndarray:
    try:
        with gzip.open(path, "rb") as handle:
            return np.frombuffer(handle.read(), dtype=np.uint8, offset=offset)
    except (OSError, EOFError, ValueError) as error:
        raise DataError(f"cannot read {path}: {error}") from None


def fashion_mnist_cache() -> Path:
    return cache_root().parent / "fashion-mnist"


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


def _fashion_mnist(_: str) -> RawData:
    folder = _find_fashion_mnist()
    arrays = {}
    for key, name in FASHION_MNIST_FILES.items():
        is_images = key.endswith("_x")
        values = _read_idx(folder / name, 16 if is_images else 8)
        arrays[key] = values.reshape(-1, 1, 28, 28) if is_images else values.astype(np.int64)
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


def _cifar(kind: str) -> Callable[[str], RawData]:
    files = {"cifar10": ([f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels",
                         "batches.meta", b"label_names"),
             "cifar100": (["train"], ["test"], b"fine_labels", "meta", b"fine_label_names")}[kind]

    def load(path: str) -> RawData:
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
            return np.concatenate(xs), np.concatenate(ys)

        train_x, train_y = read(train_files)
        test_x, test_y = read(test_files)
        meta = load_numpy_pickle(folder / meta_file) if (folder / meta_file).exists() else {}
        names = meta.get(names_key) if isinstance(meta, dict) else None
        count = int(max(train_y.max(), test_y.max())) + 1
        classes = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names) if names else \
            tuple(str(i) for i in range(count))
        return RawData(train_x, train_y, test_x, test_y, classes)

    return load


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


def _npz(path: str) -> RawData:
    _check_npz_headers(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "x" not in archive or "y" not in archive:
                raise DataError(f"npz: {path} must hold arrays 'x' and 'y' (has {', '.join(archive.files)})")
            x, y = archive["x"], archive["y"]
    except (OSError, ValueError, EOFError) as error:
        raise DataError(f"npz: cannot read {path}: {error}") from None
    x, y = checked_arrays(x, y, f"npz: {path}")
    # uint8 images stay uint8 (scale 1/255); any other numbers are kept exactly, as float32.
    scale = 1 / 255 if x.dtype == np.uint8 else 1.0
    x = x if x.dtype == np.uint8 else x.astype(np.float32)
    return RawData(x, y, None, None, tuple(str(i) for i in range(int(y.max()) + 1)) if len(y) else (), scale)


def checked_arrays(x: np.ndarray, y: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N,H,W), (N,C,H,W) or (N,H,W,C) as (N,C,H,W), and int64 labels (N,), checked from
    their shapes and dtypes first (a size beyond MAX_ARRAY_BYTES is refused before any value is
    read), then their values: finite pixels, whole class indices. The checks of an npz file and of
    arrays given from Python, before anything is written."""
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[1] not in (1, 3, 4) and x.shape[3] in (1, 3, 4):
        x = x.transpose(0, 3, 1, 2)  # NHWC -> NCHW
    if x.ndim != 4 or y.ndim != 1 or len(x) != len(y):
        raise DataError(f"{where}: expected images of shape (N,H,W), (N,C,H,W) or (N,H,W,C) and labels of "
                        f"shape (N,) (got {x.shape} and {y.shape})")
    if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating) or x.dtype == bool:
        raise DataError(f"{where}: images must be numbers (got dtype {x.dtype})")
    if x.size * x.dtype.itemsize > MAX_ARRAY_BYTES:
        raise DataError(f"{where}: {x.size * x.dtype.itemsize / 2**30:,.1f} GiB of images; arrays are held in memory "
                        f"up to {MAX_ARRAY_BYTES / 2**30:g} GiB: give larger data as imagefolder:PATH")
    try:
        check_shape(x.shape[1:], f"{where}: image shape")
    except UserError as error:
        raise DataError(str(error)) from None
    if len(y) < MIN_SAMPLES:
        raise DataError(f"{where}: needs at least {MIN_SAMPLES} samples to split into training, validation and test "
                        f"sets (got {len(y)})")
    if np.issubdtype(x.dtype, np.floating) and not (np.all(np.isfinite(x)) and np.abs(x).max(initial=0) <= MAX_PIXEL):
        raise DataError(f"{where}: pixel values must be finite numbers within +-{MAX_PIXEL:g} (found NaN, inf "
                        "or a value beyond)")
    y = integer_labels(y, where)
    if len(np.unique(y)) < 2:
        raise DataError(f"{where}: needs at least two classes (every label is {y[0]})")
    return x, y


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


def _stats(paths) -> list:
    """Names, sizes and modification times: what identifies files without reading them."""
    stats = [(Path(p).resolve(), Path(p).stat()) for p in sorted(paths)]
    return [(str(path), stat.st_size, stat.st_mtime_ns) for path, stat in stats]


def _write_arrays(loader: Callable[[str], RawData]) -> Callable[[str, int | None, Writer], None]:
    """An array source written into the cache: the training rows, then the official test rows."""
    def write(path: str, resolution: int | None, writer: Writer) -> None:
        raw = loader(path)
        x, y, test_start = raw.train_x, raw.train_y, None
        if raw.test_x is not None:
            test_start = len(y)
            x, y = np.concatenate([x, raw.test_x]), np.concatenate([y, raw.test_y])
        writer.write_array(x)
        writer.finish(y, raw.classes, raw.scale, test_start=test_start)
    return write


@dataclass(frozen=True)
class Source:
    """A scheme: what identifies a dataset of it (the cache key) and how it is written to the cache."""

    fingerprint: Callable[[str, int | None], object]
    write: Callable[[str, int | None, Writer], None]
    needs_path: bool = True
    resizable: bool = False  # whether it takes a resolution


def _folder_stats(path: str, resolution: int | None) -> list:
    return _stats(p for p in Path(path).iterdir() if p.is_file())


def _imagefolder_fingerprint(path: str, resolution: int | None) -> dict:
    root = Path(path)
    _, files, _ = image_folders.list_images(root)
    return image_folders.fingerprint(root, files, resolution)


SOURCES: dict[str, Source] = {
    "digits": Source(lambda _, __: {"scikit-learn": importlib.metadata.version("scikit-learn")},
                     _write_arrays(_digits), needs_path=False),
    "fashion-mnist": Source(lambda _, __: _stats(_find_fashion_mnist() / name for name in FASHION_MNIST_FILES.values()),
                            _write_arrays(_fashion_mnist), needs_path=False),
    "cifar10": Source(_folder_stats, _write_arrays(_cifar("cifar10"))),
    "cifar100": Source(_folder_stats, _write_arrays(_cifar("cifar100"))),
    "imagefolder": Source(_imagefolder_fingerprint,
                          lambda path, resolution, writer: image_folders.build(Path(path), resolution, writer),
                          resizable=True),
    "npz": Source(lambda path, _: _stats([path]), _write_arrays(_npz)),
}


FOLDER_SCHEMES = ("cifar10", "cifar100", "imagefolder")  # their PATH names a folder, not a file


def parse_spec(spec: str) -> tuple[str, str, int | None]:
    """(scheme, path, resolution) of `scheme[@resolution][:path]`; `~` in the path is expanded."""
    head, _, path = spec.partition(":")
    scheme, at, resolution_text = head.partition("@")
    if scheme not in SOURCES:
        raise DataError(f"unknown dataset {spec!r} (known: digits, fashion-mnist, cifar10:PATH, "
                        "cifar100:PATH, imagefolder[@RESOLUTION]:PATH, npz:PATH)")
    source = SOURCES[scheme]
    resolution = None
    if at:
        if not source.resizable:
            raise DataError(f"dataset {scheme} takes no resolution (only imagefolder does): {spec!r}")
        if not resolution_text.isdigit() or not 1 <= int(resolution_text) <= MAX_SIDE:
            raise DataError(f"resolution must be a whole number 1..{MAX_SIDE} (got {resolution_text!r} in {spec!r})")
        resolution = int(resolution_text)
    path = os.path.expanduser(path)
    if source.needs_path and not path:
        raise DataError(f"dataset {scheme} needs a path: {scheme}:PATH")
    if path and source.needs_path and not Path(path).exists():
        raise DataError(f"{scheme}: {path} does not exist")
    if path and scheme in FOLDER_SCHEMES and not Path(path).is_dir():
        raise DataError(f"{scheme}: {path} is not a folder (give the folder that holds the dataset's files)")
    return scheme, path, resolution


def with_resolution(spec: str, resolution: int | None) -> str:
    """The spec that names `spec`'s dataset at `resolution` (the form studies and exports store)."""
    if resolution is None:
        return spec
    scheme, path, _ = parse_spec(spec)
    if not SOURCES[scheme].resizable:
        raise DataError(f"--resolution applies to image folders only (not {scheme})")
    if not 1 <= resolution <= MAX_SIDE:
        raise DataError(f"resolution must be 1..{MAX_SIDE} (got {resolution})")
    return f"{scheme}@{resolution}:{Path(path).resolve()}"


def _statistics(pixels: PixelFile, rows: np.ndarray, scale: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation (in [0, 1] units) of the training rows: all of them
    when they fit STATISTICS_BYTES, else a fixed random sample that does (a few thousand images
    pin the statistics to 3 digits)."""
    take = max(MIN_SAMPLES, STATISTICS_BYTES // pixels.row_bytes)
    if len(rows) > take:
        rows = np.random.default_rng(seed).choice(rows, take, replace=False)
    total = np.zeros(pixels.shape[1]), np.zeros(pixels.shape[1])
    step = max(1, rows_per_read(pixels.row_bytes) // 8)  # the chunk is copied as float64
    for start in range(0, len(rows), step):
        chunk = pixels.read(rows[start:start + step]).astype(np.float64) * scale
        total[0][:] += chunk.sum(axis=(0, 2, 3))
        total[1][:] += (chunk * chunk).sum(axis=(0, 2, 3))
    count = len(rows) * pixels.shape[2] * pixels.shape[3]
    mean = total[0] / count
    return mean, np.sqrt(np.maximum(total[1] / count - mean * mean, 0.0)) + 1e-6


def load_dataset(spec: str, seed: int = 0, val_fraction: float = 0.1,
                 resolution: int | None = None, strict: bool = False) -> Dataset:
    """Open (decoding it into the cache the first time) and split (deterministically from
    `seed`) a dataset; the normalisation is the training split's. Without an official test
    split, 15% of the data is held out as test set first, the same rows whatever the seed.
    `strict` refuses a dataset with unreadable files instead of skipping them."""
    spec = with_resolution(spec, resolution)
    scheme, path, resolution = parse_spec(spec)
    source = SOURCES[scheme]
    cache = cached(cache_key(scheme, source.fingerprint(path, resolution)),
                   lambda writer: source.write(path, resolution, writer), spec)
    if cache.skipped and strict:
        raise DataError(f"{spec}: {cache.skipped:,} files cannot be read (--strict), e.g. {cache.skipped_example}")
    labels = cache.labels
    n_rows = len(labels) if cache.test_start is None else cache.test_start
    usable = np.flatnonzero(labels[:n_rows] >= 0)
    if len(usable) < MIN_SAMPLES:
        raise DataError(f"{spec}: needs at least {MIN_SAMPLES} samples to split into training, validation "
                        f"and test sets (got {len(usable)})")
    present = np.unique(labels[labels >= 0])
    if len(present) < 2:
        raise DataError(f"{spec}: needs at least two classes")
    missing = sorted(set(range(len(cache.classes))) - set(present.tolist()))
    if missing and scheme == "imagefolder":
        raise DataError(f"{spec}: class folder {cache.classes[missing[0]]!r} has no readable images")
    try:
        check_shape(cache.shape[1:], f"{spec}: image shape")
    except UserError as error:
        raise DataError(str(error)) from None
    if cache.skipped:  # after every refusal: a refused dataset says one line
        logger.warning(f"{spec}: skipped {cache.skipped:,} files that cannot be read (e.g. "
                       f"{cache.skipped_example}); --strict refuses them instead")
    rng = np.random.default_rng(seed)
    if cache.test_start is None:
        order = usable[np.random.default_rng(TEST_SPLIT_SEED).permutation(len(usable))]
        n_test = max(1, int(round(TEST_SHARE * len(order))))
        test_rows, usable = order[:n_test], order[n_test:]
        if seed != TEST_SPLIT_SEED:
            usable = usable[rng.permutation(len(usable))]
    else:
        test_rows = np.arange(cache.test_start, len(labels))
        usable = usable[rng.permutation(len(usable))]
    n_val = max(1, int(round(val_fraction * len(usable))))
    # Each split keeps its shuffled order: the first rows of one are a random sample of it (BatchNorm
    # recalibration reads the first 1024; an image folder's file order is its class order).
    val_rows, train_rows = usable[:n_val], usable[n_val:]
    pixels = PixelFile(cache.pixels, cache.shape, cache.dtype, cache.chunk_sha256, CHUNK_BYTES,
                       damaged=functools.partial(drop_damaged, cache.folder))
    channel_mean, channel_std = _statistics(pixels, train_rows, cache.scale, seed)
    mean, std = tuple(float(m) for m in channel_mean), tuple(float(v) for v in channel_std)

    def split(rows):
        return Images(pixels, rows, cache.scale, mean, std), torch.from_numpy(labels[rows])

    (train_x, train_y), (val_x, val_y), (test_x, test_y) = split(train_rows), split(val_rows), split(test_rows)
    return Dataset(name=spec, classes=cache.classes, train_x=train_x, train_y=train_y, val_x=val_x, val_y=val_y,
                   test_x=test_x, test_y=test_y, mean=mean, std=std,
                   test_source="official" if cache.test_start is not None else "held out")
