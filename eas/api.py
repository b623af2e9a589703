"""The library's front door: what a notebook or a script calls. Each function takes what the
command line takes, under the same names, refuses bad input with the same one-line `UserError`,
and returns plain objects; the command line is a thin face over the same calls.

    import eas
    result = eas.search(space="tiny", data="digits", trials=20, epochs=2)
    print(result.knee.genome, len(result.front))
    folder = eas.export(result.study, pick="knee", out="models/knee", storage=result.storage)
    report = eas.train(folder, data="digits", epochs=10)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eas.application import passive_threads
from eas.errors import UserError
from eas.lazy import lazy_import
from eas.objectives import DEFAULT_OBJECTIVES, Constraints
from eas.study.records import TrialRecord
from eas.study.storage import default_url, studies_dir

# Loaded on the first call, not at `import eas`: a notebook's first import stays light, and the
# thread policy is set before torch loads (eas.application.passive_threads).
session = lazy_import("eas.nas.session")
loop = lazy_import("eas.nas.loop")
live_view = lazy_import("eas.nas.live_view")
front_views = lazy_import("eas.reports.front")
reader = lazy_import("eas.study.reader")
datasets = lazy_import("eas.data.datasets")
candidates = lazy_import("eas.nas.candidate")
fidelities = lazy_import("eas.training.proxy")
exports = lazy_import("eas.deploy.export")
device_formats = lazy_import("eas.deploy.formats")
handover = lazy_import("eas.deploy.handover")
full_training = lazy_import("eas.training.full")
references = lazy_import("eas.arch.reference")
beat = lazy_import("eas.reports.time_to_beat")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchResult:
    """A search's study after this run: every trial, and views of its front."""

    study: str
    storage: str
    stopped: str  # budget | trials | interrupted | no-feasible
    trials_this_run: int
    records: tuple[TrialRecord, ...] = field(repr=False)
    objectives: tuple[str, ...]
    reference: dict = field(repr=False)
    baselines: dict = field(default_factory=dict, repr=False)  # name -> BaselineRecord

    @property
    def time_to_beat(self) -> list:
        """Each baseline (most accurate first) and when the search beat it: `Beating` records."""
        return beat.time_to_beat(list(self.records), self.baselines)

    @property
    def front(self) -> list[TrialRecord]:
        """The Pareto set, accuracy ties within their 95% intervals (what `eas show` prints)."""
        return front_views.pareto_front(list(self.records), self.objectives)

    @property
    def knee(self) -> TrialRecord | None:
        """The balanced trade-off of the front (`eas show`'s `*`), None without a feasible trial."""
        return front_views.knee(self.front, self.objectives)

    @property
    def hypervolume(self) -> float:
        """Of the front, normalised against the study's reference point: in [0, 1]."""
        return front_views.hypervolume(list(self.records), self.objectives, self.reference)

    def to_dict(self) -> dict:
        """What `eas search --json` prints of the study: front, knee, hypervolume, counts."""
        return {"study": self.study, "stopped": self.stopped, "trials_this_run": self.trials_this_run,
                **front_views.front_document(list(self.records), self.objectives, self.reference)}


def _data_spec(data) -> str:
    """A dataset spec for the study to store. Arrays given from Python, (x, y), are written once
    into the studies folder, named by their content, so a resumed search and its workers read
    the same images."""
    if isinstance(data, str):
        return data
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise UserError("data must be a dataset name or spec (digits, fashion-mnist, npz:PATH, ...) or a pair "
                        "(x, y) of arrays: images (N, H, W), (N, C, H, W) or (N, H, W, C) and labels (N,)")
    x, y = (np.asarray(a) for a in data)
    digest = hashlib.sha256(x.tobytes() + str((x.shape, x.dtype)).encode() + y.tobytes()).hexdigest()[:16]
    path = (studies_dir() / "data" / f"arrays-{digest}.npz").resolve()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npz")
        np.savez(partial, x=x, y=y)
        partial.rename(path)
        logger.info(f"data: {len(y):,} images written to {path} for the study to read")
    return f"npz:{path}"


LIMITS = ("max_macs", "max_params", "max_latency", "max_memory", "max_sram", "max_flash")


