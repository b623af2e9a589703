"""A study's place in the worker pool: its budget, when it started, whether it was stopped.

Three study attributes, each written by one kind of actor, so that concurrent writers never
overwrite each other's fields: the budget (`eas search`, `eas resume`), the start (the first
worker that takes the study, or an interactive search) and the stop (`eas stop`, Ctrl-C of an
interactive search, cleared by `eas resume`). A budget belongs to the study, not to a worker:
`seconds` of wall time from the first start (time while stopped does not count), and a total
trial count. A shared study is input: malformed attributes make the study "unqueued" with the
reason, never a crash.

The pool picks by stored priority first, then fair share: the open study with the fewest
workers running a trial of it right now, then the oldest. Workers re-pick after every trial,
so a newly queued study gets its share at once and a stopped one is left within a trial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from eas.study import schema
from eas.units import format_duration

# The states `eas studies` shows. "unqueued": no pool budget (a study of an older EAS, or
# malformed budget attributes); `eas resume STUDY --budget ...` queues it.
STATES = ("queued", "running", "stopped", "done", "unqueued")
# Trials that count against a trials budget: a failed trial's retry is counted, not the failure.
COUNTED = ("complete", "infeasible", "stopped", "pruned", "running", "waiting")


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Run:
    seconds: float | None = None  # wall time from the first start, pauses excluded
    trials: int | None = None  # the study is done at this many counted trials
    priority: int = 0
    started: float | None = None  # POSIX time of the first start (shifted by pauses)
    stopped_at: float | None = None

    @classmethod
    def from_attrs(cls, attrs: dict) -> tuple[Run | None, str | None]:
        """(run, None), or (None, why it is not queued) from a study's user attributes."""
        budget = attrs.get(schema.RUN_BUDGET)
        if budget is None:
            return None, "no pool budget"
        started, stopped = attrs.get(schema.RUN_STARTED), attrs.get(schema.RUN_STOPPED)
        if not isinstance(budget, dict):
            return None, "malformed budget"
        seconds, trials, priority = budget.get("seconds"), budget.get("trials"), budget.get("priority", 0)
        if seconds is not None and not (_finite_number(seconds) and seconds > 0):
            return None, "malformed budget seconds"
        if trials is not None and not (isinstance(trials, int) and not isinstance(trials, bool) and trials >= 0):
            return None, "malformed budget trials"
        if seconds is None and trials is None:
            return None, "budget without seconds or trials"
        if not (isinstance(priority, int) and not isinstance(priority, bool) and abs(priority) <= 10**6):
            return None, "malformed priority"
        for value in (started, stopped):
            if value is not None and not _finite_number(value):
                return None, "malformed start or stop time"
        return cls(seconds, trials, priority, started, stopped), None

    def budget_value(self) -> dict:
        return {"seconds": self.seconds, "trials": self.trials, "priority": self.priority}

    def remaining_seconds(self, now: float) -> float | None:
        """Wall time left; None without a time budget. A queued study has all of it."""
        if self.seconds is None:
            return None
        if self.started is None:
            return self.seconds
        return self.seconds - ((self.stopped_at or now) - self.started)

    def extended(self, now: float, seconds: float | None, trials: int | None, counted: int) -> Run:
        """Resumed; with a budget given, a fresh one from now: `seconds` more wall time and/or
        `trials` more than the `counted` trials so far (what is not given has no limit)."""
        resumed = self.resumed(now)
        if seconds is None and trials is None:
            return resumed
        spent = 0.0 if resumed.started is None else now - resumed.started
        return replace(resumed, seconds=None if seconds is None else spent + seconds,
                       trials=None if trials is None else counted + trials)

    def resumed(self, now: float) -> Run:
        """Stopped no more; the stopped time does not count against the budget."""
        if self.stopped_at is None:
            return self
        started = None if self.started is None else self.started + (now - self.stopped_at)
        return replace(self, started=started, stopped_at=None)


def state_of(run: Run | None, counted: int, now: float) -> str:
    if run is None:
        return "unqueued"
    if run.stopped_at is not None:
        return "stopped"
    left = run.remaining_seconds(now)
    if (left is not None and left <= 0) or (run.trials is not None and counted >= run.trials):
        return "done"
    return "queued" if run.started is None else "running"


def budget_text(run: Run | None, counted: int, now: float) -> str:
    """E.g. '12m05s of 30m, 40/100 trials'."""
    if run is None:
        return ""
    parts = []
    if run.seconds is not None:
        spent = run.seconds - run.remaining_seconds(now)
        parts.append(f"{format_duration(min(max(0.0, spent), run.seconds))} of {format_duration(run.seconds)}")
    if run.trials is not None:
        parts.append(f"{min(counted, run.trials)}/{run.trials} trials")
    return ", ".join(parts)


@dataclass(frozen=True)
class QueuedStudy:
    study_id: int
    name: str
    run: Run | None
    problem: str | None  # why it is not queued
    counted: int  # trials counting against a trials budget
    workers: frozenset[str]  # host:pid of the workers running one of its trials now

    def state(self, now: float) -> str:
        return state_of(self.run, self.counted, now)

    def state_text(self, now: float) -> str:
        state = self.state(now)
        if state == "running" or (self.workers and state in ("stopped", "done")):
            n = len(self.workers)
            return f"{state} ({n} worker{'s' if n != 1 else ''})"
        return state


def pick(studies: list[QueuedStudy], now: float, skip: frozenset[str] = frozenset()) -> QueuedStudy | None:
    """The study a free worker serves next: highest priority, then fewest workers, then oldest."""
    open_ = [s for s in studies if s.name not in skip and s.state(now) in ("queued", "running")]
    return min(open_, key=lambda s: (-s.run.priority, len(s.workers), s.study_id), default=None)


def save(storage, study_id: int, run: Run) -> None:
    """Write a whole run (eas search, eas resume): budget, start and stop."""
    storage.set_study_user_attr(study_id, schema.RUN_BUDGET, run.budget_value())
    storage.set_study_user_attr(study_id, schema.RUN_STARTED, run.started)
    storage.set_study_user_attr(study_id, schema.RUN_STOPPED, run.stopped_at)
