"""Options shared by several commands, defined once, and the helpers every command uses.

Commands are plain functions in one module per concern (arch, evaluate, search, studies,
export, train, ui); eas/cli/__init__.py registers them top-down, so no command module imports
another. Heavy imports (torch, optuna) happen inside command bodies: `eas --help` stays fast.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from eas.errors import UserError
from eas.study.storage import STORAGE_ENV

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]
InputOption = Annotated[str, typer.Option("--input", help="Input shape CxHxW, e.g. 3x32x32.")]
ClassesOption = Annotated[int, typer.Option("--classes", help="Number of classes.", min=2)]
DataOption = Annotated[str, typer.Option("--data", help="digits, fashion-mnist, cifar10:PATH, cifar100:PATH, "
                                         "imagefolder:PATH (decoded once into a cache) or npz:PATH.")]
ResolutionOption = Annotated[int | None, typer.Option("--resolution", help="Image folders: resize the short side "
                                                    "to this, centre-crop a square (stored in the study).",
                                                    min=1, max=4096)]
StrictOption = Annotated[bool, typer.Option("--strict", help="Refuse a dataset with unreadable files instead of "
                                            "skipping them.")]
DeviceOption = Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")]
MeterOption = Annotated[str, typer.Option("--meter", help="Energy meter: auto, nvml, rapl or estimated.")]
SeedOption = Annotated[int, typer.Option("--seed", help="Random seed (data split, initialisation, sampler).",
                                         min=0, max=2**31 - 1)]
ThreadsOption = Annotated[int | None, typer.Option("--threads", help="torch CPU threads.", min=1, max=1024)]
StorageOption = Annotated[str | None, typer.Option(
    "--storage", envvar=STORAGE_ENV, show_envvar=True,
    help="SQLAlchemy URL (default: sqlite:///studies/<study>.db). Also read from $EAS_STORAGE, which "
         "keeps a password off the command line.")]
StudyArgument = Annotated[str, typer.Argument(help="Study name.")]
BudgetOption = Annotated[str | None, typer.Option("--budget", help="Wall time: 2h, 90m, 45s, 1h30m.")]
CpuBudgetOption = Annotated[str | None, typer.Option(
    "--cpu-budget", help="CPU time of this process (all its threads), e.g. 50m: no trial starts after it. "
    "Holds on a busy machine, where wall time does not.")]
TrialsOption = Annotated[int | None, typer.Option("--trials", help="Stop after N trials in this run.")]
# Used as Annotated[int, PriorityOption] or Annotated[int | None, PriorityOption].
PriorityOption = typer.Option("--priority", help="Pool workers serve higher priorities first; equal ones share "
                              "the workers.", min=-1000, max=1000)
HeartbeatOption = Annotated[int, typer.Option("--heartbeat", help="Seconds between worker heartbeats; a trial "
                                              "whose worker missed 3 is failed and retried.", min=1, max=3600)]
TrialTimeoutOption = Annotated[str, typer.Option("--trial-timeout", help="Cut a trial after this long.")]
MaxMacsOption = Annotated[str | None, typer.Option("--max-macs", help="e.g. 20M")]
MaxParamsOption = Annotated[str | None, typer.Option("--max-params", help="e.g. 500k")]
MaxLatencyOption = Annotated[str | None, typer.Option("--max-latency", help="e.g. 5ms (batch 1)")]
MaxMemoryOption = Annotated[str | None, typer.Option("--max-memory", help="e.g. 2GB (inference)")]
MaxSramOption = Annotated[str | None, typer.Option("--max-sram", help="e.g. 64kB (64,000 bytes) or 64KiB: a "
                                                   "microcontroller's SRAM for the int8 activations.")]
MaxFlashOption = Annotated[str | None, typer.Option("--max-flash", help="e.g. 256kB or 1MB: a microcontroller's "
                                                    "flash for the int8 model.")]
EpochsOption = Annotated[float, typer.Option("--epochs", help="Training epochs per candidate (may be fractional).")]
SubsetOption = Annotated[int | None, typer.Option("--subset", help="Train on at most N images.")]
MaxStepsOption = Annotated[int | None, typer.Option("--max-steps", help="Cap on optimiser steps.")]
BatchSizeOption = Annotated[int, typer.Option("--batch-size", help="Images per optimiser step.")]
LrOption = Annotated[float, typer.Option("--lr", help="Peak learning rate.")]
# The training recipe (eas.training.recipe): `eas train` and `eas verify` take the same options.
AugmentOption = Annotated[str, typer.Option("--augment", help="auto (suited to the data: shift digits, shift and "
                                            "flip natural images and clothing), none, shift or standard.")]
LabelSmoothingOption = Annotated[float, typer.Option("--label-smoothing", help="e.g. 0.1; 0: off.")]
EmaOption = Annotated[float, typer.Option("--ema", help="Decay of an exponential moving average of the weights, "
                                          "which are evaluated and kept (e.g. 0.999); 0: off.")]
PrecisionOption = Annotated[str, typer.Option("--precision", help="auto, fp32, bf16 or fp16.")]


def parse_shape(text: str) -> tuple[int, int, int]:
    from eas.arch.bounds import check_shape

    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise UserError(f"--input: expected CxHxW with positive integers, e.g. 3x32x32 (got {text[:40]!r})")
    return check_shape([int(p) for p in parts], "--input")


def emit_json(data) -> None:
    """JSON on stdout; control characters in stored strings come out escaped."""
    typer.echo(json.dumps(data, indent=2, default=str))


def fidelity_from_options(epochs: float, subset: int | None, max_steps: int | None, batch_size: int,
                          lr: float, precision: str):
    from eas.training.proxy import Fidelity

    return Fidelity(epochs=epochs, subset=subset, max_steps=max_steps, batch_size=batch_size, lr=lr,
                    precision=precision)
