"""Explorer speed on a study of 10,000 trials: load, Pareto computation, chart, page run.

Writes a synthetic EAS study (random genomes' costs, accuracies on a noisy trade-off curve)
into a temporary SQLite file, then times the pieces cold and the Pareto page run cold and
cached (AppTest, same process). Goal: cached page < 2 s. Baseline in the same run: a
brute-force O(n^2) Pareto mask on the same points, the approach that made dashboards slow.

    python benchmarks/explorer_speed.py [--trials 10000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from sqlalchemy import event

from eas.explorer import trial_rows
from eas.figures import pareto_figure
from eas.report import minimised, pareto_mask
from eas.space import load_space
from eas.study import schema
from eas.study.reader import load_study
from eas.study.schema import SearchSettings
from eas.units import table

ROOT = Path(__file__).resolve().parent.parent


def write_study(url: str, n: int) -> None:
    storage = optuna.storages.RDBStorage(url)

    @event.listens_for(storage.engine, "connect")
    def fast(connection, _):  # a throwaway file: durability does not matter here
        connection.execute("PRAGMA synchronous=OFF")
        connection.execute("PRAGMA journal_mode=MEMORY")

    storage.engine.dispose()
    space = load_space("tiny", (1, 28, 28))
    objectives = ("accuracy", "macs", "params", "energy")
    study = optuna.create_study(study_name="big", storage=storage, directions=["maximize"] + ["minimize"] * 3)
    settings = SearchSettings(space_name="tiny", space=space.definition, data="fashion-mnist", objectives=objectives,
                              constraints={}, fidelity={"epochs": 1.0}, input_shape=(1, 28, 28), num_classes=10)
    study.set_user_attr(schema.REFERENCE, {"macs": 2.5e6, "params": 5e4, "energy": 1.0})
    study.set_user_attr(schema.SCHEMA, schema.SCHEMA_VERSION)
    study.set_user_attr(schema.SETTINGS, settings.to_dict())
    rng = np.random.default_rng(0)
    params = space.parameters()
    distributions = {k: CategoricalDistribution(v) for k, v in params.items()}
    trials = []
    for _ in range(n):
        chosen = {k: v[rng.integers(len(v))] for k, v in params.items()}
        genome = space.arch_from_params(chosen).encode()
        macs = float(rng.uniform(2e5, 2.4e6))
        accuracy = float(np.clip(0.6 + 0.3 * np.log10(macs / 2e5) + rng.normal(0, 0.03), 0, 1))
        metrics = {"status": "ok", "accuracy": accuracy, "macs": macs, "params": macs / 40,
                   "inference_energy_j_per_1k": macs / 3e6, "latency_ms": macs / 1e6,
                   "energy_source": "estimated", "genome": genome}
        values = [accuracy, macs, macs / 40, macs / 3e6]
        trials.append(optuna.trial.create_trial(params=chosen, distributions=distributions, values=values,
                                                user_attrs={"genome": genome, "metrics": metrics,
                                                            "status": "ok"}))
    study.add_trials(trials)


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'big.db'}"
        _, write_s = timed(write_study, url, args.trials)
        study, load_s = timed(load_study, url, "big")
        rows, rows_s = timed(trial_rows, study.records, study.objectives)
        _, figure_s = timed(pareto_figure, rows, "macs", "accuracy")
        points = minimised(study.records, study.objectives)
        _, mask_s = timed(pareto_mask, points)
        sample = points[:2000]
        _, brute_s = timed(lambda p: [not any((p[j] <= p[i]).all() and (p[j] < p[i]).any()
                                              for j in range(len(p)) if j != i) for i in range(len(p))], sample)

        from streamlit.testing.v1 import AppTest

        os.environ["EAS_UI_STORAGE"] = url
        app = AppTest.from_file(str(ROOT / "eas" / "ui" / "app.py"), default_timeout=300)
        app.run()
        app.switch_page("app_pages/pareto.py")
        _, cold_s = timed(app.run)
        _, warm_s = timed(app.run)
        assert not app.exception, [e.value for e in app.exception]

    n = args.trials
    print(f"\nstudy of {n:,} trials ({write_s:.0f} s to write it)\n")
    print(table([
        ["load trials (read-only SQL on Optuna's tables)", f"{load_s:.2f}", ""],
        ["trial rows + Pareto set + knee", f"{rows_s:.2f}", ""],
        ["Pareto scatter figure", f"{figure_s:.2f}", ""],
        [f"Pareto mask, {n:,} points (eas.report)", f"{mask_s:.3f}", "1.00x"],
        ["brute-force O(n^2) mask, 2,000 points (baseline)", f"{brute_s:.3f}",
         f"~{brute_s * (n / 2000) ** 2 / mask_s:.0f}x slower at {n:,} (n^2 extrapolated)"],
        ["Pareto page, first run (loads, computes)", f"{cold_s:.2f}", ""],
        ["Pareto page, cached", f"{warm_s:.2f}", "goal < 2 s"],
    ], ["step", "seconds", "note"]))


if __name__ == "__main__":
    main()
