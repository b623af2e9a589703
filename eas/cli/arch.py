"""`eas spaces`, `eas arch sample`, `eas arch show`: search spaces and genomes."""

from __future__ import annotations

from typing import Annotated

import typer

from eas.cli.options import ClassesOption, InputOption, JsonOption, SeedOption, emit_json, parse_shape


def spaces_command(
    input_shape: Annotated[str | None, typer.Option("--input", help="CxHxW: also print each space's range of "
                                                    "MACs, parameters and int8 SRAM and flash at this input.")] = None,
    classes: ClassesOption = 10,
    as_json: JsonOption = False,
) -> None:
    """List the built-in search spaces."""
    from eas.arch.bounds import check_classes
    from eas.arch.space import list_spaces
    from eas.units import human, human_bytes

    check_classes(classes, "--classes")
    shape = parse_shape(input_shape) if input_shape else None
    spaces = [space.for_task(shape) if shape else space for space in list_spaces()]
    ranges = {space.name: space.cost_ranges(shape, classes) if shape else {} for space in spaces}
    if as_json:
        emit_json([{"name": s.name, "description": s.description, "stages": len(s.stages),
                    "parameters": len(s.parameters()), **({"ranges": ranges[s.name]} if shape else {})}
                   for s in spaces])
        return
    for space in spaces:
        typer.echo(f"{space.name:8} {len(space.parameters()):3d} choices  {space.description}")
        if shape:
            r = ranges[space.name]
            typer.echo(f"{'':8} at {'x'.join(map(str, shape))}: MACs {human(r['macs'][0])}-{human(r['macs'][1])}, "
                       f"params {human(r['params'][0])}-{human(r['params'][1])}, int8 SRAM "
                       f"{human_bytes(r['sram_bytes'][0])}-{human_bytes(r['sram_bytes'][1])}, flash "
                       f"{human_bytes(r['flash_bytes'][0])}-{human_bytes(r['flash_bytes'][1])}")


def sample_command(
    space: Annotated[str, typer.Option("--space", help="Space name or path to a .yaml file.")],
    n: Annotated[int, typer.Option("--n", help="How many genomes.", min=1, max=100_000)] = 1,
    seed: SeedOption = 0,
    input_shape: Annotated[str | None, typer.Option("--input", help="Adapt to this input CxHxW.")] = None,
) -> None:
    """Print random genomes from a space, one per line."""
    import optuna

    from eas.arch.space import load_space

    shape = parse_shape(input_shape) if input_shape else None
    chosen = load_space(space, shape)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(n):
        typer.echo(chosen.sample(study.ask()).encode())


def show_command(
    genome: Annotated[str, typer.Argument(help="A genome string or a reference name.")],
    input_shape: InputOption = "3x224x224",
    classes: ClassesOption = 1000,
    batch: Annotated[int, typer.Option("--batch", help="Batch size for memory figures.", min=1, max=65536)] = 1,
    adapted: Annotated[bool, typer.Option("--adapted", help="Apply the small-input rule the search spaces use: "
                                          "the earliest stride-2 steps become stride 1 until the last feature "
                                          "map is at least 3 pixels.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Profile an architecture: params, MACs, FLOPs, memory and the per-layer table."""
    from eas.arch.bounds import check_classes
    from eas.arch.reference import arch_from_text

    arch = arch_from_text(genome)
    shape = parse_shape(input_shape)
    if adapted:
        arch = arch.adapted_to(min(shape[1:]))
    check_classes(classes, "--classes")
    from eas.arch.builder import build
    from eas.arch.microcontroller import flash_bytes, sram_bytes
    from eas.arch.profile import profile
    from eas.reports.summary import profile_lines

    cost = profile(build(arch, shape, classes), shape, batch_size=batch)
    int8 = {"sram_bytes": sram_bytes(arch, shape, classes), "flash_bytes": flash_bytes(arch, shape, classes)}
    if as_json:
        emit_json({"genome": arch.encode(), "hash": arch.canonical_hash(), **cost.summary(), **int8,
                   "layers": [layer.__dict__ for layer in cost.layers]})
        return
    typer.echo("\n".join(profile_lines(arch, cost, **int8)))
