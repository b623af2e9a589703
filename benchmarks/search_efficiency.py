"""Search efficiency: does EAS's default search find a better front than plain Optuna with the
same computing? Random search and Optuna's TPE, each training every candidate at the full
fidelity, against EAS's default (TPE proposing into 3 rungs, proposals that respect counted
limits), through the same evaluator, space, data and limit, 3 seeds each; and EAS's default with
its lower rungs on smaller images (`--rung-resolution 0.7`, EcoNAS-style).

Each method x seed is one unit (results/search_efficiency/<space>-<method>-seed<N>.json), run as
`eas search --cpu-budget`: every method gets the same CPU seconds (1 thread), so a unit that ran
beside other work got as much computing as one on an idle machine. A calibration unit trains 8
random candidates at the full fidelity with two seeds: Kendall's tau between them says whether
that fidelity ranks candidates stably enough to judge a front by.

The hypervolume counts only accuracies measured at the full fidelity (EAS's lower rungs do not
count), normalised by bounds fixed in the configuration (accuracy from 100% down to 50%; MACs,
parameters and inference energy on a log10 scale around the space's smallest and largest
architecture). Each configuration records the hash of the space it measured; when the built-in
space has changed since, its units go on measuring the frozen copy under benchmarks/spaces/
(`<name>-<hash>.yaml`), so a question keeps its space until all its units are done.

    python benchmarks/search_efficiency.py --space mobile --list
    setsid -w nice -n 19 python benchmarks/search_efficiency.py --space mobile --next
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import units

METHODS = {  # the flags that make each method, in the order a seed's units run; one evaluator for all
    "eas": [],  # EAS's defaults: TPE proposing into 3 rungs, eta 3 (first: it sizes the budget)
    "tpe": ["--sampler", "tpe", "--rungs", "1"],
    "random": ["--sampler", "random", "--rungs", "1"],
    # The same, its two lower rungs on 20-px images (0.7x of 28; the top rung at 28 px), as
    # resolution_fidelity found them to rank like 28 px for 0.57x the CPU: what does it save?
    "eas-lowres": ["--rung-resolution", "0.7"],
    # The peers' own methods (issue 52). Optuna's NSGA-II as Optuna ships it (population 16, every
    # candidate at the full fidelity), with the counted-limit guard every EAS sampler gets.
    "nsga2": ["--sampler", "nsga2", "--rungs", "1"],
}
SEEDS = (0, 1, 2)
SHARES = (0.25, 0.5, 0.75)  # of the CPU budget, for the anytime hypervolume
VERSION = 1

# One configuration per question. `space_hash` is the space definition these units measured;
# `bounds` fix the hypervolume's normalisation before any run: MACs and parameters from the
# counted smallest and largest architectures (/1.5, x1.5), inference energy (J per 1000 images,
# estimated on this machine: CPU time x 4 W) from those two measured (/3, x3).
CONFIGS = {
    "mobile": {
        "space": "mobile", "data": "fashion-mnist", "max_macs": "20M", "epochs": 1.0, "subset": 9000,
        "cpu_budget_seconds": 3000, "threads": 1, "accuracy_floor": 0.5, "calibration_candidates": 8,
        "space_hash": "f707f8d0dd44cd48",  # 3.04 M to 90.2 M MACs, 37.7 k to 4.78 M params at 28 px
        "bounds": {"macs": [2.0e6, 1.4e8], "params": [2.5e4, 7.2e6], "inference_energy_j_per_1k": [0.13, 29.4]},
    },
}


FROZEN_SPACES = Path(__file__).parent / "spaces"


def space_hash(name: str | Path) -> str:
    from eas.arch.space import load_space

    text = json.dumps(load_space(name).definition, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measured_space(settings: dict) -> str:
    """The space file a unit measures: the built-in space while it is the one of the
    configuration's hash, else its frozen copy."""
    name, wanted = settings["space"], settings["space_hash"]
    frozen = FROZEN_SPACES / f"{name}-{wanted}.yaml"
    for source in (name, str(frozen)):
        if (source == name or frozen.exists()) and space_hash(source) == wanted:
            return source
    raise SystemExit(f"space {name!r} changed since this configuration was made (hash {space_hash(name)}, "
                     f"units measured {wanted}) and {frozen} does not hold the old one: add a configuration "
                     "for the new space, keep this one for its results")


