"""Held-out truth (issue 49): a test split fixed whatever the seed and recorded in the study,
never read by a search (ranking, promotion), scored on by `eas verify`; and verify's choice of
members spread over the front's cost range."""

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

import eas
from eas.data.datasets import TEST_SHARE, TEST_SPLIT_SEED, load_dataset
from eas.data.images import Images
from eas.errors import UserError
from eas.nas import session
from eas.nas.verify import DEFAULT_TOP, checked_test_split, chosen_members
from eas.reports.front import pareto_front, spread_over_cost, strict_front
from eas.study.records import TrialRecord
from eas.study.schema import SearchSettings

OBJECTIVES = ("accuracy", "macs")


def test_the_test_split_is_the_same_for_every_seed_and_apart_from_training_and_validation():
    splits = {seed: load_dataset("digits", seed=seed) for seed in (0, 1, 7)}
    test_rows = {seed: tuple(task.test_x.rows) for seed, task in splits.items()}
    assert len(set(test_rows.values())) == 1  # the seed re-splits training and validation only
    assert len({tuple(task.val_x.rows) for task in splits.values()}) == 3
    for task in splits.values():
        test, seen = set(task.test_x.rows), set(task.train_x.rows) | set(task.val_x.rows)
        assert not test & seen and len(test) + len(seen) == 1797
        assert task.test_split() == splits[0].test_split()
    assert splits[0].test_split()["source"] == "held out"
    assert load_dataset("fashion-mnist").test_split()["source"] == "official"


def test_seed_0_keeps_the_split_it_had_before_the_test_split_was_fixed():
    """Studies searched before keep their validation split when they resume (as drawn then)."""
    rng = np.random.default_rng(0)
    order = rng.permutation(1797)
    n_test = round(TEST_SHARE * 1797)
    before_val = order[n_test:][:round(0.1 * (1797 - n_test))]
    assert TEST_SPLIT_SEED == 0
    assert list(load_dataset("digits", seed=0).val_x.rows) == list(before_val)


class Sealed(Images):
    """The test split as a search gets it: reading a pixel of it is recorded and fails."""

    reads: list = []

    def raw(self, index):
        Sealed.reads.append(index)
        raise AssertionError("the search read the test split")

    def subset(self, index):
        return self.raw(index)

    def to(self, device):
        return self


def test_a_search_never_reads_the_test_split_for_ranking_or_promotion(tmp_path, monkeypatch):
    monkeypatch.setenv("EAS_STUDIES_DIR", str(tmp_path / "studies"))
    loaded = []

    def sealed_task(*args, **kwargs):
        task = load_dataset(*args, **kwargs)
        sealed = Sealed(task.test_x.source, task.test_x.rows, task.test_x.scale, task.test_x.mean, task.test_x.std)
        loaded.append(task)
        return dataclasses.replace(task, test_x=sealed)

    monkeypatch.setattr(session, "load_dataset", sealed_task)
    Sealed.reads = []
    result = eas.search(space="tiny", data="digits", trials=6, epochs=1, rungs=3, eta=2, warm_start=False,
                        sampler="random", study="sealed", constraints={"max_macs": "700k"})
    assert loaded, "the search did not load its data through the sealed loader"
    assert Sealed.reads == []
    assert {r.state for r in result.records} <= {"complete", "stopped", "infeasible"}
    promoted = [r for r in result.records if len(r.attrs.get("rungs") or []) > 1]
    assert promoted and any(r.state == "stopped" for r in result.records)  # rungs ranked and promoted
    assert result.records[0].metrics["val_images"] < 1797 * TEST_SHARE + 200  # scored on validation


