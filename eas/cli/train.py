"""`eas train`: train an exported architecture fully, with the efficiency report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eas import interrupt
from eas.cli.options import (
    AugmentOption,
    DataOption,
    DeviceOption,
    EmaOption,
    JsonOption,
    LabelSmoothingOption,
    MeterOption,
    PrecisionOption,
    QuietOption,
    ResolutionOption,
    SeedOption,
    StrictOption,
    emit_json,
)


def train_command(
    folder: Annotated[Path, typer.Argument(help="A folder written by `eas export`.")],
    data: DataOption = "fashion-mnist",
    resolution: ResolutionOption = None,
    strict: StrictOption = False,
    epochs: Annotated[int, typer.Option("--epochs", min=1, max=100_000)] = 30,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Images per optimiser step (default: "
                                                   "the one the search chose, else 128).")] = None,
    accumulate: Annotated[int, typer.Option("--accumulate", help="Micro-batches per step.", min=1)] = 1,
    lr: Annotated[float | None, typer.Option("--lr", help="Peak learning rate (default: the one the search "
                                             "chose, else 3e-3).")] = None,
    weight_decay: Annotated[float | None, typer.Option("--weight-decay", help="(default: the one the search "
                                                       "chose, else 0.05)")] = None,
    precision: PrecisionOption = "auto",
    patience: Annotated[int | None, typer.Option("--patience", help="Early stop after N epochs without "
                                                 "improvement.", min=1)] = None,
    target: Annotated[float | None, typer.Option("--target", help="Report time to this validation "
                                                 "accuracy, e.g. 0.9.", min=0.0, max=1.0)] = None,
    checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", help="Steps between checkpoints.",
                                                  min=1)] = 200,
    checkpoint_minutes: Annotated[float, typer.Option("--checkpoint-minutes", min=0.01)] = 5.0,
    grid: Annotated[float, typer.Option("--grid-intensity", help="gCO2e per kWh (default: world "
                                        "average, IEA 2019).", min=0.0, max=5000.0)] = 475.0,
    pue: Annotated[float, typer.Option("--pue", help="Data-centre power usage effectiveness.",
                                       min=1.0, max=10.0)] = 1.0,
    device: DeviceOption = "auto",
    meter: MeterOption = "auto",
    seed: SeedOption = 0,
    restart: Annotated[bool, typer.Option("--restart", help="Ignore an existing checkpoint.")] = False,
    teacher: Annotated[Path | None, typer.Option("--teacher", help="A trained export to distil from (same input "
                                                 "and classes).")] = None,
    nproc: Annotated[int, typer.Option("--nproc", help="Data-parallel training processes per machine "
                                       "(torchrun; the same global batch).")] = 1,
    nnodes: Annotated[int, typer.Option("--nnodes", help="Machines taking part (each runs this command).")] = 1,
    rdzv_endpoint: Annotated[str | None, typer.Option("--rdzv-endpoint", help="HOST:PORT where the machines meet "
                                                      "(needed with --nnodes above 1).")] = None,
    max_restarts: Annotated[int, typer.Option("--max-restarts", help="Restarts from the last checkpoint after "
                                              "a process dies.")] = 3,
    augment: AugmentOption = "none",
    label_smoothing: LabelSmoothingOption = 0.0,
    ema: EmaOption = 0.0,
    quiet: QuietOption = False,
    as_json: JsonOption = False,
) -> None:
    """Train an exported architecture fully; resumes from its checkpoint when run again."""
    from eas.training.distributed import check_launch
    from eas.training.full import TrainPlan, check_teacher, read_arch
    from eas.training.recipe import Recipe

    check_launch(nproc, nnodes, rdzv_endpoint, max_restarts)
    interrupt.install()  # Ctrl-C at any instant: the last checkpoint resumes

    given = {k: v for k, v in {"batch_size": batch_size, "lr": lr, "weight_decay": weight_decay}.items()
             if v is not None}
    options = dict(epochs=epochs, accumulate=accumulate, precision=precision, patience=patience, target=target,
                   checkpoint_steps=checkpoint_every, checkpoint_minutes=checkpoint_minutes, seed=seed,
                   teacher=str(teacher.resolve()) if teacher else None,
                   **Recipe.parse(augment, label_smoothing, ema, data).to_dict())
    TrainPlan(**options, **given)  # what was typed is checked before any file is read
    document = read_arch(folder)
    from eas.deploy.formats import stored_formats

    stored_formats(document)  # a deployment format the folder asks for is known and installed, before training
    if teacher is not None:
        check_teacher(document, teacher)
    searched = document.get("training") or {}
    plan = TrainPlan(**options, **{**searched, **given})
    from eas.data.datasets import load_dataset, with_resolution
    from eas.deploy.handover import finish_training
    from eas.training.folder_lock import training_lock
    from eas.training.full import train_exported
    from eas.training.green import report_lines

    data = with_resolution(data, resolution)
    task = load_dataset(data, seed=seed, strict=strict)
    with training_lock(folder):  # a second training of the folder is refused while this one runs
        if nproc * nnodes == 1:
            train_exported(folder, task, plan, device, meter, grid, pue, restart, show_progress=not quiet)
        else:
            _train_distributed(folder, data, task, plan, device, meter, grid, pue, restart, not quiet,
                               nproc, nnodes, rdzv_endpoint, max_restarts)
        report = finish_training(folder, task)  # what is handed over is what was trained
    if as_json:
        emit_json(report)
        return
    typer.echo("\n".join(report_lines(report)))


def _train_distributed(folder: Path, data: str, task, plan, device: str, meter: str, grid: float, pue: float,
                       restart: bool, show_progress: bool, nproc: int, nnodes: int, rdzv_endpoint: str | None,
                       max_restarts: int) -> None:
    """Check everything a worker would, then let torchrun run the workers (worker 0 writes the report)."""
    import shutil
    from dataclasses import asdict

    from eas.errors import UserError
    from eas.training.distributed import launch
    from eas.training.full import check_task_fits, read_arch
    from eas.training.step import MIN_BATCH

    check_task_fits(read_arch(folder), task)  # a worker's error would only be retried by torchrun
    if plan.batch_size < MIN_BATCH * nproc * nnodes:
        raise UserError(f"a batch of {plan.batch_size} cannot be shared by {nproc * nnodes} processes (each needs "
                        f"at least {MIN_BATCH} images for BatchNorm); use a larger --batch-size")
    if restart:  # workers restarted by torchrun must resume, so the old checkpoint goes now
        for name in ("checkpoint", "checkpoint.old", "checkpoint.partial"):
            shutil.rmtree(folder / name, ignore_errors=True)
    job = {"folder": str(folder.resolve()), "data": data,
           "plan": asdict(plan), "device": device, "meter": meter, "grid": grid, "pue": pue,
           "show_progress": show_progress}
    code = launch(job, nproc, nnodes, rdzv_endpoint, max_restarts)
    if code != 0:
        raise UserError(f"distributed training failed (torchrun exit code {code}); run the same command again to "
                        f"resume from {folder}/checkpoint")
