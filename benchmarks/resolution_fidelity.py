"""Resolution as a fidelity: does training at a lower input resolution rank candidates as the
full resolution does (issue 34, part 4)? If it does, a search's lower rungs could train on
smaller images (as EcoNAS does) and save what the table says.

16 random candidates of `mobile` (under 20 M MACs at 28 px, drawn once with a fixed seed) are
trained as the search's full fidelity trains them (1 epoch x 9,000 images, 1 thread), each unit
at one resolution: Fashion-MNIST's 60,000 training images stored at that size (resized once,
bilinear with antialiasing), so every resolution splits the same images into the same training
and validation sets. The networks are the same at every resolution (the 28-px strides; a
smaller input only makes their maps smaller). Kendall's tau of each resolution's accuracies
against 28 px's says how well it ranks; a second seed at 28 px is the ceiling (how well 28 px
ranks against itself). CPU seconds say what it saves.

    python benchmarks/resolution_fidelity.py --list
    setsid -w nice -n 19 python benchmarks/resolution_fidelity.py --next
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import units
from search_efficiency import space_hash

VERSION = 1
CONFIG = {"space": "mobile", "space_hash": "a4f28bad3749b496", "data": "fashion-mnist", "max_macs": "20M",
          "candidates": 16, "sample_seed": 4321, "epochs": 1.0, "subset": 9000, "threads": 1}
UNITS = [units.Unit(f"res{size}-seed{seed}", {**CONFIG, "resolution": size, "seed": seed})
         for size, seed in ((28, 0), (20, 0), (14, 0), (28, 1), (24, 0))]
REFERENCE, CEILING = "res28-seed0", "res28-seed1"


def candidates(settings: dict) -> list:
    """The same random networks for every unit, drawn at 28 px under the MACs limit."""
    import optuna

    from eas.arch.counting import arch_cost
    from eas.arch.space import load_space
    from eas.objectives import Constraints

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space(settings["space"], (1, 28, 28))
    limit = Constraints.parse(settings["max_macs"], None, None, None).max_macs
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=settings["sample_seed"]))
    archs = []
    while len(archs) < settings["candidates"]:
        arch = space.sample(study.ask())
        if arch_cost(arch, (1, 28, 28), 10).macs <= limit:
            archs.append(arch)
    return archs


def images_at(resolution: int, folder: Path) -> str:
    """Fashion-MNIST's training images (all 60,000) at `resolution`, as an npz dataset spec."""
    import torch

    from eas.data.datasets import load_dataset

    task = load_dataset("fashion-mnist")
    x = torch.cat([task.train_x.raw(slice(None)), task.val_x.raw(slice(None))])
    y = torch.cat([task.train_y, task.val_y])
    if resolution != x.shape[-1]:
        x = torch.nn.functional.interpolate(x.float(), size=(resolution, resolution), mode="bilinear",
                                            antialias=True, align_corners=False).round().clamp(0, 255).to(torch.uint8)
    path = folder / f"fashion-mnist-{resolution}.npz"
    np.savez(path, x=x.numpy(), y=y.numpy())
    return f"npz:{path}"


def run(unit: units.Unit) -> tuple[dict, object]:
    import torch

    from eas.arch.counting import arch_cost
    from eas.data.datasets import load_dataset
    from eas.nas.candidate import Candidate
    from eas.training.proxy import Fidelity

    settings = unit.settings
    if space_hash(settings["space"]) != settings["space_hash"]:
        raise SystemExit(f"space {settings['space']!r} changed since this configuration was made")
    torch.set_num_threads(settings["threads"])
    archs = candidates(settings)
    fidelity = Fidelity(epochs=settings["epochs"], subset=settings["subset"])
    with tempfile.TemporaryDirectory() as folder:
        task = load_dataset(images_at(settings["resolution"], Path(folder)), seed=0)
        rows = []
        for arch in archs:
            candidate = Candidate(arch, task, fidelity, "cpu", settings["seed"])
            started = time.process_time()  # training alone: what a lower-resolution rung would save
            trained = candidate.train_segment(fidelity.total_steps(len(task.train_y)))
            cpu_seconds = time.process_time() - started
            rows.append({"genome": arch.encode(), "accuracy": candidate.validate()["accuracy"],
                         "diverged": trained.diverged, "cpu_seconds": cpu_seconds,
                         "macs": arch_cost(arch, task.input_shape, task.num_classes).macs})
            print(f"  {rows[-1]['accuracy']:.2%} {rows[-1]['cpu_seconds']:.0f} s", flush=True)
    return {"accuracies": [r["accuracy"] for r in rows], "cpu_seconds": sum(r["cpu_seconds"] for r in rows),
            "macs": sum(r["macs"] for r in rows)}, {"networks": rows}


def check(result: dict) -> str | None:
    figures, settings = result["figures"], result["settings"]
    accuracies = figures.get("accuracies")
    if not units.fractions(accuracies, settings.get("candidates")):
        return "accuracies missing, of another count, or outside [0, 1]"
    if not (units.finite(figures.get("cpu_seconds")) and figures["cpu_seconds"] > 0):
        return "CPU seconds missing"
    return None


def table(results: Path = units.RESULTS) -> str:
    """The docs' table (benchmarks.tables), from the result files."""
    from eas.pareto import kendall_tau
    from eas.units import table as text_table

    done, problems = units.load_results(benchmark(), results)
    c = CONFIG
    lines = [f"`resolution_fidelity.py`: {c['candidates']} random `{c['space']}` networks (definition "
             f"{c['space_hash']}, under {c['max_macs']} MACs at 28 px) trained {c['epochs']:g} epoch x "
             f"{c['subset']:,} Fashion-MNIST images at each resolution, {c['threads']} thread. "
             f"**{len(done)} of {len(UNITS)} units done.**", ""]
    reference = done.get(REFERENCE)
    rows = []
    for unit in UNITS:
        result = done.get(unit.name)
        if result is None:
            rows.append([unit.name, "-", "-", "-", "-"])
            continue
        f = result["figures"]
        tau = kendall_tau(reference["figures"]["accuracies"], f["accuracies"]) if reference and unit.name != REFERENCE \
            else None
        rows.append([unit.name, f"{float(np.median(f['accuracies'])):.2%}",
                     f"{tau:+.2f}" if tau is not None else "-",
                     f"{f['cpu_seconds'] / reference['figures']['cpu_seconds']:.2f}x" if reference else "-",
                     f"{f['macs'] / reference['figures']['macs']:.2f}x" if reference else "-"])
    lines += units.code_block(text_table(rows, ["unit", "median accuracy", "Kendall tau vs 28 px",
                                                "CPU time vs 28 px", "MACs vs 28 px"]))
    if CEILING in done and reference:
        lines += ["", f"The ceiling, 28 px against itself with another seed ({CEILING}), is the tau a lower "
                      "resolution cannot beat by more than chance."]
    if done:
        lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


def benchmark() -> units.Benchmark:
    return units.Benchmark("resolution_fidelity", VERSION, UNITS, run, check, description=__doc__.split("\n\n")[0])


def main() -> None:
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))


if __name__ == "__main__":
    main()
