"""`eas worker --storage URL` without --study: one process serving every open study of a storage.

Before each trial the worker reads the queue (a few SQL queries, whatever the studies' sizes),
picks a study (eas.study.queue.pick: priority, then fair share, then age) and runs one trial
of it within the study's remaining budget; so budgets hold across workers, a new study gets
its share at once, and a stopped one is left after the trial in flight. A worker keeps what it
needs per study (the Optuna study, the incremental live view, the sampler, the dataset) and
exits when nothing is left, or waits for more with --wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import optuna
from sqlalchemy.exc import DBAPIError

from eas.data.datasets import load_dataset
from eas.errors import UserError
from eas.nas.budget import Budget
from eas.nas.live_view import LiveStudy
from eas.nas.loop import _engine_of, make_sampler, run_search
from eas.nas.session import join_study
from eas.reports.progress import status_text
from eas.study import schema
from eas.study.queue import pick
from eas.study.reader import NoSuchStudy, queue_entries
from eas.study.schema import SearchSettings
from eas.study.snapshots import Snapshots
from eas.study.storage import checkpoint_wal, harden_sqlite, open_storage

if TYPE_CHECKING:
    from eas.arch.space import Space
    from eas.data.datasets import Dataset
    from eas.nas.proposals import ConstraintAwareSampler

WAIT_POLL_SECONDS = 5.0


@dataclass
class Served:
    """What a context needs to run trials of one study in this process."""

    study: optuna.Study
    settings: SearchSettings
    space: Space
    task: Dataset
    live: LiveStudy
    sampler: ConstraintAwareSampler
    snapshots: Snapshots


@dataclass
class PoolSummary:
    trials: dict[str, int] = field(default_factory=dict)  # study -> trials this worker ran
    skipped: dict[str, str] = field(default_factory=dict)  # study -> why this worker cannot serve it
    stopped: str = ""  # nothing-left | budget | trials | interrupted


class Pool:
    def __init__(self, url: str, heartbeat: int, trial_timeout: float, seed: int,
                 echo: Callable[[str], None] = lambda line: None):
        self.url, self.trial_timeout, self.seed, self.echo = url, trial_timeout, seed, echo
        self.storage = open_storage(url, heartbeat=heartbeat)  # one engine for every study served
        harden_sqlite(self.storage)
        self.served: dict[str, Served] = {}
        self.tasks: dict[tuple, object] = {}  # (data, seed) -> loaded dataset, shared by studies

    def _task(self, data: str, seed: int):
        """One loaded dataset for every study of the same data and split."""
        if (data, seed) not in self.tasks:
            self.tasks[(data, seed)] = load_dataset(data, seed=seed)
        return self.tasks[(data, seed)]

    def _serve(self, name: str) -> Served:
        if name not in self.served:
            joined = join_study(self.url, name, storage=self.storage, load_task=self._task)
            live = LiveStudy(joined.reader, joined.settings.objectives, joined.reader.reference)
            sampler = make_sampler(joined.settings, joined.space, joined.task, live, self.seed)
            self.served[name] = Served(joined.study, joined.settings, joined.space, joined.task, live, sampler,
                                       Snapshots(_engine_of(joined.study), name))
        return self.served[name]

    def _queue(self, tries: int = 5) -> list:
        """The queue entries of the storage; a read that fails (a dropped connection) is retried
        before it becomes an error, so a blip of the server does not end the worker. A storage
        without EAS tables is an answer, not a blip: not retried."""
        for attempt in range(1, tries):
            try:
                return queue_entries(self.url)
            except NoSuchStudy:
                raise
            except UserError as error:
                self.echo(f"eas: warning: reading the queue failed, retrying: {error}")
                time.sleep(2.0 * attempt)
        return queue_entries(self.url)

    def run(self, budget=None, wait: bool = False) -> PoolSummary:
        """Serve trials until nothing is left (or, with `wait`, forever), this worker's own
        `budget` is spent, or Ctrl-C."""
        try:
            return self._run(budget, wait)
        finally:
            checkpoint_wal(self.url)  # a SQLite storage's file alone holds every trial

    def _run(self, budget, wait: bool) -> PoolSummary:
        summary = PoolSummary()
        began = time.monotonic()
        waiting = False
        while True:
            own_left = budget.seconds - (time.monotonic() - began) if budget and budget.seconds else None
            if own_left is not None and own_left <= 0:
                summary.stopped = "budget"
                return summary
            if budget and budget.trials and sum(summary.trials.values()) >= budget.trials:
                summary.stopped = "trials"
                return summary
            queue = self._queue()
            now = time.time()
            choice = pick(queue, now, skip=frozenset(summary.skipped))
            if choice is None:
                if not wait:
                    summary.stopped = "nothing-left"
                    return summary
                if not waiting:  # said once each time the queue runs dry, not at every poll
                    self.echo(f"eas: nothing to serve; waiting for work (the queue is read every "
                              f"{WAIT_POLL_SECONDS:.0f} s)")
                    waiting = True
                time.sleep(WAIT_POLL_SECONDS if own_left is None else min(WAIT_POLL_SECONDS, own_left))
                continue
            waiting = False
            try:
                served = self._serve(choice.name)
            except UserError as error:  # e.g. its dataset is not on this machine: others may serve it
                summary.skipped[choice.name] = str(error)
                self.echo(f"eas: warning: skipping study {choice.name!r}: {error}")
                continue
            if choice.run.started is None:
                self.storage.set_study_user_attr(choice.study_id, schema.RUN_STARTED, now)
            limits = [s for s in (choice.run.remaining_seconds(now), own_left) if s is not None]
            try:
                done = run_search(served.study, served.settings, served.space, served.task, served.live,
                                  Budget(seconds=min(limits) if limits else None, trials=1), self.trial_timeout,
                                  self.seed, snapshots=served.snapshots, sampler=served.sampler)
            except DBAPIError as error:  # the server dropped this connection: its trial is retried by
                # heartbeat like a dead worker's, and the pool reconnects (pool_pre_ping)
                self.echo(f"eas: warning: storage error in study {choice.name!r}, going on: "
                          f"{str(error.orig or error).splitlines()[0][:200]}")
                time.sleep(1.0)
                continue
            summary.trials[choice.name] = summary.trials.get(choice.name, 0) + done.trials
            if done.stopped == "interrupted":
                summary.stopped = "interrupted"
                return summary
            self.echo(f"{choice.name}: {status_text(served.live)}")
