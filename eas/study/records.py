"""Stored trials as validated records. A shared study is untrusted input: anyone who can write
to it can add any trial with plain Optuna. A trial whose genome, metrics or constraints are
malformed, or whose genome describes a network too large to build, becomes a record in state
"broken" with the reason; every reader skips it and shows the flag instead of failing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypeGuard

from eas.arch.bounds import check_buildable
from eas.arch.genome import Arch
from eas.arch.reference import baseline_arch
from eas.errors import UserError
from eas.objectives import OBJECTIVES
from eas.study import schema

# "stopped": a multi-fidelity candidate that did not rank high enough at a rung to train on
# (Optuna's PRUNED, with its partial results); "pruned": one cut by a time limit.
STATES = ("complete", "infeasible", "stopped", "pruned", "failed", "running", "waiting", "broken")
OPTUNA_STATES = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running",
                 "WAITING": "waiting"}
# Metrics that readers compute with: they must be numbers (or absent) in a trial to be trusted.
NUMERIC_METRICS = {o.metric for o in OBJECTIVES.values()} | {
    "flops", "train_seconds", "evaluate_seconds", "evaluate_cpu_seconds", "accuracy_low", "accuracy_high",
    "val_images", "train_steps", "train_images", "evaluate_energy_j", "latency_ms_p10", "latency_ms_p90",
    "latency_batch_ms", "memory_bytes_training", "latency_predicted_ms"}
RUNG_NUMBERS = {"steps", "accuracy_low", "accuracy_high", "val_images", "position", "results", "keep"}
TEXT_METRICS = {"reason", "energy_source", "energy_note", "device", "status", "genome", "latency_source",
                "latency_note"}
UNREADABLE = "__unreadable__"  # the readers' mark for a stored value that is not JSON


@dataclass(frozen=True)
class TrialRecord:
    number: int
    state: str  # one of STATES; "infeasible" = complete but violating a constraint
    genome: str | None
    metrics: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)  # filled only when one trial is read in full
    started: float | None = None  # POSIX seconds
    finished: float | None = None
    reason: str | None = None
    trial_id: int | None = None  # the storage's id, to read one trial's params later
    attrs: dict = field(default_factory=dict)  # the other EAS trial attributes (worker, rungs, ...)

    def value(self, objective: str) -> float:
        value = self.metrics.get(OBJECTIVES[objective].metric)
        return math.nan if value is None else float(value)


def _is_number(value) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Ranges every stored number must lie in; out of range (1e308 accuracy, -1000 MACs) is junk.
UNIT_INTERVAL = {"accuracy", "accuracy_low", "accuracy_high"}


def _out_of_range(key: str, value) -> bool:
    if not math.isfinite(value):
        return True
    return not 0.0 <= value <= 1.0 if key in UNIT_INTERVAL else value < 0


def _numbers_problem(values: dict, keys: set, where: str) -> str | None:
    for key in sorted(keys & values.keys()):
        value = values[key]
        if value is None:
            continue
        if not _is_number(value):
            return f"{where} {key} is not a number ({str(value)[:40]!r})"
        if _out_of_range(key, value):
            return f"{where} {key} is out of range ({str(value)[:40]})"
    low, accuracy, high = (values.get(k) for k in ("accuracy_low", "accuracy", "accuracy_high"))
    # a hair of tolerance: studies stored before the interval was clamped hold 0.9999999999999999 at 100%
    if (_is_number(low) and _is_number(accuracy) and _is_number(high)
            and not low - 1e-9 <= accuracy <= high + 1e-9):
        return f"{where} accuracy {accuracy} lies outside its interval [{low}, {high}]"
    return None


def problem_with(attrs: dict, constraints: dict, task: tuple | None, times: tuple = ()) -> str | None:
    """Why a stored trial cannot be trusted, or None. `task` = (input_shape, num_classes);
    `times` = (start, finish) as POSIX seconds, NaN for a stored value that is not a date."""
    if any(isinstance(t, float) and not math.isfinite(t) for t in times):
        return "stored start or finish time is not a date"
    for key, value in attrs.items():
        if isinstance(value, dict) and UNREADABLE in value:
            return f"stored {key} is not JSON"
    genome = attrs.get(schema.GENOME)
    if genome is not None:
        if not isinstance(genome, str):
            return f"stored genome is not a string ({type(genome).__name__})"
        try:
            arch = Arch.decode(genome)
            if task is not None:
                check_buildable(arch, *task)
        except UserError as error:
            return f"stored genome is unusable: {error}"
    metrics = attrs.get(schema.METRICS)
    if metrics is not None:
        if not isinstance(metrics, dict):
            return f"stored metrics are not a mapping ({type(metrics).__name__})"
        # objectives registered since this module loaded (a user's own) are numbers too
        problem = _numbers_problem(metrics, NUMERIC_METRICS | {o.metric for o in OBJECTIVES.values()}, "stored metric")
        if problem:
            return problem
        for key in TEXT_METRICS & metrics.keys():
            if metrics[key] is not None and not isinstance(metrics[key], str):
                return f"stored metric {key} is not text"
    for name, value in constraints.items():
        if not _is_number(value) or not math.isfinite(value):
            return f"stored constraint {name} is not a number"
    for key in (schema.STATUS, schema.REASON):
        if attrs.get(key) is not None and not isinstance(attrs[key], str):
            return f"stored {key} is not a string"
    rungs = attrs.get(schema.RUNGS)
    if rungs is not None and not valid_rungs(rungs):
        return "stored rungs are malformed"
    return None


def valid_rungs(rungs) -> bool:
    """A list of rung records: each a mapping with an integer rung and numbers where numbers go."""
    if not isinstance(rungs, list):
        return False
    for rung in rungs:
        if not isinstance(rung, dict) or not isinstance(rung.get("rung"), int) or isinstance(rung["rung"], bool):
            return False
        if _numbers_problem(rung, NUMERIC_METRICS | RUNG_NUMBERS, "rung") is not None:
            return False
    return True


def state_of(optuna_state: str, status, violated: bool) -> str:
    """A trial's EAS state from Optuna's state and the status EAS stored."""
    state = OPTUNA_STATES.get(optuna_state, "failed")
    if state == "complete" and (violated or status == "infeasible"):
        return "infeasible"
    if state == "pruned" and status == "stopped":
        return "stopped"
    return state


def make_record(trial_id: int, number: int, optuna_state: str, started: float | None, finished: float | None,
                attrs: dict, constraints: dict, task: tuple | None) -> TrialRecord:
    """One stored trial -> TrialRecord, flagged "broken" when it cannot be trusted."""
    problem = problem_with(attrs, constraints, task, (started, finished))
    if problem is not None:
        genome = attrs.get(schema.GENOME)
        return TrialRecord(number=number, state="broken", genome=genome if isinstance(genome, str) else None,
                           started=started, finished=finished, reason=problem, trial_id=trial_id)
    state = state_of(optuna_state, attrs.get(schema.STATUS), violated=any(v > 0 for v in constraints.values()))
    metrics = attrs.get(schema.METRICS) or {}
    other = {k: v for k, v in attrs.items() if k not in (schema.GENOME, schema.METRICS, schema.REASON)}
    return TrialRecord(number=number, state=state, genome=attrs.get(schema.GENOME), metrics=metrics,
                       started=started, finished=finished,
                       reason=attrs.get(schema.REASON) or metrics.get("reason"), trial_id=trial_id, attrs=other)


@dataclass(frozen=True)
class BaselineRecord:
    """A hand-designed network trained as the search's candidates are (`eas search --baselines`)."""

    name: str  # family@alpha, or family@alpha:adapted
    metrics: dict
    started: float  # POSIX seconds
    finished: float

    def value(self, objective: str) -> float:
        value = self.metrics.get(OBJECTIVES[objective].metric)
        return math.nan if value is None else float(value)


def baseline_records(attrs: dict, task: tuple | None) -> dict[str, BaselineRecord]:
    """The baselines stored among a study's attributes, by name; one that cannot be trusted (not a
    known network, malformed metrics or times: anyone with access can store any attribute) is
    left out."""
    found = {}
    for key, value in sorted(attrs.items()):
        if not key.startswith(schema.BASELINE) or not isinstance(value, dict):
            continue
        name, metrics = key.removeprefix(schema.BASELINE), value.get("metrics")
        started, finished = value.get("started"), value.get("finished")
        if not isinstance(metrics, dict) or not (_is_number(started) and _is_number(finished)
                                                 and math.isfinite(started) and math.isfinite(finished)):
            continue
        try:
            arch = baseline_arch(name, task[0] if task else (1, 224, 224))
        except UserError:
            continue
        if problem_with({schema.METRICS: metrics, schema.GENOME: arch.encode()}, {}, task) is None:
            found[name] = BaselineRecord(name, metrics, float(started), float(finished))
    return found


def counts(records: list[TrialRecord]) -> dict[str, int]:
    result = dict.fromkeys(STATES, 0)
    for record in records:
        result[record.state] += 1
    return result
