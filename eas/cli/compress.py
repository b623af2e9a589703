"""`eas compress`: a lighter model from a trained export (int8 or structured pruning)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eas import interrupt
from eas.cli.options import JsonOption, MeterOption, QuietOption, SeedOption, emit_json
from eas.errors import UserError


def compress_command(
    folder: Annotated[Path, typer.Argument(help="A folder written by `eas export` and trained by `eas train`.")],
    int8: Annotated[bool, typer.Option("--int8", help="Post-training static int8 quantisation (onnxruntime).")] = False,
    prune: Annotated[float | None, typer.Option("--prune", help="Remove this fraction of each stage's channels "
                                                "(structured), then fine-tune, e.g. 0.3.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Folder to write (default: FOLDER-int8 or "
                                             "FOLDER-prune0.3).")] = None,
    data: Annotated[str | None, typer.Option("--data", help="Calibration, fine-tuning and test data (default: "
                                             "the data the architecture was searched on).")] = None,
    epochs: Annotated[int, typer.Option("--epochs", help="Fine-tuning epochs after pruning.", min=1,
                                        max=1000)] = 1,
    lr: Annotated[float, typer.Option("--lr", help="Peak fine-tuning learning rate.")] = 3e-4,
    force: Annotated[bool, typer.Option("--force", help="Replace a folder that holds a previous export.")] = False,
    meter: MeterOption = "auto",
    seed: SeedOption = 0,
    quiet: QuietOption = False,
    as_json: JsonOption = False,
) -> None:
    """Make a trained model lighter; writes a new export folder measured side by side with the original."""
    if int8 == (prune is not None):
        raise UserError("give exactly one of --int8 or --prune FRACTION")
    if prune is not None and not 0.0 < prune < 1.0:
        raise UserError(f"--prune must be a fraction in (0, 1) of the channels to remove (got {prune})")
    from eas.training.full import TrainPlan, read_arch

    plan = TrainPlan(epochs=epochs, lr=lr, seed=seed) if prune is not None else None
    document = read_arch(folder)
    from eas.deploy.compress import comparison_rows, compress_int8, compress_prune, default_output

    out = out or default_output(folder, "int8" if int8 else f"prune{prune:g}")
    from eas.data.datasets import load_dataset
    from eas.deploy.export import prepare_output
    from eas.units import table

    prepare_output(out, force, derived_from=folder)  # checked before the data is loaded
    interrupt.install()
    stored_data = document["task"].get("data")
    if not data and not isinstance(stored_data, str):
        raise UserError(f"{folder}/arch.json does not say which data the model was trained on: give --data")
    task = load_dataset(data or stored_data, seed=seed)
    if int8:
        report = compress_int8(folder, out, task, meter, force)
    else:
        report = compress_prune(folder, out, task, prune, plan, meter, force, show_progress=not quiet)
    if as_json:
        emit_json(report)
        return
    rows, headers = comparison_rows(report)
    typer.echo(f"{folder} -> {out}/ ({'int8' if int8 else f'{prune:g} of the channels pruned'}, "
               f"test set of {task.name})")
    typer.echo(table(rows, headers))
