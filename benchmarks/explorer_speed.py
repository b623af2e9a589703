"""Reads of a study of 10,000 trials: `eas show` (text and --json, each a fresh process), the
explorer's pages on their first run in a fresh process (load included) and cached, and the
pieces (load, trial rows + Pareto set + knee, figure). Goal: every first load under 2 s.
Baselines in the same run: Optuna's own `load_study(...).get_trials()` of the same study, and a
brute-force O(n^2) Pareto mask on the same points.

The study (benchmarks/synthetic_study.py: Fashion-MNIST's tiny space, random genomes with their
exact costs, noisy accuracies) is written once to --keep (about 4 minutes) and reused.

    python benchmarks/explorer_speed.py [--trials 10000] [--keep /tmp/explorer-10k.db]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_study import settings_for, write_study  # noqa: E402

from eas.pareto import pareto_mask
from eas.reports.explorer import trial_rows  # noqa: E402
from eas.reports.figures import pareto_figure  # noqa: E402
from eas.reports.front import minimised  # noqa: E402
from eas.study.reader import load_study  # noqa: E402
from eas.units import table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = """
import os, sys, time
from streamlit.testing.v1 import AppTest
app = AppTest.from_file(sys.argv[1], default_timeout=300)
started = time.perf_counter(); app.run(); landing = time.perf_counter() - started
app.switch_page(sys.argv[2])
started = time.perf_counter(); app.run(); first = time.perf_counter() - started
started = time.perf_counter(); app.run(); cached = time.perf_counter() - started
assert not app.exception, [e.value for e in app.exception]
print(landing, first, cached)
"""


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def fresh_process(*args: str, env: dict | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})})
    return time.perf_counter() - started, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, default=Path("/tmp/explorer-10k.db"))
    args = parser.parse_args()
    url = f"sqlite:///{args.keep.resolve()}"
    if not args.keep.exists():
        space, settings = settings_for("tiny", "fashion-mnist", (1, 28, 28), 10, None, {"epochs": 1.0})
        write_study(url, "big", args.trials, space, settings)
    study, load_s = timed(load_study, url, "big")
    rows, rows_s = timed(trial_rows, study.records, study.objectives)
    _, figure_s = timed(pareto_figure, rows, "macs", "accuracy")
    points = minimised(study.records, study.objectives)
    _, mask_s = timed(pareto_mask, points)
    sample = points[:2000]
    _, brute_s = timed(lambda p: [not any((p[j] <= p[i]).all() and (p[j] < p[i]).any()
                                          for j in range(len(p)) if j != i) for i in range(len(p))], sample)
    _, optuna_s = timed(lambda: optuna.load_study(study_name="big", storage=url).get_trials())
    env = {"EAS_UI_STORAGE": url}
    show_s, _ = fresh_process("-m", "eas", "show", "big", "--storage", url, env=env)
    show_json_s, _ = fresh_process("-m", "eas", "show", "big", "--storage", url, "--json", env=env)
    pages = {}
    for page in ("pareto", "progress", "trial"):
        _, out = fresh_process("-c", PAGE, str(ROOT / "eas" / "ui" / "app.py"), f"app_pages/{page}.py", env=env)
        pages[page] = [float(v) for v in out.split()]

    n = len(study.records)
    print(f"\nstudy of {n:,} trials (SQLite)\n")
    print(table([
        ["Optuna: load_study().get_trials() (baseline)", f"{optuna_s:.2f}", "1.00x"],
        ["eas show (fresh process, all of it)", f"{show_s:.2f}", f"{show_s / optuna_s:.2f}x"],
        ["eas show --json (fresh process, every trial)", f"{show_json_s:.2f}", f"{show_json_s / optuna_s:.2f}x"],
        ["explorer: Studies page, first run", f"{pages['pareto'][0]:.2f}", f"{pages['pareto'][0] / optuna_s:.2f}x"],
        *[[f"explorer: {page} page, first run (loads the study)", f"{values[1]:.2f}", f"{values[1] / optuna_s:.2f}x"]
          for page, values in pages.items()],
        *[[f"explorer: {page} page, cached", f"{values[2]:.2f}", f"{values[2] / optuna_s:.2f}x"]
          for page, values in pages.items()],
        ["  load trials (read-only SQL, validated)", f"{load_s:.2f}", ""],
        ["  trial rows + Pareto set with ties + knee", f"{rows_s:.2f}", ""],
        ["  Pareto scatter figure", f"{figure_s:.2f}", ""],
        [f"  Pareto mask, {n:,} points", f"{mask_s:.3f}", ""],
        [f"  brute-force O(n^2) mask, 2,000 points (~{brute_s * (n / 2000) ** 2:.0f} s at {n:,})",
         f"{brute_s:.3f}", ""],
    ], ["read", "seconds", "vs Optuna's read"]))
    print("\ngoal: eas show and every first page run under 2 s")


if __name__ == "__main__":
    main()
