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
from functools import partial
from pathlib import Path

import numpy as np

from eas import arguments
from eas.application import passive_threads
from eas.errors import ArgumentTypeError, UserError
from eas.lazy import lazy_import
from eas.nas import search_options
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
folder_lock = lazy_import("eas.training.folder_lock")
references = lazy_import("eas.arch.reference")
beat = lazy_import("eas.reports.time_to_beat")
progress = lazy_import("eas.reports.progress")

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


def _data_spec(data, where: str = "eas.search") -> str:
    """A dataset spec for the study to store. Arrays given from Python, (x, y), are checked first
    (shapes, size, values, labels: nothing is written for refused data), then written once into
    the studies folder, named by their content, so a resumed search and its workers read the same
    images."""
    if isinstance(data, str):
        arguments.text(where, "data", data)
        return data
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise ArgumentTypeError(f"{where}: data must be a dataset name or spec (digits, fashion-mnist, npz:PATH, ...) "
                                "or a pair (x, y) of arrays: images (N, H, W), (N, C, H, W) or (N, H, W, C) and labels "
                                f"(N,) (got {arguments.shown(data)})")
    try:
        x, y = (np.asarray(a) for a in data)
    except (ValueError, TypeError) as error:  # a ragged list, say
        raise UserError(f"{where}: data's images and labels must each be one array of numbers "
                        f"({str(error).splitlines()[0][:120]})") from None
    datasets.checked_arrays(x, y, f"{where}: data")
    digest = hashlib.sha256(np.ascontiguousarray(x).data)  # the same bytes as x.tobytes(), without the copy
    digest.update(str((x.shape, x.dtype)).encode())
    digest.update(np.ascontiguousarray(y).data)
    path = (studies_dir() / "data" / f"arrays-{digest.hexdigest()[:16]}.npz").resolve()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npz")
        np.savez(partial, x=x, y=y)
        partial.rename(path)
        logger.info(f"data: {len(y):,} images written to {path} for the study to read")
    return f"npz:{path}"


LIMITS = ("max_macs", "max_params", "max_latency", "max_memory", "max_sram", "max_flash")


def _limits(constraints: dict | None, where: str) -> dict[str, str | None]:
    """{"max_macs": "20M", ...} as the command line's texts; an unknown limit is one line."""
    given = dict(arguments.mapping(where, "constraints", constraints, optional=True) or {})
    unknown = sorted(set(given) - set(LIMITS))
    if unknown:
        raise UserError(f"{where}: unknown constraint {unknown[0]!r} (known: {', '.join(LIMITS)})")
    search_options.check_options(given, where)
    return {k: (None if v is None else str(v)) for k, v in given.items()}


def _sampler(sampler) -> tuple[str, object | None]:
    """(the name the study stores, an Optuna sampler instance or None)."""
    if isinstance(sampler, str):
        return sampler, None
    if not all(callable(getattr(sampler, m, None)) for m in ("sample_relative", "sample_independent")):
        raise ArgumentTypeError("eas.search: sampler must be a name (tpe, evolution, nsga2, gp, random) or an Optuna "
                                f"sampler instance (got {arguments.shown(sampler)})")
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
    where = "eas.search"
    search_options.check_options({"space": space, "budget": budget, "trials": trials, "cpu_budget": cpu_budget,
                                  "objectives": objectives, "study": study, "storage": storage, "seed": seed,
                                  **options}, where)
    arguments.function(where, "on_trial", on_trial, optional=True)
    arguments.function(where, "evaluator", evaluator, optional=True)
    limits = _limits(constraints, where)
    sampler_name, instance = _sampler(sampler)
    passive_threads()
    if evaluator is not None:
        options.setdefault("rungs", 1)  # each candidate is evaluated once: there is nothing to train in rungs
        # stored with the study: resuming it without one (or a worker joining it) is refused, since
        # trained accuracies and the evaluator's must never mix in one front
        options["evaluator"] = session.FROM_PYTHON + getattr(evaluator, "__qualname__", type(evaluator).__name__)
    request = session.SearchRequest.make(
        space=space, data=_data_spec(data, where), budget=budget, trials=trials, cpu_budget=cpu_budget,
        objectives=list(objectives), study=study, storage=storage, sampler=sampler_name, seed=seed,
        **limits, **options)
    opened = session.open_search(request)
    live = live_view.LiveStudy(opened.reader, opened.settings.objectives, opened.reader.reference)
    wrapped = loop.make_sampler(opened.settings, opened.space, opened.task, live, seed, base=instance) \
        if instance is not None else None
    logged = progress.LoggedProgress()

    def after_trial(view, run_summary) -> None:
        logged(view, run_summary)
        if on_trial is not None:
            on_trial(view, run_summary)

    summary = loop.run_search(opened.study, opened.settings, opened.space, opened.task, live, request.budget,
                              request.trial_timeout, seed, on_trial=after_trial, sampler=wrapped,
                              evaluator=evaluator, baselines=opened.baselines)
    loaded = opened.reader.loaded()
    return SearchResult(request.name, request.url, summary.stopped, summary.trials, tuple(loaded.records),
                        opened.settings.objectives, loaded.reference, loaded.baselines)