def _limits(constraints: dict | None) -> dict[str, str | None]:
    """{"max_macs": "20M", ...} as the command line's texts; an unknown limit is one line."""
    given = dict(constraints or {})
    unknown = sorted(set(given) - set(LIMITS))
    if unknown:
        raise UserError(f"unknown constraint {unknown[0]!r} (known: {', '.join(LIMITS)})")
    return {k: (None if v is None else str(v)) for k, v in given.items()}


def _sampler(sampler) -> tuple[str, object | None]:
    """(the name the study stores, an Optuna sampler instance or None)."""
    if isinstance(sampler, str):
        return sampler, None
    if not all(callable(getattr(sampler, m, None)) for m in ("sample_relative", "sample_independent")):
        raise UserError(f"sampler must be a name (tpe, evolution, nsga2, gp, random) or an Optuna sampler instance "
                        f"(got {type(sampler).__name__})")
    return f"{session.FROM_PYTHON}{type(sampler).__name__}", sampler


def search(space: str | dict = "mobile", data: str | tuple = "fashion-mnist", *, budget: str | None = None,
           trials: int | None = None, cpu_budget: str | None = None, objectives: Sequence[str] = DEFAULT_OBJECTIVES,
           constraints: dict | None = None, study: str | None = None, storage: str | None = None,
           sampler: str | object = "tpe", seed: int = 0, on_trial: Callable[[object, object], None] | None = None,
           evaluator: Callable[[object], object] | None = None, **options: object) -> SearchResult:
    """Search `space` on `data` until the budget is spent; returns the study's result.

    Args:
        space: a built-in space's name (`mobile`, `hybrid`, `tiny`), a YAML file's path, or a
            space definition as a dict (the YAML file's content).
        data: a dataset spec (`digits`, `fashion-mnist`, `cifar10:PATH`, `imagefolder:PATH`,
            `npz:PATH`) or a pair `(x, y)` of numpy arrays.
        budget: wall time, e.g. "10m" (at least one of budget, trials and cpu_budget).
        trials: a number of trials.
        cpu_budget: CPU time of this process, e.g. "50m": it holds on a busy machine.
        objectives: names from `eas.objectives.OBJECTIVES`, accuracy first.
        constraints: limits, e.g. {"max_macs": "20M", "max_params": "500k", "max_latency": "5ms",
            "max_memory": "2MB", "max_sram": "64kB", "max_flash": "256kB"}: proposals over a counted
            limit are never trained.
        study: the study's name (default `<space>-<data>`); the same name and settings resume it.
        storage: a SQLAlchemy URL (default a SQLite file under studies/, or $EAS_STORAGE).
        sampler: a name (tpe, evolution, nsga2, gp, random) or any Optuna sampler instance (the
            counted-limit guard wraps it; workers cannot join such a study from the command line).
        seed: fixes the data split, each candidate's initialisation and the sampler.
        on_trial: called with (live view, run summary) after every trial.
        evaluator: your own evaluation instead of training: called with each candidate's
            `eas.Arch`, it returns its accuracy in [0, 1] (or a dict of metrics with "accuracy").
            A candidate whose evaluator raises, or returns NaN or anything else, is stored as a
            failed trial with the reason, and the search goes on. Costs are counted as usual.
        options: any other `eas search` option by its Python name: epochs, subset, rungs, eta,
            batch_size, lr, device, runtime, runtime_threads, warm_start, trial_timeout, ...
            `rung_resolution=0.7` trains and ranks the rungs below the top on images at 0.7x the
            input size (the top rung continues at full size). `rung_bands=3` ranks each
            candidate at a rung only among the results in its tercile of MACs.
            `baselines=["mobilenet_v3_small@0.35,0.5"]` trains those hand-designed networks first (as
            published and adapted), as the candidates are trained; `SearchResult.time_to_beat` then
            says how long the search took to beat them.

    Returns:
        SearchResult: every trial of the study, its front, knee and hypervolume.

    Raises:
        UserError: a bad option, data or space (one line, as the command line prints it).
    """
    passive_threads()
    if evaluator is not None:
        if not callable(evaluator):
            raise UserError(f"evaluator must be a function of the architecture (got {type(evaluator).__name__})")
        options.setdefault("rungs", 1)  # each candidate is evaluated once: there is nothing to train in rungs
        # stored with the study: resuming it without one (or a worker joining it) is refused, since
        # trained accuracies and the evaluator's must never mix in one front
        options["evaluator"] = session.FROM_PYTHON + getattr(evaluator, "__qualname__", type(evaluator).__name__)
    sampler_name, instance = _sampler(sampler)
    request = session.SearchRequest.make(
        space=space, data=_data_spec(data), budget=budget, trials=trials, cpu_budget=cpu_budget,
        objectives=list(objectives), study=study, storage=storage, sampler=sampler_name, seed=seed,
        **_limits(constraints), **options)
    opened = session.open_search(request)
    live = live_view.LiveStudy(opened.reader, opened.settings.objectives, opened.reader.reference)
    wrapped = loop.make_sampler(opened.settings, opened.space, opened.task, live, seed, base=instance) \
        if instance is not None else None
    summary = loop.run_search(opened.study, opened.settings, opened.space, opened.task, live, request.budget,
                              request.trial_timeout, seed, on_trial=on_trial, sampler=wrapped,
                              evaluator=evaluator, baselines=opened.baselines)
    loaded = opened.reader.loaded()
    return SearchResult(request.name, request.url, summary.stopped, summary.trials, tuple(loaded.records),
                        opened.settings.objectives, loaded.reference, loaded.baselines)


