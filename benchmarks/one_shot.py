"""One-shot search vs EAS's per-candidate multi-fidelity search, at the same wall time.

Pipeline A: `eas search` (TPE, 3 rungs, every candidate trained from scratch) for --budget.
Pipeline B: `eas supernet train` for --supernet-share of the budget, then `eas search --supernet`
for the rest. Then the 4 most accurate members of each front are retrained identically by
`eas verify` (2 epochs of 20,000 images, augmentation suited to the data, label smoothing 0.1: the
front-vs-hand-designed recipe) — the one-shot front both from scratch and fine-tuned from its
inherited weights — and each retrained front's hypervolume (accuracy, MACs, params; the reference
point of pipeline A's study) is compared, with the energy of each whole pipeline and the
candidates each evaluated. Then a second search on the same supernet under a tighter MACs limit
is timed, and the supernet's trust (Kendall tau over 16 random sub-networks trained alone) is
measured outside both pipelines' budgets.

Default: the tiny space on Fashion-MNIST, 15 minutes per pipeline (about 50 minutes in all on 2
CPU cores); the issue's sizing is `--budget 40m`. Everything runs through the CLI; energy is
whatever the machine's meter gives (here: estimated from CPU time).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from knee import eas

from eas.reports.front import footprint
from eas.reports.pareto import hypervolume_of_points, minimised_values
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
    parser.add_argument("--budget", default="15m", help="Wall time of each pipeline.")
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
    supernet_seconds = budget * options.supernet_share
    _, b_train_wall = timed("supernet", "train", *common[:4], "--budget", f"{supernet_seconds:.0f}s", "--out",
                            "supernet", "--samples", "0", "--restart", "--quiet", cwd=work)
    _, b_search_wall = timed("search", *common, "--supernet", "supernet", "--budget",
                             f"{max(budget - b_train_wall, 30):.0f}s", "--study", "one-shot", "--quiet", cwd=work)
    description = json.loads(eas("supernet", "show", "supernet", "--json", cwd=work))
    _, second_wall = timed("search", *common[:4], "--max-macs", options.second_max_macs, "--supernet", "supernet",
                           "--budget", options.second_budget, "--study", "one-shot-second", "--quiet", cwd=work)

    a, b, second = (study_cost(work, n) for n in ("per-candidate", "one-shot", "one-shot-second"))
    supernet_j = description["trained"]["energy_j"]
    a_verify = verified(work, "per-candidate", options)
    b_verify = verified(work, "one-shot", options)
    b_finetuned = verified(work, "one-shot", options, init="inherited")
    _, trust_wall = timed("supernet", "trust", "supernet", "--samples", options.trust, "--quiet", cwd=work)
    trust = json.loads(eas("supernet", "show", "supernet", "--json", cwd=work))["trust"]

    reference = a["reference"]
    volumes = {"a": retrained_hypervolume(a_verify, reference), "b": retrained_hypervolume(b_verify, reference),
               "b_ft": retrained_hypervolume(b_finetuned, reference)}
    a_energy, b_energy = a["energy_j"], supernet_j + b["energy_j"]
    rows = [
        ["per-candidate (TPE, 3 rungs)", format_duration(a_wall), "-", f"{a['candidates']:,}",
         f"{a_energy / 3.6e3:.2f}", "1.00x", f"{volumes['a']:.4f}", "1.00x",
         f"{np.mean([m['verified_accuracy'] for m in a_verify['members']]):.2%}"],
        ["one-shot, retrained from scratch", format_duration(b_train_wall + b_search_wall),
         format_duration(b_train_wall), f"{b['candidates']:,}", f"{b_energy / 3.6e3:.2f}",
         f"{b_energy / a_energy:.2f}x", f"{volumes['b']:.4f}", f"{volumes['b'] / max(volumes['a'], 1e-12):.2f}x",
         f"{np.mean([m['verified_accuracy'] for m in b_verify['members']]):.2%}"],
        ["one-shot, fine-tuned from inherited", "(same)", "", "", "", "", f"{volumes['b_ft']:.4f}",
         f"{volumes['b_ft'] / max(volumes['a'], 1e-12):.2f}x",
         f"{np.mean([m['verified_accuracy'] for m in b_finetuned['members']]):.2%}"],
    ]
    print(f"space {options.space}, data {options.data}, budget {options.budget} per pipeline; retrained: top "
          f"{options.top} of each front, {a_verify['steps']} steps on {a_verify['train_images']:,} images, recipe "
          f"{a_verify['recipe']}; energy {a['energy_source']}")
    print(table(rows, ["pipeline", "wall", "supernet", "candidates", "search Wh", "energy ratio",
                       "HV retrained", "HV ratio", "mean acc retrained"]))
    goal = volumes["b"] >= volumes["a"] and b_energy <= a_energy / 3
    print(f"goal (HV >= per-candidate at <= 1/3 of its energy): {'met' if goal else 'NOT met'}")
    print(f"second search on the same supernet (--max-macs {options.second_max_macs}, {options.second_budget}): "
          f"{format_duration(second_wall)} wall, {second['candidates']:,} candidates, "
          f"{second['energy_j'] / 3.6e3:.3f} Wh")
    tau = trust.get("kendall_tau") if trust else None
    print(f"trust: Kendall tau {tau if tau is None else f'{tau:+.2f}'} over {trust.get('n') if trust else 0} "
          f"sub-networks (inherited vs trained alone at the search's full fidelity), measured in "
          f"{format_duration(trust_wall)} outside the budgets; goal >= 0.6: "
          f"{'met' if tau is not None and tau >= 0.6 else 'NOT met'}")
    print("search accuracy -> retrained (scratch / fine-tuned), one-shot front:")
    for s, f in zip(b_verify["members"], b_finetuned["members"], strict=True):
        print(f"  trial {s['trial']}: {s['search_accuracy']:.2%} inherited -> {s['verified_accuracy']:.2%} / "
              f"{f['verified_accuracy']:.2%}  {s['genome']}")
    (work / "result.json").write_text(json.dumps({
        "walls": {"a": a_wall, "b_train": b_train_wall, "b_search": b_search_wall, "second": second_wall,
                  "trust": trust_wall},
        "energy_j": {"a": a_energy, "b": b_energy, "supernet": supernet_j, "second": second["energy_j"]},
        "candidates": {"a": a["candidates"], "b": b["candidates"], "second": second["candidates"]},
        "hypervolume": volumes, "verify": {"a": a_verify, "b": b_verify, "b_finetuned": b_finetuned},
        "trust": trust}, indent=1, default=str))


if __name__ == "__main__":
    main()
