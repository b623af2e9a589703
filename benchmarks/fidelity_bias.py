"""The fidelity's bias (issue 49, part 1): does the search's cheap training rank networks across
the whole cost range as longer training does, or does it favour small, fast-learning ones?

40 networks of `mobile` under the 20 M MACs limit, drawn at random (fixed seed) and stratified
by MACs into four bands of ten (`band_edges`), are each trained
- as the search's rungs train them (1/9, 1/3 and all of 1 epoch x 9,000 images, each rung
  continuing its weights, seed 0), scored after every rung both as the search sees it (its
  validation images: 500 below the top rung) and on the official test set (10,000 images);
- with the verification recipe (`eas verify` / fair_fight: 2 epochs x 20,000 images, augment auto,
  label smoothing 0.1, seed 1), scored on the test set;
and two of each band (`long_per_band`) also for `long_epochs` epochs on all training images, the
reference a user who trains the chosen network fully meets.

Everything is scored on the 10,000 test images, which no choice here saw. The table gives, per
fidelity: Kendall's tau against the verification recipe and against the long training, overall
and within each cost band; the slope of test accuracy against log2(MACs) (points per doubling);
and which networks a successive-halving rule would promote to the top rung, globally or within
cost bands: the question the remedy (part 2) answers.

Units: `short-<k>` trains every fourth network (so each unit spans the cost range), `long-<k>`
two networks of the long subset.

    python benchmarks/fidelity_bias.py --list
    setsid -w nice -n 19 python benchmarks/fidelity_bias.py --next
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import units
from search_efficiency import measured_space

VERSION = 1
CONFIG = {
    "space": "mobile", "space_hash": "a4f28bad3749b496", "data": "fashion-mnist", "max_macs": 20_000_000,
    "sample_seed": 2049, "per_band": 10, "band_edges": [250_000, 1_000_000, 2_500_000, 7_000_000, 20_000_000],
    "epochs": 1.0, "subset": 9000, "rungs": 3, "eta": 3, "seed": 0, "threads": 1,
    "verify": {"epochs": 2.0, "subset": 20000, "augment": "auto", "label_smoothing": 0.1, "seed": 1},
    "long_per_band": 2, "long_epochs": 5.0, "long_seed": 1,
}
SHORT_PARTS, LONG_PARTS = 4, 4  # 40 networks in 4 short units; 8 long trainings, 2 per unit
FIDELITIES = ("rung0", "rung1", "rung2", "verify", "long")
LABELS = {"rung0": "rung 0 (1/9 of the full fidelity)", "rung1": "rung 1 (1/3)", "rung2": "rung 2 (the full fidelity)",
          "verify": "verification recipe", "long": "long training"}


def all_units() -> list[units.Unit]:
    short = [units.Unit(f"short-{k}", {**CONFIG, "kind": "short", "part": k, "of": SHORT_PARTS})
             for k in range(SHORT_PARTS)]
    long = [units.Unit(f"long-{k}", {**CONFIG, "kind": "long", "part": k, "of": LONG_PARTS})
            for k in range(LONG_PARTS)]
    return [*short, *long]


# -- the networks --------------------------------------------------------------------------------

def band_of(macs: int, edges: list[int]) -> int | None:
    for band in range(len(edges) - 1):
        if edges[band] <= macs < edges[band + 1] or (band == len(edges) - 2 and macs == edges[-1]):
            return band
    return None


def networks(settings: dict) -> list[dict]:
    """The stratified sample, band by band, each band by MACs: [{genome, macs, params, band}].
    Drawn the same way by every unit (random proposals of a fixed seed, the first `per_band`
    distinct networks in each band)."""
    import optuna

    from eas.arch.counting import arch_cost
    from eas.arch.space import load_space

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shape = (1, 28, 28)
    space = load_space(measured_space(settings), shape)
    edges, wanted = settings["band_edges"], settings["per_band"]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=settings["sample_seed"]))
    bands: list[dict[str, dict]] = [{} for _ in edges[:-1]]
    for _ in range(200_000):  # bounded: a space that cannot fill a band says so below
        if all(len(b) == wanted for b in bands):
            break
        arch = space.sample(study.ask())
        cost = arch_cost(arch, shape, 10)
        band = band_of(cost.macs, edges)
        genome = arch.encode()
        if band is not None and len(bands[band]) < wanted and genome not in bands[band]:
            bands[band][genome] = {"genome": genome, "macs": cost.macs, "params": cost.params, "band": band}
    short = [k for k, b in enumerate(bands) if len(b) < wanted]
    if short:
        raise SystemExit(f"fidelity_bias: the space filled only bands {[len(b) for b in bands]} of {wanted}")
    return [n for b in bands for n in sorted(b.values(), key=lambda n: (n["macs"], n["genome"]))]


def long_subset(found: list[dict], settings: dict) -> list[dict]:
    """`long_per_band` networks of each band, evenly spaced by MACs within it."""
    picked = []
    for band in range(len(settings["band_edges"]) - 1):
        members = [n for n in found if n["band"] == band]
        count = settings["long_per_band"]
        picked += [members[round((i + 0.5) * len(members) / count - 0.5)] for i in range(count)]
    return picked


# -- running a unit ------------------------------------------------------------------------------

def run(unit: units.Unit) -> tuple[dict, object]:
    import torch

    from eas.data.datasets import load_dataset

    settings = unit.settings
    torch.set_num_threads(settings["threads"])
    found = networks(settings)
    task = load_dataset(settings["data"], seed=settings["seed"])
    if settings["kind"] == "short":
        mine = found[settings["part"]::settings["of"]]
        rows = [short_row(n, task, settings) for n in mine]
    else:
        subset = long_subset(found, settings)
        per = math.ceil(len(subset) / settings["of"])
        rows = [long_row(n, task, settings) for n in subset[settings["part"] * per:(settings["part"] + 1) * per]]
    return {"networks": rows}, None


def _test_accuracy(candidate, task) -> float:
    from eas.training.step import evaluate_accuracy

    accuracy, _ = evaluate_accuracy(candidate.model, task.test_x, task.test_y, candidate.device)
    return accuracy


def short_row(network: dict, task, settings: dict) -> dict:
    """The network through the search's rungs, then trained anew with the verification recipe."""
    from eas.arch.genome import Arch
    from eas.nas.candidate import Candidate
    from eas.nas.rungs import Ladder
    from eas.training.proxy import Fidelity
    from eas.training.recipe import Recipe

    arch = Arch.decode(network["genome"])
    fidelity = Fidelity(epochs=settings["epochs"], subset=settings["subset"])
    ladder = Ladder.make(fidelity.total_steps(len(task.train_y)), settings["rungs"], settings["eta"])
    candidate = Candidate(arch, task, fidelity, "cpu", settings["seed"], "auto")
    rungs = []
    for rung in range(ladder.top + 1):
        started = time.process_time()
        candidate.train_segment(ladder.segment(rung), segment=rung,
                                recalibration_images=ladder.recalibration_images(rung))
        trained = time.process_time() - started
        seen = candidate.validate(ladder.val_images(rung))
        rungs.append({"rung": rung, "steps": ladder.steps[rung], "train_cpu_seconds": round(trained, 2),
                      "search_accuracy": seen["accuracy"], "search_images": seen["val_images"],
                      "test_accuracy": _test_accuracy(candidate, task)})
    v = settings["verify"]
    recipe = Recipe.parse(v["augment"], v["label_smoothing"], 0.0, settings["data"])
    verify_fidelity = Fidelity(epochs=v["epochs"], subset=v["subset"])
    verified = Candidate(arch, task, verify_fidelity, "cpu", v["seed"], "auto")
    started = time.process_time()
    verified.train_segment(verify_fidelity.total_steps(len(task.train_y)), recalibration_images=1024, recipe=recipe)
    row = {**network, "rungs": rungs, "verify": {"train_cpu_seconds": round(time.process_time() - started, 2),
                                                   "val_accuracy": verified.validate()["accuracy"],
                                                   "test_accuracy": _test_accuracy(verified, task)}}
    print(f"  {network['macs'] / 1e6:6.2f} M MACs: rungs " + " ".join(f"{r['test_accuracy']:.2%}" for r in rungs)
          + f", verify {row['verify']['test_accuracy']:.2%}", flush=True)
    return row


