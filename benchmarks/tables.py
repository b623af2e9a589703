"""Every benchmark table of the documentation, made from the result files in benchmarks/results/.

    python -m benchmarks.tables            # rewrite the tables in README.md and docs/**/*.md
    python -m benchmarks.tables --check    # exit 1 naming each table that differs from what results/ make
    python -m benchmarks.tables --print    # print them instead

A table stands in a Markdown file between two markers, and nothing between them is typed by hand:

    <!-- table: search_efficiency/mobile -->
    ...
    <!-- end table -->

Each table says how many of its units are done ("6 of 10 units"), and names in one line every
result file it left out (truncated, hand-edited to an impossible value, another benchmark version):
such a file is never averaged in.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmark scripts import their siblings

import device_formats  # noqa: E402
import earlier_runs  # noqa: E402
import fair_fight  # noqa: E402
import fidelity_bias  # noqa: E402
import int8_bits  # noqa: E402
import microcontroller_fight  # noqa: E402
import microcontroller_truth  # noqa: E402
import resolution_fidelity  # noqa: E402
import search_efficiency  # noqa: E402
import supernet_trust  # noqa: E402
import training_recipe  # noqa: E402
import units  # noqa: E402

from eas.units import table  # noqa: E402

MARKER = re.compile(r"<!-- table: (?P<name>[\w./-]+) -->\n(?P<body>.*?)<!-- end table -->", re.S)
DOCS = ("README.md", "docs")


def _spread(values: list[float], digits: int = 4) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def _left_out(problems: list[str]) -> list[str]:
    return [f"Left out: {problem}" for problem in problems]


# -- search_efficiency -------------------------------------------------------------------------

def search_efficiency_table(config: str = "mobile", results: Path = units.RESULTS) -> str:
    benchmark = search_efficiency.benchmark(config)
    done, problems = units.load_results(benchmark, results)
    settings = search_efficiency.CONFIGS[config]
    lines = [f"`search_efficiency.py --space {config}`: space `{settings['space']}` (definition "
             f"{settings['space_hash']}), {settings['data']}, at most {settings['max_macs']} MACs, full fidelity "
             f"{settings['epochs']:g} epoch x {settings['subset']:,} images, {settings['cpu_budget_seconds']:,} CPU "
             f"seconds per run at {settings['threads']} thread. **{len(done)} of {len(benchmark.units)} units done.**",
             ""]
    finals, rows = {}, []
    searches = {name: r for name, r in done.items() if r["settings"]["kind"] == "search"}
    for method in search_efficiency.METHODS:
        ran = sorted((r for r in searches.values() if r["settings"]["method"] == method),
                     key=lambda r: r["settings"]["seed"])
        finals[method] = [r["figures"]["final_hypervolume"] for r in ran]
        counts = [r["figures"]["full_fidelity_results"] for r in ran]
        at = [[r["figures"]["hypervolume_at_share"][str(share)] for r in ran] for share in search_efficiency.SHARES]
        rows.append([method, f"{len(ran)} of {len(search_efficiency.SEEDS)}", *(_spread(v) for v in at),
                     _spread(finals[method]), f"{min(counts)}-{max(counts)}" if counts else "-",
                     _spread([r["figures"]["trials"] for r in ran], 0)])
    for row, method in zip(rows, search_efficiency.METHODS, strict=True):
        base = finals.get("random")
        row.insert(6, f"{statistics.median(finals[method]) / statistics.median(base):.2f}x"
                   if base and finals[method] and statistics.median(base) else "-")
    for row, method in zip(rows, search_efficiency.METHODS, strict=True):
        ran = [r for r in searches.values() if r["settings"]["method"] == method]
        row += [_time_to(ran, finals.get("random"), settings), _time_to(ran, finals.get("tpe"), settings),
                _spread([3600 * r["figures"]["trials"] / r["figures"]["evaluate_cpu_seconds"] for r in ran
                         if r["figures"]["evaluate_cpu_seconds"]], 0)]
    shares = [f"HV @ {share:.0%} CPU" for share in search_efficiency.SHARES]
    lines += units.code_block(table(rows, ["method", "seeds", *shares, "final HV", "vs random", "full-fidelity results",
                                           "trials", "CPU min to random's HV", "to TPE's", "candidates per CPU h"]))
    lines += ["", "Hypervolume over accuracy, MACs, parameters and inference energy, full-fidelity results only, "
              "median [min, max] over seeds; CPU shares are of the budget, counted in the CPU seconds each "
              "evaluation took. Time to target: the CPU minutes of evaluation each seed took to reach the median "
              "final hypervolume random search (TPE) reached in the whole budget, median over seeds (a seed that "
              "never reached it counts as the budget, marked >); candidates per CPU hour: trials per hour of "
              "evaluation CPU.", ""]
    lines.append(_search_goal(finals))
    lines += _smaller_rungs(searches)
    lines += _rung_agreement(searches)
    calibration = done.get(f"{config}-calibration")
    if calibration:
        f = calibration["figures"]
        lines.append(f"Full-fidelity ranking stability: {settings['calibration_candidates']} random candidates trained "
                     f"with seeds 0 and 1 agree with Kendall tau {f['kendall_tau']:+.2f} (mean |accuracy difference| "
                     f"{f['mean_abs_difference']:.2%}).")
    if done:
        lines += ["", units.machines_line(list(done.values()))]
    lines += _left_out(problems)
    return "\n".join(lines) + "\n"


def _time_to(ran: list[dict], finals: list[float] | None, settings: dict) -> str:
    """Median CPU minutes the method's seeds took to reach the median of `finals` (another
    method's final hypervolumes); '>' when at least half the seeds never reached it."""
    if not ran or not finals:
        return "-"
    target = statistics.median(finals)
    budget = settings["cpu_budget_seconds"]
    reached = [search_efficiency.seconds_to_reach(r["raw"]["trials"], settings, target) for r in ran]
    minutes = statistics.median([(s if s is not None else budget) / 60 for s in reached])
    never = sum(s is None for s in reached)
    return f"{'>' if never * 2 >= len(reached) else ''}{minutes:.1f}" + (f" ({never} never)" if never else "")


