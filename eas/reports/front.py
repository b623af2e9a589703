"""Pure functions over a study's trial records: Pareto set, hypervolume, knee point, history.

The CLI and the Streamlit explorer both show what these return, so both show the same numbers.
Nothing here talks to a storage: records come from eas.study.reader.

Hypervolume convention: every objective is turned into a minimised, normalised value —
1 - accuracy for accuracy, value / reference for costs — so the fixed reference point is
(1, ..., 1) and the hypervolume lies in [0, 1]. The cost references are the largest
architecture of the space, measured when the study was created, times 1.1, or a constraint's
limit where that is smaller.
"""

from __future__ import annotations

import math

import numpy as np

from eas.errors import UserError
from eas.objectives import OBJECTIVES, Constraints
from eas.pareto import hypervolume_of_points, kendall_tau, minimised_values, pareto_mask
from eas.reports.time_to_beat import search_seconds
from eas.study import schema
from eas.study.records import TrialRecord, counts


def spent_energy_j(record: TrialRecord) -> float:
    """Training energy this trial cost the search: none when it reused another trial's result."""
    if schema.CACHED_FROM in record.attrs:
        return 0.0
    value = record.metrics.get("train_energy_j")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def minimised(records: list[TrialRecord], objectives: tuple[str, ...],
              reference: dict[str, float] | None = None) -> np.ndarray:
    """(n, d) matrix where smaller is better: -accuracy, or normalised as in the module doc."""
    return minimised_values([r.metrics for r in records], objectives, reference)


def feasible(records: list[TrialRecord], objectives: tuple[str, ...]) -> list[TrialRecord]:
    """Complete, feasible trials whose objective values are all finite."""
    return [r for r in records if r.state == "complete"
            and all(math.isfinite(r.value(o)) for o in objectives)]


