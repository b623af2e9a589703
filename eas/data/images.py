"""Images kept as stored (uint8 for every image source) and normalised a batch at a time.

A dataset's pixels live in its cache file on disk; a batch is read from the file with positional
reads (the operating system's page cache keeps what is hot), converted to float and normalised on
the device that trains on it. Nothing holds a float copy of the whole dataset, so a process's
memory is bounded by its batches, not by the dataset: a memory map would count every page it
ever touched as resident. On a GPU whose memory holds them, the rows are loaded there once.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from pathlib import Path

import numpy as np
import torch

GPU_SHARE = 0.5  # at most this share of a GPU's free memory holds a dataset's rows
READ_BYTES = 32 << 20  # a bulk read (statistics, loading onto a GPU) goes this much at a time


def rows_per_read(row_bytes: int) -> int:
    return max(1, READ_BYTES // row_bytes)


class PixelFile:
    """Rows of a raw (N, C, H, W) array in a file, read by index; safe to pickle (reopens).

    With `chunk_sha256` (the cache's hash of each `chunk_bytes` of the file), every chunk is
    checked the first time this process reads from it: `damaged(why)` makes the error raised
    (and drops the cache) when one no longer matches."""

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: str, chunk_sha256: tuple[str, ...] = (),
                 chunk_bytes: int = 4 << 20, damaged=None):
        self.path, self.shape, self.dtype = Path(path), tuple(shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(shape[1:])) * self.dtype.itemsize
        self.chunk_sha256, self.chunk_bytes, self.damaged = tuple(chunk_sha256), chunk_bytes, damaged
        self._verified: set[int] = set()
        self._fd: int | None = None

    def __getstate__(self):
        return {**self.__dict__, "_fd": None, "_verified": set()}

    def _verify(self, fd: int, first_byte: int, end_byte: int) -> None:
        """Check the chunks of [first_byte, end_byte) this process has not read before."""
        if not self.chunk_sha256:
            return
        for chunk in range(first_byte // self.chunk_bytes, (end_byte - 1) // self.chunk_bytes + 1):
            if chunk in self._verified:
                continue
            data = os.pread(fd, self.chunk_bytes, chunk * self.chunk_bytes)
            if chunk >= len(self.chunk_sha256) or hashlib.sha256(data).hexdigest() != self.chunk_sha256[chunk]:
                why = f"chunk {chunk} of {self.path.name} no longer matches its SHA-256"
                raise self.damaged(why) if self.damaged else OSError(f"{self.path}: {why}")
            self._verified.add(chunk)

    def _open(self) -> int:
        self._fd = os.open(self.path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)  # closed with the object, or at exit
        return self._fd

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The rows asked for, in the order asked; consecutive rows are read in one call."""
        fd = self._fd if self._fd is not None else self._open()
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        if not len(rows):
            return out
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        flat = np.empty((len(rows), self.row_bytes), dtype=np.uint8)
        start = 0
        breaks = np.flatnonzero(np.diff(ordered) != 1) + 1
        for end in [*breaks.tolist(), len(ordered)]:
            view = memoryview(flat[start:end]).cast("B")
            offset = int(ordered[start]) * self.row_bytes
            self._verify(fd, offset, offset + len(view))
            got = os.preadv(fd, [view], offset)
            if got != len(view):
                raise OSError(f"{self.path}: short read ({got} of {len(view)} bytes); the cache file changed")
            start = end
        out.reshape(len(rows), -1).view(np.uint8)[order] = flat
        return out


class Images:
    """A dataset split: its rows of a PixelFile (or of a tensor already in memory), the
    normalisation (pixel * scale - mean) / std, and the device batches are returned on.

    `images[index]` (a slice, tensor or array of row positions) is a normalised float32 batch;
    `subset(index)` is a view of some rows; `to(device)` says where batches go."""

    def __init__(self, source: PixelFile | torch.Tensor, rows: np.ndarray, scale: float,
                 mean: tuple[float, ...], std: tuple[float, ...], device: torch.device = torch.device("cpu")):
        self.source, self.rows, self.device = source, np.asarray(rows, dtype=np.int64), torch.device(device)
        self.scale, self.mean, self.std = float(scale), tuple(mean), tuple(std)
        std_t = torch.tensor(self.std, dtype=torch.float32)
        # x * gain + shift == (x * scale - mean) / std, one fused step on the device
        self._gain = (self.scale / std_t).view(1, -1, 1, 1).to(self.device)
        self._shift = (-torch.tensor(self.mean, dtype=torch.float32) / std_t).view(1, -1, 1, 1).to(self.device)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.rows), *tuple(self.source.shape[1:]))

    def __len__(self) -> int:
        return len(self.rows)

    def _positions(self, index) -> np.ndarray:
        if isinstance(index, slice):
            return self.rows[index]
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        return self.rows[np.asarray(index, dtype=np.int64)]

    def raw(self, index) -> torch.Tensor:
        """The stored pixels of some rows (uint8 for image sources), on this split's device."""
        rows = self._positions(index)
        if isinstance(self.source, torch.Tensor):
            return self.source[torch.from_numpy(rows).to(self.source.device)].to(self.device)
        return torch.from_numpy(self.source.read(rows)).to(self.device, non_blocking=True)

    def __getitem__(self, index) -> torch.Tensor:
        return self.raw(index).float().mul_(self._gain).add_(self._shift)

    def subset(self, index) -> Images:
        return Images(self.source, self._positions(index), self.scale, self.mean, self.std, self.device)

    def to(self, device) -> Images:
        """Batches returned on `device`. On a GPU with room, the rows move there once (as stored,
        uint8), so a step reads no file and copies nothing from the host."""
        device = torch.device(device)
        if device == self.device:
            return self
        source, rows = self.source, self.rows
        if device.type == "cuda" and isinstance(source, PixelFile):
            free, _ = torch.cuda.mem_get_info(device)
            if len(rows) * source.row_bytes <= GPU_SHARE * free:
                step = rows_per_read(source.row_bytes)
                source = torch.cat([torch.from_numpy(source.read(rows[i:i + step])).to(device)
                                    for i in range(0, len(rows), step)])
                rows = np.arange(len(rows))
        return Images(source, rows, self.scale, self.mean, self.std, device)
