"""`eas search` and `eas worker`: run the search, alone or as one of many workers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from eas import interrupt
from eas.cli.options import (
    BatchSizeOption,
    BudgetOption,
    CpuBudgetOption,
    DataOption,
    HeartbeatOption,
    JsonOption,
    LrOption,
    MaxFlashOption,
    MaxLatencyOption,
    MaxMacsOption,
    MaxMemoryOption,
    MaxParamsOption,
    MaxSramOption,
    MaxStepsOption,
    MeterOption,
    PrecisionOption,
    PriorityOption,
    QuietOption,
    ResolutionOption,
    SeedOption,
    StorageOption,
    StrictOption,
    ThreadsOption,
    TrialsOption,
    TrialTimeoutOption,
    emit_json,
)
from eas.errors import UserError
from eas.lazy import lazy_import
from eas.nas.budget import Budget
from eas.reports.summary import run_lines, study_lines
from eas.reports.time_to_beat import baseline_text
from eas.study import schema
from eas.study.queue import budget_text
from eas.study.reader import list_studies
from eas.study.storage import (
    check_study_name,
    checkpoint_wal,
    default_url,
    safe_url,
    sqlite_path,
)
from eas.units import parse_seconds

torch = lazy_import("torch")
worker_pool = lazy_import("eas.nas.pool")
front = lazy_import("eas.reports.front")
progress_line = lazy_import("eas.reports.progress")
live_view = lazy_import("eas.nas.live_view")
loop = lazy_import("eas.nas.loop")
session = lazy_import("eas.nas.session")


def _absolute_sqlite(url: str) -> str:
    """Workers started elsewhere (another folder) must find the same SQLite file."""
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
                    reader, helpers: LocalWorkers | None = None, baselines: tuple[str, ...] = ()):
    """Run in this process with a progress display, wait for local helper workers, print the
    summary; the exit code says how the run ended."""
    summary, failed = _run(study, settings, space, task, budget, trial_timeout, seed, quiet or as_json, reader,
                           helpers, baselines)
    loaded = reader.loaded()
    if as_json:
        emit_json(_run_document(name, summary, loaded.records, settings.objectives, loaded.reference))
    elif not quiet or summary.stopped != "budget":
        lines = run_lines(summary, budget, loaded.records, settings.objectives, loaded.reference)
        typer.echo("\n".join(lines + [""] + study_lines(name, settings.to_dict(), loaded.records,
                                                          settings.objectives, loaded.reference)))
    _end(summary, failed, name)


def _run(study, settings, space, task, budget, trial_timeout, seed, silent: bool, reader,
         helpers: LocalWorkers | None, baselines: tuple[str, ...] = ()):
    """(the run's summary, lines about local helpers that failed)."""
    live = live_view.LiveStudy(reader, settings.objectives, reader.reference)
    progress = progress_line.SearchProgress(budget, enabled=not silent)

    def on_baseline(name: str, metrics: dict) -> None:
        if not silent:
            typer.echo(f"baseline {name}: {baseline_text(metrics)}", err=True)

    def on_trial(live_, summary) -> None:
        progress(live_, summary)
        for line in helpers.failures() if helpers else []:
            typer.echo(f"eas: warning: {line}", err=True)

    try:
        summary = loop.run_search(study, settings, space, task, live, budget, trial_timeout, seed, on_trial=on_trial,
                                  baselines=baselines, on_baseline=on_baseline)
    finally:
        progress.close()
        failed = helpers.wait() if helpers else []
    return summary, failed


def _run_document(name: str, summary, records, objectives, reference) -> dict:
    return {"study": name, "stopped": summary.stopped, "trials_this_run": summary.trials, "cached": summary.cached,
            "refused_proposals": summary.refused, "time_split": summary.time_split,
            "wall_seconds": summary.wall_seconds, "evaluate_seconds": summary.evaluate_seconds,
            **front.front_document(records, objectives, reference)}


def _end(summary, failed: list[str], name: str) -> None:
    """Exit 130 after Ctrl-C, 1 when a local helper failed, 2 when nothing was feasible."""
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
    cpu_budget: CpuBudgetOption = None,
    data: DataOption = "fashion-mnist",
    resolution: ResolutionOption = None,
    strict: StrictOption = False,
    objectives: Annotated[str, typer.Option("--objectives", help="Comma-separated: accuracy, macs, params, "
                                            "energy, latency, memory, sram, flash, train_energy.")
                          ] = "accuracy,macs,params,energy",
    max_macs: MaxMacsOption = None,
    max_params: MaxParamsOption = None,
    max_latency: MaxLatencyOption = None,
    max_memory: MaxMemoryOption = None,
    max_sram: MaxSramOption = None,
    max_flash: MaxFlashOption = None,
    sampler: Annotated[str, typer.Option("--sampler", help="tpe (Optuna's multivariate TPE; candidates "
                                         "stopped at a lower rung count as pruned), evolution, nsga2, gp or "
                                         "random.")] = "tpe",
    rungs: Annotated[int, typer.Option("--rungs", help="Multi-fidelity rungs per candidate; 1 = plain search, "
                                       "every candidate at the full fidelity.")] = 3,
    eta: Annotated[int, typer.Option("--eta", help="Each rung trains the best 1/eta of its results on, for "
                                     "eta times more steps.")] = 3,
    rung_resolution: Annotated[float, typer.Option(
        "--rung-resolution", help="Train and rank candidates at this fraction of their input size on the rungs "
        "below the top (0.5..1; e.g. 0.7: 20 px for 28-px images, EcoNAS-style); the top rung continues the "
        "same weights at full size.")] = 1.0,
    rung_bands: Annotated[int, typer.Option(
        "--rung-bands", help="Rank each candidate at a rung only among the results in its own band of MACs "
        "(quantiles: each band about 1/N of them), so large networks compete with large ones.", min=1,
        max=5)] = 1,
    population: Annotated[int, typer.Option("--population", help="NSGA-II population size.", min=2,
                                            max=10_000)] = 16,
    seed: SeedOption = 0,
    study: Annotated[str | None, typer.Option("--study", help="Study name (default: <space>-<data>).")] = None,
    storage: StorageOption = None,
    workers: Annotated[int, typer.Option("--workers", help="Local worker processes.", min=1, max=256)] = 1,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda: where candidates train.")] = "auto",
    target: Annotated[str | None, typer.Option("--target", help="The URL of the agent on the deployment target "
                                               "(http://pi.local:8765, token from $EAS_AGENT_TOKEN): latency and "
                                               "inference energy are measured there, training runs here.")] = None,
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
    baselines: Annotated[list[str] | None, typer.Option(
        "--baselines", help="Hand-designed networks to beat: FAMILY@A,B,C (e.g. mobilenet_v3_small@0.35,0.5; "
        "repeat for more families) or auto (the space's families at 0.35, 0.5, 0.75, 1.0), each as published "
        "and adapted to the input, within the limits. Trained first as the candidates are (not counted in the "
        "budget); `eas show` then says how long the search took to beat them.")] = None,
    heartbeat: HeartbeatOption = 10,
    threads: ThreadsOption = None,
    runtime: Annotated[str, typer.Option("--runtime", help="Where latency and inference energy are measured: "
                                         "onnxruntime (the exported graph, as it ships) or torch (eager).")
                       ] = "onnxruntime",
    runtime_threads: Annotated[int, typer.Option("--runtime-threads", help="Threads of the runtime that times "
                                                 "each candidate (the deployment's, not the training's).")] = 1,
    runtime_batch: Annotated[int, typer.Option("--runtime-batch", help="The batch timed besides batch 1.")] = 32,
    predictor: Annotated[Path | None, typer.Option("--predictor", help="A latency predictor from `eas agent "
                                                   "calibrate` for this runtime and target: proposals over "
                                                   "--max-latency are refused by prediction before training, "
                                                   "candidates that reach the top rung are measured.")] = None,
    supernet: Annotated[Path | None, typer.Option("--supernet", help="One-shot search: every candidate inherits "
                                                  "its weights from this trained supernet (`eas supernet train`) "
                                                  "instead of training; --rungs does not apply.")] = None,
    queue: Annotated[bool, typer.Option("--queue", help="Create the study with its budget and leave it to "
                                        "`eas worker --storage URL` processes; run nothing here.")] = False,
    priority: Annotated[int, PriorityOption] = 0,
    quiet: QuietOption = False,
    as_json: JsonOption = False,
) -> None:
    """Search a space for architectures that trade accuracy against MACs, params and energy."""
    interrupt.install(sigterm=True)  # Ctrl-C or SIGTERM: no trial left running, the study resumable
    request = session.SearchRequest.make(
        space=space, budget=budget, trials=trials, cpu_budget=cpu_budget, data=data, resolution=resolution,
        strict=strict, objectives=objectives, max_macs=max_macs,
        max_params=max_params, max_latency=max_latency, max_memory=max_memory, max_sram=max_sram,
        max_flash=max_flash, sampler=sampler, rungs=rungs, eta=eta, rung_resolution=rung_resolution,
        rung_bands=rung_bands,
        population=population, seed=seed, study=study, storage=storage, workers=workers, device=device,
        target=target, meter=meter, epochs=epochs, subset=subset, max_steps=max_steps, batch_size=batch_size, lr=lr,
        precision=precision, trial_timeout=trial_timeout, warm_start=warm_start, queue=queue, runtime=runtime,
        runtime_threads=runtime_threads, runtime_batch=runtime_batch, predictor=predictor, supernet=supernet,
        baselines=baselines)
    torch.set_num_threads(threads or _threads_for(workers))
    opened = session.open_search(request, heartbeat, priority)
    if queue:
        _say_queued(opened, request, priority, quiet, as_json)
        return
    if not quiet and not as_json:
        described = opened.task.describe()
        typer.echo(f"{'created' if opened.created else 'resuming'} study {request.name!r} in "
                   f"{safe_url(request.url)}: {len(opened.study.trials)} trials so far; {described['train']} "
                   f"training images, input {described['input_shape']}", err=True)
    budgets = request.budget.split(workers)
    helpers = LocalWorkers(request.name, _absolute_sqlite(request.url), budgets[1:], seed, heartbeat,
                           request.trial_timeout, _threads_for(workers))
    try:
        _run_and_report(opened.study, opened.settings, opened.space, opened.task, budgets[0], request.trial_timeout,
                        seed, quiet, as_json, request.name, opened.reader, helpers, opened.baselines)
    except typer.Exit as ended:
        if ended.exit_code == 130:  # Ctrl-C stops the study: pool workers leave it too
            opened.storage.set_study_user_attr(opened.entry.study_id, schema.RUN_STOPPED, time.time())
        raise
    finally:
        checkpoint_wal(request.url)  # the study file alone holds every trial now


