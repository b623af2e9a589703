"""End-to-end searches through the real CLI, on SQLite files in a temporary folder."""

import hashlib
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from eas.errors import UserError
from eas.nas.budget import Budget
from eas.units import parse_seconds
from tests.conftest import assert_user_error, run_eas

FAST = ["--space", "tiny", "--data", "digits", "--epochs", "2", "--quiet", "--rungs", "1"]


def env_for(tmp_path):
    return {"EAS_STUDIES_DIR": str(tmp_path / "studies")}


def load(tmp_path, name):
    """A study read through a plain Optuna storage, once EAS has finished writing it."""
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'studies' / name}.db")


@pytest.mark.parametrize("text, seconds", [("2h", 7200), ("90m", 5400), ("45s", 45), ("1h30m", 5400),
                                           ("1.5h", 5400), ("500ms", 0.5)])
def test_budget_strings(text, seconds):
    assert parse_seconds(text, "--budget") == seconds
    assert Budget.parse(text, None).seconds == seconds


def test_cpu_budget_strings_and_refusals():
    assert Budget.parse(None, None, "50m") == Budget(None, None, 3000.0)
    assert Budget.parse("2h", 5, "1m").split(2) == [Budget(7200.0, 3, 60.0), Budget(7200.0, 2, 60.0)]
    for text in ("", "ten", "-5m"):
        with pytest.raises(UserError, match="--cpu-budget"):
            Budget.parse(None, None, text)


def test_cpu_budget_is_for_one_process(tmp_path):
    result = run_eas("search", *FAST, "--cpu-budget", "5s", "--workers", "2", env=env_for(tmp_path), cwd=tmp_path)
    assert_user_error(result, "--cpu-budget limits this one process")
    assert not (tmp_path / "studies").exists() or not list((tmp_path / "studies").glob("*.db"))


