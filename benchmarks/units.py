"""Benchmarks as units of work whose results are kept as data.

A question that needs more CPU hours than one session (does EAS's search beat random search on
`mobile`?) is split into units of at most about an hour: one method x seed of a search, one
supernet training, one training run. Each finished unit is one JSON file,
`benchmarks/results/<benchmark>/<unit>.json`, holding the commit, date, machine and load it ran
on, its exact settings, the figures it measured and the raw per-trial data they come from, so
every table is recomputed from the files (`python -m benchmarks.tables`) and none is copied by
hand. A unit is written aside and renamed into place only when it finished: one that stops
mid-way leaves no result file.

A benchmark script declares its units and calls `main(benchmark)`:

    python benchmarks/search_efficiency.py --space mobile --list     # done / missing
    python benchmarks/search_efficiency.py --space mobile --next     # run the first missing unit
    python benchmarks/search_efficiency.py --space mobile --unit mobile-eas-seed1

Run a unit beside other work as `setsid -w nice -n 19 ... --next` (a unit limits its own threads
to 1; `setsid` gives it a session of its own, whose scheduling group it then nices, because Linux
shares the CPU equally between sessions whatever their processes' nice): budgets that compare
methods are counted in CPU seconds of the unit's processes, which a busy machine gives out more
slowly but not differently.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
REQUIRED = {"benchmark": str, "unit": str, "version": int, "commit": str, "date": str, "machine": dict,
            "settings": dict, "figures": dict, "raw": (dict, list, type(None)), "load": dict}
MAX_RESULT_BYTES = 64 * 2**20  # a result file is data for tables, not an archive


@dataclass(frozen=True)
class Unit:
    """One piece of work: its name (the file's stem) and the settings that make it. A unit that
    works on others' results names them in `needs`; it runs once they are done, and finds
    them in `inputs` ({unit name: result})."""

    name: str
    settings: dict
    needs: tuple[str, ...] = ()
    inputs: dict = field(default_factory=dict, compare=False)


class Refused(Exception):
    """A request no unit can answer (a unit that does not exist, or one whose inputs are not done):
    `main` says it in one line and exits 2, like any bad input."""


@dataclass
class Benchmark:
    """A benchmark's units and how to run one. `run(unit)` returns (figures, raw); `check(result)`
    names an impossible figure of a stored result (None when it is sound); `refuse(unit)` says why
    this machine cannot run a unit (None when it can). `version` changes when
    a change to the benchmark makes older results incomparable: those are then left out."""

    name: str
    version: int
    units: list[Unit]
    run: Callable[[Unit], tuple[dict, object]]
    check: Callable[[dict], str | None] = lambda result: None
    refuse: Callable[[Unit], str | None] = lambda unit: None  # why this machine cannot run the unit
    description: str = ""
    extra_args: list[tuple[tuple, dict]] = field(default_factory=list)

    def folder(self, results: Path = RESULTS) -> Path:
        return results / self.name

    def unit(self, name: str) -> Unit:
        found = next((u for u in self.units if u.name == name), None)
        if found is None:
            raise Refused(f"{self.name}: no unit {name!r} (units: {', '.join(u.name for u in self.units)})")
        return found


# -- where a unit ran ---------------------------------------------------------------------------

def git_commit() -> str:
    """The commit the benchmark code came from; '+dirty' when EAS or benchmark code differed from it."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--", "eas", "eas_agent", "benchmarks",
                                  ":!benchmarks/results"], cwd=ROOT, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if changed.strip() else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return ", ".join(names) if done.returncode == 0 and names else None


def machine() -> dict:
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = None
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory_bytes": memory, "gpu": gpu_name(),
            "python": platform.python_version(), "system": f"{platform.system()} {platform.release()}"}


def _busy_and_total() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    except (OSError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - fields[3] - fields[4]) / ticks, sum(fields) / ticks


PROBE = "conv-net, 24 SGD steps of 64 images at 28 px, 1 thread"  # changes when pace_probe changes


