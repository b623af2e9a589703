"""`eas search` and `eas worker`: run the search, alone or as one of many workers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Annotated

import typer

from eas.cli.options import (
    BatchSizeOption,
    BudgetOption,
    DataOption,
    DeviceOption,
    HeartbeatOption,
    JsonOption,
    LrOption,
    MaxLatencyOption,
    MaxMacsOption,
    MaxMemoryOption,
    MaxParamsOption,
    MaxStepsOption,
    MeterOption,
    PrecisionOption,
    PriorityOption,
    QuietOption,
    SeedOption,
    StorageOption,
    ThreadsOption,
    TrialsOption,
    TrialTimeoutOption,
    emit_json,
    fidelity_from_options,
)
from eas.errors import UserError


def _absolute_sqlite(url: str) -> str:
    """Workers started elsewhere (another folder) must find the same SQLite file."""
    from eas.study.storage import sqlite_path

    path = sqlite_path(url)
    return f"sqlite:///{path.resolve()}" if path else url


def _threads_for(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


class LocalWorkers:
    """Helper `eas worker` processes on this machine. The storage URL travels in their
    environment (never on a command line, where a password would show in `ps`), and one that
    dies is reported with the last line it printed."""

    def __init__(self, name: str, url: str, budgets, seed: int, heartbeat: int, timeout: float, threads: int):
        self.processes: list[tuple[subprocess.Popen, object]] = []
        for index, budget in enumerate(budgets):
            args = ["--budget", f"{budget.seconds}s"] if budget.seconds else []
            args += ["--trials", str(budget.trials)] if budget.trials else []
            log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (lives as long as the helper)
            process = subprocess.Popen(
                [sys.executable, "-m", "eas", "worker", "--study", name, "--seed", str(seed + 1 + index),
                 "--heartbeat", str(heartbeat), "--quiet", "--trial-timeout", f"{timeout}s",
                 "--threads", str(threads), *args],
                env={**os.environ, "EAS_STORAGE": url}, stdout=subprocess.DEVNULL, stderr=log)
            self.processes.append((process, log))
        self.reported: set[int] = set()

    def failures(self) -> list[str]:
        """A line for each helper that has exited with an error, once each."""
        lines = []
        for index, (process, log) in enumerate(self.processes):
            code = process.poll()
            if code not in (None, 0) and index not in self.reported:
                self.reported.add(index)
                log.seek(0)
                last = (log.read().strip().splitlines() or ["(no output)"])[-1]
                lines.append(f"local worker {index + 1} (pid {process.pid}) exited with code {code}: {last[:300]}")
        return lines

    def wait(self) -> list[str]:
        for process, _ in self.processes:
            process.wait()
        return self.failures()


def _run_and_report(study, settings, space, task, budget, trial_timeout, seed, quiet, as_json, name,
                    reader, helpers: LocalWorkers | None = None):
    """Run in this process with a progress display, wait for local helper workers, print the
    summary; the exit code says how the run ended."""
    from eas.reports.progress import SearchProgress
    from eas.reports.summary import run_lines, study_lines
    from eas.search.live_view import LiveStudy
    from eas.search.loop import run_search

    live = LiveStudy(reader, settings.objectives, reader.reference)
    progress = SearchProgress(budget, enabled=not quiet and not as_json)

    def on_trial(live_, summary) -> None:
        progress(live_, summary)
        for line in helpers.failures() if helpers else []:
            typer.echo(f"eas: warning: {line}", err=True)

    try:
        summary = run_search(study, settings, space, task, live, budget, trial_timeout, seed, on_trial=on_trial)
    finally:
        progress.close()
        failed = helpers.wait() if helpers else []
    loaded = reader.loaded()
    records, reference = loaded.records, loaded.reference
    if as_json:
        from eas.reports.front import hypervolume, knee, pareto_front
        from eas.study.records import counts

        front = pareto_front(records, settings.objectives)
        best = knee(front, settings.objectives)
        emit_json({"study": name, "stopped": summary.stopped, "trials_this_run": summary.trials,
                   "cached": summary.cached, "refused_proposals": summary.refused,
                   "time_split": summary.time_split, "wall_seconds": summary.wall_seconds,
                   "evaluate_seconds": summary.evaluate_seconds, "counts": counts(records),
                   "hypervolume": hypervolume(records, settings.objectives, reference),
                   "pareto": [{"trial": r.number, "genome": r.genome, **r.metrics} for r in front],
                   "knee": best.number if best else None})
    elif not quiet or summary.stopped != "budget":
        lines = run_lines(summary, budget, records, settings.objectives, reference)
        typer.echo("\n".join(lines + [""] + study_lines(name, settings.to_dict(), records,
                                                          settings.objectives, reference)))
    if summary.stopped == "interrupted":
        typer.echo(f"interrupted: no trial left running; run the same command to resume study {name!r}", err=True)
        raise typer.Exit(130)
    if failed:
        for line in failed:
            typer.echo(f"eas: error: {line}", err=True)
        raise typer.Exit(1)
    if summary.stopped == "no-feasible":
        raise UserError(f"{summary.trials} candidates in a row broke the constraints and none ever met "
                        "them; loosen the constraints or use a smaller space")


def search_command(
    space: Annotated[str, typer.Option("--space", help="Space name or .yaml path.")] = "mobile",
    budget: BudgetOption = None,
    trials: TrialsOption = None,
    data: DataOption = "fashion-mnist",
    objectives: Annotated[str, typer.Option("--objectives", help="Comma-separated: accuracy, macs, params, "
                                            "energy, latency, memory, train_energy.")] = "accuracy,macs,params,energy",
    max_macs: MaxMacsOption = None,
    max_params: MaxParamsOption = None,
    max_latency: MaxLatencyOption = None,
    max_memory: MaxMemoryOption = None,
    sampler: Annotated[str, typer.Option("--sampler", help="tpe (Optuna's multivariate TPE; candidates "
                                         "stopped at a lower rung count as pruned), evolution, nsga2, gp or "
                                         "random.")] = "tpe",
    rungs: Annotated[int, typer.Option("--rungs", help="Multi-fidelity rungs per candidate; 1 = plain search, "
                                       "every candidate at the full fidelity.")] = 3,
    eta: Annotated[int, typer.Option("--eta", help="Each rung trains the best 1/eta of its results on, for "
                                     "eta times more steps.")] = 3,
    population: Annotated[int, typer.Option("--population", help="NSGA-II population size.", min=2,
                                            max=10_000)] = 16,
    seed: SeedOption = 0,
    study: Annotated[str | None, typer.Option("--study", help="Study name (default: <space>-<data>).")] = None,
    storage: StorageOption = None,
    workers: Annotated[int, typer.Option("--workers", help="Local worker processes.", min=1, max=256)] = 1,
    device: DeviceOption = "auto",
    meter: MeterOption = "auto",
    epochs: Annotated[float, typer.Option("--epochs", help="Epochs of the full fidelity (the top rung).")] = 2.0,
    subset: Annotated[int | None, typer.Option("--subset", help="Training images of the full fidelity.")] = 9000,
    max_steps: MaxStepsOption = None,
    batch_size: BatchSizeOption = 128,
    lr: LrOption = 3e-3,
    precision: PrecisionOption = "auto",
    trial_timeout: TrialTimeoutOption = "10m",
    warm_start: Annotated[bool, typer.Option("--warm-start/--no-warm-start", help="Evaluate fitting "
                                             "reference architectures first.")] = True,
    heartbeat: HeartbeatOption = 10,
    threads: ThreadsOption = None,
    queue: Annotated[bool, typer.Option("--queue", help="Create the study with its budget and leave it to "
                                        "`eas worker --storage URL` processes; run nothing here.")] = False,
    priority: Annotated[int, PriorityOption] = 0,
    quiet: QuietOption = False,
    as_json: JsonOption = False,
) -> None:
    """Search a space for architectures that trade accuracy against MACs, params and energy."""
    from eas.arch.space import load_space
    from eas.data.datasets import parse_spec
    from eas.objectives import Constraints, parse_objectives
    from eas.search.loop import SAMPLER_NAMES, Budget
    from eas.search.rungs import Ladder
    from eas.study.schema import SearchSettings
    from eas.study.storage import check_study_name, default_url
    from eas.units import parse_seconds

    # Everything the user typed is checked before any storage is opened.
    run_budget = Budget.parse(budget, trials)
    if queue and workers > 1:
        raise UserError("--queue runs nothing here: start `eas worker --storage URL` processes instead of --workers")
    chosen_objectives = parse_objectives(objectives)
    constraints = Constraints.parse(max_macs, max_params, max_memory, max_latency)
    if sampler not in SAMPLER_NAMES:
        raise UserError(f"unknown sampler {sampler!r} (known: {', '.join(SAMPLER_NAMES)})")
    fidelity = fidelity_from_options(epochs, subset, max_steps, batch_size, lr, precision)
    timeout = parse_seconds(trial_timeout, "--trial-timeout")
    chosen_space = load_space(space)
    parse_spec(data)
    name = check_study_name(study or f"{chosen_space.name}-{data.split(':')[0]}")
    url = storage or default_url(name)

    import torch

    from eas.data.datasets import load_dataset
    from eas.measure.device import resolve_device
    from eas.search.loop import check_feasible_at_all, prepare_study
    from eas.study import schema
    from eas.study.queue import Run, budget_text, save
    from eas.study.reader import StudyReader, entry_of
    from eas.study.setup import check_resumable
    from eas.study.storage import harden_sqlite, open_storage, safe_url

    torch_device = resolve_device(device)
    torch.set_num_threads(threads or _threads_for(workers))
    task = load_dataset(data, seed=seed)
    ladder = Ladder.make(fidelity.total_steps(len(task.train_y)), rungs, eta)
    chosen_space = chosen_space.for_task(task.input_shape)
    check_feasible_at_all(chosen_space, task, constraints, torch_device)
    settings = SearchSettings(space_name=chosen_space.name, space=chosen_space.definition, data=data,
                              objectives=chosen_objectives, constraints=constraints.to_dict(),
                              fidelity=fidelity.to_dict(), sampler=sampler, seed=seed, device=device,
                              meter=meter, warm_start=warm_start, population=population,
                              input_shape=task.input_shape, num_classes=task.num_classes,
                              multi_fidelity=ladder.to_dict() if rungs > 1 else {})
    check_resumable(url, name, settings)  # read-only: a mismatch leaves the storage untouched
    opened = open_storage(url, heartbeat=heartbeat)
    found, created = prepare_study(settings, name, opened, chosen_space, task, torch_device)
    harden_sqlite(opened)
    reader = StudyReader(url, name)
    entry = entry_of(url, name)
    run = Run(run_budget.seconds, None if run_budget.trials is None else entry.counted + run_budget.trials,
              priority, started=None if queue else time.time())
    save(opened, entry.study_id, run)  # this run's budget is the study's: pool workers may help
    if queue:
        verb = "queued new" if created else "queued"
        budget_words = budget_text(run, entry.counted, time.time())
        if as_json:
            emit_json({"study": name, "state": "queued", "budget": budget_words, "priority": priority})
        elif not quiet:
            typer.echo(f"{verb} study {name!r} in {safe_url(url)} ({budget_words}, priority {priority}): "
                       f"start workers with `eas worker --storage URL`")
        return
    if not quiet and not as_json:
        verb = "created" if created else "resuming"
        typer.echo(f"{verb} study {name!r} in {safe_url(url)}: {len(found.trials)} trials so far; "
                   f"{task.describe()['train']} training images, input {task.describe()['input_shape']}",
                   err=True)
    budgets = run_budget.split(workers)
    helpers = LocalWorkers(name, _absolute_sqlite(url), budgets[1:], seed, heartbeat, timeout,
                           _threads_for(workers))
    try:
        _run_and_report(found, settings, chosen_space, task, budgets[0], timeout, seed, quiet, as_json, name,
                        reader, helpers)
    except typer.Exit as ended:
        if ended.exit_code == 130:  # Ctrl-C stops the study: pool workers leave it too
            opened.set_study_user_attr(entry.study_id, schema.RUN_STOPPED, time.time())
        raise


def worker_command(
    study: Annotated[str | None, typer.Option("--study", help="Join this study with this worker's own "
                                              "--budget/--trials. Without it: serve every open study of "
                                              "--storage, each within its own stored budget.")] = None,
    storage: StorageOption = None,
    budget: BudgetOption = None,
    trials: TrialsOption = None,
    wait: Annotated[bool, typer.Option("--wait", help="Without --study: when nothing is open, wait for "
                                       "new studies instead of exiting.")] = False,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampler seed (default: from the process id).",
                                             min=0, max=2**31 - 1)] = None,
    heartbeat: HeartbeatOption = 10,
    trial_timeout: TrialTimeoutOption = "10m",
    threads: ThreadsOption = None,
    quiet: QuietOption = False,
) -> None:
    """Join a study from another process or machine, or serve every open study of a storage."""
    from eas.search.loop import Budget
    from eas.study.storage import check_study_name, default_url
    from eas.units import parse_seconds

    timeout = parse_seconds(trial_timeout, "--trial-timeout")
    if study is None:
        _serve_pool(storage, Budget.parse(budget, trials) if budget or trials else None, wait, seed, heartbeat,
                    timeout, threads, quiet)
        return
    check_study_name(study)
    run_budget = Budget.parse(budget, trials)
    url = storage or default_url(study)

    import torch

    from eas.arch.space import space_from_definition
    from eas.data.datasets import load_dataset
    from eas.study.setup import join

    if threads:
        torch.set_num_threads(threads)
    found, settings, reader = join(url, study, heartbeat)
    task = load_dataset(settings.data, seed=settings.seed)
    space = space_from_definition(settings.space, source=f"study {study}").for_task(task.input_shape)
    _run_and_report(found, settings, space, task, run_budget, timeout,
                    seed if seed is not None else os.getpid(), quiet, False, study, reader)


def _serve_pool(storage, budget, wait: bool, seed, heartbeat: int, timeout: float, threads, quiet: bool) -> None:
    if not storage:
        raise UserError("without --study, give the --storage (or $EAS_STORAGE) whose studies to serve")

    import torch

    from eas.search.pool import Pool
    from eas.study.reader import list_studies

    if threads:
        torch.set_num_threads(threads)
    for row in list_studies(storage):  # read-only: an unreadable storage is an error before anything is written
        if row["error"]:
            raise UserError(row["error"])
    echo = (lambda line: None) if quiet else (lambda line: typer.echo(line, err=True))
    pool = Pool(storage, heartbeat, timeout, seed if seed is not None else os.getpid(), echo)
    summary = pool.run(budget, wait)
    served = ", ".join(f"{n} of {name}" for name, n in summary.trials.items()) or "none"
    if not quiet:
        typer.echo(f"worker done ({summary.stopped}): trials {served}", err=True)
    if summary.stopped == "interrupted":
        raise typer.Exit(130)
