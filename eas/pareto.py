"""The Pareto and hypervolume maths, on plain numbers: what the search ranks by and what the
reports show. Pure numpy (Optuna's private hypervolume is wrapped here, in one place).

Convention: rows are points, columns objectives, smaller is better. Normalised points (1 -
accuracy, cost / reference) have the reference point (1, ..., 1), so a hypervolume is in [0, 1].
"""

from __future__ import annotations

import math

import numpy as np

from eas.lazy import lazy_import
from eas.objectives import OBJECTIVES

optuna_hypervolume = lazy_import("optuna._hypervolume")  # the one place Optuna's private HV is used


def _value(metrics: dict, objective: str) -> float:
    value = metrics.get(OBJECTIVES[objective].metric)
    return float(value) if isinstance(value, (int, float)) else math.nan


def minimised_values(metrics: list[dict], objectives: tuple[str, ...],
                     reference: dict[str, float] | None = None) -> np.ndarray:
    """As `minimised`, over metric dicts (a trial's metrics, or its record at one rung)."""
    columns = []
    for name in objectives:
        values = np.array([_value(m, name) for m in metrics], dtype=float)
        if OBJECTIVES[name].direction == "maximize":
            columns.append(1.0 - values if reference is not None else -values)
        else:
            scale = reference.get(name) if reference else None
            columns.append(values / scale if scale else values)
    return np.stack(columns, axis=1) if columns else np.zeros((len(metrics), 0))


def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Non-dominated rows of a minimisation matrix (duplicates all stay on the front).

    Rows are taken in lexicographic order, where a dominating row always comes first, in blocks:
    each block is compared with the front found so far and with itself, in numpy (10,000 rows:
    about 20 ms)."""
    n = len(points)
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    order = np.lexsort(points.T[::-1])  # sorted by first objective, ties by the next ones
    front = np.zeros(0, dtype=int)
    for start in range(0, n, 256):
        block = order[start:start + 256]
        rivals = np.concatenate([front, block])
        le = np.all(points[None, rivals] <= points[block, None], axis=2)  # [j, i]: i no worse than j
        lt = np.any(points[None, rivals] < points[block, None], axis=2)
        front = np.concatenate([front, block[~np.any(le & lt, axis=1)]])
    mask[front] = True
    return mask


def nondominated_ranks(points: np.ndarray) -> np.ndarray:
    """Front index of each row of a minimisation matrix (0 = non-dominated): fronts peeled off
    one by one, each found by the block-vectorised pareto_mask."""
    ranks = np.full(len(points), -1)
    remaining = np.arange(len(points))
    front = 0
    while len(remaining):
        on_front = pareto_mask(points[remaining])
        ranks[remaining[on_front]] = front
        remaining = remaining[~on_front]
        front += 1
    return ranks


def hypervolume_of_points(points: np.ndarray) -> float:
    """Hypervolume of normalised minimisation points against the reference point (1, ..., 1)."""
    points = points[np.all(points < 1.0, axis=1)] if len(points) else points
    if len(points) == 0:
        return 0.0
    points = points[pareto_mask(points)]
    return float(optuna_hypervolume.compute_hypervolume(points, np.ones(points.shape[1]), assume_pareto=True))


def hypervolume_contributions(points: np.ndarray) -> np.ndarray:
    """What each point of a front adds to its hypervolume (normalised points, reference 1): the
    volume only it dominates = its own box minus the hypervolume of the others limited to that
    box (WFG's "limit" step). Limited to one box, most of the others dominate each other, so
    each hypervolume is of a handful of points instead of the whole front."""
    contribution = np.zeros(len(points))
    for i, point in enumerate(points):
        if np.any(point >= 1.0):
            continue  # outside the reference box: adds nothing
        limited = np.maximum(np.delete(points, i, axis=0), point)
        limited = limited[pareto_mask(limited)] if len(limited) else limited
        contribution[i] = float(np.prod(1.0 - point)) - hypervolume_of_points(limited)
    return contribution


def kendall_tau(x, y) -> float:
    """Kendall's tau-b (ties in either ranking handled), as scipy.stats.kendalltau computes it,
    without the second of importing scipy.stats. NaN when either ranking is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    upper = np.triu_indices(len(x), k=1)
    dx = np.sign(x[:, None] - x[None, :])[upper]
    dy = np.sign(y[:, None] - y[None, :])[upper]
    scale = math.sqrt(float(np.sum(dx != 0)) * float(np.sum(dy != 0)))
    return float(np.sum(dx * dy) / scale) if scale else math.nan
