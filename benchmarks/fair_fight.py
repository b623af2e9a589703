"""A fair fight at the user's resolution: the front of a search over `mobile` (which chooses where
to downsample, so it reaches below the cheapest MobileNet at 28 px) against MobileNetV3-Small and
MobileNetV2 at four widths, each as published and as adapted to the input by the one written rule
(`Arch.adapted_to`), all trained with one recipe and two seeds, then timed together (issue 34).

Units (results/fair_fight/<unit>.json), each under an hour of one CPU:
- `search-seed<S>`: `eas search` for a fixed CPU budget (the README demo's settings, seed S); its
  Pareto set and every trial; both families at the four widths (as published and adapted, those
  under the MACs limit) trained first in the study as its candidates are (`--baselines`, outside the
  budget), so the unit also says how long the search took to beat them at its own fidelity.
- `front-seed<S>`: the `top` most accurate members of that search's Pareto set, retrained with the
  recipe (`train_epochs` x `train_subset` images, augmentation, label smoothing) and both seeds.
- `<family>` and `<family>-adapted`: the family's four widths, trained alike.
- `timing`: every trained network's latency and inference energy, measured together in ONNX
  Runtime (1 thread, batch 1) in one process, so front and baselines meet the same machine.

The table compares each seed's front with the baselines (the comparison `eas verify --baselines`
makes): hypervolume ratio to the better family (published or adapted), accuracy gain at equal
latency and latency ratio at equal accuracy. Goals (issue 34): hypervolume >= 1.05x, and +1 point
at equal latency or <= 0.6x latency at equal accuracy.

    python benchmarks/fair_fight.py --list
    setsid -w nice -n 19 python benchmarks/fair_fight.py --next
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import units
from search_efficiency import space_hash

VERSION = 1
CONFIG = {
    "space": "mobile", "space_hash": "a4f28bad3749b496", "data": "fashion-mnist", "max_macs": "20M",
    "search_cpu_seconds": 3000, "search_epochs": 1.0, "search_subset": 9000, "threads": 1, "top": 4,
    "train_epochs": 2.0, "train_subset": 20000, "augment": "auto", "label_smoothing": 0.1, "train_seeds": [1, 2],
    "alphas": [0.35, 0.5, 0.75, 1.0],
}
SEARCH_SEEDS = (0, 1)
FAMILIES = ("mobilenet_v3_small", "mobilenet_v2")
GOALS = {"hypervolume_ratio": 1.05, "gain_at_latency": 0.01, "latency_ratio_at_accuracy": 0.6}


def all_units() -> list[units.Unit]:
    """The first seed's whole comparison before the second seed's search."""
    def search(seed: int) -> units.Unit:
        return units.Unit(f"search-seed{seed}", {**CONFIG, "kind": "search", "seed": seed})

    def front(seed: int) -> units.Unit:
        return units.Unit(f"front-seed{seed}", {**CONFIG, "kind": "front", "seed": seed}, needs=(f"search-seed{seed}",))

    baselines = [units.Unit(family + ("-adapted" if adapted else ""),
                            {**CONFIG, "kind": "baselines", "family": family, "adapted": adapted})
                 for family in FAMILIES for adapted in (False, True)]
    trained = [*baselines, *(front(seed) for seed in SEARCH_SEEDS)]
    return [search(0), front(0), *baselines, search(1), front(1),
            units.Unit("timing", {**CONFIG, "kind": "timing"}, needs=tuple(u.name for u in trained))]


# -- running a unit ------------------------------------------------------------------------------

def run(unit: units.Unit) -> tuple[dict, object]:
    settings = unit.settings
    if space_hash(settings["space"]) != settings["space_hash"]:
        raise SystemExit(f"space {settings['space']!r} changed since this configuration was made: freeze its "
                         f"definition {settings['space_hash']} under benchmarks/spaces/ and measure that")
    return {"search": search, "front": train_front, "baselines": train_family, "timing": timing}[
        settings["kind"]](unit)


def search(unit: units.Unit) -> tuple[dict, object]:
    settings = unit.settings
    baselines = [arg for family in FAMILIES
                 for arg in ("--baselines", f"{family}@{','.join(map(str, settings['alphas']))}")]
    return searched(settings, ["--max-macs", settings["max_macs"], *baselines])


def searched(settings: dict, options: list[str]) -> tuple[dict, object]:
    """`eas search` with the settings' budget, fidelity and seed and these `options` (limits,
    objectives, baselines): its Pareto set, time to beat its baselines, and every trial."""
    from eas.reports.front import pareto_front
    from eas.reports.time_to_beat import time_to_beat
    from eas.study.reader import load_study

    with tempfile.TemporaryDirectory() as folder:
        url, name = f"sqlite:///{folder}/fight.db", f"fight-seed{settings['seed']}"
        command = [sys.executable, "-m", "eas", "search", "--space", settings["space"], "--data", settings["data"],
                   "--cpu-budget", f"{settings['search_cpu_seconds']}s", "--seed", str(settings["seed"]),
                   "--study", name, "--storage", url, "--quiet", "--threads", str(settings["threads"]),
                   "--trial-timeout", "24h", "--epochs", str(settings["search_epochs"]),
                   "--subset", str(settings["search_subset"]), *options]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "EAS_STUDIES_DIR": folder})
        if done.returncode != 0:
            raise SystemExit(f"eas search failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        study = load_study(url, name)
    front = sorted(pareto_front(study.records, study.objectives), key=lambda r: -r.value("accuracy"))
    trials = [{"number": r.number, "state": r.state, "genome": r.genome,
               "metrics": {k: r.metrics.get(k) for k in ("accuracy", "macs", "params", "latency_ms", "sram_bytes",
                                                         "flash_bytes", "inference_energy_j_per_1k", "status")}}
              for r in study.records]
    figures = {"objectives": list(study.objectives), "reference": study.reference, "trials": len(study.records),
               "front": [{"trial": r.number, "genome": r.genome, "search_accuracy": r.value("accuracy"),
                          "macs": r.metrics.get("macs")} for r in front],
               "time_to_beat": [b.to_dict() for b in time_to_beat(study.records, study.baselines)]}
    baselines = {name: {"metrics": b.metrics, "started": b.started, "finished": b.finished}
                 for name, b in study.baselines.items()}
    return figures, {"trials": trials, "baselines": baselines}


def _train(models: list[tuple[str, str]], settings: dict) -> tuple[dict, object]:
    """Each (label, genome) trained from scratch with the recipe and every training seed."""
    import torch

    from eas.arch.genome import Arch
    from eas.data.datasets import load_dataset
    from eas.nas.verify import Model, VerifyPlan, train_once, verified_stats
    from eas.training.proxy import Fidelity
    from eas.training.recipe import Recipe

    torch.set_num_threads(settings["threads"])
    task = load_dataset(settings["data"], seed=0)
    fidelity = Fidelity(epochs=settings["train_epochs"], subset=settings["train_subset"])
    steps = fidelity.total_steps(len(task.train_y))
    plan = VerifyPlan(recipe=Recipe.parse(settings["augment"], settings["label_smoothing"], 0.0, settings["data"]),
                      device="cpu")
    trained, raw = [], []
    for label, genome in models:
        runs = [train_once(Model(Arch.decode(genome), fidelity, name=label), task, seed, steps,
                           fidelity.batch_size, plan, "auto") for seed in settings["train_seeds"]]
        trained.append({"label": label, "genome": genome, **verified_stats(runs)})
        raw.append({"label": label, "runs": runs})
        print(f"  {label}: {trained[-1]['verified_accuracy']:.2%}", flush=True)
    return {"steps": steps, "models": trained}, {"runs": raw}


def train_front(unit: units.Unit) -> tuple[dict, object]:
    found = unit.inputs[f"search-seed{unit.settings['seed']}"]["figures"]["front"][:unit.settings["top"]]
    figures, raw = _train([(f"trial {m['trial']}", m["genome"]) for m in found], unit.settings)
    for model, member in zip(figures["models"], found, strict=True):
        model.update(trial=member["trial"], search_accuracy=member["search_accuracy"])
    return figures, raw


def train_family(unit: units.Unit) -> tuple[dict, object]:
    from eas.data.datasets import load_dataset
    from eas.nas.baselines import ADAPTED, baseline_arch

    settings = unit.settings
    shape = load_dataset(settings["data"], seed=0).input_shape
    names = [f"{settings['family']}@{alpha}" + (ADAPTED if settings["adapted"] else "") for alpha in settings["alphas"]]
    return _train([(name, baseline_arch(name, shape).encode()) for name in names], settings)


def timing(unit: units.Unit) -> tuple[dict, object]:
    """Every trained network timed in one process, one after another, as verify does."""
    from eas.arch.genome import Arch
    from eas.data.datasets import load_dataset
    from eas.measure.runtime import Runtime
    from eas.nas.candidate import Candidate, counted_metrics
    from eas.training.proxy import Fidelity

    task = load_dataset(unit.settings["data"], seed=0)
    genomes = sorted({m["genome"] for result in unit.inputs.values() for m in result["figures"].get("models", [])})
    costs = {}
    for genome in genomes:
        timed = Candidate(Arch.decode(genome), task, Fidelity(), "cpu", 0, "auto", Runtime("onnxruntime", 1, 32))
        timed.measure_latency()
        costs[genome] = counted_metrics(timed.arch, task) | {
            k: timed.metrics.get(k) for k in ("latency_ms", "inference_energy_j_per_1k", "energy_source",
                                              "latency_runtime")}
    return {"costs": costs}, None


def check(result: dict) -> str | None:
    """An impossible figure of a stored result (a hand edit, a truncation), or None."""
    figures, kind = result["figures"], result["settings"].get("kind")
    try:
        if kind == "search":
            beaten_ok = all(isinstance(b["baseline"], str) and (b["accuracy"] is None or units.fraction(b["accuracy"]))
                            and isinstance(b["seconds"], (int, float)) for b in figures["time_to_beat"])
            return None if all(isinstance(m["genome"], str) and units.fraction(m["search_accuracy"])
                               for m in figures["front"]) and isinstance(figures["reference"], dict) and beaten_ok \
                else "a front member without a genome or an accuracy in [0, 1], or a malformed time to beat"
        if kind in ("front", "baselines"):
            return None if figures["models"] and all(
                isinstance(m["genome"], str) and units.fraction(m["verified_accuracy"])
                and all(units.fraction(v) for v in m["verified_interval"]) for m in figures["models"]) \
                else "a model without a genome or with an accuracy outside [0, 1]"
        if kind == "timing":
            return None if all(isinstance(c["macs"], int) and isinstance(c["latency_ms"], float) and c["latency_ms"] > 0
                               for c in figures["costs"].values()) else "a cost that is not a count or a time"
    except (KeyError, TypeError, AttributeError) as error:
        return f"figures malformed ({type(error).__name__}: {str(error)[:60]})"
    return f"unknown kind {str(kind)[:20]!r}"


# -- the table -----------------------------------------------------------------------------------

def comparison(done: dict, seed: int) -> dict | None:
    """The seed's retrained front against every family, as `eas verify --baselines` compares them."""
    from eas.nas.baselines import compare, family_of

    needed = [f"search-seed{seed}", f"front-seed{seed}", "timing",
              *(f + suffix for f in FAMILIES for suffix in ("", "-adapted"))]
    if any(name not in done for name in needed):
        return None
    costs = done["timing"]["figures"]["costs"]
    search = done[f"search-seed{seed}"]["figures"]
    members = [{**m, "costs": costs[m["genome"]]} for m in done[f"front-seed{seed}"]["figures"]["models"]]
    baselines = [{**m, "name": m["label"], "family": family_of(m["label"]), "costs": costs[m["genome"]]}
                 for f in FAMILIES for suffix in ("", "-adapted") for m in done[f + suffix]["figures"]["models"]]
    return {"rows": members, "baseline_rows": baselines,
            **compare(members, baselines, tuple(search["objectives"]), search["reference"])}


