"""Opening a study to search it: the one way every face does it (`eas search`, `eas worker`, the
worker pool, `eas.search()` from Python, the benchmarks).

`SearchRequest.make(**options)` checks what was asked before any storage is touched;
`open_search(request)` loads the data, checks the limits can be met at all, creates the study
(or resumes it, refused when its stored settings differ) and saves this run's budget into it;
`join_study(url, name)` opens an existing study for a worker from its stored settings alone.
Both return an OpenedStudy: everything `run_search` needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from eas.arch.microcontroller import without_micro_kernel
from eas.arch.space import Space, load_space, space_from_definition
from eas.data.datasets import Dataset, load_dataset, parse_spec, with_resolution
from eas.errors import UserError
from eas.measure import runtime as runtimes
from eas.measure.device import resolve_device
from eas.measure.energy import make_meter
from eas.nas import loop
from eas.nas.baselines import baseline_arch, check_baselines_fit, parse_baselines, with_adapted
from eas.nas.budget import Budget
from eas.nas.candidate import counted_metrics
from eas.nas.one_shot import read_trust
from eas.nas.proposals import SAMPLERS
from eas.nas.rungs import Ladder, check_rung_bands, check_rung_resolution
from eas.nas.search_options import OPTIONS
from eas.objectives import Constraints, parse_objectives
from eas.study import schema
from eas.study.queue import QueuedStudy, Run, save
from eas.study.reader import StudyReader, entry_of
from eas.study.setup import check_resumable, join
from eas.study.storage import check_study_name, default_url, harden_sqlite, open_storage
from eas.training.proxy import Fidelity
from eas.training.supernet_file import check_serves, load_supernet
from eas.units import parse_seconds

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class SearchRequest:
    """What a search was asked for, every option checked before any storage is opened."""

    budget: Budget
    objectives: tuple[str, ...]
    constraints: Constraints
    fidelity: Fidelity
    trial_timeout: float
    space: Space
    name: str
    url: str
    runtime: runtimes.Runtime
    options: dict  # the options as given (data, sampler, rungs, eta, seed, device, ...), defaults filled in

    @classmethod
    def make(cls, **given) -> SearchRequest:
        # The types and ranges of a Python caller's options are checked at eas.search's door
        # (eas.nas.search_options); here the command line's parsed values get its own messages.
        unknown = sorted(set(given) - set(OPTIONS))
        if unknown:
            raise UserError(f"unknown search option {unknown[0]!r} (known: {', '.join(OPTIONS)})")
        o = {**OPTIONS, **given}
        budget = Budget.parse(o["budget"], o["trials"], o["cpu_budget"])
        if budget.cpu_seconds and (o["queue"] or o["workers"] > 1):
            raise UserError("--cpu-budget limits this one process: it does not go with --queue or --workers")
        if o["queue"] and o["workers"] > 1:
            raise UserError("--queue runs nothing here: start `eas worker --storage URL` processes instead of "
                            "--workers")
        objectives = parse_objectives(o["objectives"])
        check_rung_resolution(o["rung_resolution"], o["rungs"])
        check_rung_bands(o["rung_bands"], o["rungs"])
        if o["rung_resolution"] != 1.0 and o["supernet"] is not None:
            raise UserError("--rung-resolution is for trained candidates: a one-shot search (--supernet) trains none")
        constraints = Constraints.parse(o["max_macs"], o["max_params"], o["max_memory"], o["max_latency"],
                                        o["max_sram"], o["max_flash"])
        if o["sampler"] not in SAMPLERS and not str(o["sampler"]).startswith(FROM_PYTHON):
            raise UserError(f"unknown sampler {o['sampler']!r} (known: {', '.join(SAMPLERS)})")
        fidelity = Fidelity(epochs=o["epochs"], subset=o["subset"], max_steps=o["max_steps"],
                            batch_size=o["batch_size"], lr=o["lr"], precision=o["precision"])
        timeout = parse_seconds(o["trial_timeout"], "--trial-timeout")
        space = o["space"] if isinstance(o["space"], Space) else \
            space_from_definition(o["space"]) if isinstance(o["space"], dict) else load_space(o["space"])
        o = {**o, "data": with_resolution(o["data"], o["resolution"])}  # the spec the study stores
        scheme, _, _ = parse_spec(o["data"])
        target = o["target"]
        if o["device"].startswith(("http://", "https://")):  # the agent's URL as given before --target
            if target is not None:
                raise UserError("give the agent's URL once, as --target (--device is where candidates train)")
            target, o = o["device"], {**o, "device": "auto"}
        # candidates train here (--device); their latency and inference energy are measured on the target
        runtime = runtimes.Runtime.parse(o["runtime"], o["runtime_threads"], o["runtime_batch"], target)
        if o["predictor"] is not None:
            runtime = runtimes.with_predictor(runtime, o["predictor"])
        name = check_study_name(o["study"] if o["study"] is not None else f"{space.name}-{scheme}")
        o = {**o, "baselines": _requested_baselines(o, space)}
        return cls(budget, objectives, constraints, fidelity, timeout, space, name, o["storage"] or default_url(name),
                   runtime, o)


FROM_PYTHON = "python:"  # a sampler or an evaluator given from Python: stored by its name


def _requested_baselines(o: dict, space: Space) -> list[str]:
    """The published baselines `--baselines` names (none unless asked: each costs a full-fidelity
    training before the search starts)."""
    specs = o["baselines"]
    if isinstance(specs, str):
        specs = [specs]
    names = parse_baselines(list(specs) if specs else ["none"], space)
    if names and o["supernet"] is not None:
        raise UserError("--baselines trains each baseline as the candidates are trained; a one-shot search "
                        "(--supernet) trains none, and a hand-designed network has no weights to inherit")
    if names and o["queue"]:
        raise UserError("--baselines are trained by the process that runs the search; --queue runs nothing here")
    return names


@dataclass(frozen=True)
class OpenedStudy:
    """A study ready to be searched in this process."""

    study: optuna.Study
    created: bool
    settings: schema.SearchSettings
    space: Space  # for the data's input shape
    task: Dataset
    reader: StudyReader
    storage: object  # the opened Optuna storage
    entry: QueuedStudy | None  # its queue entry, as it was before this run (None for a joining worker)
    run: Run | None  # the pool Run this search saved (None for a joining worker)
    # hand-designed networks this run trains first, as its candidates are trained (search --baselines)
    baselines: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.reader.name

    @property
    def url(self) -> str:
        return self.reader.url


def settings_for(request: SearchRequest, space: Space, task: Dataset, supernet: dict,
                 ladder: Ladder) -> schema.SearchSettings:
    o = request.options
    return schema.SearchSettings(space_name=space.name, space=space.definition, data=o["data"],
                                 objectives=request.objectives, constraints=request.constraints.to_dict(),
                                 fidelity=request.fidelity.to_dict(), sampler=o["sampler"], seed=o["seed"],
                                 device=o["device"], meter=o["meter"], warm_start=o["warm_start"],
                                 population=o["population"], input_shape=task.input_shape,
                                 num_classes=task.num_classes,
                                 multi_fidelity=ladder.to_dict() if o["rungs"] > 1 and not supernet else {},
                                 runtime=request.runtime.to_dict(), supernet=supernet, evaluator=o["evaluator"],
                                 test_split=task.test_split())


def open_search(request: SearchRequest, heartbeat: int = 10, priority: int = 0) -> OpenedStudy:
    """Load the data, check the limits are reachable, create or resume the study (refused when its
    stored settings differ) and save this run's budget into it."""
    o = request.options
    torch_device = resolve_device(o["device"])
    task = load_dataset(o["data"], seed=o["seed"], strict=o["strict"])
    ladder = Ladder.make(request.fidelity.total_steps(len(task.train_y)), o["rungs"], o["eta"], o["rung_resolution"],
                         o["rung_bands"])
    space = request.space.for_task(task.input_shape)
    runtimes.check_reachable(request.runtime, task.input_shape, task.num_classes, space)
    meter, _ = make_meter(o["meter"], cuda=torch_device.type == "cuda")
    loop.check_feasible_at_all(space, task, request.constraints, torch_device, request.runtime, meter)
    warn_what_a_microcontroller_cannot_run(space, request)
    shared = supernet_record(o["supernet"], space, o["data"], task, o["seed"]) if o["supernet"] is not None else {}
    settings = settings_for(request, space, task, shared, ladder)
    check_resumable(request.url, request.name, settings)  # read-only: a mismatch leaves the storage untouched
    storage = open_storage(request.url, heartbeat=heartbeat)
    found, created = loop.prepare_study(settings, request.name, storage, space, task, torch_device)
    harden_sqlite(storage)
    reader = StudyReader(request.url, request.name)
    entry = entry_of(request.url, request.name)
    budget = request.budget
    run = Run(budget.seconds, None if budget.trials is None else entry.counted + budget.trials, priority,
              started=None if o["queue"] else time.time())
    save(storage, entry.study_id, run)  # this run's budget is the study's: pool workers may help
    return OpenedStudy(found, created, settings, space, task, reader, storage, entry, run,
                       baselines_within(o["baselines"], task, request.constraints, o["data"]))


