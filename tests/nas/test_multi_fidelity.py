"""Multi-fidelity search: rungs, the successive-halving rule, proposals that respect counted
limits without excluding any legal region, ties within accuracy intervals, rank agreement."""

import json
from collections import Counter

import numpy as np
import optuna
import pytest

from eas.arch.counting import arch_cost
from eas.arch.space import load_space
from eas.errors import UserError
from eas.nas.candidate import wilson_interval
from eas.nas.proposals import SAMPLERS, ConstraintAwareSampler, space_distributions
from eas.nas.rungs import Ladder, decide, order, standings
from eas.reports.front import pareto_front, rank_agreement
from eas.study import schema
from eas.study.records import TrialRecord
from tests.conftest import run_eas

SHAPE = (1, 28, 28)


def test_the_ladder_divides_the_full_fidelity_by_eta():
    assert Ladder.make(141, 3, 3).steps == (16, 47, 141)
    assert Ladder.make(141, 1, 3).steps == (141,)
    with pytest.raises(UserError, match="at least 9"):
        Ladder.make(5, 3, 3)


def test_ranking_is_by_front_then_by_hypervolume_contribution():
    points = np.array([[0.30, 0.30],   # front 0, a big box of its own
                       [0.20, 0.80],   # front 0, a thin slice
                       [0.35, 0.90],   # dominated by both
                       [0.10, 0.95]])  # front 0, a thinner slice
    assert list(order(points)) == [0, 1, 3, 2]
    assert decide(points, 0, 3).go_on and decide(points, 1, 3).go_on  # keep ceil(4/3) = 2
    assert not decide(points, 3, 3).go_on and decide(points, 3, 3).position == 2


def test_hypervolume_contributions_are_what_removing_each_point_costs():
    from eas.pareto import hypervolume_contributions, hypervolume_of_points

    rng = np.random.default_rng(5)
    for size in (1, 2, 9, 25):
        points = np.clip(rng.random((size, 3)) * 1.1, None, 1.0)
        points[0] = points[-1]  # a duplicate adds nothing
        total = hypervolume_of_points(points)
        removed = [total - hypervolume_of_points(np.delete(points, i, axis=0)) for i in range(size)]
        assert hypervolume_contributions(points) == pytest.approx(removed, abs=1e-12)


def test_ranking_only_some_rows_gives_their_places_in_the_full_order():
    from eas.nas.rungs import positions

    rng = np.random.default_rng(6)
    points = rng.random((60, 3))
    full = {int(row): place for place, row in enumerate(order(points))}
    assert positions(points, [3, 17, 59]) == {3: full[3], 17: full[17], 59: full[59]}


def test_standings_rank_among_the_most_recent_results_of_a_rung(monkeypatch):
    import eas.nas.rungs

    monkeypatch.setattr(eas.nas.rungs, "RANKING_WINDOW", 3)
    rung = {number: {"accuracy": accuracy, "macs": 1e6} for number, accuracy in enumerate([0.99, 0.5, 0.6, 0.7])}
    places = standings({0: rung}, ("accuracy", "macs"), {"macs": 2e6}, only={3})
    assert places == {3: (0, 1.0)}  # best of the last three: trial 0's 0.99 is outside the window
    assert standings({0: rung}, ("accuracy", "macs"), {"macs": 2e6}, only={0})[0] == (0, 1.0)
    assert standings({0: rung}, ("accuracy", "macs"), {"macs": 2e6}, only={2})[2] == (0, pytest.approx(2 / 3))
    # The sampler's narrower window: trial 2 is ranked among trials 2 and 3 only.
    assert standings({0: rung}, ("accuracy", "macs"), {"macs": 2e6}, only={2}, window=2)[2] == (0, 0.5)


def test_the_first_result_at_a_rung_trains_on():
    assert decide(np.array([[0.5, 0.5]]), 0, 3).go_on


def test_parents_are_ranked_where_they_stand_now_not_at_their_own_decision():
    def result(accuracy):
        return {"accuracy": accuracy, "macs": 1e6}

    # Trial 1 came first at rung 0 (ranked first of one at its decision); two better ones followed.
    rung_results = {0: {1: result(0.5), 2: result(0.9), 3: result(0.7)}, 1: {2: result(0.92)}}
    places = standings(rung_results, ("accuracy", "macs"), {"macs": 2e6})
    assert places[2] == (1, 1.0)  # ranked at the highest rung it reached
    assert places[3] == (0, pytest.approx(2 / 3))
    assert places[1] == (0, pytest.approx(1 / 3))
    assert max(places, key=places.get) == 2 and min(places, key=places.get) == 1


