"""The data path at real scale: an image folder larger than memory-hungry loaders can hold.

Makes a folder of 20,000 JPEGs at 256 px (Fashion-MNIST upscaled and tinted, 10 class folders),
then trains the mobile space's smallest network at 224 px for a fixed number of steps with
the same training step (EAS's TrainStep, channels_last, AdamW, batch 32), fed by:

- hand-written: a PyTorch Dataset that opens each JPEG with PIL, resizes the short side to 224,
  centre-crops and normalises, in a DataLoader with 2 worker processes (what a notebook does);
- eas, first use: `load_dataset("imagefolder@224:...")` decodes the folder once into the uint8
  cache (timed as setup), then batches are read from the cache and normalised a batch at a time;
- eas, cached: the same, with the cache already built (every later run, every later epoch);
- in-memory float32: the loader EAS had before (every image decoded into one float32 array,
  normalised into a second copy), on a subset it fits, its memory projected to the full folder.

Each runs in its own process; peak memory is that process's peak RSS (from wait4) and the peak
PSS summed over its process tree (sampled every 0.2 s: DataLoader workers count). Training
images/s is measured after the first 5 steps (worker start-up, first batches), so for the
hand-written loader it is what every epoch costs, and for EAS what every epoch after the first
costs; "data only" times 30 batches fetched without a training step (what the data path could
feed a device whose step is fast).
Goals (issue 23): peak RSS under 2 GB, at least 2x the hand-written loader's images/s.

    python benchmarks/data_pipeline.py [--work /tmp/eas-data-pipeline] [--images 20000] [--steps 100]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WARMUP = 5
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # what notebooks normalise with


def _write_images(job) -> int:
    from PIL import Image

    folder, side, start, images, labels, seed = job
    rng = np.random.default_rng(seed)
    for offset, (image, label) in enumerate(zip(images, labels, strict=True)):
        tint = rng.uniform(0.3, 1.0, 3)
        background = rng.uniform(0.0, 0.3, 3)
        grey = np.asarray(Image.fromarray(image).resize((side, side), Image.Resampling.BICUBIC), np.float32) / 255
        rgb = (background + grey[..., None] * (tint - background)) * 255
        Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).save(
            Path(folder) / str(label) / f"{start + offset:05d}.jpg", quality=90)
    return len(images)


def make_folder(folder: Path, count: int, side: int) -> None:
    marker = folder / f".complete-{count}-{side}"
    if marker.exists():
        return
    from multiprocessing import Pool

    from eas.data.datasets import FASHION_MNIST_FILES, _find_fashion_mnist, _read_idx

    shutil.rmtree(folder, ignore_errors=True)
    source = _find_fashion_mnist()
    images = _read_idx(source / FASHION_MNIST_FILES["train_x"], 16).reshape(-1, 28, 28)[:count]
    labels = _read_idx(source / FASHION_MNIST_FILES["train_y"], 8)[:count]
    for label in range(10):
        (folder / str(label)).mkdir(parents=True)
    jobs = [(str(folder), side, start, images[start:start + 500], labels[start:start + 500], start)
            for start in range(0, count, 500)]
    started = time.monotonic()
    with Pool(os.cpu_count()) as pool:
        made = sum(pool.imap_unordered(_write_images, jobs))
    print(f"made {made:,} JPEGs at {side} px in {time.monotonic() - started:.0f} s "
          f"({sum(f.stat().st_size for f in folder.rglob('*.jpg')) / 1e6:.0f} MB)", file=sys.stderr)
    marker.touch()


# -- one pipeline, in its own process ---------------------------------------------------------

def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class FolderDataset:
    """What a user writes by hand: decode, resize, crop and normalise each image, every epoch."""

    def __init__(self, root: Path, resolution: int):
        self.files = sorted(root.rglob("*.jpg"))
        self.labels = [int(f.parent.name) for f in self.files]
        self.resolution = resolution

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        import torch
        from PIL import Image

        with Image.open(self.files[index]) as image:
            image = image.convert("RGB")
        side = self.resolution
        scale = side / min(image.size)
        image = image.resize((max(side, round(image.size[0] * scale)), max(side, round(image.size[1] * scale))),
                             Image.Resampling.BILINEAR)
        left, top = (image.size[0] - side) // 2, (image.size[1] - side) // 2
        image = image.crop((left, top, left + side, top + side))
        x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255).permute(2, 0, 1)
        x = (x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
        return x, self.labels[index]


def _old_in_memory(root: Path, resolution: int, count: int, seed: int):
    """The path EAS had before the cache: every image decoded into float32 in one list, stacked
    into one array, split and normalised into a second copy (eas/data.py until issue 23)."""
    import torch

    from eas.data.imagefolder import _decode

    files = sorted(root.rglob("*.jpg"))
    files = [files[i] for i in np.sort(np.random.default_rng(seed).permutation(len(files))[:count])]
    arrays = [np.asarray(_decode(f, "RGB", resolution), np.float32).transpose(2, 0, 1) / 255 for f in files]
    x = np.stack(arrays)
    y = np.array([int(f.parent.name) for f in files])
    mean, std = x.mean(axis=(0, 2, 3)), x.std(axis=(0, 2, 3)) + 1e-6
    normalised = torch.from_numpy(((x - mean[:, None, None]) / std[:, None, None]).astype(np.float32))
    del arrays
    return normalised, torch.from_numpy(y)


def run_pipeline(args) -> dict:
    import torch

    from eas.arch.builder import build
    from eas.arch.space import load_space
    from eas.training.step import TrainStep, batches

    torch.manual_seed(0)
    root, resolution = Path(args.work) / "photos", args.resolution
    rss_start = _rss_mb()
    started = time.perf_counter()
    loader = None
    if args.run == "hand-written":
        from torch.utils.data import DataLoader

        loader = iter(DataLoader(FolderDataset(root, resolution), batch_size=args.batch, shuffle=True,
                                 num_workers=2, persistent_workers=True, drop_last=True))
        images = len(list(root.rglob("*.jpg")))
        next_batch = lambda: next(loader)  # noqa: E731
    elif args.run in ("eas-first-use", "eas-cached"):
        from eas.data.datasets import load_dataset

        task = load_dataset(f"imagefolder@{resolution}:{root}", seed=0)
        images = len(task.train_y)
        order = batches(images, args.batch, torch.Generator().manual_seed(0))

        def next_batch():
            index = next(order)
            return task.train_x[index], task.train_y[index]
    else:
        x, y = _old_in_memory(root, resolution, args.memory_subset, 0)
        images = len(y)
        order = batches(images, args.batch, torch.Generator().manual_seed(0))

        def next_batch():
            index = next(order)
            return x[index], y[index]
    setup = time.perf_counter() - started
    loading_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before any training
    space = load_space("mobile").for_task((3, resolution, resolution))
    smallest, _ = space.extremes((3, resolution, resolution), 10)
    model = build(smallest, (3, resolution, resolution), 10).to(memory_format=torch.channels_last)
    step = TrainStep(model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01), torch.device("cpu"),
                     "fp32", torch.channels_last)
    for index in range(args.steps):
        if index == WARMUP:
            timed_from = time.perf_counter()
        xb, yb = next_batch()
        step(xb, torch.as_tensor(yb))
    seconds = time.perf_counter() - timed_from
    # The data path alone (no training step): what it can feed a device whose step is fast. The
    # DataLoader's workers have batches queued: take those first.
    for _ in range(4 if loader else 0):
        next_batch()
    fetch_started = time.perf_counter()
    for _ in range(args.data_batches):
        next_batch()
    data_only = args.data_batches * args.batch / (time.perf_counter() - fetch_started)
    return {"data_only_per_s": data_only, "pipeline": args.run, "images": images, "setup_s": setup,
            "rss_start_mb": rss_start, "loading_peak_mb": loading_peak,
            "images_per_s": (args.steps - WARMUP) * args.batch / seconds, "network": smallest.encode()}


# -- the parent: run each pipeline in its own process and watch its memory ---------------------

def _tree_pss_mb(pid: int) -> float:
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) / 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measure(args, pipeline: str, env: dict) -> dict:
    command = [sys.executable, __file__, "--run", pipeline, *sys.argv[1:]]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
    peak_pss = 0.0
    while True:  # reaped here, not by Popen: wait4 gives the process's peak RSS
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        peak_pss = max(peak_pss, _tree_pss_mb(process.pid))
        time.sleep(0.2)
    output = process.stdout.read()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{pipeline} failed (exit {os.waitstatus_to_exitcode(status)})")
    result = json.loads(output.strip().splitlines()[-1])
    result["peak_pss_mb"] = peak_pss
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/tmp/eas-data-pipeline")
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--side", type=int, default=256, help="pixels of the generated JPEGs")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--data-batches", type=int, default=30, help="batches fetched without training")
    parser.add_argument("--memory-subset", type=int, default=2_000, help="images the float32 path loads")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        print(json.dumps(run_pipeline(args)))
        return
    from eas.units import table

    work = Path(args.work)
    make_folder(work / "photos", args.images, args.side)
    env = {**os.environ, "EAS_DATA_DIR": str(work / "eas-data")}
    shutil.rmtree(work / "eas-data", ignore_errors=True)
    results = [measure(args, name, env) for name in ("hand-written", "eas-first-use", "eas-cached", "in-memory")]
    base = results[0]["images_per_s"]
    rows = []
    for r in results:
        projected = ""
        if r["pipeline"] == "in-memory":
            # Loading alone, scaled to the whole folder: a lower bound (training comes on top).
            per_image = (r["loading_peak_mb"] - r["rss_start_mb"]) / r["images"]
            full = (r["rss_start_mb"] + per_image * args.images) / 1024
            projected = f" (at {args.images:,}: >= {full:.0f} GB)"
        rows.append([r["pipeline"], f"{r['images']:,}", f"{r['setup_s']:.1f}", f"{r['images_per_s']:.1f}",
                     f"{r['images_per_s'] / base:.2f}x", f"{r['data_only_per_s']:.0f}",
                     f"{r['data_only_per_s'] / results[0]['data_only_per_s']:.1f}x",
                     f"{r['peak_rss_mb'] / 1024:.2f} GB{projected}",
                     f"{r['peak_pss_mb'] / 1024:.2f} GB"])
    print(f"{args.images:,} JPEGs at {args.side} px -> {args.resolution} px; {args.steps} steps of {args.batch} "
          f"(images/s after {WARMUP}); network {results[0]['network']}; {os.cpu_count()} cores, "
          f"torch {__import__('torch').__version__}")
    print(table(rows, ["pipeline", "images", "setup s", "training images/s", "vs hand-written",
                       "data only images/s", "vs hand-written", "peak RSS (process)", "peak PSS (tree)"]))


if __name__ == "__main__":
    main()
