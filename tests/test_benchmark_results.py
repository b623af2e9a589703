"""Benchmark results kept as data: units written whole or not at all, result files read back with
one-line reasons for what is left out, and the docs' tables made from them (no benchmark runs here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import int8_bits  # noqa: E402
import microcontroller_truth  # noqa: E402
import search_efficiency  # noqa: E402
import tables  # noqa: E402
import units  # noqa: E402

REAL_PACE_PROBE = units.pace_probe


@pytest.fixture(autouse=True)
def quick_pace(monkeypatch):
    """The pace probe trains for seconds; here each unit gets the next of a known series instead
    (the real probe has a test of its own), so the file must hold what the probe returned."""
    paces = iter(range(1, 1000))
    monkeypatch.setattr(units, "pace_probe", lambda: float(next(paces)))


def toy_benchmark(run=None, version: int = 1) -> units.Benchmark:
    def check(result):
        value = result["figures"].get("value")
        return None if units.finite(value) and 0 <= value <= 1 else f"value {value} is not in [0, 1]"

    return units.Benchmark("toy", version, [units.Unit("a", {"x": 1}), units.Unit("b", {"x": 2})],
                           run or (lambda unit: ({"value": unit.settings["x"] / 10}, {"rows": [unit.settings["x"]]})),
                           check)


def test_next_runs_the_first_missing_unit_and_writes_a_whole_file(tmp_path):
    benchmark = toy_benchmark()
    args = units.parse_args("", argv=["--next", "--results", str(tmp_path)])
    units.main(benchmark, args)
    result = json.loads((tmp_path / "toy" / "a.json").read_text())
    for key in ("benchmark", "unit", "commit", "date", "machine", "settings", "figures", "raw", "load"):
        assert key in result
    assert result["figures"] == {"value": 0.1} and result["raw"] == {"rows": [1]}
    assert result["machine"]["cores"] == os.cpu_count() and result["load"]["own_cpu_seconds"] >= 0
    assert result["machine"]["pace"] == {"probe": units.PROBE, "cpu_seconds_before": 1.0, "cpu_seconds_after": 2.0}
    assert not (tmp_path / "toy" / "b.json").exists()
    units.main(benchmark, args)  # the next one now
    assert (tmp_path / "toy" / "b.json").exists()
    listing = units.listing(benchmark, tmp_path)
    assert listing.startswith("toy: 2 of 2 units done")


def test_a_unit_that_needs_others_waits_for_them_and_reads_their_results(tmp_path):
    def run(unit):
        if unit.needs:
            return {"value": unit.inputs["a"]["figures"]["value"] * 2}, None
        return {"value": unit.settings["x"] / 10}, None

    benchmark = units.Benchmark("toy", 1, [units.Unit("sum", {"x": 0}, needs=("a",)), units.Unit("a", {"x": 1})],
                                run)
    with pytest.raises(units.Refused, match="unit sum needs a done first"):
        units.run_unit(benchmark, benchmark.unit("sum"), tmp_path)
    args = units.parse_args("", argv=["--next", "--results", str(tmp_path)])
    units.main(benchmark, args)  # "sum" is first but not ready: "a" runs
    assert (tmp_path / "toy" / "a.json").exists() and not (tmp_path / "toy" / "sum.json").exists()
    units.main(benchmark, args)
    assert json.loads((tmp_path / "toy" / "sum.json").read_text())["figures"] == {"value": 0.2}


def test_a_unit_that_does_not_exist_or_is_not_ready_is_refused_in_one_line_with_exit_2(tmp_path, capsys):
    benchmark = units.Benchmark("toy", 1, [units.Unit("sum", {"x": 0}, needs=("a",)), units.Unit("a", {"x": 1})],
                                lambda unit: ({"value": 0.5}, None))
    for name, reason in (("nope", "toy: no unit 'nope' (units: sum, a)"), ("sum", "toy: unit sum needs a done first")):
        with pytest.raises(SystemExit) as stopped:
            units.main(benchmark, units.parse_args("", argv=["--unit", name, "--results", str(tmp_path)]))
        assert stopped.value.code == 2 and capsys.readouterr().err == reason + "\n"
    assert not (tmp_path / "toy").exists() or not any((tmp_path / "toy").iterdir())


def test_a_unit_that_stops_midway_leaves_no_result_file(tmp_path):
    def fails(unit):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        units.run_unit(toy_benchmark(fails), units.Unit("a", {"x": 1}), tmp_path)
    assert not list(tmp_path.rglob("*.json*"))
    assert "a                            missing" in units.listing(toy_benchmark(), tmp_path)


@pytest.mark.parametrize("damage, reason", [
    (lambda text: text[: len(text) // 2], "not whole JSON"),
    (lambda text: text.replace('"value": 0.1', '"value": 7.5'), "value 7.5 is not in [0, 1]"),
    (lambda text: text.replace('"version": 1', '"version": 0'), "from benchmark version 0"),
    (lambda text: text.replace('"x": 1', '"x": 3'), "its settings differ"),
    (lambda text: "[" * 200_000 + "]" * 200_000, "nested too deeply"),
    (lambda text: text.replace('"value": 0.1', '"value": NaN'), "not whole JSON"),
    (lambda text: text.replace('"cpu_seconds_before": 1.0', '"cpu_seconds_before": -1.0'), "machine pace"),
])
def test_a_damaged_result_is_named_in_one_line_and_left_out(tmp_path, damage, reason):
    benchmark = toy_benchmark()
    units.run_unit(benchmark, benchmark.units[0], tmp_path)
    units.run_unit(benchmark, benchmark.units[1], tmp_path)
    path = tmp_path / "toy" / "a.json"
    path.write_text(damage(path.read_text()))
    done, problems = units.load_results(benchmark, tmp_path)
    assert list(done) == ["b"]
    assert len(problems) == 1 and reason in problems[0] and "a.json" in problems[0] and "\n" not in problems[0]


def test_the_pace_probe_measures_cpu_time_and_leaves_torchs_threads_as_they_were():
    import torch

    threads = torch.get_num_threads()
    pace = REAL_PACE_PROBE(repeats=1)
    assert isinstance(pace, float) and 0 < pace < 600 and torch.get_num_threads() == threads


@pytest.mark.skipif(not units.AUTOGROUP.exists(), reason="Linux autogroups only")
def test_a_niced_unit_leading_its_own_session_nices_its_group_and_leaves_anothers_alone():
    ask = ("import sys; sys.path.insert(0, 'benchmarks'); import units; "
           "print(units.lower_own_group(), units.group_nice())")
    own = subprocess.run(["setsid", "nice", "-n", "7", sys.executable, "-c", ask], cwd=ROOT, capture_output=True,
                         text=True)
    assert own.stdout.split() == ["True", "7"], own.stderr
    ours = str(units.group_nice())  # the group this test runs in: None in the one a CI runner's tree starts in
    shared = subprocess.run(["nice", "-n", "7", sys.executable, "-c", ask], cwd=ROOT, capture_output=True, text=True)
    assert shared.stdout.split() == ["False", ours] and "setsid" in shared.stderr
    assert str(units.group_nice()) == ours


def test_the_machines_line_says_how_far_apart_the_machines_paces_were():
    def result(cpu, pace=None):
        return {"machine": {"cpu": cpu, "cores": 2, **({"pace": pace} if pace else {})},
                "load": {"machine_busy_share": 0.5}}

    line = units.machines_line([result("A", {"cpu_seconds_before": 2.0, "cpu_seconds_after": 1.6}),
                                result("A", {"cpu_seconds_before": 2.4, "cpu_seconds_after": 2.5}), result("B")])
    assert line.startswith("Measured on A (2 cores) and B (2 cores); their cores were 50% busy")
    assert line.endswith("(a fixed piece of training at 1 thread, in CPU seconds; 2 of 3 units measured it): "
                         "1.60-2.40 s (1.50x).")
    assert units.machines_line([result("B")]) == ("Measured on B (2 cores); its cores were 50% busy while they ran "
                                                  "(median over units).")


def search_row(number: int, accuracy: float, macs: float, cpu: float, state: str = "complete") -> dict:
    return {"number": number, "state": state, "status": "ok" if state == "complete" else "stopped",
            "accuracy": accuracy, "macs": macs, "params": 50_000.0, "inference_energy_j_per_1k": 1.0,
            "cached_from": None, "finished": 1000.0 + number, "evaluate_cpu_seconds": cpu,
            "rungs": [{"rung": 0, "steps": 8, "accuracy": accuracy - 0.1, "go_on": True},
                      {"rung": 2, "steps": 71, "accuracy": accuracy, "go_on": False}]}


def test_search_figures_follow_from_the_raw_trials():
    settings = {**search_efficiency.CONFIGS["mobile"], "kind": "search", "method": "eas", "seed": 0}
    trials = [search_row(0, 0.80, 1e7, 600), search_row(1, 0.85, 1.5e7, 600), search_row(2, 0.6, 3e6, 600, "stopped"),
              search_row(3, 0.82, 5e6, 600)]
    figures = search_efficiency.search_figures(trials, settings)
    assert figures["full_fidelity_results"] == 3 and figures["trials"] == 4 and figures["stopped"] == 1
    # at 25% of 3000 CPU seconds only the first trial was done; the final counts all three
    only_first = search_efficiency.search_figures(trials[:1], settings)["final_hypervolume"]
    assert figures["hypervolume_at_share"]["0.25"] == pytest.approx(only_first)
    assert figures["final_hypervolume"] > figures["hypervolume_at_share"]["0.5"] > only_first > 0
    point = search_efficiency.normalised(trials[0], settings)
    assert point.shape == (4,) and np.all((point >= 0) & (point <= 1))
    result = {"settings": settings, "figures": figures, "raw": {"trials": trials}}
    assert search_efficiency.check(result) is None
    edited = {**result, "figures": {**figures, "final_hypervolume": figures["final_hypervolume"] + 0.01}}
    assert "do not follow from its raw trials" in search_efficiency.check(edited)
    # time to target: the CPU seconds spent when the hypervolume first reached it
    assert search_efficiency.seconds_to_reach(trials, settings, only_first) == 600
    assert search_efficiency.seconds_to_reach(trials, settings, figures["final_hypervolume"]) == 2400
    assert search_efficiency.seconds_to_reach(trials, settings, figures["final_hypervolume"] + 0.01) is None


def test_microcontroller_figures_follow_from_its_networks_as_stored():
    rows = [{"genome": "g", "sram_counted": 1000, "arena_head": 1000, "flash_counted": 5100, "file_bytes": 5000,
             "operators_match": True},
            {"genome": "h", "sram_counted": 900, "arena_head": 1000, "flash_counted": 5000, "file_bytes": 5000,
             "operators_match": False},
            {"genome": "i", "sram_counted": 700, "flash_counted": 4000, "failed": "no GELU kernel"}]
    figures = microcontroller_truth.figures_of(rows)
    assert figures["loaded"] == 2 and figures["operators_match"] == 1
    assert figures["sram_largest_difference"] == pytest.approx(0.1)
    assert figures["flash_largest_difference"] == pytest.approx(0.02)
    # as a result file holds it: keys sorted, read back
    stored = json.loads(json.dumps({"figures": figures, "raw": {"networks": rows}}, sort_keys=True))
    assert microcontroller_truth.check(stored) is None
    stored["figures"]["sram_largest_difference"] = 0.0
    assert "not those of its networks" in microcontroller_truth.check(stored)


def test_int8_bits_figures_follow_from_its_networks_and_a_unit_runs_only_on_its_kind_of_cpu(tmp_path, capsys,
                                                                                            monkeypatch):
    def network(fp32, eight, seven):
        return {"genome": "g", "macs": 9e6, "fp32": {"test_accuracy": fp32, "bytes": 9},
                "int8-8bit": {"test_accuracy": eight, "top1_agreement": 0.8, "bytes": 3},
                "int8-7bit": {"test_accuracy": seven, "top1_agreement": 0.99, "bytes": 3}}

    rows = [network(0.85, 0.70, 0.849), network(0.80, 0.79, 0.80), network(0.90, 0.60, 0.897)]
    figures = int8_bits.figures_of(rows)
    assert figures["int8-8bit"]["median_accuracy_change_points"] == pytest.approx(-15)
    assert figures["int8-7bit"]["median_accuracy_change_points"] == pytest.approx(-0.1)
    assert figures["int8-8bit"]["lowest_top1_agreement"] == 0.8
    stored = json.loads(json.dumps({"figures": figures, "raw": {"networks": rows}}, sort_keys=True))
    assert int8_bits.check(stored) is None
    stored["raw"]["networks"][1]["int8-7bit"]["top1_agreement"] = 1.5  # hand-edited to the impossible
    assert "int8-7bit figures are missing or impossible" in int8_bits.check(stored)

    monkeypatch.setattr(int8_bits, "cpu_has_vnni", lambda: False)
    with pytest.raises(SystemExit) as stopped:
        units.main(int8_bits.benchmark(), units.parse_args("", argv=["--unit", "vnni", "--results", str(tmp_path)]))
    assert stopped.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith("int8_bits: unit vnni runs on a CPU with VNNI") and said.endswith("run --unit no-vnni")
    assert not (tmp_path / "int8_bits").exists() or not any((tmp_path / "int8_bits").iterdir())


def copy_of_the_docs(tmp_path: Path) -> Path:
    for name in ("README.md", "docs"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    shutil.copytree(ROOT / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    return tmp_path


def test_the_docs_tables_are_what_the_committed_results_make():
    done = subprocess.run([sys.executable, "-m", "benchmarks.tables", "--check"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


def test_check_names_a_table_typed_by_hand_and_a_rewrite_restores_it(tmp_path, capsys):
    root = copy_of_the_docs(tmp_path)
    page = root / "docs" / "benchmarks.md"
    original = page.read_text()
    page.write_text(original.replace("0.5671", "0.6671", 1))  # a figure of front_vs_handmade, edited by hand
    assert tables.main(["--check", "--root", str(root)]) == 1
    assert "docs/benchmarks.md: table front_vs_handmade/earlier-run differs" in capsys.readouterr().err
    assert tables.main(["--root", str(root)]) == 0
    assert page.read_text() == original


def test_a_damaged_result_is_left_out_of_its_table_and_named_under_it(tmp_path):
    root = copy_of_the_docs(tmp_path)
    result = root / "benchmarks" / "results" / "compression" / "earlier-run.json"
    result.write_text(result.read_text()[:200])
    made = tables.tables(root / "benchmarks" / "results")["compression/earlier-run"]()
    assert made.startswith("Left out: ") and "earlier-run.json: not whole JSON" in made
    assert "3.11x smaller" not in made


def test_an_unknown_table_in_the_docs_is_refused_in_one_line(tmp_path):
    root = copy_of_the_docs(tmp_path)
    (root / "docs" / "extra.md").write_text("<!-- table: nothing/here -->\n<!-- end table -->\n")
    with pytest.raises(SystemExit, match="no benchmark makes table 'nothing/here'"):
        tables.main(["--check", "--root", str(root)])


def test_each_search_efficiency_figure_stands_under_its_heading():
    """Read back by heading: each method's trial count and full-fidelity count are its results'."""
    text = tables.search_efficiency_table("mobile")
    block = [line[4:] for line in text.splitlines() if line.startswith("    ")]
    # each column spans its run of dashes (right-aligned values can be wider than their heading)
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", block[1])]
    headings = [block[0][a:b].strip() for a, b in spans]
    columns = [spans[headings.index(name)] for name in ("final HV", "vs random", "full-fidelity results", "trials")]
    done, _ = units.load_results(search_efficiency.benchmark("mobile"), units.RESULTS)
    for line in block[2:]:
        method = line.split()[0]
        final, ratio, counts, trials = (line[a:b].strip() for a, b in columns)
        ran = [r for r in done.values() if r["settings"].get("method") == method]
        if not ran:
            assert final == counts == trials == "-"
            continue
        # the median as the table writes it: two seeds' 70 and 81 are "76" (75.5, rounded half to even)
        assert trials.split()[0] == f"{statistics.median(r['figures']['trials'] for r in ran):.0f}"
        assert counts == f"{min(r['figures']['full_fidelity_results'] for r in ran)}-" \
                         f"{max(r['figures']['full_fidelity_results'] for r in ran)}"
        assert ratio == "-" or ratio.endswith("x")


def test_search_efficiency_lists_its_units():
    done = subprocess.run([sys.executable, "benchmarks/search_efficiency.py", "--space", "mobile", "--list"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    count = len(search_efficiency.METHODS) * len(search_efficiency.SEEDS) + 1
    assert lines[0].startswith("search_efficiency: ") and lines[0].endswith(f"of {count} units done")
    names = [line.split()[0] for line in lines[1:count + 1]]
    assert names[:5] == ["mobile-eas-seed0", "mobile-tpe-seed0", "mobile-random-seed0", "mobile-eas-lowres-seed0",
                         "mobile-nsga2-seed0"]
    assert names[-1] == "mobile-calibration"


def test_the_fair_fight_compares_each_seeds_front_with_the_stronger_variant_of_each_family(tmp_path):
    import fair_fight

    def model(label, accuracy, genome):
        return {"label": label, "genome": genome, "verified_accuracy": accuracy, "verified_interval":
                [accuracy - 0.01, accuracy + 0.01], "seed_spread": 0.0, "seeds": 2}

    costs = {"g-front": {"macs": 2_000_000, "params": 50_000, "latency_ms": 0.2, "inference_energy_j_per_1k": 0.3},
             "g-small": {"macs": 500_000, "params": 300_000, "latency_ms": 0.1, "inference_energy_j_per_1k": 0.1},
             "g-adapted": {"macs": 3_000_000, "params": 300_000, "latency_ms": 0.3, "inference_energy_j_per_1k": 0.5}}
    done = {"search-seed0": {"figures": {"objectives": ["accuracy", "macs"], "reference": {"macs": 2.2e7}}},
            "front-seed0": {"figures": {"models": [{**model("trial 3", 0.85, "g-front"), "trial": 3}]}},
            "timing": {"figures": {"costs": costs}}}
    for family in fair_fight.FAMILIES:
        done[family] = {"figures": {"models": [model(f"{family}@0.35", 0.70, "g-small")]}}
        done[family + "-adapted"] = {"figures": {"models": [model(f"{family}@0.35:adapted", 0.80, "g-adapted")]}}
    compared = fair_fight.comparison(done, 0)
    assert set(compared["hypervolume"]["families"]) == {"mobilenet_v2", "mobilenet_v2 adapted", "mobilenet_v3_small",
                                                        "mobilenet_v3_small adapted"}
    # at its latency (0.2 ms) the best baseline is the published one (0.1 ms, 70%): +15 points
    assert compared["summary"]["gain_at_latency"] == pytest.approx(0.15)
    assert fair_fight.comparison({k: v for k, v in done.items() if k != "timing"}, 0) is None  # not all done yet
    assert fair_fight.check({"settings": {"kind": "front"}, "figures": {"models": [model("x", 1.5, "g")]}})
    assert fair_fight.check({"settings": {"kind": "front"}, "figures": {"models": [model("x", 0.5, "g")]}}) is None
    beaten = {"baseline": "mobilenet_v2@0.35:adapted", "status": "ok", "accuracy": 0.8, "cost": "latency_ms",
              "cost_value": 0.3, "trial": 5, "seconds": 125.0, "trials": 6, "cpu_seconds": 60.0}
    search = {"front": [{"genome": "g-front", "search_accuracy": 0.8}], "reference": {},
              "time_to_beat": [beaten, {**beaten, "baseline": "mobilenet_v2@1.0", "trial": None, "seconds": 3000.0}]}
    assert fair_fight.check({"settings": {"kind": "search"}, "figures": search}) is None
    lines = "\n".join(fair_fight._time_to_beat_lines({"search-seed0": {"figures": search}}))
    assert "trial 5" in lines and "2m05s (1m00s CPU), 6 trials" in lines and "not beaten" in lines
    assert "in 50m00s" in lines
    search["time_to_beat"][0]["accuracy"] = 80.0  # a percentage where a fraction belongs
    assert fair_fight.check({"settings": {"kind": "search"}, "figures": search})


def test_resolution_fidelity_ranks_each_resolution_against_28_px_from_the_stored_results(tmp_path):
    import resolution_fidelity

    benchmark = resolution_fidelity.benchmark()
    accuracies = {"res28-seed0": [0.70, 0.80, 0.75, 0.60], "res20-seed0": [0.65, 0.78, 0.70, 0.50],
                  "res14-seed0": [0.70, 0.50, 0.60, 0.65]}
    for name, values in accuracies.items():
        unit = benchmark.unit(name)
        values = values * (unit.settings["candidates"] // 4)
        seconds = 100.0 if name == "res28-seed0" else 50.0
        units.write_result(benchmark, unit, {"accuracies": values, "cpu_seconds": seconds, "macs": 10}, None,
                           {}, "2026-12-06T00:00:00+00:00", "0" * 40, tmp_path)
    text = resolution_fidelity.table(tmp_path)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip().startswith("res")}
    assert rows["res20-seed0"][2] == "+1.00" and rows["res20-seed0"][3] == "0.50x"  # same order, half the time
    assert float(rows["res14-seed0"][2]) < 0  # another order
    assert "3 of 5 units done" in text
    damaged = {"settings": benchmark.unit("res20-seed0").settings, "figures": {"accuracies": [1.5], "cpu_seconds": 1}}
    assert resolution_fidelity.check(damaged)


def test_the_microcontroller_fight_scales_both_families_to_the_limits_and_compares_in_memory():
    import microcontroller_fight as mcu

    from eas.data.datasets import load_dataset
    from eas.nas.candidate import counted_metrics

    task = load_dataset("fashion-mnist", seed=0)
    found = mcu.fitting(mcu.CONFIG, task)
    labels = [label for label, _ in found]
    # the 1280- and 1024-wide last layers leave only the 0.1 widths under 256 kB of flash, and 28 px
    # needs over 64 kB of SRAM; 0.15 of MobileNetV3-Small rounds to 0.1's network and is left out
    assert {label.partition(" ")[0] for label in labels} == {"mobilenet_v2@0.1", "mobilenet_v3_small@0.1"}
    assert "mobilenet_v3_small@0.1 at 12 px" in labels and not any(label.endswith("28 px") for label in labels)
    grid = [mcu.scaled_arch(f, a, r, 28) for f in mcu.CONFIG["families"] for a in mcu.CONFIG["alphas"]
            for r in mcu.CONFIG["resolutions"]]
    fitting = [a for a in grid if counted_metrics(a, task)["sram_bytes"] <= 64_000
               and counted_metrics(a, task)["flash_bytes"] <= 256_000]
    assert [arch for _, arch in found] == list(dict.fromkeys(fitting))  # every fitting network, once
    assert all(arch.stem.resolution in (12, 16, 20, 24) for _, arch in found)

    def model(label, accuracy, genome):
        return {"label": label, "genome": genome, "verified_accuracy": accuracy, "verified_interval":
                [accuracy - 0.01, accuracy + 0.01], "seed_spread": 0.0, "seeds": 2}

    costs = {"g-front": {"macs": 2e6, "params": 5e4, "latency_ms": 0.2, "sram_bytes": 30_000, "flash_bytes": 90_000},
             "g-v2": {"macs": 3e6, "params": 2e5, "latency_ms": 0.3, "sram_bytes": 60_000, "flash_bytes": 210_000}}
    done = {"search-seed0": {"figures": {"objectives": ["accuracy", "sram", "flash"],
                                         "reference": {"sram": 65536.0, "flash": 262144.0}}},
            "front-seed0": {"figures": {"models": [{**model("trial 3", 0.85, "g-front"), "trial": 3}]}},
            "scaled-mobilenet_v2": {"figures": {"models": [model("mobilenet_v2@0.1 at 20 px", 0.80, "g-v2")]}},
            "scaled-mobilenet_v3_small": {"figures": {"models": []}},
            "timing": {"figures": {"costs": costs}}}
    compared = mcu.comparison(done, 0)
    assert set(compared["hypervolume"]["families"]) == {"mobilenet_v2"}
    assert compared["summary"]["hypervolume_ratio"] > 1  # more accurate in less SRAM and flash
    assert mcu.comparison({k: v for k, v in done.items() if k != "scaled-mobilenet_v3_small"}, 0) is None
    assert [u.name for u in mcu.benchmark().units if u.settings["kind"] == "baselines"] == \
        ["scaled-mobilenet_v2", "scaled-mobilenet_v3_small"]  # a unit a family: each under an hour


def test_supernet_trust_holds_the_supernet_to_each_stand_alone_seed_their_mean_and_their_own_agreement(tmp_path):
    import supernet_trust

    benchmark = supernet_trust.benchmark()
    genomes = ["a", "b", "c", "d"]
    inherited = {"10": {"accuracies": [0.1, 0.2, 0.3, 0.4], "seconds": 60.0}}
    units.write_result(benchmark, benchmark.unit("mobile-supernet"),
                       {"supernet_train_seconds": 60.0, "steps": 10, "images": 1280, "energy_j": 36.0,
                        "energy_source": "estimated", "parameters": 1000}, {"genomes": genomes, "inherited": inherited},
                       {}, "2026-12-07T00:00:00+00:00", "0" * 40, tmp_path)

    def trust(name, accuracies):
        standalone = {g: {"accuracy": a, "seconds": 1.0, "macs": 1} for g, a in zip(genomes, accuracies, strict=True)}
        units.write_result(benchmark, benchmark.unit(name), {"kendall_tau": 0.0, "kendall_tau_by_step": {"10": 0.0}},
                           {"genomes": genomes, "standalone": standalone}, {}, "2026-12-07T00:00:00+00:00", "0" * 40,
                           tmp_path)

    trust("mobile-trust", [0.80, 0.81, 0.83, 0.82])  # one pair swapped against the supernet
    one_seed = supernet_trust.table(tmp_path)
    assert "**met** (+0.67)" in one_seed and "agree with each other" not in one_seed
    trust("mobile-trust-seed1", [0.80, 0.83, 0.815, 0.84])  # another pair swapped
    two_seeds = supernet_trust.table(tmp_path)
    row = next(line for line in two_seeds.splitlines() if line.strip().startswith("10 "))
    assert row.split()[-3:] == ["+0.67", "+0.67", "+1.00"]  # each seed, then their mean: 0.80 0.82 0.8225 0.83
    assert "agree with each other to Kendall tau +0.33" in two_seeds and "3 of 3 units done" in two_seeds
    # tau 1/3 is r = 0.5 (Greiner): the truth correlates sqrt(0.5) with one run, sqrt(2/3) with the mean
    assert "agree with one run to about +0.50 and with their mean to about +0.61" in two_seeds
