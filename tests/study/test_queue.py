"""The worker pool's queue: study states, budgets across stops and resumes, which study a free
worker serves, and stored attributes that anyone could have written."""

import pytest

from eas.errors import UserError
from eas.study import schema
from eas.study.queue import QueuedStudy, Run, budget_text, pick, state_of

NOW = 1_000_000.0


def entry(study_id, run, workers=(), counted=0, name=None):
    return QueuedStudy(study_id, name or f"s{study_id}", run, None, counted, frozenset(workers))


def test_states_follow_the_budget_the_start_and_the_stop():
    assert state_of(None, 0, NOW) == "unqueued"
    assert state_of(Run(seconds=60), 0, NOW) == "queued"
    assert state_of(Run(seconds=60, started=NOW - 59), 5, NOW) == "running"
    assert state_of(Run(seconds=60, started=NOW - 60), 5, NOW) == "done"
    assert state_of(Run(trials=5, started=NOW - 999), 4, NOW) == "running"
    assert state_of(Run(trials=5, started=NOW - 999), 5, NOW) == "done"
    assert state_of(Run(seconds=60, trials=5, started=NOW - 10), 5, NOW) == "done"  # whichever ends first
    assert state_of(Run(seconds=60, started=NOW - 10, stopped_at=NOW - 5), 0, NOW) == "stopped"


def test_time_while_stopped_does_not_count_and_resume_keeps_what_was_left():
    run = Run(seconds=100, started=NOW - 500, stopped_at=NOW - 460)  # ran 40 s, then stopped for 460 s
    assert run.remaining_seconds(NOW) == 60
    resumed = run.resumed(NOW)
    assert resumed.stopped_at is None and resumed.remaining_seconds(NOW) == 60
    assert state_of(resumed, 0, NOW) == "running"
    assert budget_text(resumed, 0, NOW) == "0m40s of 1m40s"


def test_a_budget_given_at_resume_counts_from_now():
    done = Run(seconds=60, trials=10, started=NOW - 120)
    assert state_of(done, 3, NOW) == "done"
    more = done.extended(NOW, seconds=30, trials=None, counted=3)
    assert more.remaining_seconds(NOW) == 30 and more.trials is None
    assert state_of(more, 3, NOW) == "running"
    more_trials = done.extended(NOW, seconds=None, trials=4, counted=10)
    assert more_trials.trials == 14 and more_trials.seconds is None
    assert done.extended(NOW, None, None, 3) == done  # no budget given: only the stop is lifted
    queued = Run().extended(NOW, seconds=None, trials=5, counted=7)  # a study that had no pool budget
    assert state_of(queued, 7, NOW) == "queued" and queued.trials == 12


def test_a_free_worker_serves_priority_first_then_the_study_with_fewest_workers_then_the_oldest():
    busy = entry(1, Run(seconds=60, started=NOW - 1), workers={"a:1", "b:2"})
    quiet = entry(2, Run(seconds=60, started=NOW - 1), workers={"c:3"})
    newer = entry(3, Run(seconds=60), workers={"d:4"})
    assert pick([busy, quiet, newer], NOW).name == "s2"  # fewest workers; ties go to the oldest
    urgent = entry(4, Run(seconds=60, priority=5), workers={"e:5", "f:6", "g:7"})
    assert pick([busy, quiet, urgent], NOW).name == "s4"
    closed = [entry(5, Run(seconds=60, started=NOW - 61)), entry(6, Run(trials=3, started=NOW), counted=3),
              entry(7, Run(seconds=60, started=NOW - 1, stopped_at=NOW)), entry(8, None)]
    assert pick(closed, NOW) is None  # done, done, stopped, unqueued
    assert pick([quiet], NOW, skip=frozenset({"s2"})) is None  # a study this worker cannot serve


@pytest.mark.parametrize("attrs, problem", [
    ({}, "no pool budget"),
    ({schema.RUN_BUDGET: "1h"}, "malformed budget"),
    ({schema.RUN_BUDGET: {"seconds": -5}}, "malformed budget seconds"),
    ({schema.RUN_BUDGET: {"seconds": float("nan")}}, "malformed budget seconds"),
    ({schema.RUN_BUDGET: {"trials": True}}, "malformed budget trials"),
    ({schema.RUN_BUDGET: {}}, "budget without seconds or trials"),
    ({schema.RUN_BUDGET: {"seconds": 60, "priority": "high"}}, "malformed priority"),
    ({schema.RUN_BUDGET: {"seconds": 60}, schema.RUN_STARTED: "yesterday"}, "malformed start or stop time"),
])
def test_stored_budgets_anyone_could_write_are_validated(attrs, problem):
    assert Run.from_attrs(attrs) == (None, problem)


def test_a_valid_stored_budget_reads_back():
    run, problem = Run.from_attrs({schema.RUN_BUDGET: {"seconds": 60.0, "trials": None, "priority": 2},
                                   schema.RUN_STARTED: NOW, schema.RUN_STOPPED: None})
    assert problem is None and run == Run(60.0, None, 2, NOW, None)
    assert Run.from_attrs({schema.RUN_BUDGET: run.budget_value()})[0] == Run(60.0, None, 2)


def test_the_pools_narrow_read_agrees_with_the_full_listing(tmp_path):
    """queue_entries (what a pool worker reads before every trial) gives the same entries as
    list_studies, with budgets anyone could have written, and leaves out non-EAS studies."""
    import optuna

    from eas.study.queue import save
    from eas.study.reader import entry_of, list_studies, queue_entries
    from tests.study_factory import make_study

    url = f"sqlite:///{tmp_path / 'q.db'}"
    queued, broken = make_study(url, "queued", trials=3), make_study(url, "broken", trials=2)
    make_study(url, "plain", trials=1)
    save(queued._storage, queued._study_id, Run(600.0, 10, 3, started=NOW))
    broken.set_user_attr(schema.RUN_BUDGET, {"seconds": "soon"})
    optuna.create_study(study_name="not-eas", storage=url)

    entries = queue_entries(url)
    assert entries == [row["queue"] for row in list_studies(url) if row["study"]]
    assert {e.name: (e.run, e.problem, e.counted) for e in entries} == {
        "queued": (Run(600.0, 10, 3, NOW), None, 3),
        "broken": (None, "malformed budget seconds", 2),
        "plain": (None, "no pool budget", 1)}
    assert entry_of(url, "queued") == entries[0]
    with pytest.raises(UserError, match="not an EAS study"):
        entry_of(url, "not-eas")
