"""Several workers on the real PostgreSQL server: nothing lost or duplicated, a killed worker's
trial failed by heartbeat and retried."""

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

import optuna
import pytest
import sqlalchemy

from tests.conftest import run_eas

URL = os.environ.get("EAS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def postgres():
    try:
        sqlalchemy.create_engine(URL).connect().close()
    except Exception as error:  # CI starts the server; a developer machine may not have one
        pytest.skip(f"PostgreSQL not reachable at {URL}: {error}")
    return URL


@pytest.fixture
def study_name(postgres):
    name = f"pg-{uuid.uuid4().hex[:10]}"
    yield name
    with contextlib.suppress(KeyError):
        optuna.delete_study(study_name=name, storage=postgres)


def worker(name, url, *args):
    return subprocess.Popen([sys.executable, "-m", "eas", "worker", "--study", name, "--storage", url,
                             "--heartbeat", "1", "--threads", "1", "--quiet", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def create(name, url, *args):
    result = run_eas("search", "--space", "tiny", "--data", "digits", "--study", name, "--storage", url,
                     "--trials", "1", "--heartbeat", "1", "--quiet", "--no-warm-start", "--rungs", "1", *args)
    assert result.returncode == 0, result.stderr


def test_two_workers_share_a_study_without_losing_or_duplicating_trials(postgres, study_name):
    create(study_name, postgres, "--epochs", "2")
    workers = [worker(study_name, postgres, "--trials", "6", "--seed", str(seed)) for seed in (1, 2)]
    for process in workers:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    trials = optuna.load_study(study_name=study_name, storage=postgres).trials
    by_worker = {}
    for trial in trials:
        by_worker.setdefault(trial.user_attrs["worker"].split(":")[1], []).append(trial)
    pids = {str(p.pid) for p in workers}
    assert pids <= set(by_worker)
    assert all(len(by_worker[pid]) == 6 for pid in pids)  # each worker ran exactly its trials
    assert len(trials) == 1 + 12
    assert sorted(t.number for t in trials) == list(range(13))
    assert all(t.state.name == "COMPLETE" and "metrics" in t.user_attrs for t in trials)


def test_kill_9_of_a_worker_mid_trial_fails_and_retries_its_trial(postgres, study_name):
    create(study_name, postgres, "--epochs", "15")
    victim = worker(study_name, postgres, "--budget", "2m", "--seed", "1")
    storage = optuna.storages.RDBStorage(postgres)
    killed_trial = None
    deadline = time.monotonic() + 120
    while killed_trial is None and time.monotonic() < deadline:
        time.sleep(0.3)
        study = optuna.load_study(study_name=study_name, storage=storage)
        for trial in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
            if trial.user_attrs.get("worker", "").endswith(f":{victim.pid}"):
                time.sleep(0.5)
                victim.send_signal(signal.SIGKILL)
                killed_trial = trial.number
                break
    assert killed_trial is not None, "the victim never started a trial"
    victim.wait(timeout=10)
    # Past the grace period (3 heartbeats) the victim's trial is stale whatever the machine's
    # pace: the survivor fails it and its one trial is the retry.
    time.sleep(3 * 1 + 1)
    survivor = worker(study_name, postgres, "--trials", "1", "--seed", "2")
    _, err = survivor.communicate(timeout=180)
    assert survivor.returncode == 0, err

    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = {t.number: t for t in study.trials}
    assert trials[killed_trial].state.name == "FAIL"
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == killed_trial]
    assert len(retries) == 1 and retries[0].params == trials[killed_trial].params
    assert retries[0].state.name in ("COMPLETE", "PRUNED")
    assert not [t for t in trials.values() if t.state.name in ("RUNNING", "WAITING")]
    # every trial is accounted for by exactly one worker: the creator, the victim or the survivor
    owners = {t.user_attrs["worker"].split(":")[1] for t in trials.values()}
    assert owners <= {str(victim.pid), str(survivor.pid)} | {
        trials[0].user_attrs["worker"].split(":")[1]}


def test_multi_fidelity_kill_9_mid_rung_continues_from_the_last_rung_on_another_worker(postgres, study_name):
    # --queue: the study is made and its one trial left to the workers (no trial of 30 epochs run here)
    result = run_eas("search", "--space", "tiny", "--data", "digits", "--study", study_name, "--storage", postgres,
                     "--trials", "1", "--heartbeat", "1", "--quiet", "--no-warm-start", "--epochs", "30", "--queue")
    assert result.returncode == 0, result.stderr
    victim = worker(study_name, postgres, "--budget", "3m", "--seed", "1")
    storage = optuna.storages.RDBStorage(postgres)
    killed = None
    deadline = time.monotonic() + 150
    while killed is None and time.monotonic() < deadline and victim.poll() is None:
        time.sleep(0.2)
        study = optuna.load_study(study_name=study_name, storage=storage)
        for trial in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
            rungs = trial.user_attrs.get("rungs") or []
            if trial.user_attrs.get("worker", "").endswith(f":{victim.pid}") and len(rungs) == 1 and rungs[0]["go_on"]:
                victim.send_signal(signal.SIGKILL)  # in the middle of rung 1
                killed = trial.number
                break
    assert killed is not None, "no trial of the victim went past rung 0"
    victim.wait(timeout=10)
    # Past the grace period (3 heartbeats) the victim's trial is stale whatever the machine's
    # pace, so the survivor's first trial is its retry; a wall-clock budget could cut that retry
    # on a loaded machine, so the survivor runs exactly one trial instead.
    time.sleep(3 * 1 + 1)
    survivor = worker(study_name, postgres, "--trials", "1", "--seed", "2")
    _, err = survivor.communicate(timeout=480)
    assert survivor.returncode == 0, err

    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = {t.number: t for t in study.trials}
    assert trials[killed].state.name == "FAIL"
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state.name in ("COMPLETE", "PRUNED")
    retry = retries[0]
    steps = study.user_attrs["eas.settings"]["multi_fidelity"]["steps"]
    assert retry.user_attrs["rungs"][0] == trials[killed].user_attrs["rungs"][0]  # rung 0 was not trained again
    trained = retry.user_attrs["metrics"]["train_steps"]
    reached = retry.user_attrs["rungs"][-1]["rung"]
    assert trained == steps[reached] - steps[0]
    assert not [t for t in trials.values() if t.state.name in ("RUNNING", "WAITING")]
    with sqlalchemy.create_engine(postgres).connect() as connection:
        left = connection.execute(sqlalchemy.text("SELECT COUNT(*) FROM eas_rung_weights WHERE study = :s"),
                                  {"s": study_name}).scalar()
    assert left == 0