def units_of(config_name: str) -> list[units.Unit]:
    """Seeds outermost (every method's first seed is done before any second one), EAS first in
    each (its full-fidelity count is what sizes the budget), the calibration last."""
    config = CONFIGS[config_name]
    found = [units.Unit(f"{config_name}-{method}-seed{seed}",
                        {**config, "kind": "search", "method": method, "seed": seed})
             for seed in SEEDS for method in METHODS]
    return [*found, units.Unit(f"{config_name}-calibration", {**config, "kind": "calibration"})]


# -- running a unit ------------------------------------------------------------------------------

def run(unit: units.Unit) -> tuple[dict, object]:
    settings = unit.settings
    measured_space(settings)  # refuses a changed space without its frozen copy before any work
    if settings["kind"] == "calibration":
        return calibrate(settings)
    return search(unit.name, settings)


def search(name: str, settings: dict) -> tuple[dict, object]:
    """One `eas search` in its own process and study; every trial's figures kept as raw data."""
    from eas.study.reader import load_study

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/{name}.db"
        command = [sys.executable, "-m", "eas", "search", "--space", measured_space(settings),
                   "--data", settings["data"],
                   "--cpu-budget", f"{settings['cpu_budget_seconds']}s", "--seed", str(settings["seed"]),
                   "--study", name, "--storage", url, "--no-warm-start", "--quiet",
                   "--threads", str(settings["threads"]), "--trial-timeout", "24h",
                   "--max-macs", settings["max_macs"], "--epochs", str(settings["epochs"]),
                   "--subset", str(settings["subset"]), *METHODS[settings["method"]]]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "EAS_STUDIES_DIR": folder})
        if done.returncode != 0:
            raise SystemExit(f"{name}: eas search failed: {done.stderr.strip().splitlines()[-1:]}")
        loaded = load_study(url, name)
    trials = [trial_row(record) for record in sorted(loaded.records, key=lambda r: r.number)]
    return search_figures(trials, settings), {"trials": trials, "search_stderr_tail": done.stderr[-2000:]}


RAW_METRICS = ("status", "accuracy", "accuracy_low", "accuracy_high", "macs", "params",
               "inference_energy_j_per_1k", "latency_ms", "train_steps", "evaluate_seconds",
               "evaluate_cpu_seconds", "evaluate_energy_j", "energy_source")


def trial_row(record) -> dict:
    metrics = record.metrics
    rungs = record.attrs.get("rungs") or []
    return {"number": record.number, "state": record.state, "genome": record.genome,
            "started": record.started, "finished": record.finished,
            "cached_from": record.attrs.get("cached_from"),
            **{key: metrics.get(key) for key in RAW_METRICS},
            "rungs": [{k: r.get(k) for k in ("rung", "steps", "accuracy", "go_on")} for r in rungs]}


def calibrate(settings: dict) -> tuple[dict, object]:
    """`calibration_candidates` random candidates (under the limit) trained at the full fidelity
    with seeds 0 and 1."""
    import optuna

    from eas.arch.space import load_space
    from eas.data.datasets import load_dataset
    from eas.nas.candidate import counted_metrics, evaluate
    from eas.objectives import Constraints
    from eas.pareto import kendall_tau
    from eas.training.proxy import Fidelity

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    task = load_dataset(settings["data"])
    space = load_space(measured_space(settings), task.input_shape)
    limit = Constraints.parse(settings["max_macs"], None, None, None)
    fidelity = Fidelity(epochs=settings["epochs"], subset=settings["subset"])
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=12345))
    archs = []
    while len(archs) < settings["calibration_candidates"]:
        arch = space.sample(study.ask())
        if all(v <= 0 for v in limit.violations(counted_metrics(arch, task)).values()):
            archs.append(arch)
    runs = [[evaluate(a, task, fidelity, device="cpu", seed=seed).accuracy for a in archs] for seed in (0, 1)]
    figures = {"kendall_tau": kendall_tau(runs[0], runs[1]),
               "mean_abs_difference": float(np.mean(np.abs(np.array(runs[0]) - np.array(runs[1]))))}
    return figures, {"genomes": [a.encode() for a in archs], "accuracies": runs}


# -- figures from raw trials (used when the unit ends and again by the tables) -------------------