def long_row(network: dict, task, settings: dict) -> dict:
    """The network trained `long_epochs` epochs on all training images (no recipe: what `eas train`
    does by default), scored after every epoch on the test set."""
    from eas.arch.genome import Arch
    from eas.nas.candidate import Candidate
    from eas.training.proxy import Fidelity

    fidelity = Fidelity(epochs=settings["long_epochs"])
    candidate = Candidate(Arch.decode(network["genome"]), task, fidelity, "cpu", settings["long_seed"], "auto")
    started = time.process_time()
    candidate.train_segment(fidelity.total_steps(len(task.train_y)), recalibration_images=1024)
    row = {**network, "long": {"train_cpu_seconds": round(time.process_time() - started, 2),
                               "val_accuracy": candidate.validate()["accuracy"],
                               "test_accuracy": _test_accuracy(candidate, task)}}
    print(f"  {network['macs'] / 1e6:6.2f} M MACs: long {row['long']['test_accuracy']:.2%}", flush=True)
    return row


def check(result: dict) -> str | None:
    try:
        rows = result["figures"]["networks"]
        for row in rows:
            accuracies = ([r["test_accuracy"] for r in row["rungs"]] + [row["verify"]["test_accuracy"]]
                          if result["settings"]["kind"] == "short" else [row["long"]["test_accuracy"]])
            if not (isinstance(row["genome"], str) and isinstance(row["macs"], int) and units.fractions(
                    accuracies, len(accuracies))):
                return "a network without a genome, a MACs count or accuracies in [0, 1]"
        return None if rows else "no networks"
    except (KeyError, TypeError) as error:
        return f"figures malformed ({type(error).__name__}: {str(error)[:60]})"


