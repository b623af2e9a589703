"""Does augmenting the search's proxy training change how its rungs rank candidates?

Random candidates of a space (under the MACs limit) are trained through the search's rung
ladder exactly as a search trains them (one run per candidate, continued segment by segment,
validated after each rung), once without augmentation and once with the data's `auto` policy
(eas.training.recipe: whole batches augmented on the training device, seeded). Reported per
policy: Kendall's tau of each lower rung with the top rung (can the lowest rung rank?), the
accuracies, and the tau between the two policies' top-rung accuracies (do they pick the same
networks?). Accuracy-based: the numbers do not depend on the machine's load.

    python benchmarks/augment_rungs.py [--space mobile] [--candidates 16] [--max-macs 20M]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import optuna

from eas.arch.space import load_space
from eas.data.datasets import load_dataset
from eas.nas.candidate import Candidate, counted_metrics
from eas.nas.rungs import Ladder
from eas.pareto import kendall_tau
from eas.training.proxy import Fidelity
from eas.training.recipe import Recipe
from eas.units import parse_count, table


def candidates(space, task, count: int, max_macs: float, seed: int) -> list:
    """`count` distinct random architectures of the space within the MACs limit."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    found, seen = [], set()
    while len(found) < count:
        arch = space.sample(study.ask())
        if arch.encode() not in seen and counted_metrics(arch, task, 128)["macs"] <= max_macs:
            seen.add(arch.encode())
            found.append(arch)
    return found


def rung_accuracies(arch, task, fidelity, ladder, recipe, seed) -> list[float]:
    candidate = Candidate(arch, task, fidelity, "cpu", seed, "estimated")
    accuracies, done = [], 0
    for segment, steps in enumerate(ladder.steps):
        candidate.train_segment(steps - done, segment=segment, recipe=recipe)
        done = steps
        accuracies.append(candidate.validate()["accuracy"])
    return accuracies


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", default="mobile")
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--max-macs", default="20M")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--subset", type=int, default=9000)
    parser.add_argument("--rungs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    task = load_dataset(args.data, seed=args.seed)
    space = load_space(args.space).for_task(task.input_shape)
    fidelity = Fidelity(epochs=args.epochs, subset=args.subset)
    ladder = Ladder.make(fidelity.total_steps(len(task.train_y)), args.rungs, 3)
    archs = candidates(space, task, args.candidates, parse_count(args.max_macs, "--max-macs"), args.seed)
    policies = {"none": Recipe(), "auto": Recipe.parse("auto", 0.0, 0.0, args.data)}
    results = {name: [] for name in policies}
    for index, arch in enumerate(archs):
        for name, recipe in policies.items():
            results[name].append(rung_accuracies(arch, task, fidelity, ladder, recipe, args.seed))
        print(f"candidate {index + 1}/{len(archs)}: " + ", ".join(
            f"{name} {' -> '.join(f'{a:.3f}' for a in results[name][-1])}" for name in policies), flush=True)
    rows = []
    for name, recipe in policies.items():
        values = np.array(results[name])
        taus = [f"{kendall_tau(values[:, rung], values[:, -1]):+.2f}" for rung in range(ladder.top)]
        rows.append([f"{name} ({recipe.augment})", *taus, f"{statistics.median(values[:, -1]):.3f}",
                     f"{values[:, -1].min():.3f}-{values[:, -1].max():.3f}"])
    top = {name: np.array(results[name])[:, -1] for name in policies}
    print(f"\n{len(archs)} random {args.space} candidates <= {args.max_macs} MACs, {args.data}, rungs at "
          f"{ladder.steps} steps (batch {fidelity.batch_size}), seed {args.seed}")
    print(table(rows, ["augmentation", *(f"tau rung {r} vs top" for r in range(ladder.top)),
                       "top-rung accuracy (median)", "range"]))
    print(f"\ntau between the two policies' top-rung accuracies: {kendall_tau(top['none'], top['auto']):+.2f}")


if __name__ == "__main__":
    main()
