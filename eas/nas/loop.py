"""The multi-objective search: study setup, samplers, the budget loop, warm start, workers.

A study stores everything a worker needs (eas.study.schema), so `eas worker --study NAME`
joins it from any machine. Each trial stores its genome and every metric; a trial rebuilds
from its genome alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import optuna
import torch
from optuna.trial import TrialState

from eas.arch.builder import build
from eas.arch.reference import REFERENCES, baseline_arch, reference
from eas.errors import UserError
from eas.measure.energy import make_meter, shared_counter_note
from eas.measure.runtime import Runtime, measure
from eas.nas import one_shot
from eas.nas.budget import Budget
from eas.nas.candidate import Candidate, counted_metrics
from eas.nas.proposals import SAMPLERS, ConstraintAwareSampler, space_distributions
from eas.nas.rungs import RANKING_WINDOW, Ladder, decide, rung_points, same_band
from eas.objectives import OBJECTIVES, Constraints
from eas.objectives import measured as measured_objective
from eas.provenance import versions
from eas.study import schema
from eas.study.reader import queue_entries
from eas.study.schema import SearchSettings
from eas.study.setup import create_or_resume
from eas.study.snapshots import Snapshots
from eas.training.proxy import Fidelity, TrialTimeout
from eas.training.step import TrainStep, resolve_precision
from eas_agent.client import AgentError

MAX_CONSECUTIVE_INFEASIBLE = 200


# -- study setup -----------------------------------------------------------------------------

def _timed_model(arch, task, device):
    return build(arch, task.input_shape, task.num_classes).to(device).to(memory_format=torch.channels_last)


def _measure_extreme(model, task, runtime: Runtime, device, meter, **options):
    """A measurement the study cannot be set up without: a device that stays away stops the
    command in one line (and the half-made study is removed)."""
    try:
        return measure(model, task.input_shape, runtime, device, meter, **options)
    except AgentError as error:
        raise UserError(f"{error}; the study needs it to measure the space's extremes") from None


def check_feasible_at_all(space, task, constraints: Constraints, device, runtime: Runtime, meter) -> None:
    """Refuse constraints that even the smallest arch of the space breaks, before any storage
    is touched. Latency is measured in the study's runtime on the device the trials will use.
    Under limits on what is counted from the genome (MACs, memory, SRAM, flash) the arch that
    comes closest to all of them together is the one checked: the smallest by MACs need not be
    the one with the least SRAM."""
    counted = [k for k in Constraints.COUNTED if getattr(constraints, k) is not None]
    if counted:
        def worst_excess(arch) -> float:
            return max(v for k, v in constraints.violations(counted_metrics(arch, task)).items() if k in counted)

        smallest = space.least(worst_excess)
    else:
        smallest, _ = space.extremes(task.input_shape, task.num_classes)
    metrics = counted_metrics(smallest, task)
    if constraints.max_latency_ms is not None:
        timed = _measure_extreme(_timed_model(smallest, task, device), task, runtime, device, meter)
        metrics["latency_ms"] = timed.single.median_ms
    broken = {k: v for k, v in constraints.violations(metrics).items() if v > 0}
    if broken:
        def text(value: float) -> str:
            return f"{value:,.0f}" if value >= 100 else f"{value:.4g}"

        details = ", ".join(f"{k.removeprefix('max_')} {text(metrics[Constraints.METRICS[k]])} > limit "
                            f"{text(getattr(constraints, k))}" for k in broken)
        raise UserError(f"no architecture in space {space.name!r} can meet the constraints: even the "
                        f"{'one closest to them' if counted else 'smallest one'} has {details}")


def reference_point(space, task, settings: SearchSettings, device) -> dict[str, float]:
    """Cost references for the hypervolume: the largest arch of the space, measured now on the
    trials' device, x 1.1; a constraint's limit replaces a reference where it is smaller.
    The training-energy reference is a few measured training steps of the largest arch,
    scaled to the fidelity's step count, x 1.5 (noisier than a count)."""
    _, largest = space.extremes(task.input_shape, task.num_classes)
    model = _timed_model(largest, task, device)
    meter, _ = make_meter(settings.meter, cuda=device.type == "cuda")
    costs = counted_metrics(largest, task)
    timed = _measure_extreme(model, task, Runtime.from_dict(settings.runtime), device, meter, energy_seconds=0.1)
    measured = {"macs": costs["macs"], "params": costs["params"], "memory": costs["memory_bytes_inference"],
                "sram": costs["sram_bytes"], "flash": costs["flash_bytes"],
                "latency": timed.single.median_ms, "energy": timed.energy.joules}
    reference = {k: 1.1 * v for k, v in measured.items() if v}
    if "train_energy" in settings.objectives:
        fidelity = Fidelity(**settings.fidelity)
        step = TrainStep(model, torch.optim.AdamW(model.parameters()), device,
                         resolve_precision(fidelity.precision, device))
        x = task.train_x[:fidelity.batch_size].to(device)
        y = task.train_y[:fidelity.batch_size].to(device)
        step(x, y)  # warm-up outside the window
        token, steps = meter.start(), 3
        for _ in range(steps):
            step(x, y)
        per_step = meter.stop(token).joules / steps
        reference["train_energy"] = 1.5 * per_step * fidelity.total_steps(len(task.train_y))
    for name in settings.objectives:  # objectives of the user's own: derived the same way
        if OBJECTIVES[name].measure is not None:
            try:
                value = measured_objective(OBJECTIVES[name], largest, task.input_shape, task.num_classes)
            except Exception as error:  # the user's code: one line, before any study is made
                raise UserError(f"objective {name} failed on the space's largest architecture ({error}); "
                                "its reference point is measured there") from None
            reference[name] = 1.1 * value or 1.0
    limits = Constraints.from_dict(settings.constraints)
    for objective, limit in (("macs", limits.max_macs), ("params", limits.max_params),
                             ("memory", limits.max_memory), ("latency", limits.max_latency_ms),
                             ("sram", limits.max_sram), ("flash", limits.max_flash)):
        if limit is not None and objective in reference:
            reference[objective] = min(reference[objective], limit)
    return reference