def table(results=units.RESULTS) -> str:
    """The docs' table (benchmarks.tables), from the result files."""
    from eas.units import table as text_table

    done, problems = units.load_results(benchmark(), results)
    c = CONFIG
    lines = [f"`fair_fight.py`: `{c['space']}` (definition {c['space_hash']}) on {c['data']} at 28 px, searched "
             f"under {c['max_macs']} MACs for {c['search_cpu_seconds']:,} CPU seconds per seed; the top {c['top']} "
             f"of each front and MobileNetV3-Small / MobileNetV2 at widths {', '.join(map(str, c['alphas']))} (as "
             f"published and adapted) trained {c['train_epochs']:g} epochs x {c['train_subset']:,} images, augment "
             f"{c['augment']}, label smoothing {c['label_smoothing']}, seeds {c['train_seeds']}; timed together in "
             f"ONNX Runtime, 1 thread, batch 1. **{len(done)} of {len(benchmark().units)} units done.**", ""]
    rows = []
    for unit in benchmark().units:
        if unit.settings["kind"] in ("front", "baselines") and unit.name in done:
            costs = done["timing"]["figures"]["costs"] if "timing" in done else {}
            for m in done[unit.name]["figures"]["models"]:
                cost = costs.get(m["genome"], {})
                low, high = m["verified_interval"]
                rows.append([unit.name, m["label"], f"{m['verified_accuracy']:.2%}", f"{low:.1%}-{high:.1%}",
                             f"{m['seed_spread']:.1%}" if m.get("seed_spread") is not None else "-",
                             f"{cost['macs']:,}" if "macs" in cost else "-",
                             f"{cost['latency_ms']:.3f}" if isinstance(cost.get("latency_ms"), float) else "-"])
    if rows:
        lines += units.code_block(text_table(rows, ["unit", "model", "verified", "95% interval", "seed spread",
                                                    "MACs", "latency ms"]))
    for seed in SEARCH_SEEDS:
        compared = comparison(done, seed)
        if compared is None:
            continue
        summary, volumes = compared["summary"], compared["hypervolume"]
        ratio, gain, latency = (summary.get(k) for k in GOALS)
        met = [ratio is not None and ratio >= GOALS["hypervolume_ratio"],
               (gain is not None and gain >= GOALS["gain_at_latency"])
               or (latency is not None and latency <= GOALS["latency_ratio_at_accuracy"])]
        best = max(volumes["families"], key=volumes["families"].get)
        lines += ["", f"Seed {seed}: hypervolume front {volumes['front']:.4f} against the better family ({best}) "
                      f"{volumes['families'][best]:.4f}: " + (f"{ratio:.2f}x" if ratio is not None else "n/a")
                  + "; at equal latency " + (f"{gain * 100:+.1f} points" if gain is not None else "n/a")
                  + "; at equal accuracy " + (f"{latency:.2f}x the latency" if latency is not None else "n/a")
                  + f". Goals: hypervolume {'met' if met[0] else 'NOT met'}, latency/accuracy "
                  f"{'met' if met[1] else 'NOT met'}."]
    lines += _time_to_beat_lines(done)
    if done:
        lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