def open_study(study: str, storage: str | None = None) -> SearchResult:
    """A stored study, read-only: the same result object a search returns."""
    arguments.text("eas.open_study", "study", study)
    url = arguments.text("eas.open_study", "storage", storage, optional=True) or default_url(study)
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
    where = "eas.evaluate"
    arguments.text(where, "genome", genome)
    search_options.check_options({"epochs": epochs, "subset": subset, "seed": seed, "device": device}, where)
    limits = Constraints.parse(**{k.removeprefix("max_"): v for k, v in _limits(constraints, where).items()})
    arch = references.arch_from_text(genome)
    fidelity = fidelities.Fidelity(epochs=epochs, subset=subset)
    spec = _data_spec(data, where)  # last: it may write the arrays given
    passive_threads()
    task = datasets.load_dataset(spec, seed=seed)
    metrics = candidates.evaluate(arch, task, fidelity, device=device, seed=seed, constraints=limits)
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
    where = "eas.export"
    arguments.text(where, "study", study)
    arguments.path(where, "out", out)
    arguments.text(where, "pick", pick, choices=("knee", "most-accurate", "smallest"))
    arguments.whole(where, "trial", trial, 0, optional=True)
    arguments.text(where, "storage", storage, optional=True)
    arguments.flag(where, "force", force)
    arguments.texts(where, "formats", formats)
    wanted = device_formats.parse_formats(",".join(formats) if formats else None)
    url = storage or default_url(study)
    loaded = reader.load_study(url, study)
    record = front_views.select_trial(loaded.records, loaded.objectives, trial, pick)
    exports.export_trial(record, loaded.settings, study, Path(out), force, formats=wanted)
    return Path(out)


# What `train` takes through **plan, and the type of each (eas.training.full.TrainPlan checks ranges).
TRAIN_CHECKS: dict[str, Callable[..., object]] = {
    "batch_size": partial(arguments.whole, low=2), "accumulate": partial(arguments.whole, low=1),
    "lr": partial(arguments.number, above=0), "weight_decay": partial(arguments.number, low=0),
    "precision": arguments.text, "patience": partial(arguments.whole, low=1, optional=True),
    "target": partial(arguments.number, low=0, high=1, optional=True),
    "checkpoint_steps": partial(arguments.whole, low=1), "checkpoint_minutes": partial(arguments.number, above=0),
    "teacher": partial(arguments.path, optional=True), "augment": arguments.text,
    "label_smoothing": partial(arguments.number, low=0), "ema": partial(arguments.number, low=0),
}


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
    where = "eas.train"
    arguments.path(where, "folder", folder)
    folder = Path(folder)
    arguments.whole(where, "epochs", epochs, 1, 100_000)
    arguments.whole(where, "seed", seed, 0, search_options.MAX_SEED)
    arguments.text(where, "device", device)
    arguments.known_keywords(where, plan, TRAIN_CHECKS)
    for name, value in plan.items():
        TRAIN_CHECKS[name](where, name, value)
    document = full_training.read_arch(folder)
    device_formats.stored_formats(document)  # known and installed, before training
    settings = {**(document.get("training") or {}), **plan}
    train_plan = full_training.TrainPlan(epochs=epochs, seed=seed, **settings)
    spec = _data_spec(data, where)  # last: it may write the arrays given
    passive_threads()
    task = datasets.load_dataset(spec, seed=seed)
    with folder_lock.training_lock(folder):  # a second training of the folder is refused while this one runs
        full_training.train_exported(folder, task, train_plan, device, show_progress=True)
        return handover.finish_training(folder, task)
