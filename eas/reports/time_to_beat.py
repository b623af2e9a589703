"""How long a search ran before its front beat the hand-designed networks (`eas search --baselines`).

Each baseline was trained as the study's candidates are, through every rung (its full fidelity).
It is beaten by the first searched network that finished complete (trained through every rung,
within the limits) more accurate than it at no more deployed latency (in the study's runtime), or
at no more MACs where the baseline's latency was not measured. The time counted is the search's:
from its first trial's start while any trial ran, so the baselines' own training is not in it, and
neither is a pause between two runs of a resumed study (a gap of over a minute with no trial
running; the sampler's seconds between trials are part of the search). Beside it, the CPU time
the trials' evaluations took by then: the figure a busy machine does not inflate.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from eas.study.records import BaselineRecord, TrialRecord
from eas.units import format_duration, table

BRIDGED_GAP_S = 60.0  # a longer gap with no trial running is a pause between runs, not search time


@dataclass(frozen=True)
class Beating:
    """One baseline and when the search beat it (trial None: not yet)."""

    baseline: str
    status: str  # the baseline's: ok, or why it has no accuracy (diverged, cut, error, infeasible)
    accuracy: float  # NaN when not ok
    cost: str  # "latency_ms" or "macs": what "at no more" compares
    cost_value: float
    trial: int | None  # the first searched network that beat it
    seconds: float  # search time until that trial finished, or so far
    trials: int  # trials finished by then, or so far
    cpu_seconds: float = 0.0  # the CPU time their evaluations took: what a busy machine does not inflate

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def search_seconds(records: list[TrialRecord], until: float) -> float:
    """Seconds up to `until` during which the search ran: the union of its trials' spans (a trial
    still running counts until `until`), gaps under BRIDGED_GAP_S bridged."""
    spans = sorted((r.started, min(r.finished or until, until)) for r in records
                   if r.started is not None and r.started < until)
    total, start, end = 0.0, None, None
    for begin, finish in spans:
        if start is not None and end is not None and begin - end <= BRIDGED_GAP_S:
            end = max(end, finish)
            continue
        if start is not None and end is not None:
            total += end - start
        start, end = begin, finish
    return total + (end - start if start is not None and end is not None else 0.0)


def time_to_beat(records: list[TrialRecord], baselines: dict[str, BaselineRecord],
                 now: float | None = None) -> list[Beating]:
    """Each baseline and the searched network that beat it first, the most accurate baseline first
    (those without an accuracy last). `now` ends the search time of baselines not beaten yet
    (default: the clock while a trial runs, else the last trial's finish)."""
    finished = sorted((r for r in records if r.finished is not None), key=lambda r: r.finished)
    if now is None and any(r.state == "running" for r in records):
        now = time.time()
    until = now if now is not None else (finished[-1].finished if finished else 0.0)
    searched = [r for r in finished if r.state == "complete" and _number(r.metrics.get("accuracy"))]
    found = []
    for b in baselines.values():
        ok = b.metrics.get("status") == "ok" and _number(b.metrics.get("accuracy"))
        cost = "latency_ms" if _number(b.metrics.get("latency_ms")) else "macs"
        limit = b.metrics.get(cost) if _number(b.metrics.get(cost)) else math.nan
        first = next((r for r in searched if ok and r.metrics["accuracy"] > b.metrics["accuracy"]
                      and _number(r.metrics.get(cost)) and r.metrics[cost] <= limit), None)
        when = first.finished if first is not None else until
        by_then = [r for r in finished if r.finished <= when]
        cpu = sum(r.metrics["evaluate_cpu_seconds"] for r in by_then if _number(r.metrics.get("evaluate_cpu_seconds")))
        found.append(Beating(b.name, str(b.metrics.get("status") or "unknown"),
                             float(b.metrics["accuracy"]) if ok else math.nan, cost, float(limit),
                             first.number if first is not None else None, search_seconds(records, when),
                             len(by_then), cpu))
    return sorted(found, key=lambda f: (math.isnan(f.accuracy), -f.accuracy if not math.isnan(f.accuracy) else 0))


def _cost_text(beating: Beating) -> str:
    if not math.isfinite(beating.cost_value):
        return "-"
    if beating.cost == "latency_ms":
        return f"{beating.cost_value:.3g} ms"
    return f"{beating.cost_value / 1e6:.3g}M MACs"


def _trials(n: int) -> str:
    return f"{n} trial{'s' if n != 1 else ''}"


def _when_text(beating: Beating) -> str:
    cpu = f" ({format_duration(beating.cpu_seconds)} CPU)" if beating.cpu_seconds else ""
    return f"{format_duration(beating.seconds)} of search{cpu}, {_trials(beating.trials)}"


def baseline_text(metrics: dict) -> str:
    """One trained baseline in a few words: "81.20% at 1.31 ms, 4.2M MACs" or its failure."""
    if metrics.get("status") != "ok" or not _number(metrics.get("accuracy")):
        return f"{metrics.get('status')}: {metrics.get('reason') or 'no accuracy'}"
    latency = f" at {metrics['latency_ms']:.3g} ms," if _number(metrics.get("latency_ms")) else ""
    macs = f" {metrics['macs'] / 1e6:.3g}M MACs" if _number(metrics.get("macs")) else ""
    return f"{metrics['accuracy']:.2%}{latency}{macs}"


def runtime_words(settings: dict) -> str:
    """The study's runtime as the baselines' latency was measured in it: "onnxruntime, 1 thread"."""
    runtime = settings.get("runtime") if isinstance(settings.get("runtime"), dict) else {}
    threads = runtime.get("threads")
    return f"{runtime.get('name', 'torch')}" + (f", {threads} thread{'s' if threads != 1 else ''}" if threads else "")


def time_to_beat_lines(beatings: list[Beating], runtime: str) -> list[str]:
    """What `eas show` prints of a study's baselines: each one, when the search beat it, and the
    headline: the time to beat the most accurate one."""
    if not beatings:
        return []
    rows = [[b.baseline, f"{b.accuracy:.2%}" if b.status == "ok" else b.status, _cost_text(b),
             f"trial {b.trial}" if b.trial is not None else "not yet" if b.status == "ok" else "-",
             _when_text(b) if b.status == "ok" else "-"] for b in beatings]
    lines = [f"Baselines (trained as the candidates are, at the full fidelity; beaten = a searched network more "
             f"accurate at no more latency in {runtime}, or MACs where latency was not measured):",
             table(rows, ["baseline", "accuracy", "cost", "beaten by", "after"])]
    best = beatings[0]
    if best.status == "ok":
        head = f"{best.baseline}, {best.accuracy:.2%} at {_cost_text(best)}"
        lines.append(f"time to beat the best baseline ({head}): "
                     + (f"{format_duration(best.seconds)} ({format_duration(best.cpu_seconds)} CPU; trial "
                        f"{best.trial}, after {_trials(best.trials)})"
                        if best.trial is not None else f"not yet, after {_when_text(best)}"))
    return lines
