"""Does the mobile space's supernet rank networks? Kendall tau between the accuracy 16 random
sub-networks inherit from the supernet and the accuracy of the same networks trained alone at
the search's full fidelity (goal: tau >= 0.6), and how it grows with the supernet's training.

Three units:
- `mobile-supernet` trains the supernet (`eas supernet train`'s training, in this process) for
  a fixed number of sandwich steps, two hours of these 2 cores at the pace measured before
  (4.4 s a step); at a quarter, half, three quarters and the end of the steps it records the
  inherited accuracy of the 16 sub-networks `eas supernet trust` would draw. The one unit longer
  than an hour: it checkpoints into benchmarks/work/ and resumes there when run again in the
  same session (the checkpoint is not committed, so a later session starts it over).
- `mobile-trust` trains those 16 sub-networks alone and computes tau at each point from the
  supernet unit's result file (it needs no supernet, so it may run in any later session).
- `mobile-trust-seed1` trains the 16 alone again from another seed: from how well the two
  stand-alone runs agree the table estimates the most tau any ranking could reach against them
  (the reference's own noise), and their mean is a steadier reference than either.

    python benchmarks/supernet_trust.py --list
    setsid -w nice -n 19 python benchmarks/supernet_trust.py --next
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

import units

from eas.pareto import kendall_tau
from eas.units import table as text_table

VERSION = 1
WORK = units.ROOT / "benchmarks" / "work" / "supernet_trust"
MILESTONES = (0.25, 0.5, 0.75, 1.0)
CONFIG = {"space": "mobile", "data": "fashion-mnist", "steps": 1650, "batch_size": 128, "lr": 3e-3,
          "random_subnets": 2, "seed": 0, "threads": 2, "samples": 16, "trust_epochs": 2.0, "trust_subset": 9000,
          "milestones": list(MILESTONES)}
TRAINED = ("mobile-supernet",)
UNITS = [units.Unit("mobile-supernet", {**CONFIG, "kind": "supernet"}),
         units.Unit("mobile-trust", {**CONFIG, "kind": "trust"}, needs=TRAINED),
         units.Unit("mobile-trust-seed1", {**CONFIG, "kind": "trust", "standalone_seed": 1}, needs=TRAINED)]


def run(unit: units.Unit) -> tuple[dict, object]:
    import torch

    torch.set_num_threads(unit.settings["threads"])
    return train_supernet(unit) if unit.settings["kind"] == "supernet" else measure_trust(unit)


def _write_json(path: Path, value) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(value, indent=1))
    os.replace(partial, path)


def train_supernet(unit: units.Unit) -> tuple[dict, object]:
    import torch

    from eas.arch.space import load_space
    from eas.data.datasets import load_dataset
    from eas.nas.candidate import Candidate
    from eas.nas.one_shot import VALIDATION_IMAGES, load_inherited, trust_subnetworks
    from eas.training.proxy import Fidelity
    from eas.training.supernet import SupernetPlan, SupernetTraining
    from eas.training.supernet_file import read_description

    s = unit.settings
    folder = WORK / unit.name
    folder.mkdir(parents=True, exist_ok=True)
    task = load_dataset(s["data"], seed=s["seed"])
    marks = {round(share * s["steps"]) for share in s["milestones"]}
    inherited_path = folder / "inherited.json"  # kept as it is made: a resumed run keeps earlier points
    inherited = json.loads(inherited_path.read_text()) if inherited_path.exists() else {}
    if not (folder / "supernet" / "supernet.json").exists():
        plan = SupernetPlan(steps=s["steps"], batch_size=s["batch_size"], lr=s["lr"],
                            random_subnets=s["random_subnets"], seed=s["seed"])
        training = SupernetTraining(folder / "supernet", task, load_space(s["space"]), s["data"], plan,
                                    torch.device("cpu"), "auto", restart=False, show_progress=True)
        subnets = trust_subnetworks(training.supernet, s["samples"], s["seed"])

        def after_step(progress) -> None:
            if progress.step not in marks or str(progress.step) in inherited:
                return
            state = torch.get_rng_state()  # evaluating must not change what training draws next
            accuracies = []
            for arch in subnets:
                candidate = Candidate(arch, task, Fidelity(), "cpu", s["seed"], meter="estimated")
                load_inherited(candidate, training.supernet)
                accuracies.append(round(candidate.validate(VALIDATION_IMAGES)["accuracy"], 5))
            torch.set_rng_state(state)
            inherited[str(progress.step)] = {"accuracies": accuracies, "seconds": round(progress.seconds, 1)}
            _write_json(inherited_path, inherited)
            print(f"step {progress.step}: inherited accuracies {min(accuracies):.1%}-{max(accuracies):.1%}",
                  flush=True)

        training.after_step = after_step
        training.run()
        genomes = [a.encode() for a in subnets]
    else:  # trained earlier in this session; the points were kept beside it
        genomes = json.loads((folder / "genomes.json").read_text())
    _write_json(folder / "genomes.json", genomes)
    missing = sorted(marks - {int(k) for k in inherited})
    if missing:
        raise SystemExit(f"{unit.name}: the supernet finished without the inherited accuracies at steps {missing} "
                         f"(remove {folder} to train it again)")
    description = read_description(folder / "supernet")
    trained = description["trained"]
    figures = {"supernet_train_seconds": trained["seconds"], "steps": trained["steps"], "images": trained["images"],
               "energy_j": trained["energy_j"], "energy_source": trained["energy_source"],
               "parameters": description["parameters"]}
    return figures, {"genomes": genomes, "inherited": inherited, "history": trained["history"],
                     "device": trained["device"]}


def measure_trust(unit: units.Unit) -> tuple[dict, object]:
    from eas.arch.genome import Arch
    from eas.data.datasets import load_dataset
    from eas.nas.candidate import Candidate
    from eas.nas.one_shot import VALIDATION_IMAGES
    from eas.training.proxy import Fidelity

    s = unit.settings
    supernet = unit.inputs["mobile-supernet"]
    seed = s.get("standalone_seed", s["seed"])  # the data split stays the supernet's: only training differs
    folder = WORK / unit.name
    folder.mkdir(parents=True, exist_ok=True)
    task = load_dataset(s["data"], seed=s["seed"])
    fidelity = Fidelity(epochs=s["trust_epochs"], subset=s["trust_subset"], batch_size=s["batch_size"])
    alone_path = folder / "standalone.json"  # each network as it finishes: a rerun goes on from there
    alone = json.loads(alone_path.read_text()) if alone_path.exists() else {}
    for genome in supernet["raw"]["genomes"]:
        if genome in alone:
            continue
        candidate = Candidate(Arch.decode(genome), task, fidelity, "cpu", seed, meter="estimated")
        trained = candidate.train_segment(fidelity.total_steps(len(task.train_y)))
        accuracy = candidate.validate(VALIDATION_IMAGES)["accuracy"] if not trained.diverged else 0.0
        alone[genome] = {"accuracy": round(accuracy, 5), "seconds": round(trained.seconds, 2),
                         "macs": candidate.metrics["macs"]}
        _write_json(alone_path, alone)
        print(f"trust {len(alone)}/{len(supernet['raw']['genomes'])}: alone {accuracy:.2%}  {genome}", flush=True)
    standalone = [alone[g]["accuracy"] for g in supernet["raw"]["genomes"]]
    by_step = {step: kendall_tau(point["accuracies"], standalone)
               for step, point in sorted(supernet["raw"]["inherited"].items(), key=lambda kv: int(kv[0]))}
    final = by_step[max(by_step, key=int)]
    return ({"kendall_tau": final, "kendall_tau_by_step": by_step,
             "supernet_train_seconds": supernet["figures"]["supernet_train_seconds"]},
            {"genomes": supernet["raw"]["genomes"], "standalone": alone,
             "supernet_unit": {"commit": supernet["commit"], "date": supernet["date"]}})


def check(result: dict) -> str | None:
    figures, raw = result["figures"], result["raw"]
    if not isinstance(raw, dict):
        return "raw data missing"
    if result["settings"].get("kind") == "trust":
        taus = [figures.get("kendall_tau"), *(figures.get("kendall_tau_by_step") or {}).values()]
        if not all(units.finite(t) and -1 <= t <= 1 for t in taus):
            return "a Kendall tau outside [-1, 1]"
        return None
    seconds = figures.get("supernet_train_seconds")
    if not (units.finite(seconds) and seconds > 0):
        return f"supernet_train_seconds {str(seconds)[:20]} is not a positive number"
    points = raw.get("inherited")
    if not isinstance(points, dict) or not points:
        return "inherited accuracies missing"
    for step, point in points.items():
        accuracies = point.get("accuracies") if isinstance(point, dict) else None
        if not units.fractions(accuracies, len(raw.get("genomes") or [])):
            return f"inherited accuracies at step {step[:10]} are not one accuracy per sub-network in [0, 1]"
    return None


def table(results: Path = units.RESULTS) -> str:
    """The docs' table (benchmarks.tables), from the result files."""
    done, problems = units.load_results(benchmark(), results)
    c = CONFIG
    lines = [f"`supernet_trust.py`: the `{c['space']}` space's supernet on {c['data']}, {c['steps']:,} sandwich steps "
             f"of {c['batch_size']} images at {c['threads']} threads; trust over {c['samples']} random sub-networks "
             f"trained alone for {c['trust_epochs']:g} epochs x {c['trust_subset']:,} images. "
             f"**{len(done)} of {len(UNITS)} units done.**", ""]
    supernet = done.get("mobile-supernet")
    alone = standalone_runs(done, supernet)
    if supernet:
        references = {f"vs alone seed {seed}": accuracies for seed, accuracies in alone.items()}
        if len(alone) > 1:  # two runs' mean: a steadier ranking than either
            references["vs their mean"] = [statistics.fmean(a) for a in zip(*alone.values(), strict=True)]
        references = references or {"vs alone": None}
        rows = []
        for step, point in sorted(supernet["raw"]["inherited"].items(), key=lambda kv: int(kv[0])):
            accuracies = point["accuracies"]
            rows.append([f"{int(step):,}", f"{point['seconds'] / 60:.0f} min",
                         f"{min(accuracies):.1%}-{max(accuracies):.1%}",
                         *(f"{kendall_tau(accuracies, r):+.2f}" if r else "not measured yet"
                           for r in references.values())])
        lines += units.code_block(text_table(rows, ["step", "supernet training", "inherited accuracy",
                                                    *(f"Kendall tau {name}" for name in references)]))
        f = supernet["figures"]
        hours = f["supernet_train_seconds"] / 3600
        lines += ["", f"Training: {f['steps']:,} steps, {f['images']:,} images, {hours:.2f} "
                  f"h, {f['energy_j'] / 3.6e6:.3f} kWh ({f['energy_source']}); {f['parameters']:,} shared parameters."]
    if supernet and alone:
        final = supernet["raw"]["inherited"][max(supernet["raw"]["inherited"], key=int)]["accuracies"]
        tau = kendall_tau(final, alone[min(alone)])
        spans = "; ".join(f"{min(a):.1%}-{max(a):.1%} (seed {seed})" for seed, a in alone.items())
        lines += [f"Trained alone, the {c['samples']} reach {spans}. Goal (Kendall tau >= 0.6 against seed "
                  f"{min(alone)}): " + ("**met**" if tau >= 0.6 else "**not met**") + f" ({tau:+.2f})."]
        if len(alone) > 1:
            lines.append(ceiling_sentence(kendall_tau(*alone.values())))
    else:
        lines.append("Goal (Kendall tau >= 0.6): not measured yet.")
    if done:
        lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