def baselines_within(names: list[str], task: Dataset, constraints: Constraints, data: str) -> tuple[str, ...]:
    """Each published baseline and its adapted twin, where the data can be fed to them; one over a
    counted limit is left out with a warning: the search may not go where it stands."""
    names = with_adapted(names, task.input_shape)
    check_baselines_fit(names, task.input_shape, task.num_classes, data)
    kept = []
    for name in names:
        broken = [k for k, v in constraints.violations(counted_metrics(baseline_arch(name, task.input_shape),
                                                                       task)).items() if v > 0]
        if broken:
            logger.warning(f"baseline {name} left out: over {', '.join(broken)}, where the search may not go")
        else:
            kept.append(name)
    return tuple(kept)


def warn_what_a_microcontroller_cannot_run(space: Space, request: SearchRequest) -> None:
    """A search for a microcontroller (SRAM or flash an objective or a limit) says before it starts
    which of its space's choices TensorFlow Lite Micro cannot run: it does not forbid them (other
    runtimes run them), but a user who wants a microcontroller should know."""
    limits = request.constraints
    memory = {"sram", "flash"} & set(request.objectives) or limits.max_sram or limits.max_flash
    unsupported = without_micro_kernel(space) if memory else []
    if unsupported:
        logger.warning(f"space {space.name!r} offers {', '.join(unsupported)}, which TensorFlow Lite Micro has no "
                       "kernel for: networks that choose it are counted but will not run on a microcontroller "
                       "(give those stages act: hswish in a space of your own)")


