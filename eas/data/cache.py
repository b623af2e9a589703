"""The on-disk cache a dataset is decoded into once: raw pixels, labels and a header.

`$EAS_DATA_DIR/cache/<scheme>-<key>/` (default `~/.cache/eas`) holds `pixels.bin` (the rows of an
(N, C, H, W) array as stored: uint8 for images), `labels.npy` and `header.json` (shape, dtype,
scale, classes, where the official test split starts, what was skipped, the pixels' size,
modification time and SHA-256, the SHA-256 of each 4 MiB chunk of them, and its own SHA-256).
The key hashes what the source is (its files' names, sizes and modification times), the
resolution and the EAS version, so a changed source or a new EAS gets a new cache.

A cache is built in a temporary folder and renamed into place, so it is either complete or
absent; one process builds while the others wait on a lock and then read it. A cache whose size
no longer matches its header, or whose modification time changed and whose SHA-256 no longer
matches, is rebuilt, never read. A write that fails (a full disk) removes the partial folder.

What is cheap is checked at every open: the header's ranges, sizes, label counts. The pixels'
content is checked as it is first read: each chunk's SHA-256 the first time a process reads from
it (eas.data.images.PixelFile), so bytes changed behind an unchanged modification time are found
before they train anything. It costs one pass of SHA-256 over the file per process (1.7 GB/s
here: 32 ms for Fashion-MNIST's 55 MB, about 2 s for 3 GB of 224-px images), spread over the
first reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import eas
from eas.errors import UserError
from eas.jsonfile import read_json

logger = logging.getLogger(__name__)

FORMAT = 2  # 2: chunk hashes
HEADER, PIXELS, LABELS = "header.json", "pixels.bin", "labels.npy"
CHUNK_BYTES = 4 << 20


class CacheError(UserError):
    """The cache could not be written (no space, no permission)."""


def cache_root() -> Path:
    base = os.environ.get("EAS_DATA_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "eas")
    return Path(base) / "cache"


def cache_key(scheme: str, fingerprint: object) -> str:
    text = json.dumps({"format": FORMAT, "eas": eas.__version__, "scheme": scheme, "source": fingerprint},
                      sort_keys=True, default=str)
    return f"{scheme}-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


@dataclass(frozen=True)
class Cached:
    """An opened, checked cache."""

    folder: Path
    shape: tuple[int, ...]
    dtype: str
    scale: float
    labels: np.ndarray
    classes: tuple[str, ...]
    test_start: int | None  # rows from here on are the source's official test split
    skipped: int  # source files that could not be read (their rows carry label -1)
    skipped_example: str
    chunk_sha256: tuple[str, ...] = ()  # of each CHUNK_BYTES of the pixel file, checked as first read

    @property
    def pixels(self) -> Path:
        return self.folder / PIXELS


class Writer:
    """Receives a source's rows while a cache is built (rows may arrive in any order)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.header: dict = {}

    def allocate(self, count: int, row_shape: tuple[int, ...], dtype: str) -> Path:
        """Size the pixel file for `count` rows; workers write rows into it at their offsets."""
        self.header.update(shape=[count, *row_shape], dtype=np.dtype(dtype).str)
        path = self.folder / PIXELS
        with open(path, "wb") as handle:
            handle.truncate(count * int(np.prod(row_shape)) * np.dtype(dtype).itemsize)
        return path

    def write_array(self, x: np.ndarray) -> None:
        self.allocate(len(x), x.shape[1:], x.dtype.str)
        with open(self.folder / PIXELS, "r+b") as handle:
            for start in range(0, len(x), 4096):
                handle.write(np.ascontiguousarray(x[start:start + 4096]).tobytes())

    def finish(self, labels: np.ndarray, classes, scale: float, test_start: int | None = None,
               skipped: int = 0, skipped_example: str = "") -> None:
        np.save(self.folder / LABELS, np.asarray(labels, dtype=np.int64), allow_pickle=False)
        stat = (self.folder / PIXELS).stat()
        self.header.update(format=FORMAT, classes=list(classes), scale=float(scale), test_start=test_start,
                           skipped=int(skipped), skipped_example=skipped_example, size=stat.st_size,
                           mtime_ns=stat.st_mtime_ns, sha256=_sha256(self.folder / PIXELS),
                           labels_sha256=_sha256(self.folder / LABELS), chunk_bytes=CHUNK_BYTES,
                           chunk_sha256=chunk_hashes(self.folder / PIXELS))
        self.header["header_sha256"] = _header_hash(self.header)
        (self.folder / HEADER).write_text(json.dumps(self.header))


