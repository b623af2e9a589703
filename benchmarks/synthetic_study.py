"""A synthetic EAS study of N trials for the scale benchmarks, written through Optuna's own API
(so it is what a real search stores): random genomes of a space with their exact counted costs,
accuracies on a noisy trade-off curve with their 95% intervals, and, for a multi-fidelity
study, rung records where the best third went on to the next rung."""

from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from sqlalchemy import event

from eas.arch.counting import arch_cost
from eas.arch.space import load_space
from eas.nas.candidate import wilson_interval
from eas.nas.rungs import Ladder
from eas.study import schema
from eas.study.schema import SearchSettings

OBJECTIVES = ("accuracy", "macs", "params", "energy")


def settings_for(space_name: str, data: str, input_shape: tuple, num_classes: int, ladder: Ladder | None,
                 fidelity: dict) -> tuple[object, SearchSettings]:
    space = load_space(space_name, input_shape)
    return space, SearchSettings(
        space_name=space_name, space=space.definition, data=data, objectives=OBJECTIVES, constraints={},
        fidelity=fidelity, sampler="tpe", warm_start=False, input_shape=input_shape, num_classes=num_classes,
        multi_fidelity=ladder.to_dict() if ladder else {})


def write_study(url: str, name: str, n: int, space, settings: SearchSettings, seed: int = 0) -> None:
    storage = optuna.storages.RDBStorage(url)
    if url.startswith("sqlite"):
        @event.listens_for(storage.engine, "connect")
        def fast(connection, _):  # a throwaway file: durability does not matter here
            connection.execute("PRAGMA synchronous=OFF")
            connection.execute("PRAGMA journal_mode=MEMORY")

        storage.engine.dispose()
    study = optuna.create_study(study_name=name, storage=storage, directions=["maximize"] + ["minimize"] * 3)
    shape, classes = settings.input_shape, settings.num_classes
    _, largest = space.extremes(shape, classes)
    top = arch_cost(largest, shape, classes)
    study.set_metric_names(list(OBJECTIVES))
    study.set_user_attr(schema.REFERENCE, {"macs": 1.1 * top.macs, "params": 1.1 * top.params,
                                           "energy": 1.1 * top.macs / 1e6})
    study.set_user_attr(schema.SCHEMA, schema.SCHEMA_VERSION)
    study.set_user_attr(schema.SETTINGS, settings.to_dict())
    rng = np.random.default_rng(seed)
    choices = space.parameters()
    distributions = {k: CategoricalDistribution(v) for k, v in choices.items()}
    ladder = Ladder.from_dict(settings.multi_fidelity) if settings.multi_fidelity else None
    trials = []
    for _ in range(n):
        params = {k: v[rng.integers(len(v))] for k, v in choices.items()}
        arch = space.arch_from_params(params)
        cost = arch_cost(arch, shape, classes)
        quality = 0.6 + 0.3 * np.log10(max(cost.macs, 1) / (0.1 * top.macs) + 1) / 2
        accuracy = float(np.clip(quality + rng.normal(0, 0.03), 0.05, 0.999))
        low, high = wilson_interval(round(accuracy * 500), 500)
        costs = {"macs": cost.macs, "params": cost.params, "memory_bytes_inference": cost.memory_bytes_inference,
                 "latency_ms": cost.macs / 1e6, "inference_energy_j_per_1k": cost.macs / 1e6}
        metrics = {"status": "ok", "accuracy": accuracy, "accuracy_low": low, "accuracy_high": high,
                   "energy_source": "estimated", "train_seconds": 1.0, "evaluate_seconds": 1.2, **costs}
        attrs = {schema.GENOME: arch.encode(), schema.GENOME_KEY: arch.canonical_hash(), schema.WORKER: "synthetic:0"}
        state = optuna.trial.TrialState.COMPLETE
        if ladder:
            reached = 0
            while reached < ladder.top and rng.random() < 1 / ladder.eta:
                reached += 1
            attrs[schema.RUNGS] = [{"rung": k, "steps": ladder.steps[k], "accuracy": accuracy, "accuracy_low": low,
                                    "accuracy_high": high, "go_on": k < reached, **costs} for k in range(reached + 1)]
            if reached < ladder.top:
                state, metrics["status"] = optuna.trial.TrialState.PRUNED, "stopped"
        attrs[schema.METRICS], attrs[schema.STATUS] = metrics, metrics["status"]
        values = [accuracy, cost.macs, cost.params, cost.macs / 1e6] if state.name == "COMPLETE" else None
        trials.append(optuna.trial.create_trial(state=state, params=params, distributions=distributions,
                                                values=values, user_attrs=attrs))
    study.add_trials(trials)
