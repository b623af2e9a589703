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

from eas.objectives import OBJECTIVES
from eas.study import schema
from eas.study.records import TrialRecord


def spent_energy_j(record: TrialRecord) -> float:
    """Training energy this trial cost the search: none when it reused another trial's result."""
    if schema.CACHED_FROM in record.attrs:
        return 0.0
    value = record.metrics.get("train_energy_j")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def minimised(records: list[TrialRecord], objectives: tuple[str, ...],
              reference: dict[str, float] | None = None) -> np.ndarray:
    """(n, d) matrix where smaller is better: -accuracy, or normalised as in the module doc."""
    columns = []
    for name in objectives:
        values = np.array([r.value(name) for r in records], dtype=float)
        if OBJECTIVES[name].direction == "maximize":
            columns.append(1.0 - values if reference is not None else -values)
        else:
            scale = reference.get(name) if reference else None
            columns.append(values / scale if scale else values)
    return np.stack(columns, axis=1) if columns else np.zeros((len(records), 0))


def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Non-dominated rows of a minimisation matrix (duplicates all stay on the front)."""
    n = len(points)
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    order = np.lexsort(points.T[::-1])  # sorted by first objective, ties by the next ones
    front: list[int] = []
    for index in order:
        point = points[index]
        if front:
            kept = points[front]
            dominated = np.any(np.all(kept <= point, axis=1) & np.any(kept < point, axis=1))
            if dominated:
                continue
        front.append(index)
    mask[front] = True
    return mask


def feasible(records: list[TrialRecord], objectives: tuple[str, ...]) -> list[TrialRecord]:
    """Complete, feasible trials whose objective values are all finite."""
    return [r for r in records if r.state == "complete"
            and all(math.isfinite(r.value(o)) for o in objectives)]


def pareto_front(records: list[TrialRecord], objectives: tuple[str, ...]) -> list[TrialRecord]:
    candidates = feasible(records, objectives)
    mask = pareto_mask(minimised(candidates, objectives))
    return sorted((r for r, keep in zip(candidates, mask, strict=True) if keep),
                  key=lambda r: -r.value(objectives[0]))


def hypervolume_of_points(points: np.ndarray) -> float:
    """Hypervolume of normalised minimisation points against the reference point (1, ..., 1)."""
    from optuna._hypervolume import compute_hypervolume  # the one place Optuna's private HV is used

    points = points[np.all(points < 1.0, axis=1)] if len(points) else points
    if len(points) == 0:
        return 0.0
    points = points[pareto_mask(points)]
    return float(compute_hypervolume(points, np.ones(points.shape[1]), assume_pareto=True))


def hypervolume(records: list[TrialRecord], objectives: tuple[str, ...], reference: dict[str, float]) -> float:
    """Normalised hypervolume of the feasible trials against the fixed reference point."""
    return hypervolume_of_points(minimised(feasible(records, objectives), objectives, reference))


def knee(front: list[TrialRecord], objectives: tuple[str, ...]) -> TrialRecord | None:
    """The front point closest to the ideal point after min-max scaling each objective:
    the balanced trade-off, where improving one objective starts to cost most in the others."""
    if not front:
        return None
    points = minimised(front, objectives)
    low, high = points.min(axis=0), points.max(axis=0)
    scaled = (points - low) / np.where(high > low, high - low, 1.0)
    return front[int(np.argmin(np.linalg.norm(scaled, axis=1)))]


def hypervolume_history(records: list[TrialRecord], objectives: tuple[str, ...],
                        reference: dict[str, float]) -> list[dict]:
    """Hypervolume after each finished trial, with the wall time and energy spent so far."""
    finished = sorted((r for r in records if r.finished is not None), key=lambda r: r.finished)
    if not finished:
        return []
    start = min(r.started or r.finished for r in finished)
    history, seen, energy = [], [], 0.0
    for record in finished:
        seen.append(record)
        energy += spent_energy_j(record)
        history.append({"trial": record.number, "trials": len(seen), "seconds": record.finished - start,
                        "energy_j": energy, "hypervolume": hypervolume(seen, objectives, reference)})
    return history


PICKS = ("knee", "most-accurate", "smallest")


def select_trial(records: list[TrialRecord], objectives: tuple[str, ...], trial: int | None = None,
                 pick: str | None = None, limits=None) -> TrialRecord:
    """The trial to export: by number, or picked from the Pareto set after applying `limits`
    (an eas.objectives.Constraints): its knee, its most accurate or its smallest (fewest MACs)."""
    from eas.errors import UserError

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