# -- the table -----------------------------------------------------------------------------------

def measured(done: dict) -> dict[str, dict]:
    """genome -> {fidelity: test accuracy, macs, band}, merged over the units done."""
    found: dict[str, dict] = {}
    for result in done.values():
        for row in result["figures"]["networks"]:
            entry = found.setdefault(row["genome"], {"macs": row["macs"], "band": row["band"]})
            if "rungs" in row:
                entry.update({f"rung{r['rung']}": r["test_accuracy"] for r in row["rungs"]})
                entry.update({f"seen{r['rung']}": r["search_accuracy"] for r in row["rungs"]})
                entry["verify"] = row["verify"]["test_accuracy"]
                entry["cpu"] = sum(r["train_cpu_seconds"] for r in row["rungs"])
                entry["verify_cpu"] = row["verify"]["train_cpu_seconds"]
            else:
                entry["long"] = row["long"]["test_accuracy"]
                entry["long_cpu"] = row["long"]["train_cpu_seconds"]
    return found


def tau_between(rows: list[dict], a: str, b: str) -> float | None:
    from eas.pareto import kendall_tau

    pairs = [(r[a], r[b]) for r in rows if a in r and b in r]
    if len(pairs) < 3:
        return None
    tau = kendall_tau([p[0] for p in pairs], [p[1] for p in pairs])
    return None if not math.isfinite(tau) else float(tau)


def slope(rows: list[dict], fidelity: str) -> float | None:
    """Test accuracy points per doubling of MACs (least squares)."""
    pairs = [(math.log2(r["macs"]), r[fidelity]) for r in rows if fidelity in r]
    if len(pairs) < 3:
        return None
    x, y = np.array(pairs).T
    return float(np.polyfit(x, y, 1)[0]) * 100


def promoted(rows: list[dict], banded: bool, eta: int = 3) -> list[dict]:
    """Who reaches the top rung under successive halving on (rung accuracy, MACs), keeping the
    best 1/eta after each lower rung by non-dominated rank then hypervolume contribution (the
    search's rule), over all networks at once or within each cost band."""
    from eas.nas.rungs import order

    groups = [[r for r in rows if r["band"] == band] for band in sorted({r["band"] for r in rows})] if banded \
        else [rows]
    reached = []
    for group in groups:
        alive = list(group)
        for rung in (0, 1):
            top_macs = max(r["macs"] for r in rows)
            points = np.array([[1 - r[f"seen{rung}"], math.log(r["macs"]) / math.log(top_macs)] for r in alive])
            alive = [alive[i] for i in order(points)[:math.ceil(len(alive) / eta)]]
        reached += alive
    return reached


