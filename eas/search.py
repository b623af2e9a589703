"""The multi-objective search: study setup, samplers, the budget loop, warm start, workers.

A study stores everything a worker needs in its user attributes (`eas.settings`: space,
data, objectives, constraints, fidelity), so `eas worker --study NAME --storage URL` joins it
from any machine. Each trial stores its genome and every metric; a trial rebuilds from its
genome alone.
"""

from __future__ import annotations

import math
import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from eas.errors import UserError
from eas.objectives import OBJECTIVES, Constraints
from eas.units import parse_seconds

SETTINGS_KEY = "eas.settings"
REFERENCE_KEY = "eas.reference_point"
MAX_CONSECUTIVE_INFEASIBLE = 200
SAMPLER_NAMES = ("nsga2", "tpe", "gp", "random")


@dataclass(frozen=True)
class Budget:
    """When to stop starting trials: after `seconds` of wall time and/or `trials` trials."""

    seconds: float | None = None
    trials: int | None = None

    @classmethod
    def parse(cls, budget: str | None, trials: int | None) -> Budget:
        if budget is None and trials is None:
            raise UserError("give a --budget (e.g. 2h, 90m, 1h30m) and/or --trials N")
        if trials is not None and trials < 1:
            raise UserError(f"--trials must be at least 1 (got {trials})")
        return cls(parse_seconds(budget, "--budget") if budget else None, trials)


@dataclass(frozen=True)
class SearchSettings:
    space_name: str
    space: dict  # the full space definition, so workers elsewhere need no file
    data: str
    objectives: tuple[str, ...]
    constraints: dict
    fidelity: dict
    sampler: str = "nsga2"
    seed: int = 0
    device: str = "auto"
    meter: str = "auto"
    warm_start: bool = True
    population: int = 16
    input_shape: tuple[int, int, int] | None = None  # of the task, for export and the explorer
    num_classes: int | None = None

    # What must match when a study is resumed: anything that changes what a result means.
    MUST_MATCH = ("space", "data", "objectives", "constraints", "fidelity")

    def to_dict(self) -> dict:
        shape = list(self.input_shape) if self.input_shape else None
        return {**asdict(self), "objectives": list(self.objectives), "input_shape": shape}

    @classmethod
    def from_dict(cls, data: dict) -> SearchSettings:
        shape = tuple(data["input_shape"]) if data.get("input_shape") else None
        return cls(**{**data, "objectives": tuple(data["objectives"]), "input_shape": shape})

    def mismatches(self, stored: SearchSettings) -> list[str]:
        return [k for k in self.MUST_MATCH if getattr(self, k) != getattr(stored, k)]


def make_sampler(name: str, seed: int, population: int):
    import optuna

    samplers: dict[str, Callable[[], optuna.samplers.BaseSampler]] = {
        "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed, population_size=population),
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True),
        "gp": lambda: optuna.samplers.GPSampler(seed=seed),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
    }
    if name not in samplers:
        raise UserError(f"unknown sampler {name!r} (known: {', '.join(SAMPLER_NAMES)})")
    return samplers[name]()


def versions() -> dict:
    import optuna
    import torch

    from eas import __version__

    return {"eas": __version__, "torch": torch.__version__, "optuna": optuna.__version__,
            "python": platform.python_version()}


# -- study setup -----------------------------------------------------------------------------

def counted_costs(arch, task):
    """The model of `arch` for the task and the costs known without running it (MACs, params,
    inference memory), keyed like Metrics so constraints apply to them directly."""
    from eas.builder import build
    from eas.cost import profile

    model = build(arch, task.input_shape, task.num_classes)
    cost = profile(model, task.input_shape)
    return model, cost, {"macs": cost.macs, "params": cost.params,
                         "memory_bytes_inference": cost.memory_bytes_inference}


def check_feasible_at_all(space, task, constraints: Constraints) -> None:
    """Refuse constraints that even the smallest arch of the space breaks, before any storage
    is touched (cost grows with every choice, so the smallest arch is a lower bound)."""
    import torch

    from eas.measure import latency

    smallest, _ = space.extremes()
    model, _, metrics = counted_costs(smallest, task)
    if constraints.max_latency_ms is not None:
        metrics["latency_ms"] = latency(model.to(memory_format=torch.channels_last), task.input_shape,
                                        torch.device("cpu")).median_ms
    broken = {k: v for k, v in constraints.violations(metrics).items() if v > 0}
    if broken:
        details = ", ".join(f"{k.removeprefix('max_')} {metrics[Constraints.METRICS[k]]:,.4g} > limit "
                            f"{getattr(constraints, k):,.4g}" for k in broken)
        raise UserError(f"no architecture in space {space.name!r} can meet the constraints: even the "
                        f"smallest one has {details}")


