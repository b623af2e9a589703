"""Data-parallel training throughput: images per second of `eas train --nproc N` for 1 and 2
processes (the baseline: 1), the same global batch and epochs, on this machine's CPUs; with
the test accuracy each reached, to show that the same global batch trains the same model.

    python benchmarks/distributed_training.py [--folder EXPORT] [--data fashion-mnist] [--epochs 2] [--nproc 1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from knee import eas, report, trained_knee


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", help="an export (default: the demo study's knee)")
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--nproc", default="1,2")
    args = parser.parse_args()

    from eas.data.datasets import load_dataset
    from eas.units import table

    images = len(load_dataset(args.data).train_y)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        source = trained_knee(work, 1, args.folder)
        rows, baseline = [], None
        for nproc in (int(n) for n in args.nproc.split(",")):
            folder = work / f"p{nproc}"
            folder.mkdir()
            for name in ("arch.json", "model.py"):
                shutil.copy(source / name, folder / name)
            eas("train", str(folder), "--data", args.data, "--epochs", str(args.epochs), "--nproc", str(nproc),
                "--quiet", cwd=work)
            result = report(folder)
            rate = images * args.epochs / result["train_seconds"]
            baseline = baseline or rate
            rows.append([nproc, f"{rate:,.0f}", f"{rate / baseline:.2f}x", f"{result['test_accuracy']:.2%}",
                         f"{result['energy_kwh'] * 3.6e6:.0f} J ({result['energy_source']})"])
        print(f"{json.loads((source / 'arch.json').read_text())['genome']} on {args.data}, {args.epochs} epoch(s), "
              f"global batch {result['plan']['batch_size']}, {os.cpu_count()} CPU cores\n")
        print(table(rows, ["processes", "images/s", "vs 1 process", "test accuracy", "energy (all processes)"]))


if __name__ == "__main__":
    main()
