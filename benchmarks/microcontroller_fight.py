"""A microcontroller-sized search against MobileNets scaled to the same memory (issue 37): a 28-px
search of `mobile` under 64 kB of int8 SRAM and 256 kB of flash, its front against MobileNetV2
and MobileNetV3-Small scaled in width and resolution (as MCUNet scales MobileNetV2) to fit the
same limits, all trained with one recipe and two seeds.

Units (results/microcontroller_fight/<unit>.json), each under an hour of one CPU:
- `search-seed<S>`: `eas search --objectives accuracy,sram,flash --max-sram 64kB --max-flash 256kB`
  for a fixed CPU budget (seed S); its Pareto set and every trial.
- `front-seed<S>`: the `top` most accurate members of that set, retrained with the recipe.
- `scaled-<family>`: the family at every width multiplier and input resolution of the grid that
  fits both limits (counted as the search counts them; the network resizes its 28-px input itself,
  the stem's `i`, with the strides adapted to the resolution), trained alike; one unit a family,
  so that each stays under an hour.
- `timing`: every trained network's latency in ONNX Runtime (1 thread, batch 1), SRAM and flash,
  in one process.

    python benchmarks/microcontroller_fight.py --list
    setsid -w nice -n 19 python benchmarks/microcontroller_fight.py --next
"""

from __future__ import annotations

import fair_fight
import units
from search_efficiency import space_hash

VERSION = 1
CONFIG = {
    "space": "mobile", "space_hash": "a4f28bad3749b496", "data": "fashion-mnist", "max_sram": "64kB",
    "max_flash": "256kB", "objectives": "accuracy,sram,flash", "search_cpu_seconds": 3000, "search_epochs": 1.0,
    "search_subset": 9000, "threads": 1, "top": 4, "train_epochs": 2.0, "train_subset": 20000, "augment": "auto",
    "label_smoothing": 0.1, "train_seeds": [1, 2],
    "families": ["mobilenet_v2", "mobilenet_v3_small"], "alphas": [0.1, 0.15, 0.2, 0.25, 0.35, 0.5],
    "resolutions": [12, 16, 20, 24, 28],
}
SEARCH_SEEDS = (0, 1)
SCALED = [f"scaled-{family}" for family in CONFIG["families"]]  # one unit a family


def all_units() -> list[units.Unit]:
    def search(seed: int) -> units.Unit:
        return units.Unit(f"search-seed{seed}", {**CONFIG, "kind": "search", "seed": seed})

    def front(seed: int) -> units.Unit:
        return units.Unit(f"front-seed{seed}", {**CONFIG, "kind": "front", "seed": seed}, needs=(f"search-seed{seed}",))

    scaled = [units.Unit(name, {**CONFIG, "kind": "baselines", "family": family})
              for name, family in zip(SCALED, CONFIG["families"], strict=True)]
    trained = [*scaled, *(front(seed) for seed in SEARCH_SEEDS)]
    return [search(0), front(0), *scaled, search(1), front(1),
            units.Unit("timing", {**CONFIG, "kind": "timing"}, needs=tuple(u.name for u in trained))]


def scaled_arch(family: str, alpha: float, resolution: int, native: int):
    """The family at this width, seeing its input at `resolution` (resized by the network), its
    strides adapted to that resolution by the rule the spaces use."""
    from dataclasses import replace

    from eas.arch.genome import Arch
    from eas.arch.reference import reference

    arch = reference(f"{family}@{alpha}").adapted_to(resolution)
    return Arch(replace(arch.stem, resolution=0 if resolution == native else resolution), arch.stages, arch.head)


def fitting(settings: dict, task) -> list[tuple[str, object]]:
    """(label, arch) of every (family, width, resolution) of the grid within both limits; a width
    that rounds to the same network as a smaller one (channels are multiples of 8) is left out."""
    from eas.nas.candidate import counted_metrics
    from eas.objectives import Constraints

    limits = Constraints.parse(None, None, None, None, settings["max_sram"], settings["max_flash"])
    found = []
    for family in settings["families"]:
        for alpha in settings["alphas"]:
            for resolution in settings["resolutions"]:
                arch = scaled_arch(family, alpha, resolution, min(task.input_shape[1:]))
                fits = all(v <= 0 for v in limits.violations(counted_metrics(arch, task)).values())
                if fits and all(arch != known for _, known in found):
                    found.append((f"{family}@{alpha} at {resolution} px", arch))
    return found


# -- running a unit ------------------------------------------------------------------------------

def run(unit: units.Unit) -> tuple[dict, object]:
    settings = unit.settings
    if space_hash(settings["space"]) != settings["space_hash"]:
        raise SystemExit(f"space {settings['space']!r} changed since this configuration was made: freeze its "
                         f"definition {settings['space_hash']} under benchmarks/spaces/ and measure that")
    return {"search": search, "front": fair_fight.train_front, "baselines": train_scaled,
            "timing": fair_fight.timing}[settings["kind"]](unit)