@pytest.mark.slow
def test_a_cpu_budget_stops_new_trials_once_the_process_used_it(tmp_path):
    result = run_eas("search", *FAST, "--cpu-budget", "6s", "--study", "cpu", "--json", "--threads", "1",
                     env=env_for(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stopped"] == "budget"
    trials = sorted(load(tmp_path, "cpu").trials, key=lambda t: t.number)
    spent = [t.user_attrs["metrics"]["evaluate_cpu_seconds"] for t in trials]
    assert len(trials) >= 2 and all(s > 0 for s in spent)
    # whatever else ran on the machine: the trials before the last one used less than the budget
    assert sum(spent[:-1]) < 6


@pytest.mark.slow
def test_short_search_stores_trials_shows_the_front_and_resumes_under_a_wall_budget(tmp_path):
    env = env_for(tmp_path)
    first = run_eas("search", *FAST, "--trials", "3", "--study", "demo", "--json", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["stopped"] == "trials"
    study = load(tmp_path, "demo")
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(study.trials) == len(complete) == 3
    for trial in complete:
        assert trial.user_attrs["genome"].startswith("stem_")
        metrics = trial.user_attrs["metrics"]
        assert metrics["energy_source"] == "estimated" and metrics["versions"]["torch"]
        assert metrics["fidelity"]["epochs"] == 2
    assert study.metric_names == ["accuracy", "macs", "params", "energy"]

    shown = run_eas("show", "demo", env=env, cwd=tmp_path)
    assert shown.returncode == 0 and "Pareto set" in shown.stdout and "*" in shown.stdout
    assert "latency and inference energy measured in onnxruntime" in shown.stdout  # where they came from
    one = json.loads(run_eas("show", "demo", "--trial", str(complete[0].number), env=env, cwd=tmp_path).stdout)
    assert one["genome"] == complete[0].user_attrs["genome"]

    # Resumed under a wall-clock budget, with a candidate proposed again (as any worker could): it
    # is reused at once, not trained again. How many more trials fit in 8 s is the machine's pace;
    # the contract is that none starts after the budget and none is left running.
    study.enqueue_trial(complete[0].params)
    again = run_eas("search", *FAST, "--budget", "8s", "--study", "demo", "--json", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["stopped"] == "budget"
    resumed = load(tmp_path, "demo")
    added = [t for t in resumed.trials if t.number >= 3]
    assert added and (max(t.datetime_start for t in added) - min(t.datetime_start for t in added)).total_seconds() <= 8
    assert not [t for t in resumed.trials if t.state.name == "RUNNING"]
    reused = [t for t in resumed.trials if "cached_from" in t.user_attrs]
    assert reused, "the candidate proposed again was trained again"
    for trial in reused:
        source = resumed.trials[trial.user_attrs["cached_from"]]
        assert source.user_attrs["genome"] == trial.user_attrs["genome"]
        assert source.values == trial.values
    listed = run_eas("studies", "--json", env=env, cwd=tmp_path)
    assert json.loads(listed.stdout)[0]["study"] == "demo"


@pytest.mark.slow
def test_counted_limits_refuse_proposals_before_they_become_trials(tmp_path):
    result = run_eas("search", *FAST, "--trials", "6", "--study", "small", "--max-macs", "400k", "--json",
                     "--sampler", "random", env=env_for(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["refused_proposals"]["over max_macs"] > 0
    study = load(tmp_path, "small")
    feasible = [t for t in study.trials if t.user_attrs.get("status") == "ok"]
    assert len(feasible) == len(study.trials) == 6  # nothing over the limit reached the sampler's history
    for trial in feasible:
        assert trial.constraints["max_macs"] <= 0 and trial.user_attrs["metrics"]["macs"] <= 400_000
    assert all(t.number in {b.number for b in feasible} for t in study.best_trials)
    assert study.user_attrs["eas.reference_point"]["macs"] == 400_000  # the limit is the HV reference


@pytest.mark.slow
def test_warm_start_queues_a_fitting_reference_first(tmp_path):
    result = run_eas("search", "--space", "mobile", "--data", "digits", "--trials", "1", "--max-steps", "1",
                     "--rungs", "1", "--study", "warm", "--quiet", env=env_for(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first = load(tmp_path, "warm").trials[0]
    assert first.user_attrs.get("warm_start") == "mobilenet_v2"


def running_trials(tmp_path, name) -> int:
    """RUNNING trials of a study a search is writing, read without writing (0 while it is set up)."""
    from eas.errors import UserError
    from eas.study.reader import load_study

    url = f"sqlite:///{tmp_path / 'studies' / name}.db"
    try:
        return sum(record.state == "running" for record in load_study(url, name).records)
    except UserError:  # no file yet, or the study is still being created
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_leaves_no_running_trial_and_the_study_resumes(tmp_path, stop):
    """Ctrl-C (or SIGTERM): a clean stop in one line, no trial left running, the study file
    alone complete (its write-ahead log folded in), and the study resumes."""
    env = env_for(tmp_path)
    # -X faulthandler: should the search ever hang after Ctrl-C, SIGABRT prints where.
    # A suite started in the background (`cmd &` in a script) inherits SIGINT ignored, and so
    # would the search: give it the default disposition a terminal's Ctrl-C meets.
    process = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "eas", "search", "--space", "tiny",
                                "--data", "digits", "--epochs", "200", "--budget", "5m", "--study", "stop", "--quiet"],
                               cwd=tmp_path, env={**__import__("os").environ, **env},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 180  # generous: a busy machine imports torch slowly
    while not running_trials(tmp_path, "stop") and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
    assert process.poll() is None and running_trials(tmp_path, "stop"), "the search never started a trial"
    # a moment into the trial, so that the stop meets a training step as Ctrl-C usually does (any
    # moment after a trial runs is a valid one: nothing waits here for the search's pace)
    time.sleep(1.0)
    process.send_signal(stop)
    try:
        out, err = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        out, err = process.communicate()
        where = "\n".join(line for line in err.splitlines() if not line.startswith("Extension modules"))
        pytest.fail(f"the search did not stop after Ctrl-C; where it hung:\n{where[-8000:]}")
    assert process.returncode == 130, err
    assert "resume" in err and "Traceback" not in err, err
    copy = tmp_path / "elsewhere" / "stop.db"  # what a user who copies the study file gets
    copy.parent.mkdir()
    shutil.copy(tmp_path / "studies" / "stop.db", copy)
    study = load(tmp_path, "stop")
    before = len(study.trials)
    copied = optuna.load_study(study_name="stop", storage=f"sqlite:///{copy}")
    assert [t.state for t in copied.trials] == [t.state for t in study.trials]
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert any(t.user_attrs.get("status") == "interrupted" for t in study.trials)
    resumed = run_eas("search", "--space", "tiny", "--data", "digits", "--epochs", "200", "--trials", "1",
                      "--study", "stop", "--quiet", "--subset", "500", env=env, cwd=tmp_path)
    assert "different fidelity" in resumed.stderr  # fidelity is part of what must match
    resumed = run_eas("search", "--space", "tiny", "--data", "digits", "--epochs", "200", "--trials", "1",
                      "--study", "stop", "--quiet", "--trial-timeout", "3s", env=env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(load(tmp_path, "stop").trials) == before + 1


def snapshot(folder: Path) -> dict:
    """What each file holds: a SQLite database by its rows (a WAL checkpoint moves bytes without
    changing content), anything else by its bytes."""
    result = {}
    for path in sorted(folder.glob("*")):
        if path.name.endswith(("-wal", "-shm")):
            continue
        try:
            connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            content = "\n".join(connection.iterdump()).encode()
            connection.close()
        except sqlite3.DatabaseError:
            content = path.read_bytes()
        result[path.name] = hashlib.sha256(content).hexdigest()
    return result


@pytest.fixture(scope="module")
def existing_studies(tmp_path_factory):
    """A folder with one real study and one corrupt file, to check that bad input leaves them."""
    root = tmp_path_factory.mktemp("bad-input")
    result = run_eas("search", *FAST, "--trials", "2", "--study", "keep", env=env_for(root), cwd=root)
    assert result.returncode == 0, result.stderr
    (root / "studies" / "corrupt.db").write_bytes(b"this is not a database" * 100)
    return root


@pytest.mark.parametrize("args, fragment", [
    (["--budget", "2x"], "--budget"),
    (["--budget", "-5m"], "--budget"),
    (["--budget", "0"], "--budget"),
    (["--budget", "0s"], "longer than zero"),
    ([], "--budget"),
    (["--budget", "1m", "--space", "nope"], "unknown space"),
    (["--budget", "1m", "--data", "mnist"], "unknown dataset"),
    (["--budget", "1m", "--objectives", "accuracy,beauty"], "unknown objective beauty"),
    (["--budget", "1m", "--sampler", "cmaes"], "unknown sampler"),
    (["--budget", "1m", "--max-macs", "lots"], "--max-macs"),
    (["--budget", "1m", "--storage", "postgresql://nobody@127.0.0.1:1/none"], "cannot open storage"),
    (["--budget", "1m", "--study", "corrupt"], "not a readable SQLite"),
    (["--budget", "1m", "--study", "../escape"], "invalid study name"),
    (["--budget", "1m", "--study", "a/b"], "invalid study name"),
    (["--budget", "1m", "--max-macs", "10"], "can meet the constraints"),
    (["--budget", "1m", "--study", "keep", "--space", "hybrid"], "different space"),
])
@pytest.mark.slow
def test_bad_input_is_one_line_exit_2_and_leaves_studies_untouched(existing_studies, args, fragment):
    root = existing_studies
    before = snapshot(root / "studies")
    base = ["--space", "tiny", "--data", "digits", "--quiet", "--study", "keep"]
    result = run_eas("search", *base, *args, env=env_for(root), cwd=root)
    assert_user_error(result, fragment)
    assert snapshot(root / "studies") == before


@pytest.mark.parametrize("args, fragment", [
    (["show", "missing"], "no study storage"),
    (["show", "keep", "--trial", "99"], "no trial 99"),
    (["show", "corrupt"], "not a readable SQLite"),
    (["worker", "--study", "missing", "--budget", "1m"], "no study storage"),
    (["worker", "--study", "keep", "--budget", "1x"], "--budget"),
])
@pytest.mark.slow
def test_other_commands_bad_input(existing_studies, args, fragment):
    before = snapshot(existing_studies / "studies")
    assert_user_error(run_eas(*args, env=env_for(existing_studies), cwd=existing_studies), fragment)
    assert snapshot(existing_studies / "studies") == before


def test_corrupt_file_is_not_touched_by_preflight(tmp_path):
    from eas.errors import UserError
    from eas.study.storage import preflight

    path = tmp_path / "x.db"
    path.write_bytes(b"garbage" * 50)
    with pytest.raises(UserError):
        preflight(f"sqlite:///{path}")
    assert path.read_bytes() == b"garbage" * 50
    with pytest.raises(sqlite3.DatabaseError):
        sqlite3.connect(path).execute("select 1 from sqlite_master").fetchall()


@pytest.mark.slow
def test_local_workers_share_a_sqlite_study(tmp_path):
    result = run_eas("search", *FAST, "--budget", "15s", "--workers", "2", "--study", "pair", "--json",
                     env=env_for(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    study = load(tmp_path, "pair")
    workers = {t.user_attrs["worker"] for t in study.trials}
    assert len(workers) == 2
    assert summary["counts"]["complete"] == len([t for t in study.trials if t.state.name == "COMPLETE"])
    assert not [t for t in study.trials if t.state.name in ("FAIL", "RUNNING")]