def test_accuracies_inside_their_intervals_tie():
    def record(number, accuracy, macs, n=6000):
        low, high = wilson_interval(round(accuracy * n), n)
        return TrialRecord(number, "complete", "g", {"accuracy": accuracy, "accuracy_low": low,
                                                     "accuracy_high": high, "macs": macs})

    cheap, costly, better = record(0, 0.850, 1e6), record(1, 0.855, 2e6), record(2, 0.90, 3e6)
    front = [r.number for r in pareto_front([cheap, costly, better], ("accuracy", "macs"))]
    assert front == [2, 0]  # 0.5 points more is inside the noise: the costlier model is dominated
    point = [TrialRecord(0, "complete", "g", {"accuracy": 0.85, "macs": 1e6}),
             TrialRecord(1, "complete", "g", {"accuracy": 0.855, "macs": 2e6})]
    assert len(pareto_front(point, ("accuracy", "macs"))) == 2  # without intervals: strict


def test_rank_agreement_is_kendall_tau_over_promoted_trials():
    def record(number, accuracies):
        rungs = [{"rung": k, "accuracy": a} for k, a in enumerate(accuracies)]
        return TrialRecord(number, "complete", "g", attrs={schema.RUNGS: rungs})

    records = [record(0, [0.5, 0.6]), record(1, [0.6, 0.7]), record(2, [0.7, 0.8]), record(3, [0.4])]
    assert rank_agreement(records) == [{"from_rung": 0, "to_rung": 1, "trials": 3, "kendall_tau": 1.0}]
    records.append(record(4, [0.8, 0.1]))
    assert rank_agreement(records)[0]["kendall_tau"] < 1.0


@pytest.mark.slow
def test_proposals_over_a_counted_limit_never_become_trials_and_no_legal_choice_is_lost():
    space = load_space("mobile", SHAPE)
    limit = 4e6  # about 2% of this space at 28x28

    def refuse(params):
        return "over" if arch_cost(space.arch_from_params(params), SHAPE, 10).macs > limit else None

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = ConstraintAwareSampler(optuna.samplers.RandomSampler(seed=0), space_distributions(space), refuse)
    study = optuna.create_study(sampler=sampler)
    accepted, refused = [], 0
    for _ in range(250):
        trial = study.ask()
        arch = space.sample(trial)
        refused += sum(sampler.refused.values())
        accepted.append(dict(trial.params))
        assert arch_cost(arch, SHAPE, 10).macs <= limit
        study.tell(trial, 0.0)
    assert refused > 1000  # most of this space is over the limit: refused in microseconds each
    # The legal region, by uniform sampling: every choice it contains is proposed, about as often.
    rng = np.random.default_rng(1)
    legal = []
    while len(legal) < 600:
        params = {n: c[rng.integers(len(c))] for n, c in space.parameters().items()}
        if refuse(params) is None:
            legal.append(params)
    for name in space.parameters():
        expected = Counter(p[name] for p in legal)
        seen = Counter(p[name] for p in accepted)
        assert set(seen) <= set(expected), name  # nothing illegal
        for choice, count in expected.items():
            share = count / len(legal)
            if share >= 0.03:  # common enough that 250 proposals all but surely contain it
                assert seen[choice] > 0, (name, choice)
            assert abs(seen[choice] / len(accepted) - share) < 0.12, (name, choice)


def test_a_limit_too_tight_for_rejection_is_met_by_repairing_the_proposal():
    space = load_space("mobile", SHAPE)
    limit = 1e6  # a few in 100,000 of this space at 28x28: rejection alone gives up

    def macs(params):
        return arch_cost(space.arch_from_params(params), SHAPE, 10).macs

    def refuse(params):
        return "over max_macs" if macs(params) > limit else None

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = space_distributions(space)
    # Counted tries, not seconds, end each search for a proposal: the same on a loaded machine.
    plain = ConstraintAwareSampler(optuna.samplers.RandomSampler(seed=0), distributions, refuse, tries=300,
                                   seconds=1e9)
    repairing = ConstraintAwareSampler(optuna.samplers.RandomSampler(seed=0), distributions, refuse, tries=300,
                                       seconds=1e9, seed=0, excess=lambda params: macs(params) / limit - 1,
                                       repair_after=100)
    # A machine so busy that the time is up before `repair_after` refusals: the repair still comes.
    busy = ConstraintAwareSampler(optuna.samplers.RandomSampler(seed=0), distributions, refuse, seconds=0.0,
                                  seed=0, excess=lambda params: macs(params) / limit - 1, repair_after=10**9)
    found = {}
    for name, sampler in (("plain", plain), ("repairing", repairing), ("busy", busy)):
        study = optuna.create_study(sampler=sampler)
        found[name] = []
        for _ in range(6):
            trial = study.ask()
            found[name].append(space.sample(trial))
            study.tell(trial, 0.0)
    assert all(arch_cost(arch, SHAPE, 10).macs > limit for arch in found["plain"])
    assert all(arch_cost(arch, SHAPE, 10).macs <= limit for arch in found["repairing"] + found["busy"])
    assert len({arch.encode() for arch in found["repairing"]}) == 6  # near six different proposals