def enqueue_references(study, space, task, constraints: Constraints) -> list[str]:
    """Queue the reference architectures that this space can express and that meet the cheap
    constraints, so they are evaluated first."""
    queued = []
    for name in REFERENCES:
        params = space.params_of(reference(name))
        if params is None:
            continue
        cheap = counted_metrics(space.arch_from_params(params), task)
        if all(v <= 0 for v in constraints.violations(cheap).values()):
            study.enqueue_trial(params, user_attrs={schema.WARM_START: name}, skip_if_exists=True)
            queued.append(name)
    return queued


def prepare_study(settings: SearchSettings, study_name: str, storage, space, task, device):
    """(study, created): create the study, or load it and check it has the same settings."""
    def warm_start(study) -> None:
        if settings.warm_start:
            enqueue_references(study, space, task, Constraints.from_dict(settings.constraints))

    return create_or_resume(storage, study_name, settings, lambda: reference_point(space, task, settings, device),
                            warm_start)


# -- running trials --------------------------------------------------------------------------

@dataclass
class RunSummary:
    started: float = field(default_factory=time.time)
    trials: int = 0
    cached: int = 0
    evaluate_seconds: float = 0.0
    time_split: dict = field(default_factory=dict)  # phase -> seconds, over this run's evaluations
    refused: dict = field(default_factory=dict)  # reason -> proposals refused before becoming trials
    stopped: str = ""  # budget | trials | interrupted | no-feasible | done
    last_number: int | None = None  # the study's number of the trial that finished last

    @property
    def wall_seconds(self) -> float:
        return time.time() - self.started

    def add(self, metrics: dict) -> None:
        self.evaluate_seconds += metrics.get("evaluate_seconds") or 0.0
        for phase, seconds in (metrics.get("time_split") or {}).items():
            self.time_split[phase] = self.time_split.get(phase, 0.0) + seconds


def ladder_of(settings: SearchSettings, task) -> Ladder:
    """The study's rungs; a study without them trains every candidate at its one fidelity."""
    if settings.multi_fidelity:
        return Ladder.from_dict(settings.multi_fidelity)
    return Ladder((Fidelity(**settings.fidelity).total_steps(len(task.train_y)),), 3)