def reference_point(space, task, meter_name: str) -> dict[str, float]:
    """Cost references for the hypervolume: the largest arch of the space, measured now, x 1.1
    (a constraint's limit replaces it when smaller, see prepare_study)."""
    import torch

    from eas.energy import make_meter
    from eas.measure import inference_energy, latency

    _, largest = space.extremes()
    device = torch.device("cpu")
    model, cost, _ = counted_costs(largest, task)
    model = model.to(memory_format=torch.channels_last)
    meter, _ = make_meter(meter_name)
    measured = {
        "macs": cost.macs, "params": cost.params, "memory": cost.memory_bytes_inference,
        "latency": latency(model, task.input_shape, device, repeats=5).median_ms,
        "energy": inference_energy(model, task.input_shape, device, meter, batch=64, min_seconds=0.1).joules,
        "train_energy": None,
    }
    return {k: 1.1 * v for k, v in measured.items() if v}


def prepare_study(settings: SearchSettings, study_name: str, storage, space, task, quiet: bool = False):
    """Create the study, or load it and check that it was made with the same settings."""
    import optuna

    directions = [OBJECTIVES[o].direction for o in settings.objectives]
    study = optuna.create_study(study_name=study_name, storage=storage, directions=directions,
                                load_if_exists=True)
    stored = study.user_attrs.get(SETTINGS_KEY)
    if stored is not None:
        previous = SearchSettings.from_dict(stored)
        different = settings.mismatches(previous)
        if different:
            raise UserError(f"study {study_name!r} exists with different {', '.join(different)}; "
                            "use another --study name, or the same settings to resume it")
        return study, False
    if [d.name.lower() for d in study.directions] != directions:
        raise UserError(f"study {study_name!r} exists and is not an EAS study with these objectives")
    study.set_metric_names(list(settings.objectives))
    reference = reference_point(space, task, settings.meter)
    # A hard limit is the natural reference for its objective: nothing beyond it counts.
    limits = Constraints.from_dict(settings.constraints)
    for objective, limit in (("macs", limits.max_macs), ("params", limits.max_params),
                             ("memory", limits.max_memory), ("latency", limits.max_latency_ms)):
        if limit is not None and objective in reference:
            reference[objective] = min(reference[objective], limit)
    study.set_user_attr(REFERENCE_KEY, reference)
    study.set_user_attr("eas.created_by", versions())
    if settings.warm_start:
        enqueue_references(study, space, task, Constraints.from_dict(settings.constraints))
    # Settings last: a study without them is still being set up and is not joined by workers.
    study.set_user_attr(SETTINGS_KEY, settings.to_dict())
    return study, True


def enqueue_references(study, space, task, constraints: Constraints) -> list[str]:
    """Queue the reference architectures that this space can express and that meet the cheap
    constraints, so they are evaluated first."""
    from eas.reference import REFERENCES, reference

    queued = []
    for name in REFERENCES:
        params = space.params_of(reference(name))
        if params is None:
            continue
        _, _, cheap = counted_costs(space.arch_from_params(params), task)
        if all(v <= 0 for v in constraints.violations(cheap).values()):
            study.enqueue_trial(params, user_attrs={"warm_start": name}, skip_if_exists=True)
            queued.append(name)
    return queued


# -- running trials --------------------------------------------------------------------------

@dataclass
class RunSummary:
    started: float = field(default_factory=time.time)
    trials: int = 0
    cached: int = 0
    evaluate_seconds: float = 0.0
    stopped: str = ""  # budget | trials | interrupted | no-feasible | done

    @property
    def wall_seconds(self) -> float:
        return time.time() - self.started


