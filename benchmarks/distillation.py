"""Knowledge distillation: a smaller student trained with and without a trained teacher, at the
same budget (epochs, batch, learning rate, seed), measured in this run. The teacher is the knee
of a Fashion-MNIST study; the student is that knee with half of each stage's channels pruned
away, trained from scratch (its baseline: the same training without the teacher).

    python benchmarks/distillation.py [--folder TRAINED_EXPORT] [--epochs 5] [--student-epochs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from knee import eas, report, trained_knee


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", help="a trained export to teach (default: train the demo study's knee)")
    parser.add_argument("--epochs", type=int, default=5, help="training epochs of the teacher")
    parser.add_argument("--student-epochs", type=int, default=3)
    parser.add_argument("--prune", type=float, default=0.5, help="how much narrower the student is")
    args = parser.parse_args()

    from eas.units import table

    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        started = time.time()
        teacher = trained_knee(work, args.epochs, args.folder)
        narrow = work / "narrow"
        eas("compress", str(teacher), "--prune", str(args.prune), "--out", str(narrow), "--quiet", cwd=work)
        rows, accuracies = [], {}
        for label, extra in (("without teacher (baseline)", []), ("with teacher", ["--teacher", str(teacher)])):
            student = work / label.split()[0]
            student.mkdir()
            for name in ("arch.json", "model.py"):  # the narrow genome, trained from scratch
                shutil.copy(narrow / name, student / name)
            eas("train", str(student), "--data", "fashion-mnist", "--epochs", str(args.student_epochs), "--quiet",
                *extra, cwd=work)
            result = report(student)
            accuracies[label] = result["test_accuracy"]
            rows.append([label, f"{result['test_accuracy']:.2%}", f"{result['train_seconds']:.0f} s",
                         f"{result['energy_kwh'] * 3.6e6:.0f} J ({result['energy_source']})",
                         f"{100 * (result['test_accuracy'] - accuracies['without teacher (baseline)']):+.2f} points"])
        print(f"teacher {json.loads((teacher / 'arch.json').read_text())['genome']}: test accuracy "
              f"{report(teacher)['test_accuracy']:.2%}")
        print(f"student {json.loads((narrow / 'arch.json').read_text())['genome']}, {args.student_epochs} epochs\n")
        print(table(rows, ["student", "test accuracy", "training time", "training energy", "vs baseline"]))
        print(f"\nwhole benchmark {(time.time() - started) / 60:.0f} min")


if __name__ == "__main__":
    main()