class TrialRunner:
    """The objective Optuna calls: sample, skip known genomes, train rung by rung, store everything."""

    def __init__(self, settings: SearchSettings, space, task, live, snapshots, deadline: float | None,
                 trial_timeout: float, summary: RunSummary):
        self.settings, self.space, self.task, self.live, self.snapshots = settings, space, task, live, snapshots
        self.fidelity = Fidelity(**settings.fidelity)
        self.ladder = ladder_of(settings, task)
        self.constraints = Constraints.from_dict(settings.constraints)
        self.deadline, self.trial_timeout, self.summary = deadline, trial_timeout, summary
        self.versions = versions()
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.current_trial_id: int | None = None
        self.sampler = None  # the ConstraintAwareSampler, whose refusals each trial reports
        self.supernet = one_shot.open_for_study(settings.supernet) if settings.supernet else None
        # An evaluator given from Python (eas.search(evaluator=...)) replaces training: it returns
        # the candidate's accuracy (or a dict of metrics with "accuracy") from its architecture.
        self.evaluator: Callable[[object], object] | None = None

    def __call__(self, trial) -> list[float]:
        self.current_trial_id = trial._trial_id
        try:
            return self._objective(trial)
        except KeyboardInterrupt:
            # Wherever the Ctrl-C lands in the trial (sampling, its first writes under a slow
            # storage, training, storing the result), the trial says it was interrupted: found
            # as a flaky test, where a loaded machine was still writing the genome 1 s in.
            _set_outcome(trial, "interrupted", "interrupted by the user")
            raise

    def _objective(self, trial) -> list[float]:
        arch = self.space.sample(trial)
        training = self.space.training_of(trial.params)
        key = candidate_key(arch, training)
        trial.set_user_attr(schema.GENOME, arch.encode())
        trial.set_user_attr(schema.GENOME_KEY, key)
        trial.set_user_attr(schema.WORKER, self.worker)
        self.live.refresh()  # results other workers stored meanwhile
        known = self.live.known(key)
        if known is not None:
            self.summary.cached += 1
            metrics = known.metrics
            trial.set_user_attr(schema.CACHED_FROM, known.number)
            if known.attrs.get(schema.RUNGS):
                trial.set_user_attr(schema.RUNGS, known.attrs[schema.RUNGS])
        else:
            metrics = self._with_shared_counter_flag(self._evaluate(trial, arch, training))
        refused = self.sampler.refusals_for(trial.number) if self.sampler is not None else {}
        metrics = {**metrics, "proposals_refused": refused}
        for reason, count in refused.items():
            self.summary.refused[reason] = self.summary.refused.get(reason, 0) + count
        # Few writes per trial: each is a transaction (35-250 ms on SQLite).
        trial.set_user_attr(schema.METRICS, metrics)
        trial.set_user_attr(schema.STATUS, metrics["status"])
        if metrics["status"] == "stopped":
            trial.set_user_attr(schema.REASON, metrics.get("reason") or "stopped")
            raise optuna.TrialPruned(metrics.get("reason"))
        violations = metrics.get("violations") or {}
        for name in self.constraints.to_dict():
            # A limit that was not measured (latency of a candidate already over its MACs limit)
            # is neutral: 0, never NaN, which Optuna would refuse.
            value = violations.get(name)
            trial.set_constraint(name, float(value) if isinstance(value, (int, float)) and math.isfinite(value)
                                 else 0.0)
        return objective_values(metrics, self.settings.objectives)

    def _with_shared_counter_flag(self, metrics: dict) -> dict:
        """Flag a hardware counter's reading taken while other workers ran on this host."""
        if metrics.get("energy_source") not in ("rapl", "nvml"):
            return metrics
        host = self.worker.rsplit(":", 1)[0]
        neighbours = {w for entry in queue_entries(self.live.reader.url) for w in entry.workers
                      if w.rsplit(":", 1)[0] == host and w != self.worker}
        note = shared_counter_note(metrics["energy_source"], len(neighbours))
        if note is None:
            return metrics
        return {**metrics, "energy_shared": True,
                "energy_note": "; ".join(filter(None, (metrics.get("energy_note"), note)))}

    def _evaluate(self, trial, arch, training: dict) -> dict:
        limit = time.monotonic() + self.trial_timeout
        deadline = min(limit, self.deadline) if self.deadline else limit
        try:
            own = self._own_objectives(arch)  # before training: a failing measure costs no training
            result = self._train_rungs(trial, arch, training, deadline)
        except TrialTimeout as cut:
            _set_outcome(trial, "cut", str(cut))
            raise optuna.TrialPruned(str(cut)) from None
        except Exception as error:
            _set_outcome(trial, "error", f"{type(error).__name__}: {error}"[:500])
            raise
        finally:
            self.snapshots.drop(trial.number)
        metrics = {**_flatten(result.to_dict()), **own, "versions": self.versions}
        self.summary.add(metrics)
        return metrics

    def evaluate_baseline(self, name: str) -> dict:
        """The metrics of a hand-designed network trained exactly as this study's candidates are,
        through every rung: a failure or a time-out is its status and reason, as for a trial."""
        arch = baseline_arch(name, self.task.input_shape)
        try:
            own = self._own_objectives(arch)
            result = self._train_rungs(None, arch, {}, time.monotonic() + self.trial_timeout)
        except TrialTimeout as cut:
            return {"status": "cut", "reason": str(cut)}
        except Exception as error:
            return {"status": "error", "reason": f"{type(error).__name__}: {error}"[:500]}
        return {**_flatten(result.to_dict()), **own, "genome": arch.encode(), "versions": self.versions}

    def _own_objectives(self, arch) -> dict[str, float]:
        """Objectives of the user's own (eas.objectives.register_objective), measured from the
        architecture; one that fails or returns junk fails the trial with the reason."""
        own = [OBJECTIVES[name] for name in self.settings.objectives if OBJECTIVES[name].measure is not None]
        return {o.metric: measured_objective(o, arch, self.task.input_shape, self.task.num_classes) for o in own}

    def _resume_point(self, trial, candidate) -> tuple[int, list[dict]]:
        """(first rung to train, rung records so far). A retry of a trial whose worker died
        continues from the weights of its last finished rung, when they were kept."""
        rungs = trial.user_attrs.get(schema.RUNGS) or []
        history = trial.storage.get_trial_system_attrs(trial._trial_id).get("retry_history") or []
        saved = self.snapshots.load(history[-1]) if history and rungs else None
        if history:
            self.snapshots.drop(*history)  # used now or never: weights the rungs do not vouch for
        if saved is None or saved[0] != rungs[-1].get("rung") or rungs[-1].get("go_on") is not True:
            return 0, []
        candidate.model.load_state_dict(saved[1])
        return saved[0] + 1, rungs

    def _train_rungs(self, trial, arch, training: dict, deadline):
        fidelity = replace(self.fidelity, **training)
        candidate = Candidate(arch, self.task, fidelity, self.settings.device, self.settings.seed,
                              self.settings.meter, Runtime.from_dict(self.settings.runtime))
        # Rungs count optimiser steps at the study's batch size: another batch size sees as many images.
        scale = self.fidelity.batch_size / fidelity.batch_size
        infeasible = candidate.screen(self.constraints)
        if infeasible is not None:
            return infeasible
        if self.evaluator is not None:  # the user's own evaluation instead of training
            return candidate.result("ok", validation=evaluated(self.evaluator, arch))
        if self.supernet is not None:  # one-shot: weights inherited, no training
            one_shot.inherit(candidate, self.supernet)
            broken = candidate.confirm_latency(self.constraints)
            return candidate.result("infeasible" if broken else "ok", broken,
                                    validation=candidate.validate(one_shot.VALIDATION_IMAGES))
        first, rungs = self._resume_point(trial, candidate) if trial is not None else (0, [])
        ladder = self.ladder
        for rung in range(first, ladder.top + 1):
            with candidate.resized(ladder.scale(rung)):  # lower rungs on smaller images, when asked
                trained = candidate.train_segment(ladder.segment(rung, scale), segment=rung, deadline=deadline,
                                                  recalibration_images=ladder.recalibration_images(rung))
                if trained.diverged:
                    return candidate.result("diverged", trained.diverged)
                # A predicted latency is measured once the candidate has earned it: at the top rung.
                broken = candidate.confirm_latency(self.constraints) if rung == ladder.top else None
                validation = candidate.validate(ladder.val_images(rung))
            if broken:
                return candidate.result("infeasible", broken, validation=validation)
            if trial is None:  # a baseline, the search's yardstick: no rung stops it
                continue
            # NaN (an inference energy not measured yet, below the top rung) is stored as None
            record = _flatten({"rung": rung, "steps": ladder.steps[rung], **validation,
                               "train_seconds": candidate.trained.seconds, "train_energy_j": candidate.trained.energy_j,
                               **{k: candidate.metrics[k] for k in ("macs", "params", "memory_bytes_inference",
                                                                    "latency_ms", "inference_energy_j_per_1k")}})
            if ladder.top > 0:
                decision = self._decide(trial.number, rung, record)
                record.update(decision.to_dict(), go_on=decision.go_on and rung < ladder.top)
            rungs.append(record)
            if rung == ladder.top:
                break
            if record["go_on"]:  # weights first: a retry that reads go_on in the rungs finds them
                self.snapshots.save(trial.number, rung, candidate.model.state_dict())
            trial.set_user_attr(schema.RUNGS, rungs)
            if not record["go_on"]:
                reason = (f"stopped after rung {rung}: ranked {decision.position + 1} of {decision.results} "
                          f"results there (the best {decision.keep} train on)")
                return candidate.result("stopped", reason, validation=validation)
        if ladder.top > 0 and trial is not None:
            trial.set_user_attr(schema.RUNGS, rungs)
        return candidate.result("ok", validation=validation)

    def _decide(self, number: int, rung: int, record: dict):
        """Rank this rung result among the results stored at the rung so far (the most recent
        RANKING_WINDOW of them)."""
        self.live.refresh()
        results = [*self.live.results_at(rung, excluding=number, last=RANKING_WINDOW - 1), record]
        band = same_band([r.get("macs", math.nan) for r in results], len(results) - 1, self.ladder.bands)
        results = [results[i] for i in band]  # with cost bands: ranked among its own band only
        points = rung_points(results, self.settings.objectives, self.live.reference)
        return decide(points, len(results) - 1, self.ladder.eta)


