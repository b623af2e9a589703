"""`eas train`: train an exported architecture fully, with the efficiency report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eas.cli.options import (
    DataOption,
    DeviceOption,
    JsonOption,
    MeterOption,
    PrecisionOption,
    QuietOption,
    SeedOption,
    emit_json,
)


def train_command(
    folder: Annotated[Path, typer.Argument(help="A folder written by `eas export`.")],
    data: DataOption = "fashion-mnist",
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
    quiet: QuietOption = False,
    as_json: JsonOption = False,
) -> None:
    """Train an exported architecture fully; resumes from its checkpoint when run again."""
    from eas.full_training import TrainPlan, read_arch

    given = {k: v for k, v in {"batch_size": batch_size, "lr": lr, "weight_decay": weight_decay}.items()
             if v is not None}
    options = dict(epochs=epochs, accumulate=accumulate, precision=precision, patience=patience, target=target,
                   checkpoint_steps=checkpoint_every, checkpoint_minutes=checkpoint_minutes, seed=seed)
    TrainPlan(**options, **given)  # what was typed is checked before any file is read
    searched = read_arch(folder).get("training") or {}
    plan = TrainPlan(**options, **{**searched, **given})
    from eas.data import load_dataset
    from eas.full_training import train_exported
    from eas.green import report_lines

    task = load_dataset(data, seed=seed)
    report = train_exported(folder, task, plan, device, meter, grid, pue, restart, show_progress=not quiet)
    if as_json:
        emit_json(report)
        return
    typer.echo("\n".join(report_lines(report) + [f"saved              {folder}/model.safetensors, report.json"]))