def accuracy_interval(metrics: dict) -> tuple[float, float]:
    """The stored 95% interval of a validation accuracy; a point for results stored without one."""
    accuracy = metrics.get("accuracy")
    low, high = metrics.get("accuracy_low"), metrics.get("accuracy_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low <= high:
        return float(low), float(high)
    return (float(accuracy), float(accuracy)) if isinstance(accuracy, (int, float)) else (math.nan, math.nan)


def tied_pareto_mask(records: list[TrialRecord], objectives: tuple[str, ...]) -> np.ndarray:
    """The Pareto set when accuracies whose 95% intervals overlap count as equal. i removes j when
    it costs no more anywhere and either (a) is cheaper somewhere and its interval reaches j's
    (high_i >= low_j: a costlier model whose gain is within the noise leaves the front to the
    cheaper one), or (b) lies wholly above it (low_i > high_j).

    Only a kept model may remove another: in a chain A ~ B ~ C (A cheapest, each interval
    overlapping the next, C's wholly above A's), B goes because A ties it for less, but C stays,
    since B, its only remover, is gone. Models are decided in an order where every possible
    remover of a model comes before it (costs lexicographically, then the higher interval
    first), each against the kept ones only: O(n x kept)."""
    costs = [o for o in objectives if OBJECTIVES[o].direction == "minimize"]
    points = minimised(records, tuple(costs))
    if "accuracy" not in objectives:
        return pareto_mask(points)
    intervals = np.array([accuracy_interval(r.metrics) for r in records]).reshape(len(records), 2)
    low, high = intervals[:, 0], intervals[:, 1]
    keep = np.zeros(len(records), dtype=bool)
    kept = np.zeros(0, dtype=int)
    for j in np.lexsort((-low, *points.T[::-1])):
        cost_le = np.all(points[kept] <= points[j], axis=1)
        cheaper = np.any(points[kept] < points[j], axis=1)
        removed = cost_le & ((cheaper & (high[kept] >= low[j])) | (low[kept] > high[j]))
        if not removed.any():
            keep[j] = True
            kept = np.append(kept, j)
    return keep


def pareto_front(records: list[TrialRecord], objectives: tuple[str, ...]) -> list[TrialRecord]:
    """The Pareto set of the complete feasible trials, accuracy ties within their 95% intervals."""
    candidates = feasible(records, objectives)
    mask = tied_pareto_mask(candidates, objectives)
    return sorted((r for r, keep in zip(candidates, mask, strict=True) if keep),
                  key=lambda r: -r.value(objectives[0]))


def strict_front(records: list[TrialRecord], objectives: tuple[str, ...]) -> list[TrialRecord]:
    """The strict Pareto set (no ties within intervals), most accurate first: every trade-off a
    member offers, the accurate end included."""
    candidates = feasible(records, objectives)
    mask = pareto_mask(minimised(candidates, objectives)) if candidates else np.zeros(0, dtype=bool)
    return sorted((r for r, keep in zip(candidates, mask, strict=True) if keep),
                  key=lambda r: (-r.value(objectives[0]), r.number))


def spread_over_cost(front: list[TrialRecord], objectives: tuple[str, ...], k: int) -> list[TrialRecord]:
    """`k` members spread over the front's cost range, most accurate first: the most accurate
    member, the cheapest, and between them the member nearest each of k - 2 evenly spaced points
    of log cost (the study's first cost objective; ties to the cheaper). All of them when there
    are no more than k."""
    if len(front) <= k:
        return list(front)
    cost = next((o for o in objectives if OBJECTIVES[o].direction == "minimize"), None)
    if cost is None:
        return list(front[:k])
    logs = {r.number: math.log(max(r.value(cost), 1e-30)) for r in front}
    by_cost = sorted(front, key=lambda r: (logs[r.number], r.number))
    chosen = [front[0]] + ([by_cost[0]] if k > 1 and by_cost[0] is not front[0] else [])
    low, high = logs[by_cost[0].number], logs[by_cost[-1].number]
    for i in range(1, k - 1):
        if len(chosen) == k:
            break
        target = low + (high - low) * i / (k - 1)
        left = [r for r in by_cost if all(r is not c for c in chosen)]
        chosen.append(min(left, key=lambda r: (abs(logs[r.number] - target), logs[r.number])))
    while len(chosen) < k:  # the most accurate was also the cheapest: fill from the accurate end
        chosen.append(next(r for r in front if all(r is not c for c in chosen)))
    return sorted(chosen, key=lambda r: (-r.value(objectives[0]), r.number))


APPROACHED = 0.5  # a Pareto set whose costliest member uses less of a limit than this never came near it


def unapproached_limits(records: list[TrialRecord], objectives: tuple[str, ...], constraints: dict) -> list[dict]:
    """The counted or measured limits the strict Pareto set never came near: for each, the limit,
    the costliest member's value and that of the costliest complete trial. A limit the search
    never approached did not shape the front: something else (the fidelity, the budget) did."""
    front = strict_front(records, objectives)
    if not front or not isinstance(constraints, dict):
        return []
    def finite(among: list[TrialRecord], metric: str) -> list[float]:
        values = [r.metrics.get(metric) for r in among]
        return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]

    found = []
    for name, metric in Constraints.METRICS.items():
        limit, values = constraints.get(name), finite(front, metric)
        if not isinstance(limit, (int, float)) or limit <= 0 or not values or max(values) >= APPROACHED * limit:
            continue
        found.append({"limit": name, "metric": metric, "value": float(limit), "front_max": max(values),
                      "trials_max": max(finite(feasible(records, objectives), metric))})
    return found


def rank_agreement(records: list[TrialRecord]) -> list[dict]:
    """How well each rung ranks candidates like the next one: Kendall's tau between the
    accuracies at rung k and rung k+1, over the trials that reached both (the promoted ones)."""
    pairs: dict[int, list[tuple[float, float]]] = {}
    for record in records:
        if record.state in ("failed", "broken") or schema.CACHED_FROM in record.attrs:
            continue
        by_rung = {r["rung"]: r.get("accuracy") for r in record.attrs.get(schema.RUNGS) or []}
        for rung, accuracy in by_rung.items():
            following = by_rung.get(rung + 1)
            if isinstance(accuracy, (int, float)) and isinstance(following, (int, float)):
                pairs.setdefault(rung, []).append((accuracy, following))
    result = []
    for rung in sorted(pairs):
        values = np.array(pairs[rung])
        tau = kendall_tau(values[:, 0], values[:, 1]) if len(values) >= 3 else math.nan
        result.append({"from_rung": rung, "to_rung": rung + 1, "trials": len(values),
                       "kendall_tau": None if not math.isfinite(tau) else float(tau)})
    return result


