from pathlib import Path

import pytest

from eas.measure.energy import EstimatedMeter, MeterError, RaplMeter, delta_with_wrap, make_meter


def fake_powercap(root: Path, values: dict[str, int], max_range: int = 1000) -> None:
    for name, value in values.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "energy_uj").write_text(f"{value}\n")
        (root / name / "max_energy_range_uj").write_text(f"{max_range}\n")


def test_rapl_sums_packages_handles_wraparound_and_ignores_subdomains(tmp_path):
    fake_powercap(tmp_path, {"intel-rapl:0": 900, "intel-rapl:1": 100, "intel-rapl:0:0": 5})
    meter = RaplMeter(tmp_path)
    token = meter.start()
    # package 0 wraps past 1000 to 300 (+400 uJ), package 1 goes 100 -> 350 (+250 uJ)
    fake_powercap(tmp_path, {"intel-rapl:0": 300, "intel-rapl:1": 350, "intel-rapl:0:0": 999})
    reading = meter.stop(token)
    assert reading.source == "rapl"
    assert reading.joules == pytest.approx(650e-6)


def test_delta_with_wrap():
    assert delta_with_wrap(10, 30, 100) == 20
    assert delta_with_wrap(90, 5, 100) == 15


def test_rapl_permission_error_names_the_fix(tmp_path, monkeypatch):
    fake_powercap(tmp_path, {"intel-rapl:0": 1})
    original = Path.read_text

    def root_only(self, *args, **kwargs):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", root_only)
    with pytest.raises(MeterError, match="root only.*chmod o\\+r"):
        RaplMeter(tmp_path)


def test_auto_falls_back_to_an_estimate_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("EAS_POWERCAP_ROOT", str(tmp_path / "nothing"))
    meter, note = make_meter("auto")
    assert meter.source == "estimated" and "no RAPL" in note
    fake_powercap(tmp_path / "pc", {"intel-rapl:0": 1})
    monkeypatch.setenv("EAS_POWERCAP_ROOT", str(tmp_path / "pc"))
    meter, note = make_meter("auto")
    assert meter.source == "rapl" and note is None


def test_estimate_follows_cpu_time():
    import time

    meter = EstimatedMeter(watts_per_core=10.0)
    cpu = time.process_time()
    token = meter.start()
    total = 0
    for i in range(3_000_000):
        total += i
    reading = meter.stop(token)
    cpu = time.process_time() - cpu
    assert reading.source == "estimated"
    assert reading.joules == pytest.approx(10.0 * cpu, rel=0.1)
    assert reading.joules > 0


def test_unknown_meter():
    with pytest.raises(MeterError, match="known: auto"):
        make_meter("geiger")
