import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eas.pareto import pareto_mask
from eas.reports.front import hypervolume, knee, pareto_front, tied_pareto_mask
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


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(50, 60), st.sampled_from([0, 1, 2]), st.integers(0, 3), st.integers(0, 3)),
                min_size=0, max_size=8))
def test_tied_pareto_mask_matches_its_definition(rows):
    """Brute force over every subset: the tie-aware Pareto set is the one set K where a trial is
    in K exactly when no other trial *in K* removes it (costs no more anywhere, its interval
    reaches this one's, and it is cheaper somewhere or its whole interval lies above)."""
    records = [TrialRecord(i, "complete", "g", {"accuracy": a / 100, "accuracy_low": (a - w) / 100,
                                                "accuracy_high": (a + w) / 100, "macs": m, "params": p})
               for i, (a, w, m, p) in enumerate(rows)]

    def removes(i, j):
        mi, mj = records[i].metrics, records[j].metrics
        costs_le = mi["macs"] <= mj["macs"] and mi["params"] <= mj["params"]
        cheaper = mi["macs"] < mj["macs"] or mi["params"] < mj["params"]
        above = mi["accuracy_low"] > mj["accuracy_high"]
        return i != j and costs_le and mi["accuracy_high"] >= mj["accuracy_low"] and (cheaper or above)

    n = len(records)
    fixed_points = [members for members in itertools.product([False, True], repeat=n)
                    if all(members[j] == (not any(members[i] and removes(i, j) for i in range(n)))
                           for j in range(n))]
    assert len(fixed_points) == 1  # removal runs one way (costs, then intervals): the set is unique
    assert list(tied_pareto_mask(records, ("accuracy", "macs", "params"))) == list(fixed_points[0])


def test_a_chain_of_ties_keeps_the_model_wholly_above_the_cheapest():
    """A = 80% +-1 at 1 M MACs, B = 81% +-1 at 2 M, C = 82.5% +-1 at 3 M: B ties A and costs more,
    so B goes; C ties only B, which is gone, and lies wholly above A: A and C stay."""
    records = [TrialRecord(i, "complete", "g", {"accuracy": a, "accuracy_low": a - 0.01, "accuracy_high": a + 0.01,
                                                "macs": m}) for i, (a, m) in enumerate([(0.80, 1e6), (0.81, 2e6),
                                                                                         (0.825, 3e6)])]
    assert [r.number for r in pareto_front(records, ("accuracy", "macs"))] == [2, 0]


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


def test_kendall_tau_is_scipys_tau_b_with_ties():
    import numpy as np
    from scipy.stats import kendalltau

    from eas.pareto import kendall_tau

    rng = np.random.default_rng(0)
    for n in (3, 7, 40):
        x, y = rng.integers(0, 5, n), rng.normal(size=n)  # x has ties
        assert kendall_tau(x, y) == pytest.approx(kendalltau(x, y).statistic)
        assert kendall_tau(y, y) == pytest.approx(1.0) and kendall_tau(y, -y) == pytest.approx(-1.0)
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))


def test_hypervolume_history_is_the_hypervolume_of_each_prefix_and_ends_with_the_last_trial():
    from dataclasses import replace

    from eas.reports.front import hypervolume_history

    rng = np.random.default_rng(3)
    records = [replace(record(i, float(rng.uniform(0.5, 1.0)), float(rng.uniform(1, 100)),
                              "complete" if i % 4 else "failed"), started=float(i), finished=float(i + 1))
               for i in range(30)]
    reference = {"macs": 100.0}
    history = hypervolume_history(records, OBJ, reference)
    assert [h["hypervolume"] for h in history] == pytest.approx(
        [hypervolume(records[:k + 1], OBJ, reference) for k in range(30)])
    drawn = hypervolume_history(records, OBJ, reference, max_points=7)
    assert len(drawn) <= 8 and drawn[-1] == history[-1]
    assert all(h in history for h in drawn)


def _front(rows):
    return [TrialRecord(i, "complete", "g", {"accuracy": a, "macs": m, "params": m / 50,
                                             "inference_energy_j_per_1k": m * 3e-7})
            for i, (a, m) in enumerate(rows)]


def test_the_knee_reads_costs_on_a_log_scale():
    """Doubling MACs from 1 M to 2 M buys 10 points, 2 M to 8 M 5, 8 M to 64 M 3: the balanced
    pick is 2 M. On a linear MAC scale 1, 2 and 8 M all look 'cheap' and the pick drifts to 8 M."""
    front = _front([(0.70, 1e6), (0.80, 2e6), (0.85, 8e6), (0.88, 64e6)])
    assert knee(front, ("accuracy", "macs")).number == 1


def test_correlated_costs_count_once_in_the_knee_and_units_do_not_matter():
    # Evenly spaced MACs: as three axes (MACs, params, energy), cost would outweigh accuracy 3:1.
    front = _front([(0.70, 1e6), (0.76, 2e6), (0.80, 3e6), (0.83, 4e6), (0.85, 5e6)])
    one = knee(front, ("accuracy", "macs")).number
    assert knee(front, ("accuracy", "macs", "params", "energy")).number == one  # params, energy ~ MACs
    rescaled = [TrialRecord(r.number, r.state, r.genome, {**r.metrics, "macs": r.metrics["macs"] * 1000})
                for r in front]
    assert knee(rescaled, ("accuracy", "macs")).number == one


def test_show_says_when_the_front_never_approached_a_limit():
    from eas.reports.front import unapproached_limits
    from eas.reports.summary import limit_lines
    from eas.study.records import TrialRecord

    def trial(number: int, accuracy: float, macs: float, params: float) -> TrialRecord:
        return TrialRecord(number, "complete", f"g{number}", {"accuracy": accuracy, "macs": macs, "params": params})

    records = [trial(0, 0.80, 1.0e6, 50e3), trial(1, 0.82, 1.9e6, 90e3), trial(2, 0.78, 6.4e6, 400e3)]
    objectives = ("accuracy", "macs")
    found = unapproached_limits(records, objectives, {"max_macs": 20e6, "max_params": 100e3})
    assert [(u["limit"], u["front_max"], u["trials_max"]) for u in found] == [("max_macs", 1.9e6, 6.4e6)]
    line, = limit_lines(found)
    assert line.startswith("limit       max_macs 20M never approached: the Pareto set's costliest member uses "
                           "1.9M (10%), the costliest complete trial 6.4M")
    # a front that reaches half the limit, or a study without limits, says nothing
    assert unapproached_limits(records + [trial(3, 0.9, 10e6, 1e5)], objectives, {"max_macs": 20e6}) == []
    assert unapproached_limits(records, objectives, {}) == []
    assert unapproached_limits([], objectives, {"max_macs": 1}) == []


def test_the_footprint_counts_the_time_runs_took_not_the_pause_between_them():
    from eas.reports.front import footprint
    from eas.study.records import TrialRecord

    def trial(number: int, started: float, finished: float) -> TrialRecord:
        return TrialRecord(number, "complete", f"g{number}", {"accuracy": 0.8, "macs": 1e6, "evaluate_seconds": 100.0},
                           started=started, finished=finished)

    first_run = [trial(0, 0.0, 100.0), trial(1, 100.0, 200.0)]
    second_run = [trial(2, 2000.0, 2100.0)]  # resumed half an hour later
    spent = footprint(first_run + second_run, ("accuracy", "macs"), {"macs": 2e6})
    assert spent["wall_seconds"] == 300.0 and spent["evaluate_seconds"] == 300.0