def hypervolume(records: list[TrialRecord], objectives: tuple[str, ...], reference: dict[str, float]) -> float:
    """Normalised hypervolume of the feasible trials against the fixed reference point."""
    return hypervolume_of_points(minimised(feasible(records, objectives), objectives, reference))


def knee(front: list[TrialRecord], objectives: tuple[str, ...]) -> TrialRecord | None:
    """The balanced trade-off: the front member nearest the ideal (best accuracy, lowest cost)
    on two axes, each min-max scaled over the front.

    Cost is one axis, the mean of each cost's log-scaled, min-max-scaled values: MACs, params and
    energy move together, so as separate axes they would count cost three times; and on a log
    scale a model twice as large is as far from one half its size as that one is from a quarter
    of it (linear MACs pull the pick toward large models). Accuracy-like objectives form the
    other axis the same way, on their own scale."""
    if not front:
        return None
    def scaled(column: np.ndarray) -> np.ndarray:
        low, high = column.min(), column.max()
        return (column - low) / (high - low) if high > low else np.zeros_like(column)

    def axis(names: list[str], transform) -> np.ndarray:
        if not names:
            return np.zeros(len(front))
        columns = [scaled(transform(np.array([r.value(name) for r in front], dtype=float))) for name in names]
        return scaled(np.mean(columns, axis=0))

    gains = [o for o in objectives if OBJECTIVES[o].direction == "maximize"]
    costs = [o for o in objectives if OBJECTIVES[o].direction == "minimize"]
    shortfall = axis(gains, lambda values: -values)
    cost = axis(costs, lambda values: np.log(np.maximum(values, 0.0) + 1e-12))
    return front[int(np.argmin(np.hypot(shortfall, cost)))]


def hypervolume_history(records: list[TrialRecord], objectives: tuple[str, ...],
                        reference: dict[str, float], max_points: int | None = None) -> list[dict]:
    """Hypervolume after each finished trial (or, with `max_points`, after every k-th and the
    last), with the wall time and energy spent so far. The front grows trial by trial, so the
    cost follows the number of points drawn, not trials x trials."""
    finished = sorted((r for r in records if r.finished is not None), key=lambda r: r.finished)
    if not finished:
        return []
    step = 1 if not max_points else len(finished) // max_points + 1
    start = min(r.started or r.finished for r in finished)
    history, energy, hv = [], 0.0, 0.0
    front, grown = np.zeros((0, len(objectives))), False
    for index, record in enumerate(finished):
        energy += spent_energy_j(record)
        if feasible([record], objectives):
            front, grown = np.vstack([front, minimised([record], objectives, reference)]), True
        if index % step and index != len(finished) - 1:
            continue
        if grown:
            front, grown = front[pareto_mask(front)], False
            hv = hypervolume_of_points(front)
        history.append({"trial": record.number, "trials": index + 1, "seconds": record.finished - start,
                        "energy_j": energy, "hypervolume": hv})
    return history


PICKS = ("knee", "most-accurate", "smallest")


def select_trial(records: list[TrialRecord], objectives: tuple[str, ...], trial: int | None = None,
                 pick: str | None = None, limits=None) -> TrialRecord:
    """The trial to export: by number, or picked from the Pareto set after applying `limits`
    (an eas.objectives.Constraints): its knee, its most accurate or its smallest (fewest MACs)."""
    if trial is not None:
        match = [r for r in records if r.number == trial]
        if not match:
            raise UserError(f"no trial {trial} in this study (trials 0..{len(records) - 1})")
        if match[0].state != "complete":
            raise UserError(f"trial {trial} is {match[0].state}" + (f" ({match[0].reason})" if match[0].reason else "")
                            + "; export a complete, feasible trial")
        return match[0]
    if pick not in PICKS:
        raise UserError(f"unknown pick {pick!r} (known: {', '.join(PICKS)})")
    front = pareto_front(records, objectives)
    if limits is not None:
        front = [r for r in front if all(v <= 0 for v in limits.violations(r.metrics).values())]
    if not front:
        raise UserError("no complete, feasible trial" + (" within these limits" if limits else "") + " to pick from")
    if pick == "knee":
        return knee(front, objectives)
    if pick == "most-accurate":
        return max(front, key=lambda r: (r.metrics.get("accuracy", 0), -r.metrics.get("macs", 0)))
    return min(front, key=lambda r: (r.metrics.get("macs", 0), -r.metrics.get("accuracy", 0)))


