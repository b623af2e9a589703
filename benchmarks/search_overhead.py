"""Search overhead: all wall time of `eas search` that is not evaluating a candidate.

Runs a short search in this process (SQLite storage in a temporary folder, progress display
on, as a user would run it), then evaluates the same genomes in a plain loop with no Optuna
and no storage: the baseline. Goal: overhead < 5% of the run.

    python benchmarks/search_overhead.py [--trials 12] [--data fashion-mnist] [--subset 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from eas.arch.space import load_space
from eas.data.datasets import load_dataset
from eas.nas.budget import Budget
from eas.nas.candidate import evaluate
from eas.nas.live_view import LiveStudy
from eas.nas.loop import prepare_study, run_search
from eas.objectives import DEFAULT_OBJECTIVES
from eas.reports.progress import SearchProgress
from eas.study.reader import StudyReader
from eas.study.schema import SearchSettings
from eas.study.storage import harden_sqlite, open_storage
from eas.training.proxy import Fidelity
from eas.units import table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--space", default="hybrid")
    parser.add_argument("--subset", type=int, default=2000)
    args = parser.parse_args()
    task = load_dataset(args.data)
    space = load_space(args.space, task.input_shape)
    fidelity = Fidelity(epochs=1, subset=args.subset)
    settings = SearchSettings(space_name=space.name, space=space.definition, data=args.data,
                              objectives=DEFAULT_OBJECTIVES, constraints={}, fidelity=fidelity.to_dict(),
                              warm_start=False)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        storage = open_storage(url, heartbeat=10)
        study, _ = prepare_study(settings, "bench", storage, space, task, torch.device("cpu"))
        harden_sqlite(storage)
        reader = StudyReader(url, "bench")
        live = LiveStudy(reader, settings.objectives, reader.reference)
        budget = Budget(trials=args.trials)
        progress = SearchProgress(budget, enabled=True)
        started = time.perf_counter()
        summary = run_search(study, settings, space, task, live, budget, trial_timeout=600, seed=0,
                             on_trial=progress)
        search_wall = time.perf_counter() - started
        progress.close()
        genomes = [t.user_attrs["genome"] for t in study.trials if "cached_from" not in t.user_attrs]

    started = time.perf_counter()
    for genome in genomes:
        evaluate(genome, task, fidelity, device="cpu")
    plain_wall = time.perf_counter() - started

    overhead = search_wall - summary.evaluate_seconds
    print(f"\n{args.trials} trials of space {args.space} on {args.data} (subset {args.subset}, 1 epoch); "
          f"{summary.cached} reused genomes\n")
    print(table([
        ["plain loop: evaluate() per genome (baseline)", f"{plain_wall:.1f}", "1.00x", "-"],
        ["eas search (Optuna NSGA-II, SQLite, progress)", f"{search_wall:.1f}",
         f"{search_wall / plain_wall:.2f}x", f"{overhead:.2f} s = {overhead / search_wall:.1%}"],
    ], ["run", "wall s", "ratio", "overhead (not evaluating)"]))
    print(f"\nper trial: {overhead / max(1, summary.trials) * 1e3:.0f} ms of search overhead "
          f"(sampling, storage writes, duplicate lookup, progress/hypervolume)")


if __name__ == "__main__":
    main()