def pace_probe(repeats: int = 3) -> float:
    """CPU seconds a fixed piece of training takes here (the least of `repeats`): the machine's
    pace. Two VMs that name the same CPU model ran the test suite 1.6x apart, so a CPU-seconds
    budget gives different machines different amounts of work; the pace says how much."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        generator = torch.Generator().manual_seed(0)
        images = torch.randn(64, 1, 28, 28, generator=generator)
        labels = torch.randint(0, 10, (64,), generator=generator)
        taken = []
        for _ in range(repeats):
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
                                      torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
                                      torch.nn.Conv2d(64, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
                                      torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 10))
            optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
            start = time.process_time()
            for _ in range(24):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(net(images), labels).backward()
                optimizer.step()
            taken.append(time.process_time() - start)
    finally:
        torch.set_num_threads(threads)
    return round(min(taken), 3)


class LoadRecorder:
    """The machine's load while a unit runs: the 1-minute load average every `every` seconds,
    the share of all cores busy, and the CPU seconds this process and its children used."""

    def __init__(self, every: float = 30.0):
        self.every, self.samples = every, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.samples.append(float(Path("/proc/loadavg").read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                return

    def __enter__(self) -> LoadRecorder:
        self.wall0, self.stat0 = time.time(), _busy_and_total()
        self.own0 = _own_cpu_seconds()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.wall = time.time() - self.wall0
        self.own = _own_cpu_seconds() - self.own0
        stat1 = _busy_and_total()
        self.busy_share = None
        if self.stat0 and stat1 and stat1[1] > self.stat0[1]:
            self.busy_share = (stat1[0] - self.stat0[0]) / (stat1[1] - self.stat0[1])

    def to_dict(self) -> dict:
        samples = self.samples
        return {"wall_seconds": round(self.wall, 1), "own_cpu_seconds": round(self.own, 1),
                "machine_busy_share": None if self.busy_share is None else round(self.busy_share, 3),
                "others_cpu_seconds": None if self.busy_share is None else
                round(max(0.0, self.busy_share * self.wall * (os.cpu_count() or 1) - self.own), 1),
                "loadavg_mean": round(sum(samples) / len(samples), 2) if samples else None,
                "loadavg_max": max(samples) if samples else None, "niceness": os.nice(0)}


def _own_cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# -- result files -------------------------------------------------------------------------------

def write_result(benchmark: Benchmark, unit: Unit, figures: dict, raw, load: dict, started: str, commit: str,
                 results: Path = RESULTS, pace: dict | None = None) -> Path:
    """Write the unit's file aside, then rename it into place: a file in results/ is always whole."""
    document = {"benchmark": benchmark.name, "unit": unit.name, "version": benchmark.version,
                "commit": commit, "date": started, "machine": {**machine(), **({"pace": pace} if pace else {})},
                "settings": unit.settings,
                "figures": figures, "raw": raw, "load": load}
    text = json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"
    folder = benchmark.folder(results)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{unit.name}.json.partial-{os.getpid()}"
    partial.write_text(text)
    os.replace(partial, folder / f"{unit.name}.json")
    return folder / f"{unit.name}.json"


def read_result(path: Path, benchmark: Benchmark) -> tuple[dict | None, str | None]:
    """(result, None) for a sound file, or (None, one line saying why it is left out)."""
    where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
    try:
        if path.stat().st_size > MAX_RESULT_BYTES:
            return None, f"{where}: larger than {MAX_RESULT_BYTES // 2**20} MiB"
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return None, f"{where}: unreadable ({type(error).__name__})"
    try:
        result = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        return None, f"{where}: nested too deeply to be a result"
    except ValueError as error:
        return None, f"{where}: not whole JSON ({str(error).splitlines()[0][:80]})"
    if not isinstance(result, dict):
        return None, f"{where}: not a JSON object"
    for key, kind in REQUIRED.items():
        if not isinstance(result.get(key), kind) or isinstance(result.get(key), bool):
            return None, f"{where}: '{key}' missing or not {getattr(kind, '__name__', 'the right type')}"
    if result["benchmark"] != benchmark.name or result["unit"] != path.stem:
        return None, f"{where}: names benchmark {result['benchmark']!r} unit {result['unit']!r}, not its place"
    if result["version"] != benchmark.version:
        return None, (f"{where}: from benchmark version {result['version']}, this is version {benchmark.version} "
                      "(rerun the unit)")
    known = next((u for u in benchmark.units if u.name == path.stem), None)
    if known is not None and known.settings != result["settings"]:
        difference = _first_difference(known.settings, result["settings"])
        return None, f"{where}: its settings differ from the unit's ({difference})"
    problem = benchmark.check(result) or _pace_problem(result["machine"].get("pace"))
    if problem:
        return None, f"{where}: {problem}"
    return result, None