def rung_counts(records: list[TrialRecord]) -> list[dict]:
    """Per rung: how many candidates finished it, and how many of those trained on."""
    counts: dict[int, dict] = {}
    for record in records:
        if record.state in ("failed", "broken") or schema.CACHED_FROM in record.attrs:
            continue
        for rung in record.attrs.get(schema.RUNGS) or []:
            entry = counts.setdefault(rung["rung"], {"rung": rung["rung"], "finished": 0, "trained_on": 0,
                                                     "steps": rung.get("steps")})
            entry["finished"] += 1
            entry["trained_on"] += bool(rung.get("go_on"))
    return [counts[k] for k in sorted(counts)]


def footprint(records: list[TrialRecord], objectives: tuple[str, ...], reference: dict[str, float]) -> dict:
    """What the whole search cost: the wall time its runs took (from its first trial to its last,
    a pause between two runs of a resumed study not counted: eas.reports.time_to_beat's
    search_seconds), the time and energy of all evaluations (reused results not counted again),
    with the energy's source, and hypervolume per kWh."""
    finished = [r for r in records if r.state != "broken" and r.finished is not None and r.started is not None
                and math.isfinite(r.finished) and math.isfinite(r.started)]
    evaluated = [r for r in records if schema.CACHED_FROM not in r.attrs and r.state != "broken"]
    energy = sum(float(r.metrics.get("evaluate_energy_j") or spent_energy_j(r)) for r in evaluated
                 if isinstance(r.metrics.get("evaluate_energy_j") or 0.0, (int, float)))
    seconds = sum(float(r.metrics.get("evaluate_seconds") or 0.0) for r in evaluated
                  if isinstance(r.metrics.get("evaluate_seconds") or 0.0, (int, float)))
    sources = sorted({str(r.metrics.get("energy_source")) for r in evaluated if r.metrics.get("energy_source")})
    kwh = energy / 3.6e6
    hv = hypervolume(records, objectives, reference)
    return {"wall_seconds": search_seconds(finished, max(r.finished for r in finished)) if finished
            else 0.0, "evaluate_seconds": seconds, "energy_j": energy, "energy_kwh": kwh,
            "energy_source": ", ".join(sources) or "-", "hypervolume": hv,
            "hypervolume_per_kwh": hv / kwh if kwh > 0 else None}


def time_split_total(records: list[TrialRecord]) -> dict[str, float]:
    """Seconds per phase of evaluation (training, validation, ...) summed over the trials."""
    total: dict[str, float] = {}
    for record in records:
        if schema.CACHED_FROM in record.attrs:
            continue
        split = record.metrics.get("time_split")
        if isinstance(split, dict):
            for phase, seconds in split.items():
                if isinstance(seconds, (int, float)) and math.isfinite(seconds):
                    total[str(phase)] = total.get(str(phase), 0.0) + float(seconds)
    return total


def trial_summary(record: TrialRecord) -> dict:
    """One trial in brief, for `eas show --json`: its state, the rung it reached, and its
    accuracy at each rung."""
    rungs = record.attrs.get(schema.RUNGS) or []
    return {"trial": record.number, "state": record.state, "genome": record.genome,
            "rung": rungs[-1]["rung"] if rungs else None,
            "rungs": [{k: r.get(k) for k in ("rung", "steps", "accuracy", "accuracy_low", "accuracy_high",
                                             "val_images", "go_on", "position", "results")} for r in rungs],
            "accuracy": record.metrics.get("accuracy"), "reason": record.reason,
            "reused_from": record.attrs.get(schema.CACHED_FROM)}


def front_document(records: list[TrialRecord], objectives: tuple[str, ...], reference: dict[str, float]) -> dict:
    """The study's counts, hypervolume, knee and Pareto set as JSON data (`eas search --json`,
    `eas show --json`)."""
    front = pareto_front(records, objectives)
    best = knee(front, objectives)
    return {"counts": counts(records), "hypervolume": hypervolume(records, objectives, reference),
            "knee": best.number if best else None,
            "pareto": [{"trial": r.number, "genome": r.genome, **r.metrics} for r in front]}
