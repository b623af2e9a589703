"""What the Pareto explorer shows, as plain functions over trial records (see eas.reports.front and
eas.study.reader), so the explorer's numbers are the CLI's numbers and tests need no Streamlit.
"""

from __future__ import annotations

import math
import re

from eas.objectives import OBJECTIVES
from eas.pareto import pareto_mask
from eas.reports.front import accuracy_interval, feasible, knee, minimised, pareto_front
from eas.study import schema
from eas.study.records import TrialRecord

# Filters the explorer offers: metric -> label. Sliders over these shrink the front live.
FILTER_METRICS = {"macs": "max MACs (M)", "params": "max params (k)", "latency_ms": "max latency (ms)",
                  "inference_energy_j_per_1k": "max energy (J/1k)", "sram_bytes": "max SRAM, int8 (KiB)",
                  "flash_bytes": "max flash, int8 (KiB)"}
# Each limit slider in the units the tables use: (the value of one slider unit, the number format).
FILTER_UNITS = {"macs": (1e6, "%.2f"), "params": (1e3, "%.1f"), "latency_ms": (1.0, "%.3f"),
                "inference_energy_j_per_1k": (1.0, "%.3f"), "sram_bytes": (1024.0, "%.1f"),
                "flash_bytes": (1024.0, "%.1f")}


def trial_rows(records: list[TrialRecord], objectives: tuple[str, ...]) -> list[dict]:
    """Every trial with its state, Pareto membership and metrics: the data of every chart."""
    front_records = pareto_front(records, objectives)
    front = {r.number for r in front_records}
    # Off the Pareto set but dominated by nobody: a cheaper model's accuracy is within its interval.
    candidates = feasible(records, objectives)
    untied = {r.number for r, keep in zip(candidates, pareto_mask(minimised(candidates, objectives)), strict=True)
              if keep} if candidates else set()
    best = knee(front_records, objectives)
    rows = []
    for r in records:
        m = r.metrics
        rows.append({
            "trial": r.number, "state": r.state, "pareto": r.number in front,
            "knee": best is not None and r.number == best.number,
            "role": "knee" if best is not None and r.number == best.number else
                    "pareto" if r.number in front else r.state if r.state != "complete" else
                    "tied" if r.number in untied else "dominated",
            "genome": r.genome or "", "accuracy": _num(m.get("accuracy")), "macs": _num(m.get("macs")),
            "params": _num(m.get("params")), "latency_ms": _num(m.get("latency_ms")),
            "inference_energy_j_per_1k": _num(m.get("inference_energy_j_per_1k")),
            "memory_bytes_inference": _num(m.get("memory_bytes_inference")),
            "sram_bytes": _num(m.get("sram_bytes")), "flash_bytes": _num(m.get("flash_bytes")),
            "train_energy_j": _num(m.get("train_energy_j")), "energy_source": m.get("energy_source", ""),
            "device": m.get("device", ""), "reason": r.reason or "",
            "accuracy_low": accuracy_interval(m)[0], "accuracy_high": accuracy_interval(m)[1],
            "rung": _reached(r),
        })
    return rows


def verified_rows(verification: dict) -> list[dict]:
    """The retrained front and the baselines of an `eas verify` result, as plottable rows: verified
    accuracy with its interval, costs as measured by the verification. Role "retrained" or
    "baseline" (with its family)."""
    rows = []
    groups = (("retrained", verification.get("members", [])), ("baseline", verification.get("baselines", [])))
    for role, group in groups:
        for row in group:
            costs = row.get("costs") if isinstance(row.get("costs"), dict) else {}
            low, high = row.get("verified_interval") or (math.nan, math.nan)
            rows.append({"role": role, "label": row.get("name") or f"trial {row.get('trial')}",
                         "family": row.get("family", "front"), "accuracy": _num(row.get("verified_accuracy")),
                         "accuracy_low": _num(low), "accuracy_high": _num(high),
                         **{field: _num(costs.get(field)) for field in (
                             "macs", "params", "latency_ms", "inference_energy_j_per_1k", "memory_bytes_inference",
                             "sram_bytes", "flash_bytes", "train_energy_j")}})
    return rows


def _reached(record: TrialRecord) -> float:
    rungs = record.attrs.get(schema.RUNGS) or []
    return float(rungs[-1]["rung"]) if rungs else math.nan


def rung_rows(record: TrialRecord) -> list[dict]:
    """A trial's results rung by rung, with the decision taken after each."""
    rows = []
    rungs = record.attrs.get(schema.RUNGS) or []
    for index, rung in enumerate(rungs):
        low, high = accuracy_interval(rung)
        # Only a stopped trial's last rung stopped it; a complete trial's last rung is its top rung.
        stopped_here = record.state == "stopped" and index == len(rungs) - 1
        decision = "trained on" if rung.get("go_on") else "stopped" if stopped_here else "top rung"
        if rung.get("position") is not None and rung.get("results") is not None:
            decision += f" (rank {rung['position'] + 1} of {rung['results']})"
        rows.append({"rung": rung["rung"], "steps": _count_text(rung.get("steps")),
                     "accuracy": f"{rung.get('accuracy', 0):.2%} [{low:.1%}, {high:.1%}]",
                     "validation images": _count_text(rung.get("val_images")), "decision": decision})
    return rows


def _count_text(value) -> str:
    """A stored count as a table shows it: '-' where none was stored (never 'None')."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "-"


def _num(value) -> float:
    return math.nan if value is None else float(value)


def front_of(records: list[TrialRecord], rows: list[dict], objectives: tuple[str, ...]) -> list[TrialRecord]:
    """The Pareto set that trial_rows marked, as records in pareto_front's order, without
    computing it again."""
    on_front = {row["trial"] for row in rows if row["pareto"]}
    return sorted((r for r in records if r.number in on_front), key=lambda r: -r.value(objectives[0]))


def filtered_front(front: list[TrialRecord], limits: dict[str, float]) -> list[TrialRecord]:
    """The Pareto set, keeping trials within every limit (metric -> maximum)."""
    return [r for r in front
            if all(r.metrics.get(metric) is not None and r.metrics[metric] <= limit
                   for metric, limit in limits.items())]


def objective_label(name: str) -> str:
    objective = OBJECTIVES[name]
    arrow = "↑" if objective.direction == "maximize" else "↓"
    return f"{name} {arrow}" + (f" ({objective.unit})" if objective.unit else "")


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def markdown_text(text: object) -> str:
    """A stored string made inert for Streamlit's Markdown: every special character escaped,
    so a planted `![i](http://host/x.png)` is shown as text and no viewer's browser fetches it."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ")