def test_a_tpe_proposal_evaluated_before_gives_way_to_its_nearest_new_neighbour():
    space = load_space("tiny", SHAPE)
    distributions = space_distributions(space)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tpe = SAMPLERS["tpe"](0, 16, distributions, None)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=tpe)
    rng = np.random.default_rng(0)
    for _ in range(40):  # a study whose best candidates TPE will want to look at again
        params = {n: d.choices[rng.integers(len(d.choices))] for n, d in distributions.items()}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions,
                                                  values=[float(rng.random()), float(rng.random())]))
    evaluated = {tuple(sorted(t.params.items())) for t in study.trials}
    drawn = []

    def refuse(params):
        drawn.append(params)
        return "evaluated before" if tuple(sorted(params.items())) in evaluated else None

    guard = ConstraintAwareSampler(tpe, distributions, refuse, seed=0)
    study.sampler = guard
    for _ in range(5):
        drawn.clear()
        trial = study.ask()
        proposal = {n: trial.suggest_categorical(n, d.choices) for n, d in distributions.items()}
        assert tuple(sorted(proposal.items())) not in evaluated
        if len(drawn) > 1:  # TPE's own proposal was known: the one taken is near it
            changed = sum(proposal[n] != drawn[0][n] for n in distributions)
            assert 1 <= changed <= 2 and len(drawn) < 100
        study.tell(trial, [0.5, 0.5])
        evaluated.add(tuple(sorted(proposal.items())))


