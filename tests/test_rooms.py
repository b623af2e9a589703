"""Direct tests of the modules that the end-to-end tests only reached through the command line:
each one's contract, in milliseconds, so the fast tier covers every room of eas/."""

import io
import json
import math

import numpy as np
import pytest
import torch

from eas.arch.bounds import check_buildable, check_classes, check_shape
from eas.arch.channels import make_divisible
from eas.arch.genome import Arch
from eas.deploy.compress import comparison_rows
from eas.deploy.quantize import compare
from eas.errors import UserError
from eas.lazy import available, lazy_import
from eas.measure.device import device_label, resolve_device
from eas.measure.inference import latency
from eas.nas.live_view import LiveStudy
from eas.provenance import versions
from eas.reports.lineage import descendants
from eas.reports.progress import SearchProgress, status_text
from eas.reports.summary import study_lines
from eas.study.reader import StudyReader
from eas.study.snapshots import Snapshots
from eas.training.distributed import Group, check_launch, energy_share
from eas.training.green import efficiency_report, report_lines
from eas.training.supernet import SupernetPlan
from tests.study_factory import make_study

SMALL = "stem_c8_k3_s1_relu-ds_r1_k3_s2_c16_relu-head_c0_f0_relu_d0"


def test_bounds_refuse_what_cannot_be_built():
    assert check_shape([3, 32, 32]) == (3, 32, 32)
    for bad in ([3, 32], [0, 8, 8], [3, 10**6, 10**6], "3x32x32"):
        with pytest.raises(UserError):
            check_shape(bad)
    with pytest.raises(UserError):
        check_classes(1)
    with pytest.raises(UserError, match="parameters|values"):
        check_buildable(Arch.decode("stem_c16_k3_s1_relu-ds_r1_k3_s1_c4096_relu-head_c8192_f0_relu_d0"),
                        (3, 2048, 2048), 100_000)


def test_make_divisible_rounds_to_multiples_never_far_down():
    assert make_divisible(16) == 16 and make_divisible(17) == 16 and make_divisible(21) == 24
    assert make_divisible(9) == 16  # never more than 10% down: 8 would be
    assert all(make_divisible(v) % 8 == 0 and make_divisible(v) >= 0.9 * v for v in range(8, 400))


def test_lazy_modules_load_on_first_use():
    module = lazy_import("json")
    assert module.dumps([1]) == "[1]"
    assert available("json") and not available("no_such_module_here")


def test_devices_resolve_and_say_what_they_are():
    assert resolve_device("cpu").type == "cpu" and resolve_device("auto").type in ("cpu", "cuda")
    with pytest.raises(UserError, match="cpu"):
        resolve_device("tpu")
    assert device_label(torch.device("cpu")).startswith("cpu:")


def test_latency_is_an_ordered_measurement():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU()).eval()
    timed = latency(model, (1, 8, 8), torch.device("cpu"), batch=2, repeats=5)
    assert timed.batch == 2 and 0 < timed.p10_ms <= timed.median_ms <= timed.p90_ms and timed.repeats >= 3


def test_provenance_names_the_versions():
    found = versions()
    assert found["torch"] == torch.__version__ and found["eas"] and found["python"].count(".") == 2