def _search_goal(finals: dict[str, list[float]]) -> str:
    complete = all(len(finals[m]) == len(search_efficiency.SEEDS) for m in ("eas", "random", "tpe"))
    if not all(finals[m] for m in ("eas", "random", "tpe")):
        return "Goal (EAS's default at least 1.2x random's final hypervolume and above TPE, median of 3 seeds): " \
               "not decided yet."
    eas, random, tpe = (statistics.median(finals[m]) for m in ("eas", "random", "tpe"))
    met = eas >= 1.2 * random and eas > tpe
    verdict = ("**met**" if met else "**not met**") if complete else "not decided yet (seeds missing), so far"
    return (f"Goal (EAS's default at least 1.2x random's final hypervolume and above TPE, median of 3 seeds): "
            f"{verdict}: EAS {eas / random:.2f}x random, {eas / tpe:.2f}x TPE.")


def _smaller_rungs(searches: dict[str, dict]) -> list[str]:
    """EAS's default against itself with its lower rungs on smaller images, seed by seed (the
    seeds differ more than the methods: see the spread above), saying when the two ran on
    different processors (a CPU second is then not the same work)."""
    by = {(r["settings"]["method"], r["settings"]["seed"]): r for r in searches.values()}
    pairs = [(seed, by[("eas", seed)], by[("eas-lowres", seed)]) for seed in search_efficiency.SEEDS
             if ("eas", seed) in by and ("eas-lowres", seed) in by]
    if not pairs:
        return ["", "Lower rungs on smaller images (`eas-lowres`, `--rung-resolution 0.7`): no seed measured for "
                "both yet."]

    def cpu(result: dict, rung: int) -> float | None:
        """The median CPU seconds of the unit's trials that stopped after `rung`."""
        spent = [t["evaluate_cpu_seconds"] for t in result["raw"]["trials"] if t.get("state") == "stopped"
                 and t.get("cached_from") is None and len(t.get("rungs") or []) == rung + 1
                 and units.finite(t.get("evaluate_cpu_seconds"))]
        return statistics.median(spent) if spent else None

    def said(seed: int, full: dict, low: dict) -> str:
        f, g = full["figures"], low["figures"]
        cpus = [r["machine"].get("cpu") for r in (full, low)]
        where = f" (eas on {cpus[0]}, eas-lowres on {cpus[1]})" if cpus[0] != cpus[1] else ""
        stopped = "; ".join(f"stopped after rung {rung}: {cpu(low, rung) / cpu(full, rung):.2f}x"
                            for rung in (0, 1) if cpu(low, rung) and cpu(full, rung))
        return (f"seed {seed}: final HV {g['final_hypervolume'] / f['final_hypervolume']:.2f}x, "
                f"{g['full_fidelity_results']} vs {f['full_fidelity_results']} full-fidelity results, "
                f"{g['trials']} vs {f['trials']} trials, median CPU seconds of a trial {stopped}{where}")

    return ["", "Lower rungs on smaller images (`eas-lowres`, `--rung-resolution 0.7`) against EAS's default at "
            f"the same seed and CPU seconds: {'; '.join(said(*pair) for pair in pairs)}."]


