"""Image folders (one sub-folder per class, nested folders allowed) decoded into the data cache.

Decoding runs in worker processes that write each image's uint8 row straight into the cache's
pixel file, so neither they nor the parent ever hold the dataset. Light imports only (PIL, numpy):
the workers are spawned, and a worker that imported torch would pay for it.

With a resolution, each image is resized so its short side is the resolution and centre-cropped
(JPEGs are decoded at a reduced scale first where that is still larger: much faster for photos);
without one, every image must have the first readable image's size. The first readable image's
mode decides grayscale (L, 1, I, I;16, LA) or RGB (everything else; alpha dropped). A file that
cannot be read (broken, 0 bytes, a decompression bomb) is skipped and counted in the cache's
header; the loader warns about it, or refuses it with `--strict`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from eas.data import DataError
from eas.lazy import lazy_import

logger = logging.getLogger(__name__)

Image = lazy_import("PIL.Image")
tqdm = lazy_import("tqdm")

SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
GRAY_MODES = {"L", "1", "I", "I;16", "LA"}
PARALLEL_FROM = 256  # fewer images decode faster in this process than worker start-up costs
CHUNK = 64


def list_images(root: Path) -> tuple[list[str], list[Path], list[int]]:
    if not root.is_dir():
        raise DataError(f"imagefolder: {root} is not a folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if len(classes) < 2:
        raise DataError(f"imagefolder: {root} needs at least two class sub-folders")
    files, labels = [], []
    for label, name in enumerate(classes):
        found = sorted(f for f in (root / name).rglob("*") if f.suffix.lower() in SUFFIXES and f.is_file())
        files += found
        labels += [label] * len(found)
    if not files:
        raise DataError(f"imagefolder: no images found under {root} (looked for {', '.join(sorted(SUFFIXES))})")
    return classes, files, labels


def fingerprint(root: Path, files: list[Path], resolution: int | None) -> dict:
    """What identifies the folder's content without reading it: names, sizes, modification times."""
    entries = []
    for file in files:
        stat = file.stat()
        entries.append((str(file.relative_to(root)), stat.st_size, stat.st_mtime_ns))
    return {"root": str(root.resolve()), "files": entries, "resolution": resolution}


def _decode(file: Path, mode: str | None, resolution: int | None):
    """The image as a PIL image in its final mode and size, or raises what went wrong."""
    with warnings.catch_warnings():
        # A decompression bomb (a small file that expands to gigapixels) is an unreadable file.
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with Image.open(file) as image:
            mode = mode or ("L" if image.mode in GRAY_MODES else "RGB")
            if resolution and image.format == "JPEG":
                short = min(image.size)
                image.draft(mode, (image.size[0] * resolution // short, image.size[1] * resolution // short))
            image = image.convert(mode)
    if resolution:
        width, height = image.size
        scale = resolution / min(width, height)
        size = (max(resolution, round(width * scale)), max(resolution, round(height * scale)))
        image = image.resize(size, Image.Resampling.BILINEAR)
        left, top = (size[0] - resolution) // 2, (size[1] - resolution) // 2
        image = image.crop((left, top, left + resolution, top + resolution))
    return image


def _row(image) -> np.ndarray:
    array = np.asarray(image, dtype=np.uint8)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


UNREADABLE = (OSError, SyntaxError, ValueError)  # PIL raises all three for broken files


def decode_chunk(pixels: str, jobs: list[tuple[int, str]], mode: str, resolution: int | None,
                 size: tuple[int, int]) -> list[tuple[int, str, str]]:
    """Decode (row, file) jobs into the pixel file; returns (row, kind, message) for failures."""
    failures = []
    row_bytes = (1 if mode == "L" else 3) * size[0] * size[1]
    fd = os.open(pixels, os.O_WRONLY)
    try:
        for row, file in jobs:
            try:
                image = _decode(Path(file), mode, resolution)
            except (*UNREADABLE, Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
                failures.append((row, "unreadable", f"{file}: {str(error)[:160]}"))
                continue
            if image.size != size:
                failures.append((row, "size", f"{file} is {image.size[0]}x{image.size[1]}, the first image "
                                              f"{size[0]}x{size[1]}; pass a resolution"))
                continue
            data = np.ascontiguousarray(_row(image)).tobytes()
            if os.pwrite(fd, data, row * row_bytes) != row_bytes:
                raise OSError(f"short write to {pixels}")
    finally:
        os.close(fd)
    return failures


def _first_readable(files: list[Path], resolution: int | None):
    for file in files:
        try:
            return _decode(file, None, resolution)
        except (*UNREADABLE, Image.DecompressionBombError, Image.DecompressionBombWarning):
            continue
    return None


def build(root: Path, resolution: int | None, writer) -> None:
    classes, files, labels = list_images(root)
    first = _first_readable(files, resolution)
    if first is None:
        raise DataError(f"imagefolder: none of the {len(files):,} images under {root} can be read")
    mode, size = first.mode, first.size
    pixels = writer.allocate(len(files), (1 if mode == "L" else 3, size[1], size[0]), "uint8")
    jobs = [(row, str(file)) for row, file in enumerate(files)]
    chunks = [jobs[i:i + CHUNK] for i in range(0, len(jobs), CHUNK)]
    failures = []
    # A small folder decodes in a blink: no progress lines (they would precede any error line).
    show, say = sys.stderr.isatty() and len(files) >= PARALLEL_FROM, len(files) >= PARALLEL_FROM
    bar = tqdm.tqdm(total=len(files), unit="img", desc="decoding into the cache", file=sys.stderr) if show else None
    started = time.monotonic()
    if say and not show:
        logger.info(f"decoding {len(files):,} images under {root} into the data cache (once)")
    workers = min(os.cpu_count() or 1, 8)
    if len(files) < PARALLEL_FROM or workers == 1:
        for chunk in chunks:
            failures += decode_chunk(str(pixels), chunk, mode, resolution, size)
            bar and bar.update(len(chunk))
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(decode_chunk, str(pixels), chunk, mode, resolution, size) for chunk in chunks]
            for future, chunk in zip(futures, chunks, strict=True):
                failures += future.result()
                bar and bar.update(len(chunk))
    bar and bar.close()
    wrong_size = [message for _, kind, message in failures if kind == "size"]
    if wrong_size:
        raise DataError(f"imagefolder: images of mixed sizes ({wrong_size[0]})")
    broken = sorted(failures)
    labels = np.asarray(labels, dtype=np.int64)
    labels[[row for row, _, _ in broken]] = -1  # a skipped row is never part of any split
    if say and not show:
        logger.info(f"decoded {len(files) - len(broken):,} images in {time.monotonic() - started:.1f} s")
    # Broken files are recorded, not refused here: whether they are acceptable (--strict) is the
    # reader's call, and a cache does not depend on it.
    writer.finish(labels, classes, scale=1 / 255, skipped=len(broken),
                  skipped_example=broken[0][2] if broken else "")
