"""After the search: how much lighter int8 quantisation and structured pruning make the knee of
a Fashion-MNIST study, and what they cost in accuracy, all measured in this run against the
trained fp32 model (the baseline).

    python benchmarks/compression.py [--folder TRAINED_EXPORT] [--epochs 5] [--prune 0.3,0.5]

Without --folder, runs the README demo search (3 minutes), exports its knee and trains it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from knee import eas, trained_knee


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", help="a trained export (default: train the demo study's knee)")
    parser.add_argument("--epochs", type=int, default=5, help="training epochs of the knee")
    parser.add_argument("--prune", default="0.3,0.5", help="pruning fractions to try")
    parser.add_argument("--finetune-epochs", type=int, default=2)
    args = parser.parse_args()

    from eas.deploy.compress import comparison_rows
    from eas.units import table

    with tempfile.TemporaryDirectory() as work:
        started = time.time()
        folder = trained_knee(Path(work), args.epochs, args.folder)
        genome = json.loads((folder / "arch.json").read_text())["genome"]
        print(f"fp32 model: {genome}\n")
        results = [json.loads(eas("compress", str(folder), "--int8", "--out", str(Path(work) / "int8"), "--json",
                                  cwd=Path(work)))]
        for fraction in args.prune.split(","):
            results.append(json.loads(eas("compress", str(folder), "--prune", fraction, "--epochs",
                                          str(args.finetune_epochs), "--out", str(Path(work) / f"prune{fraction}"),
                                          "--json", "--quiet", cwd=Path(work))))
        for result in results:
            title = "int8 (onnxruntime, static, per-channel)" if result["method"] == "int8" else (
                f"pruned {result['ratio']:g} of the channels, fine-tuned {args.finetune_epochs} epoch(s): "
                f"{result['genome_after']}")
            rows, headers = comparison_rows(result)
            print(title)
            print(table(rows, headers) + "\n")
        print(f"whole benchmark {(time.time() - started) / 60:.0f} min")


if __name__ == "__main__":
    main()