def open_study(study: str, storage: str | None = None) -> SearchResult:
    """A stored study, read-only: the same result object a search returns."""
    url = storage or default_url(study)
    loaded = reader.load_study(url, study)
    return SearchResult(study, url, "", 0, tuple(loaded.records), loaded.objectives, loaded.reference,
                        loaded.baselines)


def evaluate(genome: str, data: str | tuple = "digits", *, epochs: float = 1.0, subset: int | None = None,
             seed: int = 0, device: str = "auto", constraints: dict | None = None) -> dict:
    """Count, time and train one architecture at one fidelity (what `eas evaluate` prints).

    Args:
        genome: a genome string or a reference network's name (`mobilenet_v2@0.5`).
        data: a dataset spec or a pair (x, y) of arrays.

    Returns:
        dict: every metric with its source (accuracy and its interval, MACs, params, latency,
        energy, the time split).
    """
    passive_threads()
    task = datasets.load_dataset(_data_spec(data), seed=seed)
    limits = Constraints.parse(**{k.removeprefix("max_"): v for k, v in _limits(constraints).items()})
    fidelity = fidelities.Fidelity(epochs=epochs, subset=subset)
    metrics = candidates.evaluate(references.arch_from_text(genome), task, fidelity, device=device, seed=seed,
                                  constraints=limits)
    return metrics.to_dict()


def export(study: str, *, out: str | Path, pick: str = "knee", trial: int | None = None,
           storage: str | None = None, force: bool = False, formats: Sequence[str] = ()) -> Path:
    """Write a stored trial's architecture (arch.json, model.py, model.pt2, model.onnx) into `out`.

    Args:
        pick: knee, most-accurate or smallest (ignored when `trial` is given).
        formats: deployment formats to add: "pte" (ExecuTorch, the executorch extra; int8 too after
            `train`), "ort" (ONNX Runtime's mobile format).

    Returns:
        Path: the export folder, ready for `train`.
    """
    wanted = device_formats.parse_formats(",".join(formats))
    url = storage or default_url(study)
    loaded = reader.load_study(url, study)
    record = front_views.select_trial(loaded.records, loaded.objectives, trial, pick)
    exports.export_trial(record, loaded.settings, study, Path(out), force, formats=wanted)
    return Path(out)


def train(folder: str | Path, data: str | tuple = "fashion-mnist", *, epochs: int = 30, seed: int = 0,
          device: str = "auto", **plan: object) -> dict:
    """Train an export fully, then hand over what was trained (model.onnx, model.pt2 and the device
    formats asked for rewritten from the trained weights and checked); resumes from the folder's
    checkpoint.

    Args:
        plan: any `eas train` option by its Python name: batch_size, lr, weight_decay, patience,
            target, augment, label_smoothing, ema, precision, ...

    Returns:
        dict: the efficiency report (report.json), with the deployed files' checks.
    """
    passive_threads()
    folder = Path(folder)
    document = full_training.read_arch(folder)
    device_formats.stored_formats(document)  # known and installed, before training
    task = datasets.load_dataset(_data_spec(data), seed=seed)
    settings = {**(document.get("training") or {}), **plan}
    full_training.train_exported(folder, task, full_training.TrainPlan(epochs=epochs, seed=seed, **settings), device,
                                 show_progress=True)
    return handover.finish_training(folder, task)