def test_a_verification_scores_its_runs_on_the_test_split():
    from eas.arch.genome import Arch
    from eas.nas.verify import Model, VerifyPlan, train_once
    from eas.training.proxy import Fidelity

    task = load_dataset("digits", seed=0)
    small = dataclasses.replace(task, test_x=task.test_x.subset(slice(0, 37)), test_y=task.test_y[:37])
    arch = Arch.decode(eas.reference("mobilenet_v3_small@0.35").encode())  # eas.reference: public, not eas.api
    run = train_once(Model(arch, Fidelity(epochs=1)), small, 1, 3, 128, VerifyPlan(device="cpu"), "auto")
    assert run["split"] == "test" and run["images"] == 37 and run["val_images"] == len(task.val_y)
    assert round(run["accuracy"] * 37) == pytest.approx(run["accuracy"] * 37)


def record(number: int, accuracy: float, macs: float, images: int = 1000) -> TrialRecord:
    from eas.nas.candidate import wilson_interval

    low, high = wilson_interval(round(accuracy * images), images)
    return TrialRecord(number, "complete", f"g{number}", {"accuracy": accuracy, "accuracy_low": low,
                                                          "accuracy_high": high, "macs": macs})


def test_verify_chooses_members_spread_over_the_cost_range_from_the_strict_front():
    # Eleven members from 1 M to 1,000 M MACs, each a little more accurate than the last: within
    # each other's intervals, so the tie-aware front keeps only the cheapest of them.
    front = [record(i, 0.80 + 0.002 * i, 1e6 * 10 ** (i * 0.3)) for i in range(11)]
    assert [r.number for r in pareto_front(front, OBJECTIVES)] == [0]
    assert len(strict_front(front, OBJECTIVES)) == 11
    chosen = spread_over_cost(strict_front(front, OBJECTIVES), OBJECTIVES, 4)
    assert [r.number for r in chosen] == [10, 7, 3, 0]  # the accurate end, two between, the cheapest
    assert [r.number for r in spread_over_cost(front[:3], OBJECTIVES, 4)] == [0, 1, 2]
    loaded = SimpleNamespace(records=front, objectives=OBJECTIVES, name="s")
    assert len(chosen_members(loaded, None)) == DEFAULT_TOP and chosen_members(loaded, None)[0].number == 10
    with pytest.raises(UserError, match="--top 12: the Pareto set of study 's' has 11 members"):
        chosen_members(loaded, 12)
    empty = SimpleNamespace(records=[], objectives=OBJECTIVES, name="s")
    with pytest.raises(UserError, match="no complete, feasible trial"):
        chosen_members(empty, None)


def settings(seed: int = 0, test_split: dict | None = None, data: str = "digits") -> SearchSettings:
    return SearchSettings("tiny", {}, data, OBJECTIVES, {}, {}, seed=seed, test_split=test_split or {})


def test_a_study_scores_only_on_the_test_split_it_recorded():
    task = load_dataset("digits", seed=3)
    found = checked_test_split(settings(3, task.test_split()), task, "s")
    assert found["recorded"] and found["images"] == len(task.test_y)
    other = {**task.test_split(), "fingerprint": "0" * 16}
    with pytest.raises(UserError, match="recorded a test split of .* the data changed"):
        checked_test_split(settings(3, other), task, "s")
    # Created before splits were recorded: seed 0 drew today's split; another seed trained on some of it.
    assert not checked_test_split(settings(0), task, "s")["recorded"]
    with pytest.raises(UserError, match="searched before EAS fixed the test split"):
        checked_test_split(settings(3), task, "s")
    official = load_dataset("fashion-mnist", seed=3)
    assert checked_test_split(settings(3, data="fashion-mnist"), official, "s")["source"] == "official"


def test_a_study_resumes_only_on_the_test_split_it_recorded():
    split = load_dataset("digits").test_split()
    now = settings(3, split)
    assert now.mismatches(settings(3, split)) == []
    assert now.mismatches(settings(3, {**split, "fingerprint": "f" * 16})) == ["test split"]
    assert now.mismatches(settings(3)) == ["test split"]  # searched before, with another split
    assert settings(0, split).mismatches(settings(0)) == []
    assert math.isclose(split["images"], round(TEST_SHARE * 1797))
