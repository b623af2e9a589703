"""Searches whose bookkeeping used to be wrong: unmeasured limits, worker trial counts, dying
helpers, energy counted twice, genomes trained twice, logs full of carriage returns."""

import json
import os

import optuna
import pytest

from eas.arch.genome import Arch
from eas.reports.front import hypervolume_history, spent_energy_j
from eas.study import schema
from eas.study.records import TrialRecord
from tests.conftest import assert_user_error, run_eas

pytestmark = pytest.mark.slow
FAST = ["--space", "tiny", "--data", "digits", "--quiet", "--no-warm-start", "--rungs", "1"]


def env_for(tmp_path):
    return {"EAS_STUDIES_DIR": str(tmp_path / "studies")}


def trials_of(tmp_path, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'studies' / name}.db").trials


def test_an_unmeasured_latency_does_not_poison_a_broken_macs_limit(tmp_path):
    from eas.arch.space import load_space

    env = env_for(tmp_path)
    limits = ["--max-macs", "90k", "--max-latency", "5000ms", "--subset", "300", "--sampler", "random"]
    result = run_eas("search", *FAST, "--trials", "1", *limits, "--study", "lat", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # Proposals over the MACs limit are refused; a queued one (as a warm start or a user's
    # enqueue_trial) still reaches the evaluator, which must store it as infeasible.
    study = optuna.load_study(study_name="lat", storage=f"sqlite:///{tmp_path / 'studies' / 'lat.db'}")
    space = load_space("tiny", (1, 8, 8))
    study.enqueue_trial(space.params_of(space.extremes((1, 8, 8), 10)[1]))
    worked = run_eas("worker", "--study", "lat", "--trials", "1", "--quiet", env=env, cwd=tmp_path)
    assert worked.returncode == 0, worked.stderr
    trial = trials_of(tmp_path, "lat")[-1]
    assert trial.state.name == "COMPLETE" and trial.user_attrs["status"] == "infeasible"
    assert trial.constraints["max_macs"] > 0 and trial.constraints["max_latency_ms"] == 0.0


def test_workers_share_the_trial_count_exactly(tmp_path):
    result = run_eas("search", *FAST, "--trials", "5", "--workers", "2", "--epochs", "1", "--study", "split",
                     env=env_for(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    trials = trials_of(tmp_path, "split")
    assert len(trials) == 5
    assert len({t.user_attrs["worker"] for t in trials}) == 2


def test_a_dying_helper_worker_is_reported(tmp_path):
    from eas.cli.search import LocalWorkers
    from eas.nas.budget import Budget

    helpers = LocalWorkers("no-such-study", f"sqlite:///{tmp_path / 'none.db'}", [Budget(trials=1)], seed=0,
                           heartbeat=10, timeout=0.9, threads=1)
    failures = helpers.wait()
    assert len(failures) == 1 and "exited with code 2" in failures[0] and "no study storage" in failures[0]
    assert "none.db" not in " ".join(helpers.processes[0][0].args)  # the URL travels in the environment


def test_logs_get_one_line_per_trial(tmp_path):
    result = run_eas("search", "--space", "tiny", "--data", "digits", "--no-warm-start", "--trials", "3",
                     "--epochs", "1", "--study", "log2", "--sampler", "random", env=env_for(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr
    progress = [line for line in result.stderr.splitlines() if "] trial " in line]
    assert len(progress) == 3 and "Pareto set" in progress[-1] and "non-dominated" not in progress[-1]
    # trials as the study numbers them (the first is trial 0, as `eas show --trial 0` calls it)
    assert [line.split("] trial ")[1].split()[0] for line in progress] == ["0", "1", "2"]


def test_resuming_with_another_seed_is_refused(tmp_path):
    env = env_for(tmp_path)
    assert run_eas("search", *FAST, "--trials", "1", "--epochs", "1", "--study", "seeded", env=env,
                   cwd=tmp_path).returncode == 0
    assert_user_error(run_eas("search", *FAST, "--trials", "1", "--epochs", "1", "--study", "seeded", "--seed", "7",
                              env=env, cwd=tmp_path), "different seed")


def test_train_energy_objective_has_a_reference_and_a_hypervolume(tmp_path):
    result = run_eas("search", *FAST, "--trials", "4", "--epochs", "1", "--study", "te", "--json",
                     "--objectives", "accuracy,train_energy", env=env_for(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["counts"]["complete"] >= 1 and summary["hypervolume"] > 0
    study = optuna.load_study(study_name="te", storage=f"sqlite:///{tmp_path / 'studies' / 'te.db'}")
    assert study.user_attrs[schema.REFERENCE]["train_energy"] > 0


def test_genomes_that_build_the_same_network_share_one_key():
    a = Arch.decode("stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0")
    b = Arch.decode("stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_gelu_d0")
    c = Arch.decode("stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c32_f0_gelu_d0")
    d = Arch.decode("stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c32_f0_relu_d0")
    assert a.canonical_hash() == b.canonical_hash()
    assert c.canonical_hash() != d.canonical_hash()  # with a 1x1 conv the activation is used


def test_a_reused_result_is_not_counted_twice_in_the_energy_spent():
    trained = TrialRecord(0, "complete", "g", {"train_energy_j": 10.0, "accuracy": 0.5}, started=0.0, finished=1.0)
    reused = TrialRecord(1, "complete", "g", {"train_energy_j": 10.0, "accuracy": 0.5}, started=1.0, finished=2.0,
                         attrs={schema.CACHED_FROM: 0})
    assert spent_energy_j(trained) == 10.0 and spent_energy_j(reused) == 0.0
    history = hypervolume_history([trained, reused], ("accuracy",), {})
    assert history[-1]["energy_j"] == 10.0


def test_helpers_do_not_see_the_password_on_their_command_line(tmp_path):
    from eas.cli.search import LocalWorkers
    from eas.nas.budget import Budget

    url = "postgresql://user:s3cret@127.0.0.1:1/db"
    helpers = LocalWorkers("x", url, [Budget(trials=1)], seed=0, heartbeat=10, timeout=60, threads=1)
    process = helpers.processes[0][0]
    assert "s3cret" not in " ".join(process.args)
    helpers.wait()
    assert os.environ.get("EAS_STORAGE") != url


def test_a_perfect_accuracy_lies_within_its_interval():
    from eas.nas.candidate import wilson_interval
    from eas.study.records import make_record

    for n in (1, 7, 26, 500, 10_000):
        for correct in (0, n // 2, n):
            low, high = wilson_interval(correct, n)
            assert 0 <= low <= correct / n <= high <= 1
    low, high = wilson_interval(26, 26)
    metrics = {"status": "ok", "accuracy": 1.0, "accuracy_low": low, "accuracy_high": 0.9999999999999999}
    record = make_record(1, 0, "COMPLETE", 1.0, 2.0, {"genome": None, "metrics": metrics, "status": "ok"}, {}, None)
    assert record.state != "broken", record.reason  # stored by an EAS before the clamp: still a result


@pytest.mark.parametrize("stage", ["sampling", "storing"])
def test_a_ctrl_c_anywhere_in_a_trial_marks_it_interrupted_and_leaves_none_running(tmp_path, monkeypatch, stage):
    """The flaky Ctrl-C test's race, made deterministic: a stop that lands before training (a
    loaded machine still writing the genome) or after it (writing the metrics) is a trial
    stopped by the user, not a trial without a status."""
    import eas
    from eas.nas import loop

    monkeypatch.setenv("EAS_STUDIES_DIR", str(tmp_path / "studies"))
    calls = {"candidate_key": 0, "objective_values": 0}

    def second_call_interrupted(name, original):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            if calls[name] == 2:
                raise KeyboardInterrupt
            return original(*args, **kwargs)
        return wrapped

    name = "candidate_key" if stage == "sampling" else "objective_values"
    monkeypatch.setattr(loop, name, second_call_interrupted(name, getattr(loop, name)))
    result = eas.search(space="tiny", data="digits", trials=4, study="ctrl-c", warm_start=False, sampler="random",
                        evaluator=lambda arch: 0.5 + arch.stem.width / 100)
    assert result.stopped == "interrupted"
    study = optuna.load_study(study_name="ctrl-c", storage=result.storage)
    *before, stopped = study.trials
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in before)
    assert stopped.state == optuna.trial.TrialState.FAIL
    assert stopped.user_attrs["status"] == "interrupted" and stopped.user_attrs["reason"] == "interrupted by the user"
