"""One-shot search vs EAS's per-candidate multi-fidelity search, at the same wall time.

Pipeline A: `eas search` (TPE, 3 rungs, every candidate trained from scratch) for --budget.
Pipeline B: `eas supernet train` for --supernet-share of the budget, then `eas search --supernet`
for the rest; and the same pipeline in a third of the budget (the goal asks for at most a third
of the per-candidate search's energy, which at equal wall time on one machine no pipeline can
meet). Then the 4 most accurate members of each front are retrained identically by `eas verify`
(2 epochs of 20,000 images, augmentation suited to the data, label smoothing 0.1: the
front-vs-hand-designed recipe) — the one-shot front both from scratch and fine-tuned from its
inherited weights — and each retrained front's hypervolume (accuracy, MACs, params; the reference
point of pipeline A's study) is compared, with the energy of each whole pipeline and the
candidates each evaluated. Then a second search on the same supernet under a tighter MACs limit
is timed, and the supernet's trust (Kendall tau over 16 random sub-networks trained alone) is
measured outside the pipelines' budgets.

Default: the tiny space on Fashion-MNIST, 20 minutes per pipeline (about 60 minutes in all on 2
CPU cores, with the third-time pipeline, the retraining and the trust measurement). Everything
runs through the CLI; energy is whatever the machine's meter gives (here: estimated from CPU time).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from knee import eas

from eas.pareto import hypervolume_of_points, minimised_values
from eas.reports.front import footprint
from eas.study.reader import StudyReader
from eas.units import format_duration, parse_seconds, table

OBJECTIVES = ("accuracy", "macs", "params")
RECIPE = ("--augment", "auto", "--label-smoothing", "0.1", "--seeds", "1", "--baselines", "none")


def timed(*args: str, cwd: Path) -> tuple[str, float]:
    started = time.perf_counter()
    out = eas(*args, cwd=cwd)
    return out, time.perf_counter() - started


def study_cost(work: Path, name: str) -> dict:
    loaded = StudyReader(f"sqlite:///{work / 'studies' / name}.db", name).loaded()
    spent = footprint(loaded.records, loaded.objectives, loaded.reference)
    complete = [r for r in loaded.records if r.state == "complete"]
    return {"energy_j": spent["energy_j"], "energy_source": spent["energy_source"], "candidates": len(complete),
            "reference": loaded.reference}


def verified(work: Path, name: str, options, init: str = "scratch") -> dict:
    out, seconds = timed("verify", name, "--top", str(options.top), "--epochs", options.epochs, "--subset",
                         options.subset, "--init", init, *RECIPE, "--json", cwd=work)
    return {**json.loads(out), "wall_seconds": seconds}


def retrained_hypervolume(result: dict, reference: dict) -> float:
    points = [{"accuracy": m["verified_accuracy"], "macs": m["costs"]["macs"], "params": m["costs"]["params"]}
              for m in result["members"]]
    return hypervolume_of_points(minimised_values(points, OBJECTIVES, reference)) if points else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="20m", help="Wall time of each pipeline.")
    parser.add_argument("--supernet-share", type=float, default=0.67, help="Of pipeline B's budget.")
    parser.add_argument("--space", default="tiny")
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--max-macs", default=None, help="Limit of both searches (default: none).")
    parser.add_argument("--second-max-macs", default="300k", help="The tighter limit of the second search.")
    parser.add_argument("--second-budget", default="2m")
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument("--epochs", default="2")
    parser.add_argument("--subset", default="20000")
    parser.add_argument("--trust", default="16", help="Sub-networks trained alone to measure trust.")
    parser.add_argument("--work", default="benchmark-one-shot")
    options = parser.parse_args()
    work = Path(options.work).resolve()
    (work / "studies").mkdir(parents=True, exist_ok=True)
    budget = parse_seconds(options.budget, "--budget")
    limit = ("--max-macs", options.max_macs) if options.max_macs else ()
    common = ("--space", options.space, "--data", options.data, *limit)

    _, a_wall = timed("search", *common, "--budget", f"{budget:.0f}s", "--study", "per-candidate", "--quiet",
                      cwd=work)
    b = one_shot_pipeline(work, common, budget, options.supernet_share, "one-shot")
    b3 = one_shot_pipeline(work, common, budget / 3, options.supernet_share, "one-shot-third")
    _, second_wall = timed("search", *common[:4], "--max-macs", options.second_max_macs, "--supernet",
                           "supernet-one-shot", "--budget", options.second_budget, "--study", "one-shot-second",
                           "--quiet", cwd=work)
    a = {**study_cost(work, "per-candidate"), "wall": a_wall, "supernet_wall": None}
    second = study_cost(work, "one-shot-second")
    verify = {"a": verified(work, "per-candidate", options), "b": verified(work, "one-shot", options),
              "b_ft": verified(work, "one-shot", options, init="inherited"),
              "b3": verified(work, "one-shot-third", options)}
    _, trust_wall = timed("supernet", "trust", "supernet-one-shot", "--samples", options.trust, "--quiet", cwd=work)
    trust = json.loads(eas("supernet", "show", "supernet-one-shot", "--json", cwd=work))["trust"]

    reference = a["reference"]
    volumes = {k: retrained_hypervolume(v, reference) for k, v in verify.items()}
    rows = [row("per-candidate (TPE, 3 rungs)", a, a, volumes["a"], volumes["a"], verify["a"]),
            row("one-shot, same time", b, a, volumes["b"], volumes["a"], verify["b"]),
            row("  its front fine-tuned from inherited", None, a, volumes["b_ft"], volumes["a"], verify["b_ft"]),
            row("one-shot, 1/3 of the time", b3, a, volumes["b3"], volumes["a"], verify["b3"])]
    print(f"space {options.space}, data {options.data}, budget {options.budget} per pipeline (the last: a third); "
          f"retrained: top {options.top} of each front, {verify['a']['steps']} steps on "
          f"{verify['a']['train_images']:,} images, recipe {verify['a']['recipe']}; energy {a['energy_source']}")
    print(table(rows, ["pipeline", "wall", "supernet", "candidates", "energy Wh", "energy ratio",
                       "HV retrained", "HV ratio", "mean acc retrained"]))
    for label, key, run in (("same time", "b", b), ("1/3 of the time", "b3", b3)):
        met = volumes[key] >= volumes["a"] and run["energy_j"] <= a["energy_j"] / 3
        print(f"goal, one-shot at {label} (HV >= per-candidate at <= 1/3 of its energy): {'met' if met else 'NOT met'}")
    print(f"second search on the same supernet (--max-macs {options.second_max_macs}, {options.second_budget}): "
          f"{format_duration(second_wall)} wall, {second['candidates']:,} candidates, "
          f"{second['energy_j'] / 3.6e3:.3f} Wh")
    tau = trust.get("kendall_tau") if trust else None
    print(f"trust: Kendall tau {tau if tau is None else f'{tau:+.2f}'} over {trust.get('n') if trust else 0} "
          f"sub-networks (inherited vs trained alone at the search's full fidelity), measured in "
          f"{format_duration(trust_wall)} outside the budgets; goal >= 0.6: "
          f"{'met' if tau is not None and tau >= 0.6 else 'NOT met'}")
    print("search accuracy -> retrained (scratch / fine-tuned), one-shot front:")
    for s, f in zip(verify["b"]["members"], verify["b_ft"]["members"], strict=True):
        print(f"  trial {s['trial']}: {s['search_accuracy']:.2%} inherited -> {s['verified_accuracy']:.2%} / "
              f"{f['verified_accuracy']:.2%}  {s['genome']}")
    (work / "result.json").write_text(json.dumps({
        "pipelines": {"a": a, "b": b, "b3": b3}, "second": {**second, "wall": second_wall},
        "hypervolume": volumes, "verify": verify, "trust": trust, "trust_wall": trust_wall}, indent=1, default=str))


def one_shot_pipeline(work: Path, common: tuple, budget: float, share: float, name: str) -> dict:
    """Supernet training for `share` of the budget, then a one-shot search for what is left."""
    folder = f"supernet-{name}"
    _, train_wall = timed("supernet", "train", *common[:4], "--budget", f"{budget * share:.0f}s", "--out", folder,
                          "--samples", "0", "--restart", "--quiet", cwd=work)
    _, search_wall = timed("search", *common, "--supernet", folder, "--budget",
                           f"{max(budget - train_wall, 30):.0f}s", "--study", name, "--quiet", cwd=work)
    trained = json.loads(eas("supernet", "show", folder, "--json", cwd=work))["trained"]
    cost = study_cost(work, name)
    return {**cost, "energy_j": cost["energy_j"] + trained["energy_j"], "wall": train_wall + search_wall,
            "supernet_wall": train_wall, "supernet_steps": trained["steps"]}


def row(label: str, run: dict | None, a: dict, volume: float, a_volume: float, verify: dict) -> list[str]:
    accuracy = f"{np.mean([m['verified_accuracy'] for m in verify['members']]):.2%}"
    ratio = f"{volume / max(a_volume, 1e-12):.2f}x"
    if run is None:
        return [label, "", "", "", "", "", f"{volume:.4f}", ratio, accuracy]
    return [label, format_duration(run["wall"]),
            format_duration(run["supernet_wall"]) if run["supernet_wall"] else "-", f"{run['candidates']:,}",
            f"{run['energy_j'] / 3.6e3:.2f}", f"{run['energy_j'] / a['energy_j']:.2f}x", f"{volume:.4f}", ratio,
            accuracy]


if __name__ == "__main__":
    main()
