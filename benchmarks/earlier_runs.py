"""Tables of runs made before benchmark results were kept as data.

Their figures are those measured then, but the raw data they came from was not kept, so they
cannot be recomputed: each is a file `results/<benchmark>/earlier-run.json` holding the table as
it was printed, with the commit and date of the run, and the docs show it saying so. Rerunning the
benchmark as units replaces it.
"""

from __future__ import annotations

from pathlib import Path

import units

UNIT = "earlier-run"


def _check(result: dict) -> str | None:
    figures = result["figures"]
    blocks = figures.get("tables")
    if not isinstance(blocks, list) or not blocks or not all(isinstance(b, str) and b.strip() for b in blocks):
        return "figures.tables is not a list of printed tables"
    if result["settings"].get("recomputable") is not False:
        return "an earlier run must say it is not recomputable"
    return None


def _benchmark(name: str) -> units.Benchmark:
    return units.Benchmark(name, 0, [], run=lambda unit: ({}, None), check=_check)


def names(results: Path = units.RESULTS) -> list[str]:
    return sorted(p.parent.name for p in results.glob(f"*/{UNIT}.json"))


def table(name: str, results: Path = units.RESULTS) -> str:
    result, problem = units.read_result(results / name / f"{UNIT}.json", _benchmark(name))
    if problem:
        return f"Left out: {problem}\n"
    command = result["settings"].get("command", f"python benchmarks/{name}.py")
    lines = [f"From an earlier run (commit {result['commit'][:10]}, {result['date'][:10]}; `{command}`), not "
             "recomputable: its raw data was not kept.", ""]
    for block in result["figures"]["tables"]:
        lines += [*units.code_block(block.rstrip("\n")), ""]
    return "\n".join(lines[:-1]) + "\n"
