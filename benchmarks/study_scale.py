"""Bookkeeping against study size: what a search pays per trial, outside training, when its study
already holds 100, 1,000 or 10,000 trials (issue: the cost must not grow with the study).

For each size, a synthetic multi-fidelity study (benchmarks/synthetic_study.py, tiny space on
digits, EAS's default sampler, TPE) is written to a temporary SQLite file; then a worker joins it
(the one-time reads of the whole study, and a first trial, are timed apart) and runs real trials of a few optimiser
steps. Per trial it times: the live view's refresh (duplicate-genome index, progress counts,
front and hypervolume), the proposal (sampler + constraint guard + duplicate check), the rung
decision (ranking among every result at the rung), and everything else outside evaluate()
(Optuna's ask/tell, storage writes). Baseline: the same at 100 trials, in the same run.

    python benchmarks/study_scale.py [--sizes 100,1000,10000] [--trials 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_study import settings_for, write_study  # noqa: E402

from eas.data.datasets import load_dataset  # noqa: E402
from eas.nas.budget import Budget
from eas.nas.live_view import LiveStudy  # noqa: E402
from eas.nas.loop import TrialRunner, run_search  # noqa: E402
from eas.nas.rungs import Ladder  # noqa: E402
from eas.study.reader import StudyReader  # noqa: E402
from eas.study.storage import harden_sqlite, open_storage  # noqa: E402
from eas.training.proxy import Fidelity  # noqa: E402
from eas.units import table  # noqa: E402


def timed(fn):
    """`fn`, adding up the seconds spent in it in `.seconds` (a function: it binds as a method)."""
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            wrapper.seconds += time.perf_counter() - started

    wrapper.seconds = 0.0
    return wrapper


def measure(n: int, trials: int, task, folder: Path) -> dict:
    fidelity = Fidelity(epochs=1, max_steps=9, batch_size=64)
    ladder = Ladder.make(fidelity.total_steps(len(task.train_y)), 2, 3)
    space, settings = settings_for("tiny", "digits", task.input_shape, task.num_classes, ladder, fidelity.to_dict())
    url = f"sqlite:///{folder / f'scale{n}.db'}"
    started = time.perf_counter()
    write_study(url, "scale", n, space, settings)
    write_s = time.perf_counter() - started

    import optuna

    storage = open_storage(url, heartbeat=10)
    harden_sqlite(storage)
    study = optuna.load_study(study_name="scale", storage=storage)
    started = time.perf_counter()
    reader = StudyReader(url, "scale")
    live = LiveStudy(reader, settings.objectives, reader.reference)
    live.refresh()
    join_s = time.perf_counter() - started

    # One untimed trial first: Optuna's storage cache reads the whole study once per process.
    warm_up = time.perf_counter()
    run_search(study, settings, space.for_task(task.input_shape), task, live, Budget(trials=1), trial_timeout=600,
               seed=n)
    join_s += time.perf_counter() - warm_up

    refresh = live.refresh = timed(live.refresh)
    decide = TrialRunner._decide = timed(ORIGINAL_DECIDE)
    from eas.nas import proposals

    guard = proposals.ConstraintAwareSampler.sample_relative = timed(ORIGINAL_PROPOSE)
    started = time.perf_counter()
    summary = run_search(study, settings, space.for_task(task.input_shape), task, live, Budget(trials=trials),
                         trial_timeout=600, seed=n)
    wall = time.perf_counter() - started
    per = 1e3 / summary.trials
    outside = (wall - summary.evaluate_seconds) * per
    return {"n": n, "write_s": write_s, "join_s": join_s, "trials": summary.trials,
            "refresh_ms": refresh.seconds * per, "propose_ms": guard.seconds * per, "decide_ms": decide.seconds * per,
            "outside_ms": outside, "other_ms": outside - (refresh.seconds + guard.seconds) * per}


from eas.nas import proposals as _proposals  # noqa: E402

ORIGINAL_DECIDE = TrialRunner._decide
ORIGINAL_PROPOSE = _proposals.ConstraintAwareSampler.sample_relative


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--trials", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = load_dataset("digits")
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for n in (int(s) for s in args.sizes.split(",")):
            results.append(measure(n, args.trials, task, Path(folder)))
            print(f"  {n:,} trials measured", file=sys.stderr)
    base = results[0]
    rows = []
    for r in results:
        rows.append([f"{r['n']:,}", f"{r['join_s']:.2f}", f"{r['refresh_ms']:.0f}", f"{r['propose_ms']:.0f}",
                     f"{r['decide_ms']:.0f}", f"{r['other_ms']:.0f}", f"{r['outside_ms']:.0f}",
                     f"{r['outside_ms'] / base['outside_ms']:.2f}x"])
    print(f"\nper trial, outside evaluate(); {args.trials} real trials at each study size (tiny space, digits, "
          "2 rungs; decide is inside evaluate, shown apart)\n")
    print(table(rows, ["study size", "join s (once)", "refresh ms", "propose ms", "decide ms", "storage+optuna ms",
                       "outside ms", f"vs {base['n']:,}"]))


if __name__ == "__main__":
    main()
