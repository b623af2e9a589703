"""`eas export`: from a stored trial to standalone artifacts for training elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eas.cli.options import (
    JsonOption,
    MaxLatencyOption,
    MaxMacsOption,
    MaxMemoryOption,
    MaxParamsOption,
    StorageOption,
    StudyArgument,
    emit_json,
)
from eas.errors import UserError


def export_command(
    study: StudyArgument,
    out: Annotated[Path, typer.Option("--out", help="Folder to write (must be new or empty).")],
    trial: Annotated[int | None, typer.Option("--trial", help="Export this trial.")] = None,
    pick: Annotated[str | None, typer.Option("--pick", help="knee, most-accurate or smallest (from the "
                                             "Pareto set).")] = None,
    max_macs: MaxMacsOption = None,
    max_params: MaxParamsOption = None,
    max_latency: MaxLatencyOption = None,
    max_memory: MaxMemoryOption = None,
    storage: StorageOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a folder that holds a previous export.")] = False,
    onnx: Annotated[bool, typer.Option("--onnx/--no-onnx", help="Also write model.onnx.")] = True,
    formats: Annotated[str | None, typer.Option(
        "--format", help="Deployment formats to add, comma-separated: pte (ExecuTorch; int8 too after `eas train`; "
                         "extra 'executorch'), ort (ONNX Runtime's mobile format).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Write arch.json, a standalone model.py, model.pt2, model.onnx (and --format's) for a trial."""
    from eas.objectives import Constraints
    from eas.study.storage import check_study_name, default_url

    if (trial is None) == (pick is None):
        raise UserError("give exactly one of --trial N or --pick knee|most-accurate|smallest")
    limits = Constraints.parse(max_macs, max_params, max_memory, max_latency)
    check_study_name(study)
    from eas.deploy.formats import FORMATS, parse_formats

    wanted = parse_formats(formats)

    from eas.deploy.export import export_trial, prepare_output
    from eas.reports.front import select_trial
    from eas.study.reader import load_study

    prepare_output(out, force)
    found = load_study(storage or default_url(study), study)  # read-only
    settings = found.settings
    if found.task is None:
        raise UserError(f"study {study!r} does not record its input shape (made by an older EAS)")
    chosen = select_trial(found.records, found.objectives, trial, pick, limits if limits.to_dict() else None)
    document = export_trial(chosen, settings, study, out, force=force, onnx=onnx, formats=wanted)
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
    for name in wanted:
        diff = checks.get(f"{name}_max_abs_diff")
        typer.echo(f"  {name:<7} " + (checks[name] if diff is None else
                                      f"{FORMATS[name].file} (max |diff| vs PyTorch {diff:.2g})"))
    typer.echo(f"  next    eas train {out} --data {settings['data']} --epochs 30")
