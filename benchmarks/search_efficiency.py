"""Search efficiency: does EAS's default search find a better front than plain Optuna in the
same time? Random search, Optuna's default multi-objective sampler (TPE) and NSGA-II, each
training every candidate at the full fidelity, against EAS's default (multi-fidelity rungs,
TPE proposing into them, proposals that respect counted limits), all through the same
evaluator, space, data and wall-clock budget, several seeds each.

Fixed before any run, and printed: the full fidelity, the normalisation and the reference
point of the hypervolume (accuracy from 100% down to --accuracy-floor; MACs, parameters and
inference energy on a log10 scale between the space's smallest and largest architecture).
A method's hypervolume counts only accuracies measured at that full fidelity (EAS's lower
rungs do not count). Before the runs, a few random candidates are trained at the full
fidelity with two seeds: Kendall's tau between the two says whether that fidelity ranks
candidates stably enough to judge a front by.

    python benchmarks/search_efficiency.py [--space tiny] [--data fashion-mnist] [--budget 4m]
        [--seeds 0,1,2] [--epochs 2] [--subset 9000] [--methods random,tpe,nsga2,eas]

Prints anytime hypervolume against wall time and against energy (median [min, max] over
seeds), the time each method needed to reach plain NSGA-II's final hypervolume, and ratios
against random search measured in the same run; writes everything to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

METHODS = {  # the flags that make each method; every one uses the same evaluator
    "random": ["--sampler", "random", "--rungs", "1"],
    "tpe": ["--sampler", "tpe", "--rungs", "1"],
    "nsga2": ["--sampler", "nsga2", "--rungs", "1", "--population", "8"],
    "eas": [],  # EAS's defaults: TPE proposing into 3 rungs, eta 3
    # Not in the default list: EAS's evolution proposer in the same rungs, to tell the
    # proposer's share of the result from the rungs'.
    "evolution": ["--sampler", "evolution"],
}
FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def normaliser(space, task, floor: float):
    """Objective -> [0, 1] maps (0 best, 1 = the reference point), fixed before the runs."""
    import torch

    from eas.arch.counting import arch_cost
    from eas.search.candidate import Candidate
    from eas.training.proxy import Fidelity

    smallest, largest = space.extremes(task.input_shape, task.num_classes)
    bounds = {}
    for key, attribute in (("macs", "macs"), ("params", "params")):
        low = getattr(arch_cost(smallest, task.input_shape, task.num_classes), attribute)
        high = getattr(arch_cost(largest, task.input_shape, task.num_classes), attribute)
        bounds[key] = (low / 1.5, high * 1.5)
    energies = []
    for arch in (smallest, largest):
        torch.manual_seed(0)
        candidate = Candidate(arch, task, Fidelity(), "cpu")
        candidate.measure_latency()  # latency and inference energy, in the study's default runtime
        energies.append(candidate.metrics["inference_energy_j_per_1k"])
    bounds["inference_energy_j_per_1k"] = (energies[0] / 3, energies[1] * 3)

    def normalise(metrics: dict) -> np.ndarray:
        values = [(1 - metrics["accuracy"]) / (1 - floor)]
        for key, (low, high) in bounds.items():
            scaled = math.log10(max(metrics[key], 1e-12)) - math.log10(low)
            values.append(scaled / (math.log10(high) - math.log10(low)))
        return np.array(values)

    return normalise, bounds


def hypervolume(points: list[np.ndarray]) -> float:
    from eas.reports.pareto import hypervolume_of_points

    return hypervolume_of_points(np.array(points)) if points else 0.0


def calibrate(space, task, fidelity, count: int) -> dict:
    """Train `count` random candidates at the full fidelity with seeds 0 and 1."""
    import optuna
    from scipy.stats import kendalltau

    from eas.search.candidate import evaluate

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=12345))
    archs = [space.sample(study.ask()) for _ in range(count)]
    runs = [[evaluate(a, task, fidelity, device="cpu", seed=seed).accuracy for a in archs] for seed in (0, 1)]
    return {"accuracies": runs, "kendall_tau": float(kendalltau(runs[0], runs[1]).statistic),
            "mean_abs_difference": float(np.mean(np.abs(np.array(runs[0]) - np.array(runs[1]))))}


def run_method(method: str, seed: int, args, folder: Path) -> dict:
    """One search in its own process and study; the anytime curves of its full-fidelity results."""
    from eas.study.reader import load_study

    name = f"{method}-{seed}"
    url = f"sqlite:///{folder / name}.db"
    command = [sys.executable, "-m", "eas", "search", "--space", args.space, "--data", args.data, "--budget",
               args.budget, "--seed", str(seed), "--study", name, "--storage", url, "--no-warm-start", "--quiet",
               "--epochs", str(args.epochs), "--subset", str(args.subset), *METHODS[method], *args.extra]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "EAS_STUDIES_DIR": str(folder)})
    if done.returncode != 0:
        raise SystemExit(f"{method} seed {seed} failed: {done.stderr.strip().splitlines()[-1:]}")
    loaded = load_study(url, name)
    # The clock starts with the first trial: start-up checks (data, reference point) are the same for all.
    started = min((r.started for r in loaded.records if r.started), default=0.0)
    events = []  # (seconds since the search began, energy so far, full-fidelity metrics or None)
    energy = 0.0
    for record in sorted((r for r in loaded.records if r.finished), key=lambda r: r.finished):
        if "cached_from" not in record.attrs:
            energy += float(record.metrics.get("evaluate_energy_j") or 0.0)
        full = record.state == "complete" and record.metrics.get("status") == "ok"
        events.append((record.finished - started, energy, dict(record.metrics) if full else None))
    return {"method": method, "seed": seed, "events": events, "wall": events[-1][0] if events else 0.0,
            "trials": len(loaded.records), "full_fidelity": sum(e[2] is not None for e in events),
            "stopped": sum(r.state == "stopped" for r in loaded.records)}


def curve(run: dict, normalise) -> list[tuple[float, float, float]]:
    """(seconds, energy, hypervolume) after each finished trial."""
    points, result = [], []
    for seconds, energy, metrics in run["events"]:
        if metrics is not None:
            points.append(normalise(metrics))
        result.append((seconds, energy, hypervolume(points)))
    return result


def at(series: list[tuple[float, float, float]], limit: float, axis: int) -> float:
    """Hypervolume reached by `limit` seconds (axis 0) or joules (axis 1)."""
    reached = [hv for *x, hv in series if x[axis] <= limit]
    return reached[-1] if reached else 0.0


def time_to(series, target: float) -> float | None:
    return next((seconds for seconds, _, hv in series if hv >= target - 1e-12), None)


def median_time(reach: list[float | None]) -> float | None:
    """Median over every seed, a seed that never reached the target counting as later than any
    that did; None when the median seed did not reach it."""
    ordered = sorted(reach, key=lambda t: math.inf if t is None else t)
    middle = ordered[(len(ordered) - 1) // 2: len(ordered) // 2 + 1]
    return None if None in middle else statistics.mean(middle)


def reach_text(reach: list[float | None]) -> str:
    if not reach:
        return "-"
    hits = sum(t is not None for t in reach)
    median = median_time(reach)
    return (f"{median:.0f} s" if median is not None else "not reached") + f" ({hits}/{len(reach)} seeds)"


def spread(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.4f} [{min(values):.4f}, {max(values):.4f}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--space", default="tiny")
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--budget", default="4m")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--subset", type=int, default=9000)
    parser.add_argument("--methods", default="random,tpe,nsga2,eas")
    parser.add_argument("--accuracy-floor", type=float, default=0.5)
    parser.add_argument("--calibration", type=int, default=8, help="candidates trained twice before the runs")
    parser.add_argument("--target", type=float, help="time to this hypervolume instead of NSGA-II's final "
                        "(for a run without nsga2, e.g. EAS alone against an earlier table)")
    parser.add_argument("--out", default="search_efficiency.json")
    parser.add_argument("extra", nargs="*", help="more `eas search` options for every method, after --")
    args = parser.parse_args()

    from eas.arch.space import load_space
    from eas.data.datasets import load_dataset
    from eas.training.proxy import Fidelity
    from eas.units import parse_seconds, table

    task = load_dataset(args.data)
    space = load_space(args.space, task.input_shape)
    fidelity = Fidelity(epochs=args.epochs, subset=args.subset)
    normalise, bounds = normaliser(space, task, args.accuracy_floor)
    budget = parse_seconds(args.budget, "--budget")
    print(f"space {args.space}, data {args.data}, budget {args.budget} per run, seeds {args.seeds}")
    print(f"full fidelity: {args.epochs:g} epoch(s) x {args.subset} images = "
          f"{fidelity.total_steps(len(task.train_y))} steps; every method's hypervolume counts only these")
    print("hypervolume normalisation (fixed before the runs; reference point = 1 on every axis):")
    print(f"  accuracy  (1 - acc) / (1 - {args.accuracy_floor}): 100% -> 0, {args.accuracy_floor:.0%} -> 1")
    for key, (low, high) in bounds.items():
        print(f"  {key:9} log10 scale, {low:.4g} -> 0, {high:.4g} -> 1")

    started = time.time()
    stability = calibrate(space, task, fidelity, args.calibration)
    print(f"\nfull-fidelity ranking stability, {args.calibration} random candidates x seeds 0 and 1: Kendall tau "
          f"{stability['kendall_tau']:+.2f}, mean |accuracy difference| {stability['mean_abs_difference']:.2%} "
          f"({time.time() - started:.0f} s)")

    methods = args.methods.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for seed in seeds:  # seeds outermost: a slow period of the machine hits every method alike
            for method in methods:
                run = run_method(method, seed, args, Path(folder))
                runs.append(run)
                final = curve(run, normalise)[-1][2] if run["events"] else 0.0
                print(f"  {method:7} seed {seed}: {run['trials']} trials, {run['full_fidelity']} at full fidelity, "
                      f"hypervolume {final:.4f}", flush=True)
    curves = {(r["method"], r["seed"]): curve(r, normalise) for r in runs}
    energy_scale = statistics.median(c[-1][1] for c in curves.values() if c)

    def per_method(method, value):
        return [value(curves[(method, s)], next(r for r in runs if r["method"] == method and r["seed"] == s))
                for s in seeds]

    finals = {m: per_method(m, lambda c, r: c[-1][2] if c else 0.0) for m in methods}
    Path(args.out).write_text(json.dumps({"args": vars(args), "bounds": bounds, "stability": stability,
                                          "runs": runs, "finals": finals}, indent=1, default=str))
    target = args.target or (statistics.median(finals["nsga2"]) if "nsga2" in finals else None)
    rows = []
    for method in methods:
        row = [method]
        row += [spread(per_method(method, lambda c, r, f=f: at(c, f * budget, 0))) for f in FRACTIONS[:3]]
        row += [spread(finals[method])]
        row += [spread(per_method(method, lambda c, r, f=f: at(c, f * energy_scale, 1))) for f in (0.25, 0.5)]
        reach = per_method(method, lambda c, r: time_to(c, target)) if target is not None else []
        row += [reach_text(reach)]
        row += [f"{statistics.median(finals[method]) / statistics.median(finals['random']):.2f}x"
                if "random" in finals and statistics.median(finals["random"]) else "-"]
        row += [f"{statistics.median(per_method(method, lambda c, r: r['full_fidelity'])):.0f}"]
        rows.append(row)
    print(f"\nanytime hypervolume, median [min, max] over seeds {args.seeds} (time from each search's first "
          f"trial; energy in shares of the median run's total, {energy_scale:.0f} J, estimated unless a counter "
          "was readable):")
    print(table(rows, ["method", f"HV @ {budget * .25:.0f}s", f"HV @ {budget * .5:.0f}s",
                       f"HV @ {budget * .75:.0f}s", "final HV", "HV @ 25% energy", "HV @ 50% energy",
                       f"time to NSGA-II's final ({target:.4f})" if target else "time to NSGA-II's final",
                       "final vs random", "full-fidelity results"]))
    if "eas" in finals and target is not None:
        eas_reach = median_time(per_method("eas", lambda c, r: time_to(c, target)))
        if eas_reach is not None:
            print(f"\nEAS reached NSGA-II's final hypervolume after {eas_reach:.0f} s (median over seeds), "
                  f"{eas_reach / budget:.2f}x of the budget NSGA-II used (goal: at most 0.5x)")
        else:
            print("\nEAS did not reach NSGA-II's final hypervolume within the budget in most seeds "
                  "(goal: within half of it)")
    if "eas" in finals and "random" in finals:
        ratio = statistics.median(finals["eas"]) / statistics.median(finals["random"])
        print(f"EAS final hypervolume {ratio:.2f}x random search's (goal: at least 1.10x)")
    print(f"\nall runs and curves: {args.out}; whole benchmark {(time.time() - started) / 60:.0f} min")


if __name__ == "__main__":
    main()