@pytest.mark.slow
def test_a_multi_fidelity_search_stores_rungs_stops_candidates_and_resumes(tmp_path):
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    # The default sampler, TPE: its first 10 proposals are random, the resumed ones learn from
    # the candidates stopped at lower rungs (pruned trials) and the complete ones.
    args = ["search", "--space", "tiny", "--data", "digits", "--epochs", "6", "--study", "mf", "--quiet",
            "--no-warm-start"]
    first = run_eas(*args, "--trials", "10", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    shown = json.loads(run_eas("show", "mf", "--json", env=env, cwd=tmp_path).stdout)
    states = Counter(t["state"] for t in shown["trials"])
    assert states["complete"] >= 1 and states["stopped"] >= 1
    assert all(t["rung"] is not None for t in shown["trials"])
    for trial in shown["trials"]:
        if trial["state"] == "stopped":
            assert trial["rung"] < 2 and trial["rungs"][-1]["go_on"] is False and trial["accuracy"] is not None
        if trial["state"] == "complete":
            assert trial["rung"] == 2 and all(r["go_on"] for r in trial["rungs"][:-1])
    assert {p["trial"] for p in shown["pareto"]} <= {t["trial"] for t in shown["trials"] if t["state"] == "complete"}
    assert [a["from_rung"] for a in shown["rank_agreement"]] == [0, 1]
    assert shown["footprint"]["energy_kwh"] > 0 and shown["footprint"]["energy_source"] == "estimated"
    rung0_before = shown["rungs"][0]["finished"]

    again = run_eas(*args, "--trials", "4", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    resumed = json.loads(run_eas("show", "mf", "--json", env=env, cwd=tmp_path).stdout)
    new = [t for t in resumed["trials"] if t["trial"] >= 10 and t["reused_from"] is None]
    # The resumed search ranks its new candidates among everything stored at the rung before it.
    assert all(t["rungs"][0]["results"] > rung0_before for t in new if t["rungs"] and t["rungs"][0]["results"])
    assert resumed["rungs"][0]["finished"] == rung0_before + len(new)
    text = run_eas("show", "mf", env=env, cwd=tmp_path).stdout
    assert "Kendall tau" in text and "footprint" in text and "time split" in text and "sampler tpe" in text


@pytest.mark.slow
def test_a_space_can_choose_training_hyperparameters_that_reach_export_and_training(tmp_path):
    space = load_space("tiny").definition
    space["train"] = {"lr": [0.002, 0.01], "batch_size": [32, 64]}
    (tmp_path / "space.yaml").write_text(json.dumps(space))  # JSON is YAML
    env = {"EAS_STUDIES_DIR": str(tmp_path / "studies")}
    result = run_eas("search", "--space", str(tmp_path / "space.yaml"), "--data", "digits", "--epochs", "1",
                     "--rungs", "1", "--trials", "4", "--study", "hp", "--quiet", "--no-warm-start", env=env,
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    study = optuna.load_study(study_name="hp", storage=f"sqlite:///{tmp_path / 'studies' / 'hp.db'}")
    for trial in study.trials:
        fidelity = trial.user_attrs["metrics"]["fidelity"]
        assert fidelity["lr"] == trial.params["train.lr"] and fidelity["batch_size"] == trial.params["train.batch_size"]
    knee = run_eas("export", "hp", "--pick", "knee", "--out", str(tmp_path / "knee"), "--no-onnx", "--json",
                   env=env, cwd=tmp_path)
    assert knee.returncode == 0, knee.stderr
    document = json.loads(knee.stdout)
    chosen = study.trials[document["provenance"]["trial"]].params
    assert document["training"] == {"lr": chosen["train.lr"], "batch_size": chosen["train.batch_size"]}
    trained = run_eas("train", str(tmp_path / "knee"), "--data", "digits", "--epochs", "1", "--quiet", "--json",
                      cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    plan = json.loads(trained.stdout)["plan"]
    assert plan["lr"] == chosen["train.lr"] and plan["batch_size"] == chosen["train.batch_size"]
    override = run_eas("train", str(tmp_path / "knee"), "--data", "digits", "--epochs", "1", "--quiet", "--json",
                       "--lr", "0.005", "--restart", cwd=tmp_path)
    assert json.loads(override.stdout)["plan"]["lr"] == 0.005


@pytest.mark.slow
def test_verify_retrains_the_front_and_stores_what_it_found(small_study):
    root, env = small_study
    result = run_eas("verify", "s", "--top", "3", "--factor", "1", "--json", env=env, cwd=root)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert 1 <= found["of"] <= 3 and found["held"] <= found["of"]
    for member in found["members"]:
        assert 0 <= member["verified_accuracy"] <= 1 and isinstance(member["held_place"], bool)
    shown = json.loads(run_eas("show", "s", "--json", env=env, cwd=root).stdout)
    assert shown["verification"]["members"] == found["members"]
    assert "held" in run_eas("show", "s", env=env, cwd=root).stdout


def test_a_rung_that_rounds_to_no_steps_still_trains_one_and_never_means_everything():
    ladder = Ladder((1, 3, 9), 3)
    # A candidate with 4x the study's batch takes 1/4 of the steps: rung 0 rounds to 0.
    assert [ladder.segment(rung, 0.25) for rung in range(3)] == [1, 1, 1]
    assert [ladder.segment(rung) for rung in range(3)] == [1, 2, 6]
    with pytest.raises(ValueError, match="at least one step"):
        from eas.training.proxy import Fidelity, train
        train(None, None, None, Fidelity(), None, steps=0)


def test_verify_rescales_steps_by_batch_and_pools_the_seeds_interval():
    from eas.nas.candidate import wilson_interval
    from eas.nas.verify import steps_at_batch, verified_row
    from eas.study.records import TrialRecord

    assert steps_at_batch(90, study_batch=128, batch=256) == 45
    assert steps_at_batch(90, study_batch=128, batch=64) == 180
    record = TrialRecord(number=3, state="complete", genome="g", metrics={"accuracy": 0.7})
    runs = [{"accuracy": 0.80, "images": 100}, {"accuracy": 0.90, "images": 100}]
    row = verified_row(record, runs)
    assert row["verified_accuracy"] == pytest.approx(0.85)
    assert row["verified_interval"] == pytest.approx(list(wilson_interval(170, 200)))  # not the first seed's
    assert row["seed_spread"] == pytest.approx(0.10)


def test_refusals_are_counted_only_for_the_trial_the_guard_proposed():
    """An enqueued (or retried) trial has fixed parameters: Optuna asks no proposal for it, so the
    refusals of the trial before must not be counted again for it."""
    space = load_space("tiny", SHAPE)
    distributions = space_distributions(space)
    first_refused = {"done": False}

    def refuse(params):
        if not first_refused["done"]:
            first_refused["done"] = True
            return "over max_macs"
        return None

    sampler = ConstraintAwareSampler(optuna.samplers.RandomSampler(seed=0), distributions, refuse, seed=0)
    study = optuna.create_study(sampler=sampler)
    proposed = study.ask()
    space.sample(proposed)
    assert sampler.refusals_for(proposed.number) == {"over max_macs": 1}
    study.tell(proposed, 0.0)
    study.enqueue_trial(proposed.params)
    enqueued = study.ask()
    space.sample(enqueued)
    assert sampler.refusals_for(enqueued.number) == {}


def test_the_top_rung_of_a_complete_trial_is_not_shown_as_stopped():
    from eas.reports.explorer import rung_rows
    from eas.study.records import TrialRecord

    rungs = [{"rung": 0, "steps": 3, "accuracy": 0.6, "go_on": True, "position": 0, "results": 5, "keep": 2},
             {"rung": 1, "steps": 9, "accuracy": 0.8, "go_on": False, "position": 0, "results": 12, "keep": 4}]
    complete = TrialRecord(number=1, state="complete", genome="g", attrs={"rungs": rungs})
    assert [row["decision"] for row in rung_rows(complete)] == ["trained on (rank 1 of 5)", "top rung (rank 1 of 12)"]
    stopped = TrialRecord(number=2, state="stopped", genome="g", attrs={"rungs": rungs[:1] + [
        {**rungs[1], "position": 9}]})
    assert rung_rows(stopped)[-1]["decision"] == "stopped (rank 10 of 12)"
    # a rung stored without its validation images shows '-' as the tables do, never 'None'
    assert [row["validation images"] for row in rung_rows(complete)] == ["-", "-"]
    assert rung_rows(complete)[1]["steps"] == "9"


def test_a_ladder_may_train_its_lower_rungs_on_smaller_images_and_stores_a_full_size_one_as_before():
    ladder = Ladder.make(90, 3, 3, resolution=0.7)
    assert [ladder.scale(k) for k in range(3)] == [0.7, 0.7, 1.0]
    assert Ladder.from_dict(ladder.to_dict()) == ladder
    assert Ladder.make(90, 3, 3).to_dict() == {"steps": [10, 30, 90], "eta": 3}  # older studies resume
    assert Ladder.from_dict({"steps": [10, 30, 90], "eta": 3}).scale(0) == 1.0
    for planted in (0.3, 1.5, float("nan"), "0.7", True, None):  # a shared study is input too
        with pytest.raises(UserError, match="rung resolution must be"):
            Ladder.from_dict({"steps": [10, 30, 90], "eta": 3, "resolution": planted})
    with pytest.raises(UserError, match="--rungs 2 or more"):
        Ladder.make(90, 1, 3, resolution=0.7)


def test_cost_bands_split_a_rungs_results_into_quantiles_of_macs():
    from eas.nas.rungs import same_band
    from eas.reports.summary import bands_text

    costs = [5.0, 1.0, 3.0, 2.0, 4.0, 6.0]
    assert same_band(costs, 0, 2) == [0, 4, 5] and same_band(costs, 1, 2) == [1, 2, 3]
    assert same_band(costs, 0, 3) == [0, 5] and same_band(costs, 0, 1) == list(range(6))
    assert same_band([1.0, float("nan"), 2.0, None], 1, 2) == [1, 3]  # a missing cost ranks with the costliest
    assert same_band([7.0], 0, 3) == [0]  # the first result at a rung is alone in its band
    ladder = Ladder.make(90, 3, 3, bands=3)
    assert ladder.to_dict() == {"steps": [10, 30, 90], "eta": 3, "bands": 3}
    assert Ladder.from_dict(ladder.to_dict()) == ladder
    assert Ladder.from_dict({"steps": [10, 30, 90], "eta": 3}).bands == 1 and bands_text(ladder.to_dict())
    for planted in (0, 6, 2.5, "2", True, None):  # a shared study is input too
        with pytest.raises(UserError, match="rung bands must be"):
            Ladder.from_dict({"steps": [10, 30, 90], "eta": 3, "bands": planted})
    with pytest.raises(UserError, match="--rungs 2 or more"):
        Ladder.make(90, 1, 3, bands=2)


def test_with_cost_bands_a_candidate_is_ranked_only_among_its_own_band(tmp_path):
    import eas

    result = eas.search(space="tiny", data="digits", trials=6, epochs=1, rungs=2, eta=2, rung_bands=2,
                        warm_start=False, sampler="random", study="bands", storage=f"sqlite:///{tmp_path}/b.db")
    ranked = [r.attrs["rungs"][0] for r in result.records if r.attrs.get("rungs")]
    assert len(ranked) == 6
    # Without bands the last decision ranks among all 6 results at rung 0; within 2 bands, about half
    assert max(r["results"] for r in ranked) <= 4 and ranked[-1]["results"] < 6
    assert result.records[0].state in ("complete", "stopped")
