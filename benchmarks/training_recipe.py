"""What does `eas train`'s recipe (augmentation suited to the data, label smoothing 0.1, EMA of
the weights at 0.999) give at a real training length? The README demo's knee trained 10 epochs
on all of Fashion-MNIST's training split, with and without the recipe, 2 seeds each: one unit
per run (results/training_recipe/<recipe>-seed<N>.json), each about 50 CPU minutes on 2 cores
(the table gives each run's wall and CPU minutes).

    python benchmarks/training_recipe.py --list
    setsid -w nice -n 19 python benchmarks/training_recipe.py --next
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import units

from eas.units import table as text_table

VERSION = 1
WORK = units.ROOT / "benchmarks" / "work" / "training_recipe"
# The knee of ./scripts/search-demo.sh (mobile, Fashion-MNIST, 3 minutes, <= 20 M MACs) as run on
# 2026-12-06 (trial 14 of 16): 84.9% at its full fidelity (1 epoch x 9,000 images), 10.4 M MACs.
KNEE = ("stem_c16_k3_s1_relu6-ir_r1_k3_s1_e1_c16_relu6-ir_r1_k3_s1_e3_c16_se_relu6-ir_r1_k7_s2_e4_c32_hswish-"
        "ir_r1_k5_s2_e6_c48_se_hswish-ir_r1_k7_s2_e4_c160_se_hswish-ir_r1_k7_s1_e3_c240_se_relu6-head_c0_f0_relu6_d0.2")
RECIPES = {"without": {"augment": "none", "label_smoothing": 0.0, "ema": 0.0},
           "with": {"augment": "auto", "label_smoothing": 0.1, "ema": 0.999}}
CONFIG = {"genome": KNEE, "data": "fashion-mnist", "epochs": 10, "batch_size": 128, "lr": 3e-3,
          "weight_decay": 0.05, "threads": 2}
SEEDS = (0, 1)
UNITS = [units.Unit(f"{recipe}-seed{seed}", {**CONFIG, "recipe": recipe, **RECIPES[recipe], "seed": seed})
         for seed in SEEDS for recipe in RECIPES]


def run(unit: units.Unit) -> tuple[dict, object]:
    import torch

    from eas.data.datasets import load_dataset
    from eas.training.full import TrainPlan, train_exported

    s = unit.settings
    torch.set_num_threads(s["threads"])
    task = load_dataset(s["data"])
    folder = WORK / unit.name  # the run's checkpoints: run again in the same session, it resumes
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "arch.json").write_text(json.dumps({"genome": s["genome"], "task": {
        "input_shape": list(task.input_shape), "num_classes": task.num_classes, "data": s["data"]}}))
    plan = TrainPlan(epochs=s["epochs"], batch_size=s["batch_size"], lr=s["lr"], weight_decay=s["weight_decay"],
                     seed=s["seed"], augment=s["augment"], label_smoothing=s["label_smoothing"], ema=s["ema"])
    report = train_exported(folder, task, plan, "cpu", show_progress=True)
    figures = {key: report[key] for key in ("test_accuracy", "train_seconds", "energy_kwh", "energy_source",
                                            "best_epoch", "epochs_run")}
    return figures, {"report": report}


def check(result: dict) -> str | None:
    accuracy = result["figures"].get("test_accuracy")
    if not (units.finite(accuracy) and 0 <= accuracy <= 1):
        return f"test_accuracy {str(accuracy)[:20]} is not in [0, 1]"
    return None


def benchmark() -> units.Benchmark:
    return units.Benchmark("training_recipe", VERSION, UNITS, run, check, description=__doc__.split("\n\n")[0])


def minutes(result: dict) -> str:
    """A run's training time in wall minutes, and in brackets the CPU minutes of the unit's process:
    the wall time depends on what else ran beside it."""
    wall, cpu = result["figures"].get("train_seconds"), result["load"].get("own_cpu_seconds")
    if not units.finite(wall):
        return "?"
    return f"{wall / 60:.0f}" + (f" ({cpu / 60:.0f})" if units.finite(cpu) else "")


def table(results: Path = units.RESULTS) -> str:
    """The docs' table (benchmarks.tables), from the result files."""
    done, problems = units.load_results(benchmark(), results)
    lines = [f"`training_recipe.py`: the README demo's knee (`{KNEE}`), {CONFIG['epochs']} epochs on all of "
             f"Fashion-MNIST's training split, batch {CONFIG['batch_size']}, AdamW lr {CONFIG['lr']:g}, "
             f"{CONFIG['threads']} threads. **{len(done)} of {len(UNITS)} units done.**", ""]
    rows = []
    medians = {}
    for recipe, parts in RECIPES.items():
        ran = [done[u.name] for u in UNITS if u.settings["recipe"] == recipe and u.name in done]
        accuracies = [r["figures"]["test_accuracy"] for r in ran]
        medians[recipe] = statistics.median(accuracies) if accuracies else None
        words = ", ".join(f"{k} {v}" for k, v in parts.items())
        rows.append([recipe, words, f"{len(ran)} of {len(SEEDS)}",
                     " / ".join(f"{a:.2%}" for a in accuracies) or "-",
                     f"{medians[recipe]:.2%}" if accuracies else "-",
                     " / ".join(minutes(r) for r in ran) or "-"])
    lines += units.code_block(text_table(rows, ["recipe", "settings", "seeds", "test accuracy per seed",
                                                "median", "wall (CPU) minutes"]))
    if all(medians.values()):
        gain = 100 * (medians["with"] - medians["without"])
        lines += ["", f"The recipe changes the median test accuracy by {gain:+.2f} points."]
    if done:  # wall time depends on what else ran; CPU time on the machine's pace
        lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))