def _trials(count: int) -> str:
    return f"{count} trial" + ("" if count == 1 else "s")


def _time_to_beat_lines(done: dict) -> list[str]:
    """Per seed: how long the search took to beat each baseline, at the search's own fidelity."""
    from eas.units import format_duration
    from eas.units import table as text_table

    rows = []
    for seed in SEARCH_SEEDS:
        for b in done.get(f"search-seed{seed}", {}).get("figures", {}).get("time_to_beat", []):
            beaten = b["trial"] is not None
            rows.append([str(seed), b["baseline"], f"{b['accuracy']:.2%}" if b["accuracy"] is not None else b["status"],
                         f"{b['cost_value']:.3g} ms" if b["cost"] == "latency_ms" and b["cost_value"] else "-",
                         f"trial {b['trial']}" if beaten else "not beaten",
                         f"{format_duration(b['seconds'])}"
                         + (f" ({format_duration(b['cpu_seconds'])} CPU)" if b.get("cpu_seconds") else "")
                         + f", {_trials(b['trials'])}" if beaten else
                         f"in {format_duration(b['seconds'])}, {_trials(b['trials'])}"])
    if not rows:
        return []
    return ["", "Time to beat each baseline at the search's own fidelity (trained in the study as its candidates "
                "are; beaten = a searched network more accurate at no more latency, search time counted):", "",
            *units.code_block(text_table(rows, ["seed", "baseline", "search accuracy", "latency", "beaten by",
                                                "after"]))]


def benchmark() -> units.Benchmark:
    return units.Benchmark("fair_fight", VERSION, all_units(), run, check, description=__doc__.split("\n\n")[0])


def main() -> None:
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))


if __name__ == "__main__":
    main()