def search(unit: units.Unit) -> tuple[dict, object]:
    s = unit.settings
    return fair_fight.searched(s, ["--objectives", s["objectives"], "--max-sram", s["max_sram"],
                                   "--max-flash", s["max_flash"]])


def train_scaled(unit: units.Unit) -> tuple[dict, object]:
    from eas.data.datasets import load_dataset

    task = load_dataset(unit.settings["data"], seed=0)
    family = unit.settings["family"]
    models = [(label, arch.encode()) for label, arch in fitting({**unit.settings, "families": [family]}, task)]
    if not models:
        raise SystemExit(f"no scaled {family} fits the limits: widen the grid")
    return fair_fight._train(models, unit.settings)


# -- the table -----------------------------------------------------------------------------------

def comparison(done: dict, seed: int) -> dict | None:
    """The seed's retrained front against the scaled families, in the search's objectives."""
    from eas.nas.baselines import compare

    if any(name not in done for name in (f"search-seed{seed}", f"front-seed{seed}", *SCALED, "timing")):
        return None
    costs = done["timing"]["figures"]["costs"]
    search_figures = done[f"search-seed{seed}"]["figures"]
    members = [{**m, "costs": costs[m["genome"]]} for m in done[f"front-seed{seed}"]["figures"]["models"]]
    baselines = [{**m, "name": m["label"], "family": m["label"].partition("@")[0], "costs": costs[m["genome"]]}
                 for name in SCALED for m in done[name]["figures"]["models"]]
    return compare(members, baselines, tuple(search_figures["objectives"]), search_figures["reference"])


def table(results=units.RESULTS) -> str:
    """The docs' table (benchmarks.tables), from the result files."""
    from eas.units import human_bytes
    from eas.units import table as text_table

    done, problems = units.load_results(benchmark(), results)
    c = CONFIG
    lines = [f"`microcontroller_fight.py`: `{c['space']}` (definition {c['space_hash']}) on {c['data']} at 28 px, "
             f"objectives {c['objectives']}, searched under {c['max_sram']} SRAM and {c['max_flash']} flash (int8, "
             f"counted) for {c['search_cpu_seconds']:,} CPU seconds per seed; the top {c['top']} of each front and "
             f"{' / '.join(c['families'])} at every width ({', '.join(map(str, c['alphas']))}) and resolution "
             f"({', '.join(map(str, c['resolutions']))} px) that fits both limits, trained "
             f"{c['train_epochs']:g} epochs x {c['train_subset']:,} images, augment {c['augment']}, label smoothing "
             f"{c['label_smoothing']}, seeds {c['train_seeds']}; timed together in ONNX Runtime, 1 thread, batch 1. "
             f"**{len(done)} of {len(benchmark().units)} units done.**", ""]
    costs = done["timing"]["figures"]["costs"] if "timing" in done else {}
    rows = []
    for unit in benchmark().units:
        if unit.settings["kind"] in ("front", "baselines") and unit.name in done:
            for m in done[unit.name]["figures"]["models"]:
                cost = costs.get(m["genome"], {})
                rows.append([unit.name, m["label"], f"{m['verified_accuracy']:.2%}",
                             human_bytes(cost["sram_bytes"]) if "sram_bytes" in cost else "-",
                             human_bytes(cost["flash_bytes"]) if "flash_bytes" in cost else "-",
                             f"{cost['macs']:,}" if "macs" in cost else "-",
                             f"{cost['latency_ms']:.3f}" if isinstance(cost.get("latency_ms"), float) else "-"])
    if rows:
        lines += units.code_block(text_table(rows, ["unit", "model", "verified", "SRAM", "flash", "MACs",
                                                    "latency ms"]))
    for seed in SEARCH_SEEDS:
        compared = comparison(done, seed)
        if compared is None:
            continue
        summary, volumes = compared["summary"], compared["hypervolume"]
        best = max(volumes["families"], key=volumes["families"].get)
        ratio, gain = summary.get("hypervolume_ratio"), summary.get("gain_at_latency")
        lines += ["", f"Seed {seed}: hypervolume (accuracy, SRAM, flash) front {volumes['front']:.4f} against the "
                      f"better family ({best}) {volumes['families'][best]:.4f}: "
                  + (f"{ratio:.2f}x" if ratio is not None else "n/a") + "; at equal latency "
                  + (f"{gain * 100:+.1f} points" if gain is not None else "n/a") + "."]
    if done:
        lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


def benchmark() -> units.Benchmark:
    return units.Benchmark("microcontroller_fight", VERSION, all_units(), run, fair_fight.check,
                           description=__doc__.split("\n\n")[0])


def main() -> None:
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))


if __name__ == "__main__":
    main()