def normalised(row: dict, settings: dict) -> np.ndarray:
    """A full-fidelity result as a point of [0, 1]^4: 0 best, 1 the reference point."""
    floor = settings["accuracy_floor"]
    values = [(1 - row["accuracy"]) / (1 - floor)]
    for key, (low, high) in settings["bounds"].items():
        scaled = math.log10(max(row[key], 1e-12)) - math.log10(low)
        values.append(max(0.0, scaled / (math.log10(high) - math.log10(low))))  # below the bound: as good
    return np.array(values)


def full_fidelity(row: dict) -> bool:
    return (row["state"] == "complete" and row["status"] == "ok" and row["cached_from"] is None
            and all(units.finite(row.get(k)) for k in ("accuracy", "macs", "params", "inference_energy_j_per_1k")))


def anytime(trials: list[dict], settings: dict) -> list[tuple[float, float]]:
    """(CPU seconds spent evaluating so far, hypervolume so far) after each finished trial."""
    from eas.pareto import hypervolume_of_points

    points, curve, spent = [], [], 0.0
    for row in sorted((t for t in trials if t["finished"] is not None), key=lambda t: t["finished"]):
        if row["cached_from"] is None:
            spent += float(row.get("evaluate_cpu_seconds") or 0.0)
        if full_fidelity(row):
            points.append(normalised(row, settings))
        curve.append((spent, hypervolume_of_points(np.array(points)) if points else 0.0))
    return curve


def seconds_to_reach(trials: list[dict], settings: dict, target: float) -> float | None:
    """CPU seconds of evaluation a search took to reach hypervolume `target` (None: never)."""
    return next((spent for spent, hv in anytime(trials, settings) if hv >= target), None)


def search_figures(trials: list[dict], settings: dict) -> dict:
    curve = anytime(trials, settings)
    budget = settings["cpu_budget_seconds"]

    def at(seconds: float) -> float:
        reached = [hv for spent, hv in curve if spent <= seconds]
        return reached[-1] if reached else 0.0

    return {"final_hypervolume": curve[-1][1] if curve else 0.0,
            "full_fidelity_results": sum(full_fidelity(t) for t in trials),
            "trials": len(trials), "stopped": sum(t["state"] == "stopped" for t in trials),
            "evaluate_cpu_seconds": round(curve[-1][0], 1) if curve else 0.0,
            "hypervolume_at_share": {str(share): at(share * budget) for share in SHARES}}


def check(result: dict) -> str | None:
    """An impossible figure, or one its raw trials do not give."""
    figures, settings = result["figures"], result["settings"]
    if settings.get("kind") == "calibration":
        tau = figures.get("kendall_tau")
        return None if units.finite(tau) and -1 <= tau <= 1 else f"kendall_tau {str(tau)[:20]} is not in [-1, 1]"
    hv, count = figures.get("final_hypervolume"), figures.get("full_fidelity_results")
    if not (units.finite(hv) and 0 <= hv <= 1):
        return f"final_hypervolume {str(hv)[:20]} is not in [0, 1]"
    if not (isinstance(count, int) and count >= 0):
        return f"full_fidelity_results {str(count)[:20]} is not a count"
    trials = (result.get("raw") or {}).get("trials") if isinstance(result.get("raw"), dict) else None
    if not isinstance(trials, list) or not all(isinstance(t, dict) for t in trials):
        return "raw trials missing"
    try:
        again = search_figures(trials, settings)
    except (KeyError, TypeError, ValueError) as error:
        return f"raw trials malformed ({type(error).__name__}: {str(error)[:60]})"
    if again["full_fidelity_results"] != count or not math.isclose(again["final_hypervolume"], hv, abs_tol=1e-9):
        return (f"figures do not follow from its raw trials (hypervolume {hv:.4f} stored, "
                f"{again['final_hypervolume']:.4f} recomputed; {count} vs {again['full_fidelity_results']} "
                "full-fidelity results)")
    return None


def benchmark(config_name: str = "mobile") -> units.Benchmark:
    return units.Benchmark("search_efficiency", VERSION, units_of(config_name), run, check,
                           description=__doc__.split("\n\n")[0])


def all_units() -> list[units.Unit]:
    return [u for name in CONFIGS for u in units_of(name)]


def main() -> None:
    args = units.parse_args(__doc__.split("\n\n")[0], lambda p: p.add_argument(
        "--space", default="mobile", choices=sorted(CONFIGS), help="Which configuration's units."))
    units.main(benchmark(args.space), args)


if __name__ == "__main__":
    main()