def _say_queued(opened, request, priority: int, quiet: bool, as_json: bool) -> None:
    budget_words = budget_text(opened.run, opened.entry.counted, time.time())
    if as_json:
        emit_json({"study": request.name, "state": "queued", "budget": budget_words, "priority": priority})
    elif not quiet:
        typer.echo(f"{'queued new' if opened.created else 'queued'} study {request.name!r} in "
                   f"{safe_url(request.url)} ({budget_words}, priority {priority}): start workers with "
                   "`eas worker --storage URL`")


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
    timeout = parse_seconds(trial_timeout, "--trial-timeout")
    interrupt.install(sigterm=True)
    if study is None:
        _serve_pool(storage, Budget.parse(budget, trials) if budget or trials else None, wait, seed, heartbeat,
                    timeout, threads, quiet)
        return
    check_study_name(study)
    run_budget = Budget.parse(budget, trials)
    url = storage or default_url(study)
    if threads:
        torch.set_num_threads(threads)
    joined = session.join_study(url, study, heartbeat)
    try:
        _run_and_report(joined.study, joined.settings, joined.space, joined.task, run_budget, timeout,
                        seed if seed is not None else os.getpid(), quiet, False, study, joined.reader)
    finally:
        checkpoint_wal(url)


def _serve_pool(storage, budget, wait: bool, seed, heartbeat: int, timeout: float, threads, quiet: bool) -> None:
    if not storage:
        raise UserError("without --study, give the --storage (or $EAS_STORAGE) whose studies to serve")

    if threads:
        torch.set_num_threads(threads)
    for row in list_studies(storage):  # read-only: an unreadable storage is an error before anything is written
        if row["error"]:
            raise UserError(row["error"])
    echo = (lambda line: None) if quiet else (lambda line: typer.echo(line, err=True))
    pool = worker_pool.Pool(storage, heartbeat, timeout, seed if seed is not None else os.getpid(), echo)
    summary = pool.run(budget, wait)
    served = ", ".join(f"{n} of {name}" for name, n in summary.trials.items()) or "none"
    if not quiet:
        typer.echo(f"worker done ({summary.stopped}): trials {served}", err=True)
    if summary.stopped == "interrupted":
        raise typer.Exit(130)
