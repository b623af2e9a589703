"""The efficiency report green ML asks for: accuracy per cost, kWh with its source, CO2e."""

from __future__ import annotations

# World average carbon intensity of electricity generation, IEA 2019: ~475 gCO2e/kWh.
DEFAULT_GRID_G_PER_KWH = 475.0


def efficiency_report(*, test_accuracy: float, params: int, macs: int, energy_j: float, energy_source: str,
                      train_seconds: float, time_to_target_s: float | None, target: float | None,
                      grid_g_per_kwh: float = DEFAULT_GRID_G_PER_KWH, pue: float = 1.0) -> dict:
    """Pure: the numbers of the report, each with its unit in the key."""
    kwh = energy_j / 3.6e6 * pue
    return {
        "test_accuracy": test_accuracy,
        "target_accuracy": target,
        "time_to_target_s": time_to_target_s,
        "train_seconds": train_seconds,
        "energy_kwh": kwh,
        "energy_source": energy_source,
        "pue": pue,
        "grid_gco2e_per_kwh": grid_g_per_kwh,
        "co2e_g": kwh * grid_g_per_kwh,
        "flops_per_inference": 2 * macs,
        "macs_per_inference": macs,
        "params": params,
        "accuracy_per_mmac": test_accuracy / (macs / 1e6) if macs else None,
        "accuracy_per_mparam": test_accuracy / (params / 1e6) if params else None,
    }


def report_lines(report: dict) -> list[str]:
    target = ("not given" if report["target_accuracy"] is None else
              f"{report['target_accuracy']:.1%} reached after {report['time_to_target_s']:.0f} s"
              if report["time_to_target_s"] is not None else f"{report['target_accuracy']:.1%} not reached")
    return [
        f"test accuracy      {report['test_accuracy']:.2%}",
        f"time to target     {target}",
        f"training time      {report['train_seconds']:.0f} s",
        f"energy             {report['energy_kwh']:.3g} kWh ({report['energy_source']}"
        + (": no energy counter was readable" if report["energy_source"] == "estimated" else "")
        + (f", PUE {report['pue']}" if report["pue"] != 1.0 else "") + ")",
        f"CO2e               {report['co2e_g']:.3g} g at {report['grid_gco2e_per_kwh']:.0f} gCO2e/kWh"
        + (" (world average, IEA 2019)" if report["grid_gco2e_per_kwh"] == DEFAULT_GRID_G_PER_KWH else ""),
        f"FLOPs / inference  {report['flops_per_inference']:,} (= 2 x {report['macs_per_inference']:,} MACs)",
        f"parameters         {report['params']:,}",
        f"accuracy / MMAC    {report['accuracy_per_mmac']:.4g}",
        f"accuracy / Mparam  {report['accuracy_per_mparam']:.4g}",
    ] + _training_setup_lines(report)


def _training_setup_lines(report: dict) -> list[str]:
    lines = []
    if report.get("processes", 1) > 1:
        lines.append(f"processes          {report['processes']} data-parallel (energy of all of them), "
                     f"{report.get('restarts', 0)} restart(s)")
    recipe = report.get("recipe")
    if recipe:
        lines.append(f"recipe             augment {recipe['augment']}, label smoothing {recipe['label_smoothing']:g}, "
                     + (f"weights averaged (EMA {recipe['ema']:g})" if recipe["ema"] else "no weight averaging"))
    teacher = report.get("teacher")
    if teacher:
        lines.append(f"distilled from     {teacher['folder']} (teacher test accuracy {teacher['test_accuracy']:.2%})")
    return lines + deployed_lines(report.get("deployed") or {})


def deployed_lines(deployed: dict) -> list[str]:
    """Each deployable file, checked against the trained PyTorch model (or why it was removed)."""
    lines = ["saved              model.safetensors (the trained weights), report.json"] if deployed else []
    for name, check in deployed.items():
        if "removed" in check:
            why = check["removed"].removeprefix("not rewritten with the trained weights: ")
            lines.append(f"{name:18} removed: {why}")
        else:
            lines.append(f"{name:18} trained weights; vs PyTorch on {check['images']} validation images: top-1 agrees "
                         f"on {check['top1_agreement']:.1%}, largest logit difference {check['max_abs_diff']:.2g}")
    return lines
