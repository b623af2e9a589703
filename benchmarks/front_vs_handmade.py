"""Is the model EAS found better than the hand-designed one a user would otherwise take?

The README demo's search (mobile space, Fashion-MNIST, at most 20 M MACs, 1 epoch x 9,000
images at full fidelity, 3 rungs) runs for --budget; then `eas verify` retrains the front's top
--top members and the MobileNetV3-Small and MobileNetV2 families at width multipliers 0.35, 0.5,
0.75 and 1.0 with one recipe (augmentation suited to the data, label smoothing 0.1), the same
data (--epochs x --subset images) and the same --seeds seeds, and times every model together
in the study's deployment runtime (ONNX Runtime, 1 thread). All through the real command line.

    python benchmarks/front_vs_handmade.py [--budget 30m] [--epochs 2] [--subset 20000] [--seeds 2]
        [--top 4] [--work DIR]

Prints one table (verified accuracy with its 95% interval, MACs, params, latency, inference
energy, per model) and the comparison: hypervolume of the retrained front against each family's
(ratio to the better family), accuracy gain at equal MACs and at equal latency (median over the
front), latency and MACs ratio at equal accuracy (median over the baselines the front reaches).
Goals (issue 22): hypervolume >= 1.05x the better family's, and at equal latency >= +1 point or at
equal accuracy <= 0.6x the latency. Run again with the same --work to resume: the search is not
repeated and `eas verify` reuses every model it already trained.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from knee import eas

from eas.reports.summary import verification_lines
from eas.units import table

STUDY = "front-vs-handmade"
FAMILIES = ("mobilenet_v3_small@0.35,0.5,0.75,1.0", "mobilenet_v2@0.35,0.5,0.75,1.0")
GOALS = {"hypervolume_ratio": 1.05, "gain_at_latency": 0.01, "latency_ratio_at_accuracy": 0.6}


def searched(work: Path, budget: str) -> float:
    """Run the search once (seconds it took); an existing study is kept as it is."""
    if (work / "studies" / f"{STUDY}.db").exists():
        return 0.0
    started = time.perf_counter()
    eas("search", "--space", "mobile", "--data", "fashion-mnist", "--budget", budget, "--max-macs", "20M",
        "--epochs", "1", "--subset", "9000", "--study", STUDY, "--quiet", cwd=work)
    return time.perf_counter() - started


def cells(row: dict, label: str) -> list[str]:
    costs = row["costs"]
    low, high = row["verified_interval"]

    def number(key: str, shown: str) -> str:
        value = costs.get(key)
        return format(value, shown) if isinstance(value, (int, float)) and value == value else "-"

    return [label, f"{row['verified_accuracy']:.2%}", f"{low:.1%}-{high:.1%}",
            f"{row['seed_spread']:.1%}" if row.get("seed_spread") is not None else "-",
            number("macs", ",.0f"), number("params", ",.0f"), number("latency_ms", ".3f"),
            number("inference_energy_j_per_1k", ".3g")]


def verdict(summary: dict) -> list[str]:
    def shown(key: str, value, unit: str) -> str:
        if value is None:
            return f"{key}: n/a"
        return f"{key}: {value * 100:+.1f} points" if unit == "points" else f"{key}: {value:.2f}x"

    ratio, gain, latency = (summary.get(k) for k in GOALS)
    hypervolume_met = ratio is not None and ratio >= GOALS["hypervolume_ratio"]
    latency_met = (gain is not None and gain >= GOALS["gain_at_latency"]) or \
        (latency is not None and latency <= GOALS["latency_ratio_at_accuracy"])
    return [shown("hypervolume ratio (front / better family)", ratio, "x"),
            shown("accuracy gain at equal MACs (median)", summary.get("gain_at_macs"), "points"),
            shown("accuracy gain at equal latency (median)", gain, "points"),
            shown("MACs ratio at equal accuracy (median)", summary.get("macs_ratio_at_accuracy"), "x"),
            shown("latency ratio at equal accuracy (median)", latency, "x"),
            f"goal hypervolume >= 1.05x: {'met' if hypervolume_met else 'NOT met'}; goal +1 point at equal latency "
            f"or <= 0.6x latency at equal accuracy: {'met' if latency_met else 'NOT met'}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="30m")
    parser.add_argument("--epochs", default="2")
    parser.add_argument("--subset", default="20000")
    parser.add_argument("--seeds", default="2")
    parser.add_argument("--top", default="4")
    parser.add_argument("--work", default="benchmark-front-vs-handmade")
    parser.add_argument("--out", default=None, help="JSON file (default WORK/result.json)")
    options = parser.parse_args()
    work = Path(options.work).resolve()
    (work / "studies").mkdir(parents=True, exist_ok=True)
    search_seconds = searched(work, options.budget)
    started = time.perf_counter()
    found = json.loads(eas("verify", STUDY, "--top", options.top, "--epochs", options.epochs, "--subset",
                           options.subset, "--seeds", options.seeds, "--augment", "auto", "--label-smoothing", "0.1",
                           *(f for family in FAMILIES for f in ("--baselines", family)), "--json", cwd=work))
    verify_seconds = time.perf_counter() - started
    shown = json.loads(eas("show", STUDY, "--json", cwd=work))
    print(f"search: {options.budget} budget ({search_seconds / 60:.0f} min here), "
          f"{shown.get('counts', {}).get('complete', '?')} trials; verify: {found['steps']} steps x batch 128 on "
          f"{found['train_images']:,} images ({options.epochs} epochs), {found['seeds']} seeds, recipe "
          f"{found['recipe']}, {found['trained']} models trained and {found['reused']} reused in "
          f"{verify_seconds / 60:.0f} min")
    rows = [cells(m, f"EAS trial {m['trial']}") for m in found["members"]]
    rows += [cells(b, b["name"]) for b in found["baselines"]]
    print(table(rows, ["model", "verified", "95% interval", "seed spread", "MACs", "params", "latency ms",
                       "energy J/1k"]))
    comparison = found["comparison"]
    volumes = comparison["hypervolume"]
    print("hypervolume (study objectives, its reference point): front "
          f"{volumes['front']:.4f}; " + "; ".join(f"{k} {v:.4f}" for k, v in volumes["families"].items()))
    print("\n".join(verdict(comparison["summary"])))
    print(next((line for line in verification_lines(found) if line.startswith("timed")), ""))
    out = Path(options.out) if options.out else work / "result.json"
    out.write_text(json.dumps({"search_seconds": search_seconds, "verify_seconds": verify_seconds,
                               "verification": found}, indent=1))


if __name__ == "__main__":
    main()
