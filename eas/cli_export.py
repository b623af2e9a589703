"""`eas export` and `eas train`: from a stored trial to a trained, reported model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eas.cli import DataOption, DeviceOption, JsonOption, MeterOption, app, emit_json
from eas.cli_search import StorageOption
from eas.errors import UserError


@app.command("export")
def export_command(
    study: Annotated[str, typer.Argument(help="Study name.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write (must be new or empty).")],
    trial: Annotated[int | None, typer.Option("--trial", help="Export this trial.")] = None,
    pick: Annotated[str | None, typer.Option("--pick", help="knee, most-accurate or smallest (from the "
                                             "Pareto set).")] = None,
    max_macs: Annotated[str | None, typer.Option("--max-macs")] = None,
    max_params: Annotated[str | None, typer.Option("--max-params")] = None,
    max_latency: Annotated[str | None, typer.Option("--max-latency")] = None,
    max_memory: Annotated[str | None, typer.Option("--max-memory")] = None,
    storage: StorageOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty --out folder.")] = False,
    onnx: Annotated[bool, typer.Option("--onnx/--no-onnx", help="Also write model.onnx.")] = True,
    as_json: JsonOption = False,
) -> None:
    """Write arch.json, a standalone model.py, model.pt2 and model.onnx for a trial."""
    from eas.objectives import Constraints
    from eas.storage import check_study_name, default_url

    if (trial is None) == (pick is None):
        raise UserError("give exactly one of --trial N or --pick knee|most-accurate|smallest")
    limits = Constraints.parse(max_macs, max_params, max_memory, max_latency)
    check_study_name(study)

    from eas.explorer import load_study
    from eas.export import export_trial, prepare_output
    from eas.report import select_trial

    prepare_output(out, force)
    found = load_study(storage or default_url(study), study)  # read-only
    settings = found.settings
    if not settings.get("input_shape"):
        raise UserError(f"study {study!r} does not record its input shape (made by an older EAS)")
    chosen = select_trial(found.records, found.objectives, trial, pick, limits if limits.to_dict() else None)
    document = export_trial(chosen, settings, study, out, force=force, onnx=onnx)
    if as_json:
        emit_json(document)
        return
    checks = document["checks"]
    typer.echo(f"exported trial {chosen.number} of {study} to {out}/")
    typer.echo(f"  genome  {document['genome']}")
    typer.echo(f"  params  {checks['params']:,}, MACs {checks['macs']:,} (equal to the study's)")
    typer.echo(f"  files   arch.json, model.py, model.pt2 (max |diff| {checks['pt2_max_abs_diff']:.2g})"
               + (f", model.onnx (max |diff| vs PyTorch {checks['onnx_max_abs_diff']:.2g})"
                  if "onnx_max_abs_diff" in checks else f"; onnx {checks.get('onnx', 'not requested')}"))
    typer.echo(f"  next    eas train {out} --data {settings['data']} --epochs 30")


@app.command("train")
def train_command(
    folder: Annotated[Path, typer.Argument(help="A folder written by `eas export`.")],
    data: DataOption = "fashion-mnist",
    epochs: Annotated[int, typer.Option("--epochs", min=1)] = 30,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 128,
    accumulate: Annotated[int, typer.Option("--accumulate", help="Micro-batches per step.", min=1)] = 1,
    lr: Annotated[float, typer.Option("--lr")] = 3e-3,
    weight_decay: Annotated[float, typer.Option("--weight-decay")] = 0.05,
    precision: Annotated[str, typer.Option("--precision", help="auto, fp32, bf16, fp16.")] = "auto",
    patience: Annotated[int | None, typer.Option("--patience", help="Early stop after N epochs without "
                                                 "improvement.")] = None,
    target: Annotated[float | None, typer.Option("--target", help="Report time to this validation "
                                                 "accuracy, e.g. 0.9.")] = None,
    checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", help="Steps between checkpoints.",
                                                  min=1)] = 200,
    checkpoint_minutes: Annotated[float, typer.Option("--checkpoint-minutes")] = 5.0,
    grid: Annotated[float, typer.Option("--grid-intensity", help="gCO2e per kWh (default: world "
                                        "average, IEA 2019).")] = 475.0,
    pue: Annotated[float, typer.Option("--pue", help="Data-centre power usage effectiveness.")] = 1.0,
    device: DeviceOption = "auto",
    meter: MeterOption = "auto",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    restart: Annotated[bool, typer.Option("--restart", help="Ignore an existing checkpoint.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    as_json: JsonOption = False,
) -> None:
    """Train an exported architecture fully; resumes from its checkpoint when run again."""
    from eas.full_training import TrainPlan, read_arch

    plan = TrainPlan(epochs=epochs, batch_size=batch_size, accumulate=accumulate, lr=lr,
                     weight_decay=weight_decay, precision=precision, patience=patience, target=target,
                     checkpoint_steps=checkpoint_every, checkpoint_minutes=checkpoint_minutes, seed=seed)
    read_arch(folder)
    from eas.data import load_dataset
    from eas.full_training import train_exported
    from eas.green import report_lines

    task = load_dataset(data, seed=seed)
    report = train_exported(folder, task, plan, device, meter, grid, pue, restart, show_progress=not quiet)
    if as_json:
        emit_json(report)
        return
    typer.echo("\n".join(report_lines(report) + [f"saved              {folder}/model.safetensors, report.json"]))