def _pace_problem(pace) -> str | None:
    """Units from before the probe have no pace; one that has it holds positive CPU seconds."""
    if pace is None:
        return None
    if not isinstance(pace, dict) or not all(finite(pace.get(k)) and pace[k] > 0
                                             for k in ("cpu_seconds_before", "cpu_seconds_after")):
        return f"machine pace {str(pace)[:60]} is not two positive CPU-second figures"
    return None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _first_difference(expected: dict, found: dict) -> str:
    for key in sorted(set(expected) | set(found)):
        if expected.get(key) != found.get(key):
            return f"{key}: {str(found.get(key))[:40]} instead of {str(expected.get(key))[:40]}"
    return "?"


def load_results(benchmark: Benchmark, results: Path = RESULTS) -> tuple[dict[str, dict], list[str]]:
    """{unit name: result} of the sound files of the benchmark's declared units, and one line for
    each file left out (truncated, hand-edited to an impossible value, another version)."""
    found, problems = {}, []
    folder = benchmark.folder(results)
    names = {u.name for u in benchmark.units}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if path.stem not in names:
            continue
        result, problem = read_result(path, benchmark)
        if problem:
            problems.append(problem)
        else:
            found[path.stem] = result
    return found, problems


# -- the command line of every benchmark ---------------------------------------------------------

def listing(benchmark: Benchmark, results: Path = RESULTS) -> str:
    done, problems = load_results(benchmark, results)
    lines = [f"{benchmark.name}: {len(done)} of {len(benchmark.units)} units done"]
    for unit in benchmark.units:
        result = done.get(unit.name)
        state = f"done   {result['date'][:16]}  {result['commit'][:12]}" if result else "missing"
        lines.append(f"  {unit.name:28} {state}")
    lines += [f"  left out: {p}" for p in problems]
    return "\n".join(lines)


def run_unit(benchmark: Benchmark, unit: Unit, results: Path = RESULTS) -> Path:
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    commit = git_commit()  # the code the unit runs: taken before it starts
    reason = benchmark.refuse(unit)
    if reason:
        raise Refused(f"{benchmark.name}: {reason}")
    if unit.needs:
        done, _ = load_results(benchmark, results)
        missing = [name for name in unit.needs if name not in done]
        if missing:
            raise Refused(f"{benchmark.name}: unit {unit.name} needs {', '.join(missing)} done first")
        unit = replace(unit, inputs={name: done[name] for name in unit.needs})
    print(f"{benchmark.name}: running unit {unit.name} ({json.dumps(unit.settings, sort_keys=True)[:300]})",
          flush=True)
    pace = {"probe": PROBE, "cpu_seconds_before": pace_probe()}
    with LoadRecorder() as load:
        figures, raw = benchmark.run(unit)
    pace["cpu_seconds_after"] = pace_probe()
    path = write_result(benchmark, unit, figures, raw, load.to_dict(), started, commit, results, pace)
    print(f"{benchmark.name}: unit {unit.name} done in {load.wall / 60:.1f} min "
          f"({load.own / 60:.1f} CPU min): {path}", flush=True)
    return path


def parse_args(benchmark_description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None,
               argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=benchmark_description)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="Units done and missing (the default).")
    what.add_argument("--next", action="store_true", help="Run the first unit without a result file.")
    what.add_argument("--unit", help="Run this unit (again, replacing its result once it finishes).")
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    if extra:
        extra(parser)
    return parser.parse_args(argv)


def main(benchmark: Benchmark, args: argparse.Namespace) -> None:
    """--list (default), --next or --unit NAME."""
    limit_threads()
    if args.unit or args.next:
        lower_own_group()
    try:
        run_requested(benchmark, args)
    except Refused as refused:
        print(refused, file=sys.stderr)
        raise SystemExit(2) from None


def run_requested(benchmark: Benchmark, args: argparse.Namespace) -> None:
    if args.unit:
        run_unit(benchmark, benchmark.unit(args.unit), args.results)
    elif args.next:
        done, _ = load_results(benchmark, args.results)
        missing = [u for u in benchmark.units if u.name not in done]
        if not missing:
            print(f"{benchmark.name}: every unit is done")
            return
        ready = [u for u in missing if all(name in done for name in u.needs)]
        missing = ready or missing  # none ready: the first says what it waits for
        run_unit(benchmark, missing[0], args.results)
    else:
        print(listing(benchmark, args.results))


