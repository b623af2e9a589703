"""The worker pool on the real PostgreSQL server: queued studies served by `eas worker --storage`
without --study, each within its own budget; `eas stop` and `eas resume` without killing anyone."""

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from datetime import timezone

import optuna
import pytest
import sqlalchemy

from tests.conftest import assert_user_error, run_eas
from tests.study.test_postgres_workers import URL

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
FAST = ("--space", "tiny", "--data", "digits", "--epochs", "2", "--rungs", "1", "--no-warm-start", "--quiet")


def queue(name, url, *budget):
    result = run_eas("search", *FAST, "--study", name, "--storage", url, "--queue", *budget)
    assert result.returncode == 0, result.stderr
    return result


def pool_worker(url, *args):
    return subprocess.Popen([sys.executable, "-m", "eas", "worker", "--storage", url, "--heartbeat", "2",
                             "--threads", "1", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def listed(url, names):
    rows = json.loads(run_eas("studies", "--storage", url, "--json").stdout)
    return {row["study"]: row for row in rows if row["study"] in names}


def start_times(name, url):
    trials = optuna.load_study(study_name=name, storage=url).trials
    return [t.datetime_start.replace(tzinfo=timezone.utc).timestamp() for t in trials]


@pytest.fixture
def postgres():
    """A database of its own on the PostgreSQL server: a pool worker serves every study of its
    storage, so it must not meet the studies of tests running beside it (nor they its workers)."""
    admin = sqlalchemy.create_engine(URL, isolation_level="AUTOCOMMIT")
    try:
        admin.connect().close()
    except Exception as error:  # CI starts the server; a developer machine may not have one
        pytest.skip(f"PostgreSQL not reachable at {URL}: {error}")
    name = f"eas_pool_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    yield sqlalchemy.make_url(URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:  # FORCE: a worker left behind by a failed test holds a connection
        connection.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def study_name(postgres):
    return f"pg-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def second_study(postgres):
    name = f"pg2-{time.time_ns() % 10**10}"
    yield name
    with contextlib.suppress(KeyError):
        optuna.delete_study(study_name=name, storage=postgres)


def test_two_queued_studies_are_served_by_two_pool_workers_each_within_its_budget(postgres, study_name,
                                                                                    second_study):
    by_trials, by_time = study_name, second_study
    queue(by_trials, postgres, "--trials", "6")
    queue(by_time, postgres, "--budget", "15s")
    before = listed(postgres, {by_trials, by_time})
    assert {row["state"] for row in before.values()} == {"queued"}
    workers = [pool_worker(postgres, "--seed", str(seed)) for seed in (1, 2)]
    for worker in workers:
        _, err = worker.communicate(timeout=400)
        assert worker.returncode == 0, err
        assert "nothing-left" in err  # both studies done: the worker exits by itself

    after = listed(postgres, {by_trials, by_time})
    assert {row["state"] for row in after.values()} == {"done"}
    # the trials budget holds across workers (two that check at the same instant may each start one)
    counted = after[by_trials]["trials"] - after[by_trials]["failed"]
    assert 6 <= counted <= 7
    # the time budget: no trial started after the study's deadline (recorded when it first started)
    stored = optuna.load_study(study_name=by_time, storage=postgres).user_attrs
    deadline = stored["eas.run.started"] + stored["eas.run.budget"]["seconds"]
    assert max(start_times(by_time, postgres)) <= deadline + 2  # clocks of one machine; writes take a moment
    assert after[by_time]["complete"] >= 1 and after[by_trials]["complete"] >= 1  # both progressed
    served = {name: set() for name in (by_trials, by_time)}
    for name in served:
        for trial in optuna.load_study(study_name=name, storage=postgres).trials:
            served[name].add(trial.user_attrs["worker"].split(":")[1])
    pids = {str(worker.pid) for worker in workers}
    assert served[by_trials] | served[by_time] == pids  # both workers worked


def test_stop_and_resume_without_killing_the_worker(postgres, study_name):
    queue(study_name, postgres, "--trials", "500")
    worker = pool_worker(postgres, "--wait", "--seed", "3")
    said: list[str] = []  # its stderr, line by line, as it comes

    def read() -> None:
        for line in worker.stderr:
            said.append(line)

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and listed(postgres, {study_name})[study_name]["complete"] < 2:
            time.sleep(0.5)
        stopped = run_eas("stop", study_name, "--storage", postgres)
        assert stopped.returncode == 0 and "stopped study" in stopped.stdout, stopped.stderr
        row = listed(postgres, {study_name})[study_name]
        assert row["state"].startswith("stopped")
        # the worker leaves it after the trial in flight, reads the queue, finds nothing to serve
        # and says so: from then on nothing more is started
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any("nothing to serve" in line for line in said):
            time.sleep(0.5)
        assert any("nothing to serve" in line for line in said), said
        settled = listed(postgres, {study_name})[study_name]
        assert settled["running"] == 0
        assert worker.poll() is None  # still alive, waiting for work

        resumed = run_eas("resume", study_name, "--storage", postgres, "--trials", "3")
        assert resumed.returncode == 0 and "running" in resumed.stdout, resumed.stderr
        # done once its last trial is counted, which a running trial already is (so its worker may
        # still show, until that trial has finished): wait for nothing running
        deadline = time.monotonic() + 180
        final = listed(postgres, {study_name})[study_name]
        while time.monotonic() < deadline and not (final["state"] == "done" and final["running"] == 0):
            time.sleep(0.5)
            final = listed(postgres, {study_name})[study_name]
        assert final["state"] == "done" and final["trials"] == settled["trials"] + 3  # one worker: exactly 3 more
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        reading.join(timeout=60)
    assert_user_error(run_eas("resume", study_name, "--storage", postgres), "spent its budget")
    assert_user_error(run_eas("stop", "no-such-study", "--storage", postgres), "no study 'no-such-study'")


def test_a_pool_worker_needs_a_storage():
    assert_user_error(run_eas("worker", env={"EAS_STORAGE": ""}), "--storage")
