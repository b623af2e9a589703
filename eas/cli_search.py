"""`eas search`, `eas worker`, `eas studies`, `eas show`: the search service's commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Annotated

import typer

from eas.cli import DataOption, DeviceOption, JsonOption, MeterOption, app, emit_json
from eas.errors import UserError

QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
StorageOption = Annotated[str | None, typer.Option("--storage", help="SQLAlchemy URL (default: "
                                                   "sqlite:///studies/<study>.db).")]
HeartbeatOption = Annotated[int, typer.Option("--heartbeat", help="Seconds between worker heartbeats; a trial "
                                              "whose worker missed 3 is failed and retried.", min=1)]
BudgetOption = Annotated[str | None, typer.Option("--budget", help="Wall time: 2h, 90m, 45s, 1h30m.")]
TrialsOption = Annotated[int | None, typer.Option("--trials", help="Stop after N trials in this run.")]


def _absolute_sqlite(url: str) -> str:
    """Workers started elsewhere (another folder) must find the same SQLite file."""
    from eas.storage import sqlite_path

    path = sqlite_path(url)
    return f"sqlite:///{path.resolve()}" if path else url


def _threads_for(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


def _run_and_report(study, settings, space, task, budget, trial_timeout, seed, quiet, as_json, name,
                    helpers: list[subprocess.Popen] = ()):
    """Run in this process with a progress bar, wait for local helper workers, print the summary;
    the exit code says how the run ended."""
    from eas.progress import SearchProgress
    from eas.report import records_from_trials
    from eas.search import REFERENCE_KEY, run_search
    from eas.summary import run_lines, study_lines

    reference = study.user_attrs.get(REFERENCE_KEY, {})
    progress = SearchProgress(budget, settings.objectives, reference, enabled=not quiet and not as_json)
    try:
        summary = run_search(study, settings, space, task, budget, trial_timeout, seed, on_trial=progress)
    finally:
        progress.close()
        for helper in helpers:
            helper.wait()
    records = records_from_trials(study.get_trials(deepcopy=False))
    if as_json:
        from eas.report import counts, hypervolume, knee, pareto_front

        front = pareto_front(records, settings.objectives)
        best = knee(front, settings.objectives)
        emit_json({"study": name, "stopped": summary.stopped, "trials_this_run": summary.trials,
                   "cached": summary.cached, "wall_seconds": summary.wall_seconds,
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
    if summary.stopped == "no-feasible":
        raise UserError(f"{summary.trials} candidates in a row broke the constraints and none ever met "
                        "them; loosen the constraints or use a smaller space")


@app.command("search")
def search_command(
    space: Annotated[str, typer.Option("--space", help="Space name or .yaml path.")] = "mobile",
    budget: BudgetOption = None,
    trials: TrialsOption = None,
    data: DataOption = "fashion-mnist",
    objectives: Annotated[str, typer.Option("--objectives", help="Comma-separated: accuracy, macs, params, "
                                            "energy, latency, memory, train_energy.")] = "accuracy,macs,params,energy",
    max_macs: Annotated[str | None, typer.Option("--max-macs", help="e.g. 20M")] = None,
    max_params: Annotated[str | None, typer.Option("--max-params", help="e.g. 500k")] = None,
    max_latency: Annotated[str | None, typer.Option("--max-latency", help="e.g. 5ms (batch 1)")] = None,
    max_memory: Annotated[str | None, typer.Option("--max-memory", help="e.g. 2GB (inference)")] = None,
    sampler: Annotated[str, typer.Option("--sampler", help="nsga2, tpe, gp or random.")] = "nsga2",
    population: Annotated[int, typer.Option("--population", help="NSGA-II population size.", min=2)] = 16,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    study: Annotated[str | None, typer.Option("--study", help="Study name (default: <space>-<data>).")] = None,
    storage: StorageOption = None,
    workers: Annotated[int, typer.Option("--workers", help="Local worker processes.", min=1)] = 1,
    device: DeviceOption = "auto",
    meter: MeterOption = "auto",
    epochs: Annotated[float, typer.Option("--epochs", help="Proxy training epochs per candidate.")] = 1.0,
    subset: Annotated[int | None, typer.Option("--subset", help="Training images per candidate.")] = 5000,
    max_steps: Annotated[int | None, typer.Option("--max-steps")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 128,
    lr: Annotated[float, typer.Option("--lr")] = 3e-3,
    precision: Annotated[str, typer.Option("--precision", help="auto, fp32, bf16, fp16.")] = "auto",
    trial_timeout: Annotated[str, typer.Option("--trial-timeout", help="Cut a trial after this long.")] = "10m",
    warm_start: Annotated[bool, typer.Option("--warm-start/--no-warm-start", help="Evaluate fitting "
                                             "reference architectures first.")] = True,
    heartbeat: HeartbeatOption = 10,
    threads: Annotated[int | None, typer.Option("--threads", help="torch CPU threads per worker.", min=1)] = None,
    quiet: QuietOption = False,
    as_json: JsonOption = False,
) -> None:
    """Search a space for architectures that trade accuracy against MACs, params and energy."""
    from eas.cli import fidelity_from_options
    from eas.data import parse_spec
    from eas.objectives import Constraints, parse_objectives
    from eas.search import SAMPLER_NAMES, Budget, SearchSettings
    from eas.space import load_space
    from eas.storage import check_study_name, default_url
    from eas.units import parse_seconds

    # Everything the user typed is checked before any storage is opened.
    run_budget = Budget.parse(budget, trials)
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

    from eas.data import load_dataset
    from eas.evaluate import resolve_device
    from eas.search import check_feasible_at_all, prepare_study
    from eas.storage import harden_sqlite, open_storage, safe_url

    resolve_device(device)
    torch.set_num_threads(threads or _threads_for(workers))
    task = load_dataset(data, seed=seed)
    chosen_space = chosen_space.for_task(task.input_shape)
    check_feasible_at_all(chosen_space, task, constraints)
    settings = SearchSettings(space_name=chosen_space.name, space=chosen_space.definition, data=data,
                              objectives=chosen_objectives, constraints=constraints.to_dict(),
                              fidelity=fidelity.to_dict(), sampler=sampler, seed=seed, device=device,
                              meter=meter, warm_start=warm_start, population=population,
                              input_shape=task.input_shape, num_classes=task.num_classes)
    opened = open_storage(url, heartbeat=heartbeat)
    found, created = prepare_study(settings, name, opened, chosen_space, task)
    harden_sqlite(opened)
    if not quiet and not as_json:
        verb = "created" if created else "resuming"
        typer.echo(f"{verb} study {name!r} in {safe_url(url)}: {len(found.trials)} trials so far; "
                   f"{task.describe()['train']} training images, input {task.describe()['input_shape']}",
                   err=True)
    helpers = _start_workers(name, _absolute_sqlite(url), run_budget, workers - 1, seed, heartbeat,
                             timeout, _threads_for(workers))
    _run_and_report(found, settings, chosen_space, task, run_budget, timeout, seed, quiet, as_json, name, helpers)


def _start_workers(name, url, budget, count, seed, heartbeat, timeout, threads) -> list[subprocess.Popen]:
    args = []
    if budget.seconds:
        args += ["--budget", f"{int(budget.seconds)}s"]
    if budget.trials:
        args += ["--trials", str(max(1, budget.trials // (count + 1)))]
    return [subprocess.Popen([sys.executable, "-m", "eas", "worker", "--study", name, "--storage", url,
                              "--seed", str(seed + 1 + i), "--heartbeat", str(heartbeat), "--quiet",
                              "--trial-timeout", f"{int(timeout)}s", "--threads", str(threads), *args])
            for i in range(count)]


@app.command("worker")
def worker_command(
    study: Annotated[str, typer.Option("--study", help="Name of an existing study.")],
    storage: StorageOption = None,
    budget: BudgetOption = None,
    trials: TrialsOption = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampler seed (default: from the process id).")] = None,
    heartbeat: HeartbeatOption = 10,
    trial_timeout: Annotated[str, typer.Option("--trial-timeout")] = "10m",
    threads: Annotated[int | None, typer.Option("--threads", min=1)] = None,
    quiet: QuietOption = False,
) -> None:
    """Join a study from another process or machine: its name and storage are all it needs."""
    from eas.search import Budget
    from eas.storage import check_study_name, default_url
    from eas.units import parse_seconds

    check_study_name(study)
    run_budget = Budget.parse(budget, trials)
    timeout = parse_seconds(trial_timeout, "--trial-timeout")
    url = storage or default_url(study)

    import torch

    from eas.data import load_dataset
    from eas.explorer import find_eas_study
    from eas.search import SETTINGS_KEY, SearchSettings
    from eas.space import space_from_definition
    from eas.storage import harden_sqlite, open_storage

    if threads:
        torch.set_num_threads(threads)
    opened = open_storage(url, heartbeat=heartbeat, must_exist=True)
    found = find_eas_study(study, opened)
    harden_sqlite(opened)
    settings = SearchSettings.from_dict(found.user_attrs[SETTINGS_KEY])
    task = load_dataset(settings.data, seed=settings.seed)
    space = space_from_definition(settings.space, source=f"study {study}").for_task(task.input_shape)
    _run_and_report(found, settings, space, task, run_budget, timeout,
                    seed if seed is not None else os.getpid(), quiet, False, study)


@app.command("studies")
def studies_command(storage: StorageOption = None, as_json: JsonOption = False) -> None:
    """List studies with their trial counts (default: every file under studies/)."""
    from eas.explorer import list_studies, load_study
    from eas.report import counts
    from eas.units import table

    rows = []
    for row in list_studies(storage):
        if row["error"]:
            raise UserError(f"{row['storage']}: {row['error']}")
        c = counts(load_study(row["url"], row["study"]).records)
        rows.append({k: row[k] for k in ("study", "space", "data", "started", "trials", "storage")} | c)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        typer.echo("no studies yet: run `eas search --space tiny --data digits --budget 1m`")
        return
    keys = ["study", "space", "data", "started", "trials", "complete", "infeasible", "failed", "pruned", "running"]
    typer.echo(table([[row[k] for k in keys] for row in rows], keys))


@app.command("show")
def show_command(
    study: Annotated[str, typer.Argument(help="Study name.")],
    storage: StorageOption = None,
    trial: Annotated[int | None, typer.Option("--trial", help="Show one trial in full.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Print a study's Pareto set with its knee point, or one trial in full."""
    from eas.explorer import load_study
    from eas.report import counts, hypervolume, knee, pareto_front
    from eas.storage import check_study_name, default_url
    from eas.summary import study_lines

    check_study_name(study)
    found = load_study(storage or default_url(study), study)  # read-only: show never writes
    settings, objectives, reference, records = found.settings, found.objectives, found.reference, found.records
    if trial is not None:
        match = [r for r in records if r.number == trial]
        if not match:
            raise UserError(f"study {study!r} has no trial {trial} (trials 0..{len(records) - 1})")
        record = match[0]
        data = {"trial": record.number, "state": record.state, "genome": record.genome, "reason": record.reason,
                "params": record.params, "metrics": record.metrics}
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    if as_json:
        front = pareto_front(records, objectives)
        best = knee(front, objectives)
        emit_json({"study": study, "settings": settings, "counts": counts(records),
                   "hypervolume": hypervolume(records, objectives, reference), "reference_point": reference,
                   "knee": best.number if best else None,
                   "pareto": [{"trial": r.number, "genome": r.genome, **r.metrics} for r in front]})
        return
    typer.echo("\n".join(study_lines(study, settings, records, objectives, reference)))