AUTOGROUP = Path("/proc/self/autogroup")


def group_nice() -> int | None:
    """The nice of this process's autogroup; None outside one: the group every process starts in
    until something calls setsid (a container's or CI runner's tree) shows an empty file."""
    fields = AUTOGROUP.read_text().split() if AUTOGROUP.exists() else []
    return int(fields[-1]) if fields else None


def lower_own_group() -> bool:
    """Make a niced unit's nice hold against other sessions; True when it set its group's.

    Linux groups processes by session (autogroups, on by default) and shares the CPU equally
    between groups: nice orders only the processes of one session. A unit run with `nice -n 19`
    from one terminal and the tests from another got as much CPU as the tests (measured: a
    supernet at nice 0 got 0.4 of a core beside two units at nice 19, 1.8 cores once their groups
    were niced). A unit that leads a session of its own (started with `setsid`) gives its group
    its nice; in someone else's session it leaves the group alone and says how to start it."""
    niceness = os.nice(0)
    if niceness <= 0 or not AUTOGROUP.exists():
        return False
    if os.getsid(0) != os.getpid():
        print(f"note: nice {niceness} orders this unit only against its own terminal's processes (Linux "
              "autogroups); start it with `setsid nice -n 19 ...` to yield to the tests as well", file=sys.stderr)
        return False
    try:
        AUTOGROUP.write_text(str(niceness))
    except OSError:
        return False
    return True


def limit_threads() -> None:
    """One thread per unit unless told otherwise, so that a unit runs beside the tests; threads
    that wait sleep (a unit may import torch before EAS, which sets this too): busy-waiting
    OpenMP threads beside other work made a supernet step cost 3.5x its CPU time."""
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, os.environ.get("EAS_BENCHMARK_THREADS", "1"))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# -- what every table says -----------------------------------------------------------------------

def code_block(text: str) -> list[str]:
    """A plain-text table as Markdown lines (indented: a code block keeps its columns)."""
    return ["    " + line if line else "" for line in text.splitlines()]


def machines_line(results: list[dict]) -> str:
    """Where the units ran and how busy the machine was meanwhile."""
    cpus = sorted({f"{r['machine'].get('cpu')} ({r['machine'].get('cores')} cores"
                   + (f", {r['machine']['gpu']}" if r["machine"].get("gpu") else "") + ")" for r in results})
    loads = [r["load"].get("machine_busy_share") for r in results if finite(r["load"].get("machine_busy_share"))]
    whose = "its" if len(cpus) == 1 else "their"
    busy = (f"; {whose} cores were {statistics.median(loads):.0%} busy while they ran (median over units)"
            if loads else "")
    where = cpus[0] if len(cpus) == 1 else ", ".join(cpus[:-1]) + " and " + cpus[-1]
    return "Measured on " + where + busy + "." + pace_sentence(results)


def pace_sentence(results: list[dict]) -> str:
    """How fast the machines were: the pace probe's CPU seconds (the lesser of before and after a
    unit, as the other may have met a busier machine), over the units that ran it."""
    paces = [min(p["cpu_seconds_before"], p["cpu_seconds_after"]) for r in results
             if isinstance(p := r["machine"].get("pace"), dict)]
    if not paces:
        return ""
    low, high = min(paces), max(paces)
    spread = f"{low:.2f} s" if len(paces) == 1 else f"{low:.2f}-{high:.2f} s ({high / low:.2f}x)"
    return (f" The machine's pace (a fixed piece of training at 1 thread, in CPU seconds; {len(paces)} of "
            f"{len(results)} units measured it): {spread}.")


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fraction(value) -> bool:
    """A stored accuracy or share: a number in [0, 1]."""
    return finite(value) and 0 <= value <= 1


def fractions(values, count: int) -> bool:
    """`count` stored accuracies, each in [0, 1] (one per network a unit trained)."""
    return isinstance(values, list) and len(values) == count and all(fraction(v) for v in values)


if __name__ == "__main__":
    sys.exit("run a benchmark script (e.g. benchmarks/search_efficiency.py --list), or python -m benchmarks.tables")
