"""How far to trust a front, and what it is worth: retrain its members longer, with other seeds,
beside the hand-designed networks a user would otherwise take, trained the same way.

`verify` takes K members of a study's strict Pareto set spread over its cost range (the most
accurate, the cheapest, and between them the member nearest each of evenly spaced points of log
cost: `spread_over_cost`), trains each from scratch for `factor` times the study's full-fidelity
steps with other seeds and one training recipe, scores each on the test split (images neither
the search, which ranked on the validation split, nor this selection saw), and reports:
Kendall's tau between the accuracies the search stored and the verified ones, the spread over
seeds, which members are still on the Pareto set when their verified accuracies replace the
stored ones, and, with baselines (eas.nas.baselines), how the front compares with them at equal
cost.

Every trained model is stored in the study as soon as it is validated, under a key of what
determines its result (genome, seed, steps, training settings, recipe, data), so an interrupted
verify resumes without training a finished model again. Latency and inference energy are
measured for every model in the same process, in the study's deployment runtime, so front and
baselines are timed alike. With a deployment format (`--deploy pte`), each member's first trained
model is also written in that format and checked in its own runtime (eas.deploy.deployable).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from eas.arch.genome import Arch
from eas.errors import UserError
from eas.measure.runtime import Runtime
from eas.nas import one_shot
from eas.nas.baselines import baseline_arch, compare, family_of
from eas.nas.candidate import Candidate, counted_metrics, wilson_interval
from eas.nas.loop import ladder_of
from eas.pareto import kendall_tau
from eas.reports.front import pareto_front, spread_over_cost, strict_front
from eas.study.records import TrialRecord
from eas.study.schema import SearchSettings
from eas.training.proxy import Fidelity
from eas.training.recipe import Recipe

COST_FIELDS = ("latency_ms", "latency_batch_ms", "inference_energy_j_per_1k", "latency_runtime", "energy_source",
               "runtime_error")


SPLIT = "test"  # what verified accuracies are scored on; runs stored before it scored validation
DEFAULT_TOP = 5


@dataclass(frozen=True)
class VerifyPlan:
    top: int | None = None  # None: up to DEFAULT_TOP; more than the Pareto set holds is refused
    factor: float = 3.0
    seeds: int = 1
    baselines: tuple[str, ...] = ()  # reference names, e.g. mobilenet_v3_small@0.5
    recipe: Recipe = Recipe()
    device: str = "auto"
    epochs: float | None = None  # instead of `factor`: epochs of the (subset of the) training images
    subset: int | None = None  # training images; None: the study's full fidelity's
    init: str = "scratch"  # or "inherited": a one-shot study's members start from their supernet weights
    deploy: str | None = None  # a deployment format (pte, ort) each member is checked in after training
    # (trained model, task, runtime threads) -> figures; eas.deploy.deployable, given by the caller
    deploy_check: Callable[[object, object, int], dict] | None = None


@dataclass(frozen=True)
class Model:
    """One network a verification trains: a front member (trial) or a baseline (name)."""

    arch: Arch
    fidelity: Fidelity
    trial: int | None = None
    name: str | None = None


def run_key(model: Model, seed: int, steps: int, recipe: Recipe, data: str, init: str = "scratch") -> str:
    """What determines one training's result; equal keys mean a stored run can stand in."""
    started = {} if init == "scratch" else {"init": init}  # keys of runs stored before --init stay valid
    text = json.dumps({"genome": model.arch.encode(), "seed": seed, "steps": steps, "data": data, "split": SPLIT,
                       "fidelity": model.fidelity.to_dict(), "recipe": recipe.to_dict(), **started}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def valid_run(run) -> bool:
    """A stored run with the fields a verification reads (a shared study is input too)."""
    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    return (isinstance(run, dict) and number(run.get("accuracy")) and 0 <= run["accuracy"] <= 1
            and run.get("split") == SPLIT and isinstance(run.get("images"), int) and run["images"] > 0
            and number(run.get("train_energy_j")) and number(run.get("train_seconds")))


def verify_front(loaded, task, plan: VerifyPlan, stored_runs: dict | None = None,
                 save_run: Callable[[str, dict], None] | None = None, on_result=None) -> dict:
    settings = SearchSettings.from_dict(loaded.settings, loaded.name)
    front = chosen_members(loaded, plan.top)
    test_split = checked_test_split(settings, task, loaded.name)
    study_fidelity = Fidelity(**settings.fidelity)
    if plan.subset:
        study_fidelity = replace(study_fidelity, subset=plan.subset)
    full_steps = ladder_of(settings, task).steps[-1]
    steps = max(1, round(full_steps * plan.factor)) if plan.epochs is None else \
        replace(study_fidelity, epochs=plan.epochs, max_steps=None).total_steps(len(task.train_y))
    runtime = Runtime.from_dict(settings.runtime)
    if plan.init == "inherited" and not settings.supernet:
        raise UserError(f"--init inherited: study {loaded.name!r} was not searched with a supernet")
    supernet = one_shot.open_for_study(settings.supernet) if plan.init == "inherited" else None
    stored_runs = stored_runs if stored_runs is not None else {}
    tally = {"trained": 0, "reused": 0}
    started = time.time()

    def trained(model: Model) -> list[dict]:
        """The model's runs, one per seed: stored ones reused, the others trained and stored."""
        runs = []
        for offset in range(1, plan.seeds + 1):
            seed = settings.seed + offset
            inherits = supernet if model.trial is not None else None  # baselines always start from scratch
            key = run_key(model, seed, steps, plan.recipe, settings.data, plan.init if inherits else "scratch")
            run = stored_runs.get(key)
            # The deployment check needs the trained weights, which are not kept: a stored run
            # without it is trained again (same key, same result) and checked.
            check = plan.deploy_check if plan.deploy and offset == 1 and model.trial is not None else None
            if valid_run(run) and (check is None or _deployed_in(run, plan.deploy)):
                tally["reused"] += 1
            else:
                run = train_once(model, task, seed, steps, study_fidelity.batch_size, plan, settings.meter, inherits,
                                 check, runtime.threads or 1)
                tally["trained"] += 1
                if save_run:
                    save_run(key, run)
            runs.append(run)
        return runs

    members = [Model(Arch.decode(r.genome), replace(study_fidelity, **_training(r)), trial=r.number) for r in front]
    baseline_models = [Model(baseline_arch(name, task.input_shape), study_fidelity, name=name)
                       for name in plan.baselines]
    runs = {}
    for model in members + baseline_models:
        runs[model] = trained(model)
        if on_result:
            on_result(model, verified_stats(runs[model]))
    # Timed together after all training, so that front and baselines meet the same machine.
    costs = {model: _costs(model, task, runtime, plan.device, settings.meter, runs[model]) for model in runs}
    rows = [verified_row(record, runs[model]) | {"costs": costs[model]}
            | ({"deploy": runs[model][0]["deploy"]} if plan.deploy else {})
            for record, model in zip(front, members, strict=True)]
    baselines = [{"name": m.name, "family": family_of(m.name), "genome": m.arch.encode(),
                  **verified_stats(runs[m]), "costs": costs[m]} for m in baseline_models]
    held = _held(front, rows, loaded.objectives)
    for row in rows:
        row["held_place"] = row["trial"] in held
    tau = kendall_tau([r["search_accuracy"] for r in rows], [r["verified_accuracy"] for r in rows]) \
        if len(rows) >= 3 else math.nan
    result = {"at": started, "steps": steps, "factor": steps / full_steps, "seeds": plan.seeds, "members": rows,
              "split": SPLIT, "test_split": test_split, "selection": SELECTION,
              "train_images": min(len(task.train_y), study_fidelity.subset or len(task.train_y)),
              "kendall_tau": None if not math.isfinite(tau) else float(tau),
              "held": sum(r["held_place"] for r in rows), "of": len(rows), "recipe": plan.recipe.to_dict(),
              "init": plan.init, **({"deploy": plan.deploy} if plan.deploy else {}),
              **tally}
    if baselines:
        result["baselines"] = baselines
        result["comparison"] = compare(rows, baselines, loaded.objectives,
                                       _reference_at(loaded.reference, steps / full_steps))
    result["seconds"] = time.time() - started
    return result


SELECTION = ("the most accurate and the cheapest member of the strict Pareto set, and between them the member "
             "nearest each of evenly spaced points of log cost")


def chosen_members(loaded, top: int | None) -> list[TrialRecord]:
    """The members to verify, most accurate first: `top` of the strict Pareto set spread over its
    cost range (every member when it holds no more). A tie-aware front would hand on only the
    cheapest member of each tie, so the accurate end would never be verified."""
    front = strict_front(loaded.records, loaded.objectives)
    if not front:
        raise UserError(f"study {loaded.name!r} has no complete, feasible trial to verify yet")
    if top is not None and top > len(front):
        raise UserError(f"--top {top}: the Pareto set of study {loaded.name!r} has {len(front)} member"
                        f"{'' if len(front) == 1 else 's'}; ask for at most that many")
    return spread_over_cost(front, loaded.objectives, top or DEFAULT_TOP)


def checked_test_split(settings: SearchSettings, task, name: str) -> dict:
    """The test split verified accuracies are scored on. A study records its split when it is
    created; data whose split is another now (other files under the same name) is refused."""
    found = task.test_split()
    recorded = settings.test_split
    if not replace(settings, test_split=found).test_split_differs(settings):  # the rule a resumed search keeps
        return {**found, "recorded": bool(recorded)}
    if recorded:
        raise UserError(f"study {name!r} recorded a test split of {recorded.get('images')} images "
                        f"({recorded.get('fingerprint')}) when it was created; {settings.data} gives another now "
                        f"({found['images']} images, {found['fingerprint']}): the data changed since the search")
    raise UserError(f"study {name!r} was searched before EAS fixed the test split of data without an official "
                    f"one: with seed {settings.seed} its training images include some of today's test images, so "
                    "no claim can be scored on unseen images; search again in a new study")


def _deployed_in(run: dict, deploy_format: str | None) -> bool:
    checked = run.get("deploy")
    return isinstance(checked, dict) and checked.get("format") == deploy_format \
        and isinstance(checked.get("deployable"), bool)


def train_once(model: Model, task, seed: int, steps: int, study_batch: int, plan: VerifyPlan, meter: str,
               supernet=None, deploy_check=None, threads: int = 1) -> dict:
    candidate = Candidate(model.arch, task, model.fidelity, plan.device, seed, meter)
    if supernet is not None:  # fine-tuned from the weights the search scored it with
        one_shot.inherit(candidate, supernet)
    result = candidate.train_segment(steps_at_batch(steps, study_batch, model.fidelity.batch_size),
                                     recalibration_images=1024, recipe=plan.recipe)
    # A diverged model is kept at what it scores: fragility is a finding. The validation accuracy
    # is kept beside the test one: how optimistic the split that chose the front was.
    validation, tested = candidate.validate(), candidate.test()
    run = {"accuracy": tested["accuracy"], "split": SPLIT, "images": tested["images"],
           "val_accuracy": validation["accuracy"], "val_images": validation["val_images"], "seed": seed,
           "steps": result.steps, "train_seconds": candidate.trained.seconds,
           "train_energy_j": candidate.trained.energy_j, "diverged": result.diverged,
           "model": model.name or f"trial {model.trial}"}
    if deploy_check is not None:
        run["deploy"] = deploy_check(candidate.model, task, threads)
    return run


def _costs(model: Model, task, runtime: Runtime, device: str, meter: str, runs: list[dict]) -> dict:
    """Counted costs, latency and inference energy measured now in the study's runtime, and the
    mean training energy of the runs."""
    timed = Candidate(model.arch, task, model.fidelity, device, 0, meter, runtime)
    timed.measure_latency()
    costs = counted_metrics(model.arch, task) | {k: timed.metrics.get(k) for k in COST_FIELDS}
    return costs | {"train_energy_j": statistics.fmean(r["train_energy_j"] for r in runs)}


def _reference_at(reference_point: dict, scale: float) -> dict:
    """The study's reference point, its training energy scaled to the verification's steps."""
    return {k: v * scale if k == "train_energy" else v for k, v in reference_point.items()}


def steps_at_batch(steps: int, study_batch: int, batch: int) -> int:
    """The search counts steps at the study's batch size (every candidate sees as many images);
    a candidate that trains with another batch size takes proportionally more or fewer."""
    return max(1, round(steps * study_batch / batch))


def verified_stats(runs: list[dict]) -> dict:
    """The mean accuracy over the seeds with the 95% interval of all their test images pooled
    (not the first seed's), and the spread between seeds."""
    accuracies = [run["accuracy"] for run in runs]
    images = sum(run["images"] for run in runs)
    correct = sum(round(run["accuracy"] * run["images"]) for run in runs)
    return {"verified_accuracy": statistics.fmean(accuracies),
            "verified_interval": list(wilson_interval(correct, images)),
            "seed_spread": (max(accuracies) - min(accuracies)) if len(runs) > 1 else None, "seeds": len(runs)}


def verified_row(record: TrialRecord, runs: list[dict]) -> dict:
    """One member's verification, beside what the search stored for it."""
    return {"trial": record.number, "genome": record.genome, "search_accuracy": record.value("accuracy"),
            "search_interval": [record.metrics.get("accuracy_low"), record.metrics.get("accuracy_high")],
            **verified_stats(runs), "costs": {k: record.metrics.get(k) for k in ("macs", "params")}}


def _training(record: TrialRecord) -> dict:
    fidelity = record.metrics.get("fidelity") or {}
    return {k: fidelity[k] for k in ("lr", "weight_decay", "batch_size") if k in fidelity}


def _held(front: list[TrialRecord], rows: list[dict], objectives) -> set[int]:
    """Members still on the (tied) Pareto set of the verified members, with verified accuracies."""
    verified = []
    for record, row in zip(front, rows, strict=True):
        low, high = row["verified_interval"]
        metrics = {**record.metrics, "accuracy": row["verified_accuracy"], "accuracy_low": low,
                   "accuracy_high": high}
        verified.append(replace(record, metrics=metrics))
    return {r.number for r in pareto_front(verified, objectives)}
