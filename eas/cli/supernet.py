"""`eas supernet train | trust | show`: one network for a whole space, and how far to trust it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eas import interrupt
from eas.cli.options import (
    BatchSizeOption,
    BudgetOption,
    DataOption,
    DeviceOption,
    JsonOption,
    LrOption,
    MeterOption,
    PrecisionOption,
    QuietOption,
    ResolutionOption,
    SeedOption,
    StrictOption,
    ThreadsOption,
    emit_json,
)
from eas.units import parse_seconds

SupernetFolder = Annotated[Path, typer.Argument(help="A folder written by `eas supernet train`.")]
SamplesOption = Annotated[int, typer.Option("--samples", help="Random sub-networks trained alone to measure the "
                                            "Kendall tau of inherited accuracy (0: skip).", min=0, max=1000)]
# The stand-alone training that trust compares with: `eas search`'s full fidelity by default.
TrustEpochsOption = Annotated[float, typer.Option("--trust-epochs", help="Epochs of each stand-alone training "
                                                  "(the search's full fidelity).")]
TrustSubsetOption = Annotated[int | None, typer.Option("--trust-subset", help="Training images of each "
                                                       "stand-alone training.")]


def train_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for the supernet (and its checkpoint while "
                                      "training).")] = Path("supernets/supernet"),
    space: Annotated[str, typer.Option("--space", help="Space name or .yaml path.")] = "mobile",
    data: DataOption = "fashion-mnist",
    resolution: ResolutionOption = None,
    strict: StrictOption = False,
    budget: BudgetOption = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Sandwich steps (instead of --budget).",
                                              min=1, max=10_000_000)] = None,
    batch_size: BatchSizeOption = 128,
    lr: LrOption = 3e-3,
    random_subnets: Annotated[int, typer.Option("--random-subnets", help="Random sub-networks per step, "
                                                "besides the largest and the smallest.", min=0, max=16)] = 2,
    checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", help="Steps between checkpoints.",
                                                  min=1)] = 100,
    checkpoint_minutes: Annotated[float, typer.Option("--checkpoint-minutes", min=0.01)] = 5.0,
    precision: PrecisionOption = "auto",
    samples: SamplesOption = 16,
    trust_epochs: TrustEpochsOption = 2.0,
    trust_subset: TrustSubsetOption = 9000,
    device: DeviceOption = "auto",
    meter: MeterOption = "auto",
    seed: SeedOption = 0,
    threads: ThreadsOption = None,
    restart: Annotated[bool, typer.Option("--restart", help="Ignore an existing checkpoint or supernet.")] = False,
    quiet: QuietOption = False,
) -> None:
    """Train one weight-sharing network holding every architecture of a space; resumes when run again."""
    import torch

    from eas.arch.space import load_space
    from eas.data.datasets import load_dataset, with_resolution
    from eas.measure.device import resolve_device
    from eas.training.supernet import SupernetPlan, SupernetTraining
    from eas.training.supernet_file import load_supernet

    plan = SupernetPlan(steps=steps, budget_seconds=parse_seconds(budget, "--budget") if budget else None,
                        batch_size=batch_size, lr=lr, random_subnets=random_subnets, checkpoint_steps=checkpoint_every,
                        checkpoint_minutes=checkpoint_minutes, precision=precision, seed=seed)
    fidelity = _trust_fidelity(trust_epochs, trust_subset, batch_size, precision)
    if threads:
        torch.set_num_threads(threads)
    chosen = load_space(space)
    data = with_resolution(data, resolution)
    task = load_dataset(data, seed=seed, strict=strict)
    interrupt.install(sigterm=True)
    training = SupernetTraining(out, task, chosen, data, plan, resolve_device(device), meter, restart, not quiet)
    try:
        training.run()
    except KeyboardInterrupt:
        typer.echo(f"interrupted at step {training.progress.step}: the checkpoint holds step {training.saved_step}; "
                   "run the same command to resume from it", err=True)
        raise typer.Exit(130) from None
    stored = load_supernet(out)
    if samples:
        _measure_trust(stored, task, fidelity, samples, seed, device, quiet)
    typer.echo("\n".join(_show_lines(stored)))


def trust_command(
    folder: SupernetFolder,
    samples: SamplesOption = 16,
    trust_epochs: TrustEpochsOption = 2.0,
    trust_subset: TrustSubsetOption = 9000,
    batch_size: BatchSizeOption = 128,
    precision: PrecisionOption = "auto",
    device: DeviceOption = "auto",
    quiet: QuietOption = False,
) -> None:
    """Measure (or extend) the Kendall tau between inherited and stand-alone accuracy."""
    from eas.data.datasets import load_dataset
    from eas.training.supernet_file import load_supernet

    fidelity = _trust_fidelity(trust_epochs, trust_subset, batch_size, precision)
    stored = load_supernet(folder)
    seed = stored.seed  # the supernet's split: its validation images are the ones it never trained on
    task = load_dataset(stored.data, seed=seed)
    _measure_trust(stored, task, fidelity, max(samples, 2), seed, device, quiet)
    typer.echo("\n".join(_show_lines(stored)))


def show_command(folder: SupernetFolder, as_json: JsonOption = False) -> None:
    """What a supernet holds, how it was trained, and how far its inherited accuracies rank like training."""
    from eas.nas.one_shot import read_trust
    from eas.training.supernet_file import load_supernet

    stored = load_supernet(folder)
    if as_json:
        emit_json({**stored.description, "trust": read_trust(stored)})
        return
    typer.echo("\n".join(_show_lines(stored)))


def _trust_fidelity(epochs: float, subset: int | None, batch_size: int, precision: str):
    from eas.training.proxy import Fidelity

    return Fidelity(epochs=epochs, subset=subset, batch_size=batch_size, precision=precision)  # search's lr


def _measure_trust(stored, task, fidelity, samples: int, seed: int, device: str, quiet: bool) -> None:
    from eas.nas.one_shot import measure_trust

    def say(done: int, sample: dict) -> None:
        if not quiet:
            typer.echo(f"trust {done}/{samples}: inherited {sample['inherited_accuracy']:.2%}, alone "
                       f"{sample['standalone_accuracy']:.2%}  {sample['genome']}", err=True)

    measure_trust(stored, task, fidelity, samples, seed, device, say)


def _show_lines(stored) -> list[str]:
    from eas.nas.one_shot import read_trust
    from eas.reports.summary import supernet_lines

    return supernet_lines(str(stored.folder), stored.description, read_trust(stored))