def evaluated(evaluator: Callable[[object], object], arch) -> dict:
    """What an evaluator given from Python says of `arch`, checked: an accuracy in [0, 1] (alone,
    or as "accuracy" of a dict whose other values are finite numbers). Anything else raises, and
    the trial is stored as failed with the reason; the search goes on."""
    answer = evaluator(arch)
    metrics = answer if isinstance(answer, dict) else {"accuracy": answer}
    accuracy = metrics.get("accuracy")
    if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not 0 <= accuracy <= 1:
        raise ValueError(f"the evaluator returned accuracy {str(accuracy)[:40]!r}, not a number in [0, 1]")
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"the evaluator returned {key} = {str(value)[:40]!r}, not a finite number")
    return {**metrics, "accuracy": float(accuracy), "accuracy_low": float(accuracy),
            "accuracy_high": float(accuracy)}


def candidate_key(arch, training: dict) -> str:
    """Equal for candidates that train the same network the same way: the genome's canonical
    hash, extended by the training hyperparameters a space chose (when it chooses any)."""
    if not training:
        return arch.canonical_hash()
    text = arch.canonical().encode() + json.dumps(training, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _set_outcome(trial, status: str, reason: str) -> None:
    trial.set_user_attr(schema.STATUS, status)
    trial.set_user_attr(schema.REASON, reason)


def _flatten(metrics: dict) -> dict:
    """Optuna attrs must be JSON: NaN becomes None, in nested dicts too."""
    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    return clean(metrics)


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


def make_sampler(settings: SearchSettings, space, task, live, seed: int, base=None):
    """The study's sampler (or `base`, an Optuna sampler given from Python), wrapped so that
    proposals over a counted limit, or evaluated before, never become trials."""
    distributions = space_distributions(space)
    if base is None:
        if settings.sampler not in SAMPLERS:
            raise UserError(f"unknown sampler {settings.sampler!r} (known: {', '.join(SAMPLERS)})")
        base = SAMPLERS[settings.sampler](seed, settings.population, distributions, live)
    constraints = Constraints.from_dict(settings.constraints)

    def refuse(params: dict) -> str | None:
        try:
            arch = space.arch_from_params(params)
            counted = counted_metrics(arch, task)
        except UserError:
            return "unbuildable"
        broken = [name for name, excess in constraints.violations(counted).items() if excess > 0]
        if broken:
            return "over " + ", ".join(broken)
        if live.known(candidate_key(arch, space.training_of(params))) is not None:
            return "evaluated before"
        return None

    counted = [k for k in Constraints.COUNTED if getattr(constraints, k) is not None]

    def excess(params: dict) -> float:
        try:
            violations = constraints.violations(counted_metrics(space.arch_from_params(params), task))
        except UserError:
            return math.inf
        return max(violations[k] for k in counted)

    return ConstraintAwareSampler(base, distributions, refuse, seed=seed, excess=excess if counted else None)


def run_search(study, settings: SearchSettings, space, task, live, budget: Budget, trial_timeout: float,
               seed: int, on_trial: Callable[[object, RunSummary], None] | None = None,
               snapshots=None, sampler=None, evaluator: Callable[[object], object] | None = None,
               baselines: Sequence[str] = (), on_baseline: Callable[[str, dict], None] | None = None) -> RunSummary:
    """Run trials in this process until the budget is spent, Ctrl-C, or nothing is feasible.
    A worker pool passes the study's `sampler` (and `snapshots`) kept from its earlier trials.
    `baselines` not yet stored in the study are trained first (outside the budget: they are the
    yardstick, not the search); `on_baseline(name, metrics)` is called after each."""
    study.sampler = sampler or make_sampler(settings, space, task, live, seed)
    snapshots = snapshots or Snapshots(_engine_of(study), study.study_name)
    runner = TrialRunner(settings, space, task, live, snapshots, None, trial_timeout, RunSummary())
    runner.evaluator = evaluator
    try:
        _train_baselines(study, runner, baselines, on_baseline)
    except KeyboardInterrupt:  # nothing half-stored: a baseline is one attribute, written when done
        return RunSummary(stopped="interrupted")
    summary = runner.summary = RunSummary()
    runner.deadline = time.monotonic() + budget.seconds if budget.seconds else None
    cpu_started = time.process_time()
    runner.sampler = study.sampler
    streak = {"infeasible": 0}

    def after_trial(study_, frozen) -> None:
        summary.trials += 1
        summary.last_number = frozen.number
        live.refresh()
        infeasible = frozen.state == TrialState.COMPLETE and frozen.user_attrs.get(schema.STATUS) == "infeasible"
        streak["infeasible"] = streak["infeasible"] + 1 if infeasible else 0
        if streak["infeasible"] >= MAX_CONSECUTIVE_INFEASIBLE and not live.any_feasible:
            summary.stopped = "no-feasible"
            study_.stop()
        elif budget.cpu_seconds and time.process_time() - cpu_started >= budget.cpu_seconds:
            summary.stopped = "budget"
            study_.stop()
        if on_trial:
            on_trial(live, summary)

    quiet_ctrl_c = _NoTracebackForCtrlC()
    for handler in logging.getLogger("optuna").handlers:
        handler.addFilter(quiet_ctrl_c)
    try:
        study.optimize(runner, n_trials=budget.trials, timeout=budget.seconds, callbacks=[after_trial],
                       catch=(Exception,), gc_after_trial=False)
        if not summary.stopped:
            summary.stopped = "trials" if budget.trials and summary.trials >= budget.trials else "budget"
    except KeyboardInterrupt:
        summary.stopped = "interrupted"
        _fail_if_running(study, runner.current_trial_id)
    finally:
        for handler in logging.getLogger("optuna").handlers:
            handler.removeFilter(quiet_ctrl_c)
    return summary


def _train_baselines(study, runner: TrialRunner, names: Sequence[str], on_baseline) -> None:
    """Each named baseline the study does not hold yet, trained and stored as it finishes."""
    stored = study.user_attrs
    for name in (n for n in names if schema.BASELINE + n not in stored):
        started = time.time()
        metrics = runner.evaluate_baseline(name)
        study.set_user_attr(schema.BASELINE + name, {"metrics": metrics, "started": started, "finished": time.time()})
        if on_baseline:
            on_baseline(name, metrics)


class _NoTracebackForCtrlC(logging.Filter):
    """Optuna logs "Trial N failed ... Traceback ... KeyboardInterrupt" and then "Trial N failed
    with value None." for a trial that Ctrl-C stopped; a clean stop says so in one line instead
    (the command's own). EAS's objective never returns None: that line only ever follows an
    exception, which the trial's stored reason already names."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt):
            return False
        return "failed with value None" not in record.getMessage()


def _engine_of(study):
    storage = study._storage
    return getattr(storage, "_backend", storage).engine


def _fail_if_running(study, trial_id: int | None) -> None:
    """After Ctrl-C no trial may stay RUNNING (Optuna fails it, unless the interrupt hit
    between its own steps)."""
    if trial_id is None:
        return
    storage = study._storage
    if storage.get_trial(trial_id).state == TrialState.RUNNING:
        storage.set_trial_user_attr(trial_id, schema.STATUS, "interrupted")
        storage.set_trial_user_attr(trial_id, schema.REASON, "interrupted by the user")
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
