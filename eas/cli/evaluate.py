"""`eas evaluate`: train one candidate briefly and measure everything a search would."""

from __future__ import annotations

from typing import Annotated

import typer

from eas.cli.options import (
    BatchSizeOption,
    DataOption,
    DeviceOption,
    EpochsOption,
    JsonOption,
    LrOption,
    MaxStepsOption,
    MeterOption,
    PrecisionOption,
    ResolutionOption,
    SeedOption,
    StrictOption,
    SubsetOption,
    ThreadsOption,
    emit_json,
    fidelity_from_options,
)


def evaluate_command(
    genome: Annotated[str, typer.Argument(help="A genome string or a reference name.")],
    data: DataOption = "fashion-mnist",
    epochs: EpochsOption = 1.0,
    subset: SubsetOption = None,
    max_steps: MaxStepsOption = None,
    batch_size: BatchSizeOption = 128,
    lr: LrOption = 3e-3,
    precision: PrecisionOption = "auto",
    device: DeviceOption = "auto",
    meter: MeterOption = "auto",
    seed: SeedOption = 0,
    threads: ThreadsOption = None,
    resolution: ResolutionOption = None,
    strict: StrictOption = False,
    as_json: JsonOption = False,
) -> None:
    """Train a candidate briefly and measure accuracy, cost, latency and energy."""
    from eas.arch.reference import arch_from_text

    fidelity = fidelity_from_options(epochs, subset, max_steps, batch_size, lr, precision)
    arch = arch_from_text(genome)
    import torch

    from eas.data.datasets import load_dataset
    from eas.nas.candidate import evaluate
    from eas.reports.summary import metrics_lines

    if threads:
        torch.set_num_threads(threads)
    task = load_dataset(data, seed=seed, resolution=resolution, strict=strict)
    metrics = evaluate(arch, task, fidelity, device=device, seed=seed, meter=meter)
    if as_json:
        emit_json({**metrics.to_dict(), "data": task.describe()})
        return
    typer.echo("\n".join(metrics_lines(metrics)))