@pytest.fixture
def study(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    make_study(url, "s", trials=8)
    return url


def test_the_live_view_counts_and_keeps_the_front(study):
    reader = StudyReader(study, "s")
    live = LiveStudy(reader, ("accuracy", "macs", "params", "energy"), reader.reference)
    assert len(live.refresh()) == 8 and live.counts["complete"] == 8 and live.any_feasible
    assert 0 < len(live.front) <= 8 and 0 < live.hypervolume <= 1
    assert live.refresh() == []  # nothing new: nothing read again
    text = status_text(live)
    # one definition of the front: the progress line counts the set `eas show` prints
    from eas.reports.front import pareto_front

    shown = pareto_front(reader.loaded().records, live.objectives)
    assert text.startswith("8 done") and f"| Pareto set {len(shown)} |" in text
    assert [r.number for r in live.pareto_set] == [r.number for r in shown]


def test_the_progress_line_in_a_log_names_each_trial(study):
    reader = StudyReader(study, "s")
    live = LiveStudy(reader, ("accuracy", "macs", "params", "energy"), reader.reference)
    live.refresh()
    stream = io.StringIO()  # not a terminal: a line per trial
    progress = SearchProgress(type("B", (), {"seconds": None, "trials": 8})(), stream=stream)

    class Summary:
        trials, last_number = 3, 7

    progress(live, Summary())
    progress.close()
    assert "] trial 7 finished: 8 done" in stream.getvalue()


def test_study_lines_print_the_pareto_set_with_its_knee(study):
    loaded = StudyReader(study, "s").loaded()
    lines = study_lines("s", loaded.settings, loaded.records, loaded.objectives, loaded.reference)
    assert any(line.startswith("Pareto set (") for line in lines) and any("*" in line for line in lines)


def test_snapshots_round_trip_and_drop(study):
    import sqlalchemy as sa

    snapshots = Snapshots(sa.create_engine(study), "s")
    weights = {"w": torch.arange(6.0).reshape(2, 3)}
    snapshots.save(4, 1, weights)
    rung, loaded = snapshots.load(4)
    assert rung == 1 and torch.equal(loaded["w"], weights["w"])
    snapshots.drop(4)
    assert snapshots.load(4) is None


def test_lineage_finds_the_exports_of_a_trial(tmp_path):
    for name, trial in (("knee", 3), ("other", 5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "arch.json").write_text(json.dumps({
            "format": "eas-arch/1", "genome": SMALL, "provenance": {"study": "s", "trial": trial}}))
    (tmp_path / "knee-int8").mkdir()
    (tmp_path / "knee-int8" / "arch.json").write_text(json.dumps({
        "format": "eas-arch/1", "genome": SMALL, "derived_from": {"folder": str((tmp_path / "knee").resolve())},
        "provenance": {"study": "s", "trial": 3}}))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "arch.json").write_text("[" * 10_000)
    found = [entry["folder"] for entry in descendants("s", 3, tmp_path)]
    assert [f.rsplit("/", 1)[-1] for f in found] == ["knee", "knee-int8"]


def test_the_green_report_does_its_arithmetic_and_says_its_source():
    report = efficiency_report(test_accuracy=0.9, params=10_000, macs=2_000_000, energy_j=3.6e6, energy_source="rapl",
                               train_seconds=60.0, time_to_target_s=None, target=None, grid_g_per_kwh=400, pue=1.5)
    assert report["energy_kwh"] == pytest.approx(1.5) and report["co2e_g"] == pytest.approx(600)
    assert report["flops_per_inference"] == 4_000_000 and report["accuracy_per_mmac"] == pytest.approx(0.45)
    lines = report_lines(report)
    assert any("rapl" in line and "PUE 1.5" in line for line in lines)


def test_distributed_launch_refuses_nonsense_and_counts_a_machine_counter_once():
    for args, fragment in (((0, 1, None, 3), "--nproc"), ((1, 2, None, 3), "--rdzv-endpoint"),
                           ((1, 2, "host", 3), "HOST:PORT"), ((1, 1, None, 101), "--max-restarts")):
        with pytest.raises(UserError, match=fragment):
            check_launch(*args)
    group = Group()
    assert energy_share(5.0, "rapl", group) == 5.0 and energy_share(5.0, "estimated", group) == 5.0


def test_a_supernet_plan_refuses_what_cannot_train():
    with pytest.raises(UserError, match="--budget or --steps"):
        SupernetPlan()
    for field, value in (("steps", 0), ("lr", math.nan), ("random_subnets", 17)):
        with pytest.raises(UserError):
            SupernetPlan(**{"steps": 10, field: value})
    assert SupernetPlan(steps=10).recipe()["sandwich"].startswith("largest + smallest")


def test_int8_ratios_and_the_comparison_table():
    fp32 = {"size_bytes": 400.0, "latency_ms_b1": 1.0, "latency_ms_b32": 8.0, "energy_j_per_1k": 2.0,
            "test_accuracy": 0.9, "energy_source": "estimated"}
    int8 = {**fp32, "size_bytes": 100.0, "latency_ms_b1": 2.0, "test_accuracy": 0.89}
    gain = compare(fp32, int8)
    assert gain["smaller"] == 4.0 and gain["faster_b1"] == 0.5 and gain["accuracy_points"] == pytest.approx(-1.0)
    rows, headers = comparison_rows({"method": "int8", "fp32": fp32, "int8": int8})
    assert headers[1:3] == ["fp32", "int8"] and "4.00x smaller" in rows[0] and "2.00x slower" in rows[1]
    assert np.isfinite(gain["less_energy"])