def table(results=units.RESULTS) -> str:
    from eas.units import table as text_table

    benchmark_ = benchmark()
    done, problems = units.load_results(benchmark_, results)
    c = CONFIG
    edges = c["band_edges"]
    bands = [f"{edges[b] / 1e6:g}-{edges[b + 1] / 1e6:g} M" for b in range(len(edges) - 1)]
    lines = [f"`fidelity_bias.py`: {c['per_band'] * len(bands)} random networks of `{c['space']}` (definition "
             f"{c['space_hash']}) on {c['data']}, {c['per_band']} in each MACs band ({', '.join(bands)}); each "
             f"trained through the search's {c['rungs']} rungs ({c['epochs']:g} epoch x {c['subset']:,} images at the "
             f"top, seed {c['seed']}) and anew with the verification recipe ({c['verify']['epochs']:g} epochs x "
             f"{c['verify']['subset']:,} images, augment {c['verify']['augment']}, label smoothing "
             f"{c['verify']['label_smoothing']}); {c['long_per_band']} per band also {c['long_epochs']:g} epochs on "
             f"all training images. **Accuracies on Fashion-MNIST's 10,000 test images**, which nothing here "
             f"chose by. **{len(done)} of {len(benchmark_.units)} units done.**", ""]
    rows = list(measured(done).values())
    if not any("verify" in r for r in rows):
        return "\n".join(lines + [f"Left out: {p}" for p in problems]) + "\n"
    table_rows = []
    for fidelity in FIDELITIES:
        have = [r for r in rows if fidelity in r]
        if not have:
            continue
        within = [tau_between([r for r in have if r["band"] == b], fidelity, "verify") for b in range(len(bands))]
        within = [t for t in within if t is not None]
        by_band = [statistics.median([r[fidelity] for r in have if r["band"] == b] or [math.nan])
                   for b in range(len(bands))]
        table_rows.append([LABELS[fidelity], str(len(have)), _signed(tau_between(have, fidelity, "verify")),
                           _signed(statistics.fmean(within)) if within and fidelity != "verify" else "-",
                           _signed(tau_between(have, fidelity, "long")),
                           *(f"{v:.1%}" if math.isfinite(v) else "-" for v in by_band),
                           f"{slope(have, fidelity):+.2f}"])
    lines += units.code_block(text_table(table_rows, ["fidelity", "networks", "tau vs verify", "within bands",
                                                      "tau vs long", *(f"median {b}" for b in bands),
                                                      "points per 2x MACs"]))
    lines += _promotion_lines(rows, bands)
    lines += ["", "tau: Kendall's rank correlation of test accuracies over the networks both fidelities trained; "
                  "within bands: its mean over the bands. Points per 2x MACs: the least-squares slope of test "
                  "accuracy against log2(MACs)."]
    lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


def _promotion_lines(rows: list[dict], bands: list[str]) -> list[str]:
    complete = [r for r in rows if all(k in r for k in ("seen0", "seen1", "verify"))]
    if len(complete) < 4 * len(bands):
        return []
    best = sorted(complete, key=lambda r: -r["verify"])[:5]
    lines = ["", "Successive halving replayed on these networks (keep the best third after rungs 0 and 1 by the "
                 "search's rule on accuracy as the search sees it and MACs), over all of them or within each band:", ""]
    out = []
    for banded in (False, True):
        top = promoted(complete, banded)
        out.append(["within bands" if banded else "all together", str(len(top)),
                    ", ".join(f"{sum(r['band'] == b for r in top)}" for b in range(len(bands))),
                    f"{max(r['verify'] for r in top):.2%}", f"{sum(r in top for r in best)} of {len(best)}"])
    from eas.units import table as text_table

    lines += units.code_block(text_table(out, ["promotion", "reach the top", "per band", "best verified there",
                                               "of the 5 best verified"]))
    return lines


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def benchmark() -> units.Benchmark:
    return units.Benchmark("fidelity_bias", VERSION, all_units(), run, check, description=__doc__.split("\n\n")[0])


def main() -> None:
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))


if __name__ == "__main__":
    main()