class TrialRunner:
    """The objective Optuna calls: sample, skip known genomes, evaluate, store everything."""

    def __init__(self, settings: SearchSettings, space, task, deadline: float | None,
                 trial_timeout: float, summary: RunSummary):
        from eas.train import Fidelity

        self.settings, self.space, self.task = settings, space, task
        self.fidelity = Fidelity(**settings.fidelity)
        self.constraints = Constraints.from_dict(settings.constraints)
        self.deadline, self.trial_timeout, self.summary = deadline, trial_timeout, summary
        self.versions = versions()
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.current_trial_id: int | None = None

    def __call__(self, trial) -> list[float]:
        self.current_trial_id = trial._trial_id
        arch = self.space.sample(trial)
        genome = arch.encode()
        trial.set_user_attr("genome", genome)
        trial.set_user_attr("worker", self.worker)
        known = self._evaluated(trial.study, genome)
        if known is not None:
            self.summary.cached += 1
            metrics = known.user_attrs["metrics"]
            trial.set_user_attr("cached_from", known.number)
        else:
            metrics = self._evaluate(trial, arch)
        # Few writes per trial: each is a transaction (35-250 ms on SQLite).
        trial.set_user_attr("metrics", metrics)
        trial.set_user_attr("status", metrics["status"])
        violations = metrics.get("violations") or {}
        for name in self.constraints.to_dict():
            trial.set_constraint(name, float(violations.get(name, 0.0)))
        return objective_values(metrics, self.settings.objectives)

    def _evaluate(self, trial, arch) -> dict:
        import optuna

        from eas.evaluate import evaluate
        from eas.train import TrialTimeout

        limit = time.monotonic() + self.trial_timeout
        deadline = min(limit, self.deadline) if self.deadline else limit
        try:
            result = evaluate(arch, self.task, self.fidelity, device=self.settings.device,
                              seed=self.settings.seed, meter=self.settings.meter,
                              constraints=self.constraints, deadline=deadline)
        except TrialTimeout as cut:
            _set_outcome(trial, "cut", str(cut))
            raise optuna.TrialPruned(str(cut)) from None
        except KeyboardInterrupt:
            _set_outcome(trial, "interrupted", "interrupted by the user")
            raise
        except Exception as error:
            _set_outcome(trial, "error", f"{type(error).__name__}: {error}"[:500])
            raise
        self.summary.evaluate_seconds += result.evaluate_seconds
        return {**_flatten(result.to_dict()), "versions": self.versions}

    def _evaluated(self, study, genome: str):
        """A complete trial of the same genome (the fidelity is the study's, so results compare)."""
        from optuna.trial import TrialState

        for other in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if other.user_attrs.get("genome") == genome and "metrics" in other.user_attrs:
                return other
        return None


def _set_outcome(trial, status: str, reason: str) -> None:
    trial.set_user_attr("status", status)
    trial.set_user_attr("reason", reason)


def _flatten(metrics: dict) -> dict:
    """Optuna attrs must be JSON: NaN becomes None."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}


def objective_values(metrics: dict, objectives: tuple[str, ...]) -> list[float]:
    """Objective values of a trial; what was not measured (an infeasible or diverged candidate)
    is the worst value, so samplers learn to avoid it."""
    values = []
    for name in objectives:
        objective = OBJECTIVES[name]
        value = metrics.get(objective.metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            value = 0.0 if objective.direction == "maximize" else math.inf
        if metrics.get("status") != "ok" and objective.direction == "maximize":
            value = 0.0
        values.append(float(value))
    return values


def run_search(study, settings: SearchSettings, space, task, budget: Budget, trial_timeout: float,
               seed: int, on_trial: Callable[[object, RunSummary], None] | None = None) -> RunSummary:
    """Run trials in this process until the budget is spent, Ctrl-C, or nothing is feasible."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.sampler = make_sampler(settings.sampler, seed, settings.population)
    summary = RunSummary()
    deadline = time.monotonic() + budget.seconds if budget.seconds else None
    runner = TrialRunner(settings, space, task, deadline, trial_timeout, summary)
    streak = {"infeasible": 0}

    def after_trial(study_, frozen) -> None:
        summary.trials += 1
        infeasible = frozen.state == TrialState.COMPLETE and frozen.user_attrs.get("status") == "infeasible"
        streak["infeasible"] = streak["infeasible"] + 1 if infeasible else 0
        if streak["infeasible"] >= MAX_CONSECUTIVE_INFEASIBLE and not any(
                t.user_attrs.get("status") == "ok" for t in study_.get_trials(deepcopy=False)):
            summary.stopped = "no-feasible"
            study_.stop()
        if on_trial:
            on_trial(study_, summary)

    try:
        study.optimize(runner, n_trials=budget.trials, timeout=budget.seconds, callbacks=[after_trial],
                       catch=(Exception,), gc_after_trial=False)
        if not summary.stopped:
            summary.stopped = "trials" if budget.trials and summary.trials >= budget.trials else "budget"
    except KeyboardInterrupt:
        summary.stopped = "interrupted"
        _fail_if_running(study, runner.current_trial_id)
    return summary


def _fail_if_running(study, trial_id: int | None) -> None:
    """After Ctrl-C no trial may stay RUNNING (Optuna fails it, unless the interrupt hit
    between its own steps)."""
    from optuna.trial import TrialState

    if trial_id is None:
        return
    storage = study._storage
    if storage.get_trial(trial_id).state == TrialState.RUNNING:
        storage.set_trial_user_attr(trial_id, "reason", "interrupted by the user")
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