def join_study(url: str, name: str, heartbeat: int | None = 10, storage=None,
               load_task: Callable[[str, int], Dataset] | None = None) -> OpenedStudy:
    """An existing study opened from its stored settings alone (a worker on any machine): checked
    read-only first, so nothing is written to a storage that holds no such study. A pool passes
    its one `storage` for every study it serves, and `load_task(data, seed)` to share a loaded
    dataset between studies."""
    found, settings, reader, storage = join(url, name, heartbeat, storage)
    if settings.sampler.startswith(FROM_PYTHON):
        raise UserError(f"study {name!r} proposes with a sampler given from Python ({settings.sampler}); join it "
                        "from Python with eas.search(..., sampler=<the same sampler>)")
    if settings.evaluator:
        raise UserError(f"study {name!r} evaluates candidates with a function given from Python "
                        f"({settings.evaluator}) instead of training them; join it from Python with "
                        "eas.search(..., evaluator=<the same function>)")
    task = (load_task or _load_task)(settings.data, settings.seed)
    space = space_from_definition(settings.space, source=f"study {name}").for_task(task.input_shape)
    return OpenedStudy(found, False, settings, space, task, reader, storage, None, None)


def _load_task(data: str, seed: int) -> Dataset:
    return load_dataset(data, seed=seed)


def supernet_record(folder: Path, space: Space, data: str, task: Dataset, seed: int) -> dict:
    """What a one-shot study stores of its supernet: checked (hashes, space, data, input) first."""
    stored = load_supernet(folder)
    check_serves(stored, space.definition, data, task.input_shape, task.num_classes, seed)
    return {"path": str(stored.folder.resolve()), "hash": stored.hash, "trust": read_trust(stored)}
