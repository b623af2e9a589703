import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eas.report import hypervolume, knee, pareto_front, pareto_mask
from eas.study.records import TrialRecord, counts

OBJ = ("accuracy", "macs")


def record(number, accuracy, macs, state="complete"):
    return TrialRecord(number, state, f"g{number}", {"accuracy": accuracy, "macs": macs})


def brute_force_mask(points):
    n = len(points)
    return np.array([not any(np.all(points[j] <= points[i]) and np.any(points[j] < points[i])
                             for j in range(n) if j != i) for i in range(n)], dtype=bool)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 6)] * 3), min_size=0, max_size=40))
def test_pareto_mask_matches_brute_force(rows):
    points = np.array(rows, dtype=float).reshape(-1, 3)
    assert (pareto_mask(points) == brute_force_mask(points)).all()


def test_front_excludes_dominated_infeasible_and_failed():
    records = [record(0, 0.9, 100), record(1, 0.8, 50), record(2, 0.7, 80),
               record(3, 0.95, 10, "infeasible"), record(4, 0.99, 1, "failed")]
    assert [r.number for r in pareto_front(records, OBJ)] == [0, 1]
    assert counts(records)["infeasible"] == 1 and counts(records)["complete"] == 3


def test_hypervolume_by_hand():
    reference = {"macs": 100.0}
    # minimised, normalised points: (0.1, 0.5) and (0.5, 0.1) against (1, 1)
    records = [record(0, 0.9, 50), record(1, 0.5, 10)]
    by_hand = 0.9 * 0.5 + 0.5 * 0.9 - 0.5 * 0.5
    assert hypervolume(records, OBJ, reference) == pytest.approx(by_hand)
    # a point beyond the reference contributes nothing
    assert hypervolume(records + [record(2, 0.99, 150)], OBJ, reference) == pytest.approx(by_hand)
    assert hypervolume([], OBJ, reference) == 0.0


def test_knee_is_the_balanced_point():
    front = [record(0, 0.99, 1000), record(1, 0.95, 100), record(2, 0.50, 90)]
    assert knee(front, OBJ).number == 1
    assert knee([], OBJ) is None


def test_large_front_is_fast_enough():
    rng = np.random.default_rng(0)
    points = rng.random((10_000, 4))
    points[:, 1] = 1 - points[:, 0]  # a large front
    mask = pareto_mask(points)
    assert mask.sum() > 10
    sample = rng.choice(10_000, 300, replace=False)
    sub = points[sample]
    assert (pareto_mask(sub) == brute_force_mask(sub)).all()


def test_counts_cover_every_state():
    states = ["complete", "infeasible", "stopped", "pruned", "failed", "running", "waiting", "broken"]
    records = [record(i, 0.5, 1, s) for i, s in zip(itertools.count(), states, strict=False)]
    assert all(v == 1 for v in counts(records).values())