def _header_hash(header: dict) -> str:
    fields = {k: v for k, v in header.items() if k != "header_sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def chunk_hashes(path: Path) -> list[str]:
    hashes = []
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            hashes.append(hashlib.sha256(chunk).hexdigest())
    return hashes


def _header_problem(header: dict, size: int) -> str | None:
    """What is out of range in a header (cheap: no pixel is read)."""
    shape, scale, test_start = header.get("shape"), header.get("scale"), header.get("test_start")
    if not (isinstance(shape, list) and len(shape) == 4 and all(isinstance(d, int) for d in shape)
            and shape[0] >= 0 and all(d > 0 for d in shape[1:])):
        return f"its header's shape {str(shape)[:40]} is not (N, C, H, W)"
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        return f"its header's scale {str(scale)[:20]} is not a positive number"
    if test_start is not None and not (isinstance(test_start, int) and 0 <= test_start <= shape[0]):
        return f"its header's test split start {str(test_start)[:20]} is not a row"
    classes = header.get("classes")
    if not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        return "its header's classes are not a list of names"
    hashes = header.get("chunk_sha256")
    if header.get("chunk_bytes") != CHUNK_BYTES or not isinstance(hashes, list) or \
            len(hashes) != -(-size // CHUNK_BYTES) or not all(isinstance(h, str) and len(h) == 64 for h in hashes):
        return "its header's chunk hashes do not cover its pixels"
    if not (isinstance(header.get("skipped"), int) and header["skipped"] >= 0):
        return "its header's skipped count is not a count"
    return None


class CacheDamaged(UserError):
    """Pixels changed after the cache was written: the cache is dropped, to be rebuilt."""


def drop_damaged(folder: Path, why: str) -> CacheDamaged:
    """Make the next use rebuild the cache; the error to raise now."""
    with contextlib.suppress(OSError):
        (Path(folder) / HEADER).unlink()
    return CacheDamaged(f"the data cache {folder} is damaged ({why}); it was dropped and is rebuilt on the next run")


def _open(folder: Path) -> Cached | str:
    """The cache in `folder`, or why it cannot be used."""
    try:
        header = read_json(folder / HEADER, max_bytes=2**20)
        if header.get("header_sha256") != _header_hash(header):
            return "its header no longer matches its SHA-256"
        shape, dtype = tuple(int(v) for v in header["shape"]), np.dtype(header["dtype"])
        pixels = folder / PIXELS
        stat = pixels.stat()
        size = stat.st_size
        problem = _header_problem(header, size)
        if problem:
            return problem
        if header.get("format") != FORMAT or size != header["size"] or \
                size != int(np.prod(shape)) * dtype.itemsize:
            return f"its pixel file holds {size:,} bytes, its header says {header.get('size')}"
        # A file whose modification time moved may have been edited: its hash decides.
        if stat.st_mtime_ns != header.get("mtime_ns") and _sha256(pixels) != header["sha256"]:
            return "its pixels no longer match their SHA-256"
        if _sha256(folder / LABELS) != header["labels_sha256"]:
            return "its labels no longer match their SHA-256"
        labels = np.load(folder / LABELS, allow_pickle=False)
        if labels.shape != shape[:1] or labels.dtype != np.int64 or \
                (len(labels) and not -1 <= labels.min() <= labels.max() < len(header["classes"])):
            return "its labels do not fit its pixels and classes"
        return Cached(folder, shape, dtype.str, float(header["scale"]), labels,
                      tuple(str(c) for c in header["classes"]), header["test_start"],
                      int(header["skipped"]), str(header["skipped_example"]), tuple(header["chunk_sha256"]))
    except FileNotFoundError as error:  # no header: never built (or dropped); a header without its files: damaged
        return "missing" if Path(error.filename or "").name == HEADER else f"{Path(error.filename).name} is missing"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"unreadable ({str(error)[:200]})"


def cached(key: str, build: Callable[[Writer], None], what: str) -> Cached:
    """The cache named `key`, built by `build(writer)` first if it is missing or damaged."""
    root = cache_root()
    folder = root / key
    found = _open(folder)
    if isinstance(found, Cached):
        return found
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / f"{key}.lock", "a")  # noqa: SIM115 (closed by the with below)
    except OSError as error:
        raise CacheError(f"cannot write the data cache under {root} ({error.strerror}); set $EAS_DATA_DIR "
                         "to a writable folder") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait, then look again
        found = _open(folder)
        if isinstance(found, Cached):
            return found
        if found != "missing":
            logger.warning(f"the data cache {folder} cannot be used ({found}); rebuilding it")
        building = root / f"{key}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        try:
            building.mkdir()
            writer = Writer(building)
            build(writer)
            shutil.rmtree(folder, ignore_errors=True)
            building.rename(folder)
        except OSError as error:
            shutil.rmtree(building, ignore_errors=True)
            raise CacheError(f"cannot write the data cache for {what} under {root}: {error.strerror or error} "
                             "(the partial cache was removed; set $EAS_DATA_DIR to a folder with room)") from None
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    found = _open(folder)
    if not isinstance(found, Cached):
        raise CacheError(f"the data cache {folder} just written cannot be read back ({found})")
    return found
