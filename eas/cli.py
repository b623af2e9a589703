"""The `eas` command line. Heavy imports (torch, optuna) happen inside command bodies."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer

from eas.errors import UserError

app = typer.Typer(help="EAS: search small, accurate, energy-frugal neural networks.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
arch_app = typer.Typer(help="Sample and inspect architecture genomes.", no_args_is_help=True)
app.add_typer(arch_app, name="arch")

InputOption = Annotated[str, typer.Option("--input", help="Input shape CxHxW, e.g. 3x32x32.")]
ClassesOption = Annotated[int, typer.Option("--classes", help="Number of classes.", min=1)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise UserError(f"--input: expected CxHxW with positive integers, e.g. 3x32x32 (got {text!r})")
    return tuple(int(p) for p in parts)


def emit_json(data) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


@app.command("spaces")
def spaces_command(as_json: JsonOption = False) -> None:
    """List the built-in search spaces."""
    from eas.space import list_spaces

    spaces = list_spaces()
    if as_json:
        emit_json([{"name": s.name, "description": s.description, "stages": len(s.stages),
                    "parameters": len(s.parameters())} for s in spaces])
        return
    for space in spaces:
        typer.echo(f"{space.name:8} {len(space.parameters()):3d} choices  {space.description}")


@arch_app.command("sample")
def arch_sample(
    space: Annotated[str, typer.Option("--space", help="Space name or path to a .yaml file.")],
    n: Annotated[int, typer.Option("--n", help="How many genomes.", min=1)] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
    input_shape: Annotated[str | None, typer.Option("--input", help="Adapt to this input CxHxW.")] = None,
) -> None:
    """Print random genomes from a space, one per line."""
    import optuna

    from eas.space import load_space

    shape = parse_shape(input_shape) if input_shape else None
    chosen = load_space(space, shape)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(n):
        typer.echo(chosen.sample(study.ask()).encode())


@arch_app.command("show")
def arch_show(
    genome: Annotated[str, typer.Argument(help="A genome string or a reference name.")],
    input_shape: InputOption = "3x224x224",
    classes: ClassesOption = 1000,
    batch: Annotated[int, typer.Option("--batch", help="Batch size for memory figures.", min=1)] = 1,
    as_json: JsonOption = False,
) -> None:
    """Profile an architecture: params, MACs, FLOPs, memory and the per-layer table."""
    from eas.builder import build
    from eas.cost import profile
    from eas.reference import arch_from_text
    from eas.summary import profile_lines

    arch = arch_from_text(genome)
    shape = parse_shape(input_shape)
    cost = profile(build(arch, shape, classes), shape, batch_size=batch)
    if as_json:
        emit_json({"genome": arch.encode(), "hash": arch.canonical_hash(), **cost.summary(),
                   "layers": [layer.__dict__ for layer in cost.layers]})
        return
    typer.echo("\n".join(profile_lines(arch, cost)))


DataOption = Annotated[str, typer.Option("--data", help="digits, fashion-mnist, cifar10:PATH, cifar100:PATH, "
                                          "imagefolder:PATH or npz:PATH.")]
DeviceOption = Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")]
MeterOption = Annotated[str, typer.Option("--meter", help="Energy meter: auto, nvml, rapl or estimated.")]


def fidelity_from_options(epochs: float, subset: int | None, max_steps: int | None, batch_size: int,
                          lr: float, precision: str):
    from eas.train import Fidelity

    return Fidelity(epochs=epochs, subset=subset, max_steps=max_steps, batch_size=batch_size, lr=lr,
                    precision=precision)


@app.command("evaluate")
def evaluate_command(
    genome: Annotated[str, typer.Argument(help="A genome string or a reference name.")],
    data: DataOption = "fashion-mnist",
    epochs: Annotated[float, typer.Option("--epochs", help="Training epochs (may be fractional).")] = 1.0,
    subset: Annotated[int | None, typer.Option("--subset", help="Train on at most N images.")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Cap on optimiser steps.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 128,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate.")] = 3e-3,
    precision: Annotated[str, typer.Option("--precision", help="auto, fp32, bf16 or fp16.")] = "auto",
    device: DeviceOption = "auto",
    meter: MeterOption = "auto",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    threads: Annotated[int | None, typer.Option("--threads", help="torch CPU threads.", min=1)] = None,
    resolution: Annotated[int | None, typer.Option("--resolution", help="Resize images (imagefolder).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Train a candidate briefly and measure accuracy, cost, latency and energy."""
    fidelity = fidelity_from_options(epochs, subset, max_steps, batch_size, lr, precision)
    from eas.reference import arch_from_text

    arch = arch_from_text(genome)
    import torch

    from eas.data import load_dataset
    from eas.evaluate import evaluate
    from eas.summary import metrics_lines

    if threads:
        torch.set_num_threads(threads)
    task = load_dataset(data, seed=seed, resolution=resolution)
    metrics = evaluate(arch, task, fidelity, device=device, seed=seed, meter=meter)
    if as_json:
        emit_json({**metrics.to_dict(), "data": task.describe()})
        return
    typer.echo("\n".join(metrics_lines(metrics)))


@app.command("ui")
def ui_command(
    storage: Annotated[str | None, typer.Option("--storage", help="SQLAlchemy URL (default: every study "
                                                "file under studies/).")] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8501,
    host: Annotated[str, typer.Option("--host", help="Address to bind; 0.0.0.0 exposes it to other "
                                      "machines.")] = "127.0.0.1",
) -> None:
    """Start the Streamlit Pareto explorer (read-only; local-only unless --host says otherwise)."""
    import subprocess
    from pathlib import Path

    app_file = Path(__file__).resolve().parent.parent / "ui" / "app.py"
    if not app_file.exists():
        raise UserError(f"the explorer app is not at {app_file} (install EAS from its repository with pip -e)")
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise UserError("the explorer needs the ui extra: pip install -e '.[ui]'") from None
    env = {**os.environ, "EAS_UI_STORAGE": storage or ""}
    if storage is None:
        from eas.storage import studies_dir

        env["EAS_STUDIES_DIR"] = str(studies_dir().resolve())
    command = [sys.executable, "-m", "streamlit", "run", str(app_file), "--server.headless", "true",
               "--server.address", host, "--server.port", str(port), "--browser.gatherUsageStats", "false",
               "--client.toolbarMode", "viewer"]
    typer.echo(f"EAS explorer on http://{host}:{port}  (Ctrl-C to stop)", err=True)
    try:
        raise typer.Exit(subprocess.call(command, env=env))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def main() -> None:
    """Entry point: known errors become one line on stderr and exit code 2."""
    try:
        app()
    except UserError as error:
        if os.environ.get("EAS_DEBUG"):
            raise
        print(f"eas: error: {error}", file=sys.stderr)
        sys.exit(2)


# The search, export and training commands live in their own modules and register on `app`.
from eas import cli_export, cli_search  # noqa: E402,F401