def ceiling_sentence(agreement: float) -> str:
    """What two stand-alone runs' agreement says about the best tau any ranking could reach. If each
    run is the networks' true accuracy plus normal noise of the same size, Kendall tau and the
    correlation r relate as tau = 2/pi asin(r) (Greiner), a run correlates with the truth as
    sqrt(r) and the mean of two as sqrt(2r / (1 + r))."""
    sentence = f"The two stand-alone runs agree with each other to Kendall tau {agreement:+.2f}."
    r = math.sin(math.pi / 2 * agreement)
    if r <= 0:
        return sentence
    one, mean = (2 / math.pi * math.asin(math.sqrt(c)) for c in (r, 2 * r / (1 + r)))
    return (sentence + f" If they differ by noise around the networks' true accuracies (normal, alike in both), a "
            f"ranking in the true order would agree with one run to about {one:+.2f} and with their mean to about "
            f"{mean:+.2f}: the ceilings of the columns above.")


def standalone_runs(done: dict, supernet: dict | None) -> dict[int, list[float]]:
    """{seed: the sub-networks' stand-alone accuracies, in the supernet unit's order} of the trust
    units done."""
    if not supernet:
        return {}
    genomes, runs = supernet["raw"]["genomes"], {}
    for unit in UNITS:
        trained = done[unit.name]["raw"]["standalone"] if unit.settings["kind"] == "trust" and unit.name in done else {}
        if trained and all(g in trained for g in genomes):
            seed = unit.settings.get("standalone_seed", unit.settings["seed"])
            runs[seed] = [trained[g]["accuracy"] for g in genomes]
    return runs


def benchmark() -> units.Benchmark:
    return units.Benchmark("supernet_trust", VERSION, UNITS, run, check, description=__doc__.split("\n\n")[0])


if __name__ == "__main__":
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))