def _rung_agreement(searches: dict[str, dict]) -> list[str]:
    """Kendall tau between each lower rung and the top over EAS's candidates that reached the top."""
    from eas.pareto import kendall_tau

    pairs: dict[int, tuple[list, list]] = {}
    top = None
    for result in searches.values():
        if result["settings"]["method"] != "eas":
            continue
        for trial in result["raw"]["trials"]:
            rungs = trial.get("rungs") or []
            if not search_efficiency.full_fidelity(trial) or len(rungs) < 2:
                continue
            top = rungs[-1]["rung"]
            for rung in rungs[:-1]:
                lower, upper = pairs.setdefault(rung["rung"], ([], []))
                lower.append(rung["accuracy"])
                upper.append(rungs[-1]["accuracy"])
    if not pairs:
        return []
    parts = [f"rung {rung} vs top {kendall_tau(lower, upper):+.2f} (n = {len(lower)})"
             for rung, (lower, upper) in sorted(pairs.items())]
    return ["", f"The rung ladder (EAS's candidates that reached the top rung {top}, all seeds): " + ", ".join(parts)
            + ". Only promoted candidates are in it, so this is the agreement among the better ones."]


# -- the table registry --------------------------------------------------------------------------

def tables(results: Path = units.RESULTS) -> dict[str, Callable[[], str]]:
    """Table name -> what makes it from `results`."""
    made = {"search_efficiency/mobile": lambda: search_efficiency_table("mobile", results),
            "supernet_trust/mobile": lambda: supernet_trust.table(results),
            "training_recipe/mobile-knee": lambda: training_recipe.table(results),
            "microcontroller_truth/all": lambda: microcontroller_truth.table(results),
            "device_formats/all": lambda: device_formats.table(results),
            "int8_bits/all": lambda: int8_bits.table(results),
            "fair_fight/mobile-28px": lambda: fair_fight.table(results),
            "fair_fight/held-out": lambda: fair_fight.held_out_table(results),
            "fidelity_bias/mobile": lambda: fidelity_bias.table(results),
            "microcontroller_fight/64kB-256kB": lambda: microcontroller_fight.table(results),
            "resolution_fidelity/mobile": lambda: resolution_fidelity.table(results)}
    made.update({f"{name}/earlier-run": (lambda name=name: earlier_runs.table(name, results))
                 for name in earlier_runs.names(results)})
    return made


def documents(root: Path = units.ROOT) -> list[Path]:
    found = [root / "README.md"] if (root / "README.md").exists() else []
    return found + sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else found


def remade(text: str, made: dict[str, str], where: str) -> tuple[str, list[str]]:
    """The document with every table remade, and the names of those that changed."""
    changed = []

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in made:
            raise SystemExit(f"{where}: no benchmark makes table {name!r} (known: {', '.join(sorted(made))})")
        if match.group("body") != made[name]:
            changed.append(name)
        return f"<!-- table: {name} -->\n{made[name]}<!-- end table -->"

    return MARKER.sub(replace, text), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="Exit 1 when a table in the docs differs.")
    mode.add_argument("--print", action="store_true", help="Print every table instead of writing.")
    parser.add_argument("--root", type=Path, default=units.ROOT, help=argparse.SUPPRESS)  # tests: a copy
    args = parser.parse_args(argv)
    made = {name: make() for name, make in tables(args.root / "benchmarks" / "results").items()}
    if args.print:
        for name, text in made.items():
            print(f"## {name}\n\n{text}")
        return 0
    stale = []
    placed = set()
    for path in documents(args.root):
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(args.root))
        placed |= {m.group("name") for m in MARKER.finditer(text)}
        new, changed = remade(text, made, where)
        if args.check:
            stale += [f"{where}: table {name} differs from what benchmarks/results/ make" for name in changed]
        elif changed:
            path.write_text(new, encoding="utf-8")
            print(f"{where}: remade {', '.join(changed)}")
    for name in sorted(set(made) - placed):
        print(f"note: table {name} stands in no document", file=sys.stderr)
    if stale:
        print("\n".join(stale) + "\nrun `python -m benchmarks.tables` and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
