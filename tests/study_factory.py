"""Stored EAS studies made without training, for reader tests: genomes from the tiny space with
their real counted costs, accuracies from a seeded generator. (Readers do not care where the
numbers came from; searches that really train are tested elsewhere.)"""

from __future__ import annotations

import random

import optuna

from eas.arch.counting import arch_cost
from eas.arch.space import load_space
from eas.objectives import DEFAULT_OBJECTIVES
from eas.study import schema
from eas.study.schema import SearchSettings
from eas.study.setup import create_or_resume
from eas.study.storage import open_storage

SHAPE, CLASSES = (1, 8, 8), 10


def settings(**changes) -> SearchSettings:
    space = load_space("tiny", SHAPE)
    return SearchSettings(space_name="tiny", space=space.definition, data="digits", objectives=DEFAULT_OBJECTIVES,
                          constraints={}, fidelity={"epochs": 1.0}, input_shape=SHAPE, num_classes=CLASSES,
                          **changes)


def make_study(url: str, name: str = "s", trials: int = 10, seed: int = 0, **changes):
    """An EAS study with `trials` complete trials (settings `changes` from the defaults here);
    returns the Optuna study."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url)
    study, _ = create_or_resume(storage, name, settings(**changes), lambda: {"macs": 2e6, "params": 1e5, "energy": 1.0})
    add_trials(study, trials, seed)
    return study


def add_trials(study, count: int, seed: int = 0) -> None:
    space = load_space("tiny", SHAPE)
    rng = random.Random(seed)
    sampler = optuna.samplers.RandomSampler(seed=seed)
    scratch = optuna.create_study(sampler=sampler)
    for _ in range(count):
        arch = space.sample(scratch.ask())
        cost = arch_cost(arch, SHAPE, CLASSES)
        metrics = {"status": "ok", "accuracy": rng.uniform(0.5, 0.95), "macs": cost.macs, "params": cost.params,
                   "inference_energy_j_per_1k": rng.uniform(0.1, 1.0), "energy_source": "estimated",
                   "train_energy_j": rng.uniform(1, 5)}
        plant(study, arch.encode(), metrics)


def plant(study, genome, metrics, **attrs) -> None:
    """Add a trial as anyone with write access to a shared study could, with plain Optuna."""
    known = metrics if isinstance(metrics, dict) else {}
    values = [float(v) if isinstance(v, (int, float)) else 0.5 for v in (
        known.get("accuracy"), known.get("macs"), known.get("params"), known.get("inference_energy_j_per_1k"))]
    study.add_trial(optuna.trial.create_trial(values=values, user_attrs={
        schema.GENOME: genome, schema.METRICS: metrics, schema.STATUS: known.get("status", "ok"), **attrs}))
